#include "format/delta.hpp"

#include <fmt/format.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/bytes.hpp"
#include "core/splitmix.hpp"

namespace sluice::core {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'D', 'E', 'L', 'T', 'A', '\0'};

// Appends the sparse forms' leading count.
void put_count(std::vector<std::uint8_t>& raw, std::size_t count) {
  std::uint8_t bytes[4];
  ByteWriter(bytes, sizeof bytes).u32(static_cast<std::uint32_t>(count));
  raw.insert(raw.end(), bytes, bytes + sizeof bytes);
}

// A word of a version's bytes in host order: equality and XOR do not care about the order.
std::uint32_t load_word(const std::uint8_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// The xor form's raw bytes: the chunk's 4-byte words split into four byte planes, then the XOR
// of the tail bytes.
void xor_planes(const std::uint8_t* base, const std::uint8_t* target, std::size_t n,
                std::vector<std::uint8_t>& raw) {
  const std::size_t words = n / 4;
  raw.resize(n);
  std::uint8_t* planes[4] = {raw.data(), raw.data() + words, raw.data() + 2 * words,
                             raw.data() + 3 * words};
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint32_t x = load_word(base + 4 * w) ^ load_word(target + 4 * w);
    for (int b = 0; b < 4; ++b)
      planes[b][w] = static_cast<std::uint8_t>(x >> (8 * b));
  }
  for (std::size_t i = 4 * words; i < n; ++i)
    raw[i] = base[i] ^ target[i];
}

// The sparse form's raw bytes: count u32, then each changed word's gap from the previous one
// (varint), then the changed words' XORs as four byte planes, then the XOR of the tail bytes.
void sparse_form(const std::uint8_t* base, const std::uint8_t* target, std::size_t n,
                 const std::vector<std::uint32_t>& changed, std::vector<std::uint8_t>& raw) {
  raw.clear();
  put_count(raw, changed.size());
  std::uint64_t prev = 0;
  for (std::size_t k = 0; k < changed.size(); ++k) {
    std::uint64_t gap = changed[k] - (k == 0 ? 0 : prev + 1);
    prev = changed[k];
    while (gap >= 0x80) {
      raw.push_back(static_cast<std::uint8_t>(gap | 0x80));
      gap >>= 7;
    }
    raw.push_back(static_cast<std::uint8_t>(gap));
  }
  const std::size_t planes_at = raw.size();
  raw.resize(planes_at + 4 * changed.size());
  for (std::size_t k = 0; k < changed.size(); ++k) {
    const std::size_t w = changed[k];
    const std::uint32_t x = load_word(base + 4 * w) ^ load_word(target + 4 * w);
    for (int b = 0; b < 4; ++b)
      raw[planes_at + b * changed.size() + k] = static_cast<std::uint8_t>(x >> (8 * b));
  }
  for (std::size_t i = 4 * (n / 4); i < n; ++i)
    raw.push_back(base[i] ^ target[i]);
}

std::uint16_t load_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

void put_varint(std::vector<std::uint8_t>& raw, std::uint64_t v) {
  while (v >= 0x80) {
    raw.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  raw.push_back(static_cast<std::uint8_t>(v));
}

// Reads one varint of at most 5 bytes (a gap below 2^35); false when it runs past the end or is
// longer.
bool get_varint(ByteReader& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    const std::uint8_t byte = in.u8();
    if (!in.ok()) return false;
    v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// The sparse forms' index list: a u32 count (at most `limit`), then the indices of the changed
// `unit`s (words or values) as varint gaps, each index below `limit`. Leaves `at` after it.
Status read_sparse_indices(const std::vector<std::uint8_t>& raw, std::uint64_t i,
                           std::uint64_t limit, const char* unit, std::size_t& at,
                           std::vector<std::uint32_t>& index) {
  ByteReader in(raw.data(), raw.size());
  const std::uint64_t count = in.u32();
  if (!in.ok()) return protocol_error(fmt::format("delta: chunk {}'s indices are malformed", i));
  if (count > limit) {
    return protocol_error(
        fmt::format("delta: chunk {} names {} changed {}s of {}", i, count, unit, limit));
  }
  index.resize(count);
  std::uint64_t next = 0;
  for (std::uint64_t k = 0; k < count; ++k) {
    std::uint64_t gap = 0;
    if (!get_varint(in, gap)) {
      return protocol_error(fmt::format("delta: chunk {}'s indices are malformed", i));
    }
    next += gap;
    if (next >= limit) {
      return protocol_error(fmt::format("delta: chunk {} names {} {} of {}", i, unit, next, limit));
    }
    index[k] = static_cast<std::uint32_t>(next);
    ++next;
  }
  at = in.pos();
  return {};
}

// target - base of one 2-byte value, mod 2^16, zigzagged so that small steps either way are
// small numbers (-1 -> 1, +1 -> 2, -2 -> 3, ...), and back.
std::uint16_t zigzag16(std::uint16_t base, std::uint16_t target) {
  const auto d = static_cast<std::int16_t>(static_cast<std::uint16_t>(target - base));
  return static_cast<std::uint16_t>((static_cast<std::uint16_t>(d) << 1) ^
                                    static_cast<std::uint16_t>(d >> 15));
}
std::uint16_t unzigzag16(std::uint16_t base, std::uint16_t z) {
  const auto d = static_cast<std::uint16_t>((z >> 1) ^ static_cast<std::uint16_t>(-(z & 1)));
  return static_cast<std::uint16_t>(base + d);
}

// The sparse16 form's raw bytes: count u32, each changed 2-byte value's gap from the previous
// one (varint), their zigzagged differences as two byte planes (low, high), then the XOR of the
// tail byte.
void sparse16_form(const std::uint8_t* base, const std::uint8_t* target, std::size_t n,
                   const std::vector<std::uint32_t>& changed, std::vector<std::uint8_t>& raw) {
  raw.clear();
  put_count(raw, changed.size());
  std::uint64_t prev = 0;
  for (std::size_t k = 0; k < changed.size(); ++k) {
    put_varint(raw, changed[k] - (k == 0 ? 0 : prev + 1));
    prev = changed[k];
  }
  const std::size_t planes_at = raw.size();
  raw.resize(planes_at + 2 * changed.size());
  for (std::size_t k = 0; k < changed.size(); ++k) {
    const std::size_t v = changed[k];
    const std::uint16_t z = zigzag16(load_u16(base + 2 * v), load_u16(target + 2 * v));
    raw[planes_at + k] = static_cast<std::uint8_t>(z);
    raw[planes_at + changed.size() + k] = static_cast<std::uint8_t>(z >> 8);
  }
  if (n % 2) raw.push_back(base[n - 1] ^ target[n - 1]);
}

// The frames carry zstd's content checksum (4 bytes): a damaged payload is refused when it is
// decompressed, before a chunk is rebuilt from it.
Status compress(ZSTD_CCtx* cctx, const std::vector<std::uint8_t>& raw,
                std::vector<std::uint8_t>& out) {
  out.resize(ZSTD_compressBound(raw.size()));
  const std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), raw.data(), raw.size());
  if (ZSTD_isError(n)) return internal_error(fmt::format("zstd: {}", ZSTD_getErrorName(n)));
  out.resize(n);
  return {};
}

// Rebuilds an n-byte chunk into `o` from the base chunk `b` and the decompressed sparse16 form.
Status apply_sparse16(const std::vector<std::uint8_t>& raw, std::uint64_t i, const std::uint8_t* b,
                      std::uint8_t* o, std::uint64_t n) {
  const std::uint64_t values = n / 2;
  const std::uint64_t tail = n % 2;
  std::vector<std::uint32_t> index;
  std::size_t at = 0;
  SLUICE_TRY(read_sparse_indices(raw, i, values, "value", at, index));
  const std::uint64_t count = index.size();
  const std::size_t end = raw.size();
  std::memcpy(o, b, n);
  if (end - at != 2 * count + tail) {
    return protocol_error(
        fmt::format("delta: chunk {}'s sparse16 form has {} bytes of differences, not {}", i,
                    end - at, 2 * count + tail));
  }
  for (std::uint64_t k = 0; k < count; ++k) {
    const auto z = static_cast<std::uint16_t>(raw[at + k] | (raw[at + count + k] << 8));
    const std::uint16_t v = unzigzag16(load_u16(b + 2 * index[k]), z);
    o[2 * index[k]] = static_cast<std::uint8_t>(v);
    o[2 * index[k] + 1] = static_cast<std::uint8_t>(v >> 8);
  }
  if (tail) o[n - 1] = b[n - 1] ^ raw[at + 2 * count];
  return {};
}

}  // namespace

std::uint64_t DeltaView::chunk_size(std::uint64_t i) const {
  const std::uint64_t start = i * header.chunk_bytes;
  return std::min(header.chunk_bytes, header.total_bytes - start);
}

Result<std::vector<std::uint8_t>> encode_delta(std::span<const std::uint8_t> base,
                                               std::span<const std::uint8_t> target,
                                               std::uint64_t base_version,
                                               std::uint64_t target_version,
                                               std::uint64_t chunk_bytes,
                                               const DeltaOptions& options, DeltaStats* stats) {
  if (base.size() != target.size()) {
    return invalid_argument(
        fmt::format("a delta needs versions of one layout: base of {} bytes, "
                    "target of {}",
                    base.size(), target.size()));
  }
  if (target.empty()) return invalid_argument("a delta of an empty version");
  if (chunk_bytes == 0) return invalid_argument("a delta needs a positive chunk size");
  if (options.zstd_level < 1 || options.zstd_level > ZSTD_maxCLevel()) {
    return invalid_argument(
        fmt::format("zstd level {} is not within 1..{}", options.zstd_level, ZSTD_maxCLevel()));
  }
  std::unique_ptr<ZSTD_CCtx, CCtxFree> cctx(ZSTD_createCCtx());
  if (!cctx) return internal_error("zstd: cannot create a compression context");
  if (ZSTD_isError(
          ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, options.zstd_level)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1))) {
    return internal_error("zstd: cannot set the compression parameters");
  }
  DeltaStats st;
  const std::uint64_t total = target.size();
  const std::uint64_t count = (total + chunk_bytes - 1) / chunk_bytes;
  std::vector<std::uint8_t> out(kDeltaHeaderBytes + count * kDeltaEntryBytes);
  ByteWriter header(out.data(), kDeltaHeaderBytes);
  header.put(kMagic, sizeof kMagic).u32(kDeltaFormatVersion).u32(0);
  header.u64(base_version).u64(target_version).u64(total).u64(chunk_bytes).u64(count);
  std::vector<std::uint8_t> raw, packed, alt_raw, alt_packed;
  std::vector<std::uint32_t> changed, changed16;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t start = i * chunk_bytes;
    const std::size_t n = static_cast<std::size_t>(std::min(chunk_bytes, total - start));
    const std::uint8_t* b = base.data() + start;
    const std::uint8_t* t = target.data() + start;
    const std::size_t words = n / 4;
    changed.clear();
    for (std::size_t w = 0; w < words; ++w)
      if (load_word(b + 4 * w) != load_word(t + 4 * w))
        changed.push_back(static_cast<std::uint32_t>(w));
    std::uint64_t tail_changed = 0;
    for (std::size_t k = 4 * words; k < n; ++k)
      tail_changed += b[k] != t[k];
    st.words += words;
    st.changed_words += changed.size();
    st.changed_bytes += tail_changed;
    for (auto w : changed)
      for (int k = 0; k < 4; ++k)
        st.changed_bytes += b[4 * w + k] != t[4 * w + k];
    const std::size_t values16 = n / 2;
    changed16.clear();
    for (std::size_t v = 0; v < values16; ++v)
      if (load_u16(b + 2 * v) != load_u16(t + 2 * v))
        changed16.push_back(static_cast<std::uint32_t>(v));
    st.values16 += values16;
    st.changed_values16 += changed16.size();
    DeltaEncoding enc = DeltaEncoding::kSame;
    packed.clear();
    if (!changed.empty() || tail_changed) {
      xor_planes(b, t, n, raw);
      SLUICE_TRY(compress(cctx.get(), raw, packed));
      enc = DeltaEncoding::kXor;
      if (options.sparse && changed.size() <= words / 4) {
        sparse_form(b, t, n, changed, alt_raw);
        SLUICE_TRY(compress(cctx.get(), alt_raw, alt_packed));
        if (alt_packed.size() < packed.size()) {
          packed.swap(alt_packed);
          enc = DeltaEncoding::kSparse;
        }
      }
      if (options.sparse16 && changed16.size() <= values16 / 2) {
        sparse16_form(b, t, n, changed16, alt_raw);
        SLUICE_TRY(compress(cctx.get(), alt_raw, alt_packed));
        if (alt_packed.size() < packed.size()) {
          packed.swap(alt_packed);
          enc = DeltaEncoding::kSparse16;
        }
      }
    }
    switch (enc) {
      case DeltaEncoding::kSame:
        ++st.same_chunks;
        break;
      case DeltaEncoding::kXor:
        ++st.xor_chunks;
        break;
      case DeltaEncoding::kSparse:
        ++st.sparse_chunks;
        break;
      case DeltaEncoding::kSparse16:
        ++st.sparse16_chunks;
        break;
    }
    ByteWriter(out.data() + kDeltaHeaderBytes + i * kDeltaEntryBytes, kDeltaEntryBytes)
        .u32(static_cast<std::uint32_t>(enc))
        .u32(0)
        .u64(packed.size());
    out.insert(out.end(), packed.begin(), packed.end());
  }
  if (stats) *stats = st;
  return out;
}

Result<DeltaView> parse_delta(std::span<const std::uint8_t> blob) {
  if (blob.size() < kDeltaHeaderBytes) {
    return protocol_error(fmt::format("delta: {} bytes, shorter than its {}-byte header",
                                      blob.size(), kDeltaHeaderBytes));
  }
  // The header fits (checked above), so its reads cannot fail.
  ByteReader in(blob.data(), blob.size());
  if (in.view(sizeof kMagic) != std::string_view(kMagic, sizeof kMagic)) {
    return protocol_error("delta: bad magic (not a sluice delta)");
  }
  const std::uint32_t format = in.u32();
  if (format != kDeltaFormatVersion) {
    return protocol_error(
        fmt::format("delta: format version {}, this build reads {}", format, kDeltaFormatVersion));
  }
  if (in.u32() != 0) return protocol_error("delta: unknown flags");
  DeltaView v;
  v.header.base_version = in.u64();
  v.header.target_version = in.u64();
  v.header.total_bytes = in.u64();
  v.header.chunk_bytes = in.u64();
  v.header.chunk_count = in.u64();
  const DeltaHeader& h = v.header;
  if (h.total_bytes == 0 || h.chunk_bytes == 0) {
    return protocol_error("delta: total bytes and chunk bytes must be positive");
  }
  const std::uint64_t expect = h.total_bytes / h.chunk_bytes + (h.total_bytes % h.chunk_bytes != 0);
  if (h.chunk_count != expect) {
    return protocol_error(fmt::format("delta: {} chunks for {} bytes in chunks of {} (expected {})",
                                      h.chunk_count, h.total_bytes, h.chunk_bytes, expect));
  }
  // The entries' size is checked against the blob before any of them is read or stored.
  const std::uint64_t room = (blob.size() - kDeltaHeaderBytes) / kDeltaEntryBytes;
  if (h.chunk_count > room) {
    return protocol_error(
        fmt::format("delta: {} chunk entries do not fit in {} bytes", h.chunk_count, blob.size()));
  }
  std::uint64_t at = kDeltaHeaderBytes + h.chunk_count * kDeltaEntryBytes;
  v.chunks.resize(h.chunk_count);
  for (std::uint64_t i = 0; i < h.chunk_count; ++i) {
    // The entries fit (checked above); the reader walks them in order.
    const std::uint32_t enc = in.u32();
    const std::uint32_t reserved = in.u32();
    const std::uint64_t bytes = in.u64();
    if (enc > static_cast<std::uint32_t>(DeltaEncoding::kSparse16) || reserved != 0) {
      return protocol_error(fmt::format("delta: chunk {} has an unknown encoding {}", i, enc));
    }
    if ((enc == 0) != (bytes == 0)) {
      return protocol_error(
          fmt::format("delta: chunk {}: {} payload bytes for encoding {}", i, bytes, enc));
    }
    if (bytes > blob.size() - at) {
      return protocol_error(
          fmt::format("delta: chunk {}'s payload of {} bytes runs past the end", i, bytes));
    }
    v.chunks[i] = {static_cast<DeltaEncoding>(enc), at, bytes};
    at += bytes;
  }
  if (at != blob.size()) {
    return protocol_error(fmt::format("delta: {} bytes after the last payload", blob.size() - at));
  }
  return v;
}

Status check_delta_fits(const DeltaHeader& h, std::uint64_t held_version,
                        std::uint64_t target_version, std::uint64_t total_bytes,
                        std::uint64_t chunk_bytes) {
  if (h.base_version != held_version) {
    return failed_precondition(
        fmt::format("delta {} -> {} is against version {}; this reader holds version {}",
                    h.base_version, h.target_version, h.base_version, held_version));
  }
  if (h.target_version != target_version) {
    return failed_precondition(fmt::format("delta {} -> {} makes version {}, not the {} wanted",
                                           h.base_version, h.target_version, h.target_version,
                                           target_version));
  }
  if (h.total_bytes != total_bytes || h.chunk_bytes != chunk_bytes) {
    return invalid_argument(fmt::format(
        "delta {} -> {} is for {} bytes in chunks of {}; the version is {} bytes in chunks of {}",
        h.base_version, h.target_version, h.total_bytes, h.chunk_bytes, total_bytes, chunk_bytes));
  }
  return {};
}

Status apply_delta_chunk(const DeltaView& view, std::span<const std::uint8_t> blob, std::uint64_t i,
                         std::span<const std::uint8_t> base_chunk, std::span<std::uint8_t> out) {
  if (i >= view.chunks.size()) {
    return invalid_argument(fmt::format("delta: no chunk {} (of {})", i, view.chunks.size()));
  }
  const std::uint64_t n = view.chunk_size(i);
  if (base_chunk.size() != n || out.size() != n) {
    return invalid_argument(fmt::format("delta: chunk {} is {} bytes, given base {} and out {}", i,
                                        n, base_chunk.size(), out.size()));
  }
  const DeltaView::Chunk& c = view.chunks[i];
  if (c.offset + c.bytes > blob.size()) {
    return invalid_argument("delta: the blob is not the one the view was parsed from");
  }
  if (c.encoding == DeltaEncoding::kSame) {
    std::memcpy(out.data(), base_chunk.data(), n);
    return {};
  }
  const std::uint8_t* frame = blob.data() + c.offset;
  // Exactly one frame, whose declared size is checked before anything is allocated for it.
  const std::size_t frame_bytes = ZSTD_findFrameCompressedSize(frame, c.bytes);
  if (ZSTD_isError(frame_bytes) || frame_bytes != c.bytes) {
    return protocol_error(fmt::format("delta: chunk {}'s payload is not one zstd frame", i));
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(frame, c.bytes);
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return protocol_error(fmt::format("delta: chunk {}'s frame declares no size", i));
  }
  const std::uint64_t words = n / 4;
  const std::uint64_t tail = n % 4;
  if (c.encoding == DeltaEncoding::kXor) {
    if (declared != n) {
      return protocol_error(
          fmt::format("delta: chunk {} decodes to {} bytes, not its {}", i, declared, n));
    }
  } else if (c.encoding == DeltaEncoding::kSparse) {
    if (declared < 4 + tail || declared > 4 + 9 * words + tail) {
      // A count, at most 5 varint bytes and 4 XOR bytes per word, and the tail.
      return protocol_error(fmt::format(
          "delta: chunk {}'s sparse form of {} bytes does not fit {} bytes", i, declared, n));
    }
  } else if (declared < 4 + n % 2 || declared > 4 + 7 * (n / 2) + n % 2) {
    // Sparse16: a count, at most 5 varint bytes and 2 difference bytes per value, and the tail.
    return protocol_error(fmt::format(
        "delta: chunk {}'s sparse16 form of {} bytes does not fit {} bytes", i, declared, n));
  }
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(declared));
  std::unique_ptr<ZSTD_DCtx, DCtxFree> dctx(ZSTD_createDCtx());
  if (!dctx) return internal_error("zstd: cannot create a decompression context");
  const std::size_t got = ZSTD_decompressDCtx(dctx.get(), raw.data(), raw.size(), frame, c.bytes);
  if (ZSTD_isError(got) || got != raw.size()) {
    return protocol_error(fmt::format("delta: chunk {} does not decompress: {}", i,
                                      ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short"));
  }
  const std::uint8_t* b = base_chunk.data();
  std::uint8_t* o = out.data();
  if (c.encoding == DeltaEncoding::kXor) {
    const std::uint8_t* planes[4] = {raw.data(), raw.data() + words, raw.data() + 2 * words,
                                     raw.data() + 3 * words};
    for (std::uint64_t w = 0; w < words; ++w) {
      const std::uint32_t x = static_cast<std::uint32_t>(planes[0][w]) |
                              static_cast<std::uint32_t>(planes[1][w]) << 8 |
                              static_cast<std::uint32_t>(planes[2][w]) << 16 |
                              static_cast<std::uint32_t>(planes[3][w]) << 24;
      const std::uint32_t v = load_word(b + 4 * w) ^ x;
      std::memcpy(o + 4 * w, &v, 4);
    }
    for (std::uint64_t k = 4 * words; k < n; ++k)
      o[k] = b[k] ^ raw[k];
    return {};
  }
  if (c.encoding == DeltaEncoding::kSparse16) return apply_sparse16(raw, i, b, o, n);
  // Sparse.
  std::vector<std::uint32_t> index;
  std::size_t at = 0;
  SLUICE_TRY(read_sparse_indices(raw, i, words, "word", at, index));
  const std::uint64_t count = index.size();
  const std::size_t end = raw.size();
  std::memcpy(o, b, n);
  if (end - at != 4 * count + tail) {
    return protocol_error(
        fmt::format("delta: chunk {}'s sparse form has {} bytes of values, "
                    "not {}",
                    i, end - at, 4 * count + tail));
  }
  for (std::uint64_t k = 0; k < count; ++k) {
    std::uint32_t x = 0;
    for (int p = 0; p < 4; ++p)
      x |= static_cast<std::uint32_t>(raw[at + p * count + k]) << (8 * p);
    const std::uint32_t v = load_word(b + 4 * index[k]) ^ x;
    std::memcpy(o + 4 * index[k], &v, 4);
  }
  at += 4 * count;
  for (std::uint64_t k = 0; k < tail; ++k)
    o[4 * words + k] = b[4 * words + k] ^ raw[at + k];
  return {};
}

Status apply_delta(std::span<const std::uint8_t> blob, std::span<const std::uint8_t> base,
                   std::span<std::uint8_t> out) {
  SLUICE_ASSIGN_OR_RETURN(DeltaView v, parse_delta(blob));
  if (base.size() != v.header.total_bytes || out.size() != v.header.total_bytes) {
    return invalid_argument(fmt::format("delta of {} bytes: base is {} bytes and out {}",
                                        v.header.total_bytes, base.size(), out.size()));
  }
  for (std::uint64_t i = 0; i < v.chunks.size(); ++i) {
    const std::uint64_t at = i * v.header.chunk_bytes;
    const std::uint64_t n = v.chunk_size(i);
    SLUICE_TRY(apply_delta_chunk(v, blob, i, base.subspan(at, n), out.subspan(at, n)));
  }
  return {};
}

namespace {
// splitmix64: a small, fast generator with a 64-bit state (enough for synthetic weights).
double uniform(std::uint64_t& s) {
  return static_cast<double>(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}
}  // namespace

void fill_weights_fp32(std::span<std::uint8_t> data, std::uint64_t seed) {
  std::uint64_t s = seed;
  for (std::size_t i = 0; i + 4 <= data.size(); i += 4) {
    // Box-Muller; one of the pair is enough here.
    const double u1 = std::max(uniform(s), 1e-300);
    const double u2 = uniform(s);
    const auto v = static_cast<float>(0.02 * std::sqrt(-2.0 * std::log(u1)) *
                                      std::cos(6.283185307179586 * u2));
    std::memcpy(data.data() + i, &v, 4);
  }
}

std::uint64_t optimizer_step_fp32(std::span<std::uint8_t> data, double fraction,
                                  std::uint64_t seed) {
  std::uint64_t s = seed;
  std::uint64_t changed = 0;
  for (std::size_t i = 0; i + 4 <= data.size(); i += 4) {
    if (uniform(s) >= fraction) continue;
    float v;
    std::memcpy(&v, data.data() + i, 4);
    const float step = static_cast<float>((uniform(s) * 2.0 - 1.0) * 1e-3);
    float w = v * (1.0f + step);
    if (w == v || std::isnan(w)) w = std::nextafter(v, v >= 0.0f ? 1.0f : -1.0f);
    std::memcpy(data.data() + i, &w, 4);
    ++changed;
  }
  return changed;
}

}  // namespace sluice::core
