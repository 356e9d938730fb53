#include "format/shard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/checksum.hpp"
#include "format/bf16.hpp"

namespace sluice::core {

namespace {

constexpr const char* kCastBf16 = "bf16";
constexpr const char* kCastFp8 = "fp8_e4m3";
constexpr float kFp8Max = 448.0f;

bool casts(const ShardLayout& l, const std::string& dtype) {
  return (l.cast == kCastBf16 && dtype == "F32") || (l.cast == kCastFp8 && dtype == "BF16");
}

std::uint64_t elements(const ShardTensor& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape)
    n *= d;
  return n;
}

std::uint64_t scale_blocks(std::uint64_t n, std::uint32_t block) {
  return n / block + (n % block != 0 ? 1 : 0);
}

}  // namespace

Status ShardLayout::validate() const {
  if (tp_size == 0 || tp_size > kMaxTensorParallel) {
    return invalid_argument("shard layout: tp_size must be 1.." +
                            std::to_string(kMaxTensorParallel) + ", not " +
                            std::to_string(tp_size));
  }
  if (tp_rank >= tp_size) {
    return invalid_argument("shard layout: tp_rank " + std::to_string(tp_rank) +
                            " is not below tp_size " + std::to_string(tp_size));
  }
  if (!cast.empty() && cast != kCastBf16 && cast != kCastFp8) {
    return invalid_argument("shard layout: unsupported cast '" + cast +
                            "' (supported: \"bf16\" from F32, \"fp8_e4m3\" from BF16)");
  }
  if (cast_block == 0) return invalid_argument("shard layout: cast_block must be positive");
  if (host_tp_size > 0 && tp_size % host_tp_size != 0) {
    return invalid_argument("shard layout: host_tp_size " + std::to_string(host_tp_size) +
                            " does not divide tp_size " + std::to_string(tp_size));
  }
  return {};
}

Result<ShardLayout> ShardLayout::from_json(const nlohmann::json& j) {
  auto bad = [](const std::string& what) { return invalid_argument("shard layout: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  ShardLayout l;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    auto u32 = [&](std::uint32_t& out) -> Status {
      // A literal 2 in C++ JSON is a signed integer; JSON text makes it unsigned: both count.
      const bool non_negative =
          v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
      if (!non_negative || v.get<std::uint64_t>() > UINT32_MAX)
        return bad("'" + key + "' must be a non-negative integer");
      out = v.get<std::uint32_t>();
      return {};
    };
    if (key == "tp_rank") {
      SLUICE_TRY(u32(l.tp_rank));
    } else if (key == "tp_size") {
      SLUICE_TRY(u32(l.tp_size));
    } else if (key == "cast_block") {
      SLUICE_TRY(u32(l.cast_block));
    } else if (key == "host_tp_size") {
      SLUICE_TRY(u32(l.host_tp_size));
    } else if (key == "cast") {
      if (!v.is_string()) return bad("'cast' must be a string");
      l.cast = v.get<std::string>();
    } else if (key == "splits") {
      if (!v.is_object()) return bad("'splits' must be an object of tensor name -> split");
      for (auto s = v.begin(); s != v.end(); ++s) {
        const std::string word = s->is_string() ? s->get<std::string>() : std::string();
        if (word == "rows") {
          l.splits[s.key()] = Split::kRows;
        } else if (word == "columns") {
          l.splits[s.key()] = Split::kColumns;
        } else if (word == "replicated") {
          l.splits[s.key()] = Split::kReplicated;
        } else {
          return bad("'splits." + s.key() + "' must be \"rows\", \"columns\" or \"replicated\"");
        }
      }
    } else if (key == "names") {
      if (!v.is_object()) return bad("'names' must be an object of trainer name -> rollout name");
      for (auto s = v.begin(); s != v.end(); ++s) {
        if (!s->is_string()) return bad("'names." + s.key() + "' must be a string");
        l.names[s.key()] = s->get<std::string>();
      }
    } else {
      return bad("unknown key '" + key +
                 "' (known: tp_rank, tp_size, splits, names, cast, cast_block, host_tp_size)");
    }
  }
  SLUICE_TRY(l.validate());
  return l;
}

nlohmann::json ShardLayout::to_json() const {
  nlohmann::json j = {
      {"tp_rank", tp_rank}, {"tp_size", tp_size}, {"cast", cast}, {"cast_block", cast_block}};
  j["splits"] = nlohmann::json::object();
  for (const auto& [name, s] : splits)
    j["splits"][name] = split_word(s);
  j["names"] = names;
  if (host_tp_size > 0) j["host_tp_size"] = host_tp_size;
  return j;
}

Result<std::string> shard_splits(const Manifest& m, const ShardLayout& layout) {
  const std::string what = "layout tp " + std::to_string(layout.tp_rank) + "/" +
                           std::to_string(layout.tp_size) + " for " + m.model + "@" +
                           std::to_string(m.version);
  SLUICE_TRY(layout.validate().with_context(what));
  std::set<std::string> have;
  for (const auto& t : m.tensors)
    have.insert(t.name);
  for (const auto& [name, s] : layout.splits) {
    if (!have.count(name)) {
      return invalid_argument(what + ": a split is given for tensor '" + name +
                              "', which the version does not have");
    }
  }
  std::string out;
  for (const auto& t : m.tensors) {
    auto it = layout.splits.find(t.name);
    const Split s = it == layout.splits.end() ? Split::kReplicated : it->second;
    SLUICE_TRY(split_bytes(t, s, layout.tp_size).status().with_context(what));
    out.push_back(static_cast<char>(s));
  }
  return out;
}

Result<ShardPlan> plan_shard(const Manifest& m, const ShardLayout& layout) {
  const std::string what = "layout tp " + std::to_string(layout.tp_rank) + "/" +
                           std::to_string(layout.tp_size) + " for " + m.model + "@" +
                           std::to_string(m.version);
  SLUICE_ASSIGN_OR_RETURN(std::string splits, shard_splits(m, layout));
  std::set<std::string> have;
  for (const auto& t : m.tensors)
    have.insert(t.name);
  for (const auto& [name, to] : layout.names) {
    if (!have.count(name)) {
      return invalid_argument(what + ": the name map names tensor '" + name +
                              "', which the version does not have");
    }
    if (to.empty()) return invalid_argument(what + ": the name map gives '" + name + "' no name");
  }
  ShardPlan plan;
  plan.tp_rank = layout.tp_rank;
  plan.tp_size = layout.tp_size;
  plan.splits = splits;
  std::set<std::string> taken;
  const std::uint64_t tp = layout.tp_size, rank = layout.tp_rank;
  // Appends [src, src + bytes) to the stream, cut where the version's chunks end, merged with
  // the piece before when both sides continue it.
  auto add = [&](std::uint64_t src, std::uint64_t bytes) {
    while (bytes > 0) {
      const std::uint64_t to_chunk_end = m.chunk_bytes - src % m.chunk_bytes;
      const std::uint64_t n = std::min(bytes, to_chunk_end);
      auto& ps = plan.pieces;
      if (!ps.empty() && ps.back().src_offset + ps.back().bytes == src &&
          ps.back().dst_offset + ps.back().bytes == plan.bytes &&
          ps.back().src_offset / m.chunk_bytes == src / m.chunk_bytes) {
        ps.back().bytes += n;
      } else {
        ps.push_back({src, plan.bytes, n});
      }
      plan.bytes += n;
      src += n;
      bytes -= n;
    }
  };
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    ShardTensor st;
    st.source = t.name;
    if (!layout.names.empty()) {
      auto it = layout.names.find(t.name);
      if (it == layout.names.end()) {
        return invalid_argument(what + ": the name map has no entry for tensor '" + t.name + "'");
      }
      st.name = it->second;
    } else {
      st.name = t.name;
    }
    if (!taken.insert(st.name).second) {
      return invalid_argument(what + ": two tensors map to the rollout name '" + st.name + "'");
    }
    if (layout.cast == kCastFp8 && t.dtype == "BF16" && !taken.insert(st.name + ".scale").second) {
      return invalid_argument(what + ": tensor '" + st.name + "' and its fp8 scales '" + st.name +
                              ".scale' need distinct names");
    }
    st.dtype = t.dtype;
    st.shape = t.shape;
    st.split = static_cast<Split>(splits[i]);
    st.offset = plan.bytes;
    if (st.split == Split::kReplicated) {
      add(t.offset, t.bytes);
    } else if (st.split == Split::kRows) {
      st.shape[0] /= tp;
      const std::uint64_t part = t.bytes / tp;
      add(t.offset + rank * part, part);
    } else {
      st.shape[1] /= tp;
      const std::uint64_t rows = t.shape[0];
      const std::uint64_t row_bytes = rows == 0 ? 0 : t.bytes / rows;
      const std::uint64_t part = row_bytes / tp;
      for (std::uint64_t r = 0; r < rows && part > 0; ++r)
        add(t.offset + r * row_bytes + rank * part, part);
    }
    st.bytes = plan.bytes - st.offset;
    plan.tensors.push_back(std::move(st));
  }
  return plan;
}

const std::vector<std::uint64_t>* declared_checksums(const Manifest& m, const ShardPlan& plan) {
  for (const auto& sc : m.shards) {
    if (sc.tp_size == plan.tp_size && sc.splits == plan.splits && plan.tp_rank < sc.ranks.size())
      return &sc.ranks[plan.tp_rank];
  }
  return nullptr;
}

const std::vector<Digest>* declared_digests(const Manifest& m, const ShardPlan& plan) {
  for (const auto& sc : m.shards) {
    if (sc.tp_size == plan.tp_size && sc.splits == plan.splits && plan.tp_rank < sc.digests.size())
      return &sc.digests[plan.tp_rank];
  }
  return nullptr;
}

std::vector<std::uint64_t> stream_checksums(std::span<const std::uint8_t> stream,
                                            std::uint64_t chunk_bytes) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t off = 0; off < stream.size(); off += chunk_bytes) {
    out.push_back(chunk_checksum(stream.data() + off,
                                 std::min<std::uint64_t>(chunk_bytes, stream.size() - off)));
  }
  return out;
}

Status add_shard_checksums(Manifest& m, const ShardLayout& layout, const std::uint8_t* data) {
  ShardLayout base;
  base.tp_size = layout.tp_size;
  base.splits = layout.splits;
  ShardChecksums sc;
  sc.tp_size = layout.tp_size;
  // One chunk of a rank's stream at a time: memory stays one chunk whatever the version's size.
  std::vector<std::uint8_t> chunk(m.chunk_bytes);
  for (std::uint32_t r = 0; r < layout.tp_size; ++r) {
    base.tp_rank = r;
    SLUICE_ASSIGN_OR_RETURN(ShardPlan plan, plan_shard(m, base));
    sc.splits = plan.splits;
    std::vector<std::uint64_t> sums;
    std::vector<Digest> digests;
    auto add = [&](std::uint64_t n) {
      ChunkSums s = chunk_sums(chunk.data(), n, SumKind::both);
      sums.push_back(*s.checksum);
      digests.push_back(*s.digest);
    };
    std::uint64_t fill = 0;
    for (const auto& p : plan.pieces) {
      std::uint64_t done = 0;
      while (done < p.bytes) {
        const std::uint64_t n = std::min(p.bytes - done, m.chunk_bytes - fill);
        std::memcpy(chunk.data() + fill, data + p.src_offset + done, n);
        fill += n;
        done += n;
        if (fill == m.chunk_bytes) {
          add(fill);
          fill = 0;
        }
      }
    }
    if (fill > 0) add(fill);
    sc.ranks.push_back(std::move(sums));
    sc.digests.push_back(std::move(digests));
  }
  std::erase_if(m.shards, [&](const ShardChecksums& o) {
    return o.tp_size == sc.tp_size && o.splits == sc.splits;
  });
  if (m.shards.size() >= kMaxShardLayouts) {
    return invalid_argument("manifest " + m.model + "@" + std::to_string(m.version) +
                            ": more than " + std::to_string(kMaxShardLayouts) +
                            " shard layouts declared");
  }
  m.shards.push_back(std::move(sc));
  return {};
}

void assemble_shard(const ShardPlan& plan, const std::uint8_t* version, std::uint8_t* out) {
  for (const auto& p : plan.pieces)
    std::memcpy(out + p.dst_offset, version + p.src_offset, p.bytes);
}

Manifest shard_manifest(const Manifest& m, const ShardPlan& plan, const ShardLayout& layout) {
  Manifest out;
  out.model = m.model;
  out.version = m.version;
  out.chunk_bytes = m.chunk_bytes;
  std::uint64_t offset = 0;
  for (const auto& t : plan.tensors) {
    TensorSpec s{t.name, t.dtype, t.shape, offset, t.bytes};
    if (casts(layout, t.dtype)) {
      const std::uint64_t n = elements(t);
      s.dtype = layout.cast == kCastBf16 ? "BF16" : "F8_E4M3";
      s.bytes = layout.cast == kCastBf16 ? 2 * n : n;
      out.tensors.push_back(s);
      offset += s.bytes;
      if (layout.cast == kCastFp8) {
        const std::uint64_t blocks = scale_blocks(n, layout.cast_block);
        out.tensors.push_back({t.name + ".scale", "F32", {blocks}, offset, 4 * blocks});
        offset += 4 * blocks;
      }
      continue;
    }
    out.tensors.push_back(s);
    offset += s.bytes;
  }
  out.total_bytes = offset;
  return out;
}

namespace {

std::string splits_hash(std::string_view splits) {
  return fmt::format("{:016x}", chunk_checksum(splits.data(), splits.size()));
}

struct ShareName {
  std::string parent;
  std::uint32_t tp_size = 0;
  std::uint32_t tp_rank = 0;
  std::string hash;
};

// "<parent>~tp<T>.<R>~<16 hex>"; nullopt for anything else.
std::optional<ShareName> parse_share(const std::string& name) {
  const auto a = name.find('~');
  if (a == std::string::npos || a == 0) return std::nullopt;
  const auto b = name.find('~', a + 1);
  if (b == std::string::npos || name.size() - b - 1 != 16) return std::nullopt;
  ShareName out;
  out.parent = name.substr(0, a);
  out.hash = name.substr(b + 1);
  unsigned t = 0, r = 0;
  int used = 0;
  const std::string mid = name.substr(a + 1, b - a - 1);
  if (std::sscanf(mid.c_str(), "tp%u.%u%n", &t, &r, &used) != 2 ||
      static_cast<std::size_t>(used) != mid.size() || t == 0 || t > kMaxTensorParallel || r >= t)
    return std::nullopt;
  if (out.hash.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  out.tp_size = t;
  out.tp_rank = r;
  return out;
}

}  // namespace

std::string share_model(const std::string& model, std::uint32_t tp_size, std::uint32_t tp_rank,
                        std::string_view splits) {
  return fmt::format("{}~tp{}.{}~{}", model, tp_size, tp_rank, splits_hash(splits));
}

bool is_share_model(const std::string& name) {
  return name.find('~') != std::string::npos;
}

std::string share_parent(const std::string& name) {
  return name.substr(0, name.find('~'));
}

std::map<std::string, Split> splits_by_name(const Manifest& m, std::string_view splits) {
  std::map<std::string, Split> out;
  for (std::size_t i = 0; i < m.tensors.size() && i < splits.size(); ++i) {
    if (static_cast<Split>(splits[i]) != Split::kReplicated)
      out[m.tensors[i].name] = static_cast<Split>(splits[i]);
  }
  return out;
}

Result<Manifest> share_manifest(const Manifest& m, const std::string& name) {
  const auto share = parse_share(name);
  if (!share || share->parent != m.model) {
    return invalid_argument("'" + name + "' is not the name of a share of " + m.model);
  }
  const ShardChecksums* declared = nullptr;
  for (const auto& sc : m.shards) {
    if (sc.tp_size == share->tp_size && splits_hash(sc.splits) == share->hash) declared = &sc;
  }
  if (!declared || share->tp_rank >= declared->ranks.size()) {
    return failed_precondition(m.model + "@" + std::to_string(m.version) +
                               " declares no layout of tp_size " + std::to_string(share->tp_size) +
                               " with the splits of " + name +
                               ": a host share is verified against declared checksums only");
  }
  ShardLayout layout;
  layout.tp_size = share->tp_size;
  layout.tp_rank = share->tp_rank;
  layout.splits = splits_by_name(m, declared->splits);
  SLUICE_ASSIGN_OR_RETURN(ShardPlan plan, plan_shard(m, layout));
  Manifest out = shard_manifest(m, plan, layout);
  out.model = name;
  out.checksums = declared->ranks[share->tp_rank];
  if (share->tp_rank < declared->digests.size()) out.digests = declared->digests[share->tp_rank];
  if (out.checksums.size() != out.chunk_count()) {
    return invalid_argument(name + ": " + std::to_string(out.checksums.size()) +
                            " declared checksums for " + std::to_string(out.chunk_count()) +
                            " chunks");
  }
  return out;
}

Status check_share_follows(const Manifest& parent, const Manifest& share) {
  SLUICE_ASSIGN_OR_RETURN(Manifest want, share_manifest(parent, share.model));
  if (share.version != parent.version || !share.signature.empty() ||
      want.signed_bytes() != share.signed_bytes()) {
    return invalid_argument(share.model + "@" + std::to_string(share.version) +
                            ": the manifest is not the share that " + parent.model + "@" +
                            std::to_string(parent.version) + " declares");
  }
  return {};
}

Result<std::vector<ShardPiece>> rebase_pieces(const ShardPlan& fine, const ShardPlan& coarse,
                                              std::uint64_t chunk_bytes) {
  // Coarse pieces ascend in src_offset (tensors in offset order, rows in order), so the one that
  // holds a byte is found by search.
  std::vector<ShardPiece> out;
  const auto& cp = coarse.pieces;
  auto holder = [&cp](std::uint64_t src) -> const ShardPiece* {
    auto it = std::upper_bound(cp.begin(), cp.end(), src, [](std::uint64_t s, const ShardPiece& p) {
      return s < p.src_offset;
    });
    if (it == cp.begin()) return nullptr;
    --it;
    return src < it->src_offset + it->bytes ? &*it : nullptr;
  };
  for (const auto& p : fine.pieces) {
    std::uint64_t done = 0;
    while (done < p.bytes) {
      const ShardPiece* c = holder(p.src_offset + done);
      if (!c) {
        return invalid_argument("rank " + std::to_string(fine.tp_rank) + " of tp_size " +
                                std::to_string(fine.tp_size) + " needs byte " +
                                std::to_string(p.src_offset + done) +
                                " of the version, which rank " + std::to_string(coarse.tp_rank) +
                                " of tp_size " + std::to_string(coarse.tp_size) + " does not hold");
      }
      const std::uint64_t at = c->dst_offset + (p.src_offset + done - c->src_offset);
      std::uint64_t n = std::min(p.bytes - done, c->src_offset + c->bytes - (p.src_offset + done));
      n = std::min(n, chunk_bytes - at % chunk_bytes);
      out.push_back({at, p.dst_offset + done, n});
      done += n;
    }
  }
  return out;
}

std::uint8_t fp32_to_fp8_e4m3(float f) {
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  // E4M3FN has no infinity: everything from 448 up (infinity too) saturates to 448 (0x7e).
  if (a >= kFp8Max) return sign | 0x7e;
  // Subnormals are multiples of 2^-9 below 2^-6; rounding up to 8 x 2^-9 gives 0x08, the
  // smallest normal, with the same bits.
  if (a < std::ldexp(1.0, -6)) {
    return sign | static_cast<std::uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e = 0;
  const double m = std::frexp(a, &e);                   // a = m x 2^e, m in [0.5, 1)
  int exponent = e - 1;                                 // a = (2m) x 2^exponent, 2m in [1, 2)
  auto q = static_cast<int>(std::nearbyint(m * 16.0));  // 8..16: eight steps per binade
  if (q == 16) {
    q = 8;
    ++exponent;
  }
  const int field = exponent + 7;
  if (field > 15 || (field == 15 && q - 8 == 7)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<std::uint8_t>((field << 3) | (q - 8));
}

float fp8_e4m3_to_fp32(std::uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int field = (b >> 3) & 0x0f;
  const int mant = b & 0x07;
  if (field == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (field == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, field - 7);
}

void cast_shard(const ShardPlan& plan, const ShardLayout& layout, const std::uint8_t* in,
                std::uint8_t* out, std::uint64_t step_bytes) {
  std::uint64_t at = 0;  // in `out`
  for (const auto& t : plan.tensors) {
    const std::uint8_t* src = in + t.offset;
    if (!casts(layout, t.dtype)) {
      std::memcpy(out + at, src, t.bytes);
      at += t.bytes;
      continue;
    }
    const std::uint64_t n = elements(t);
    if (layout.cast == kCastBf16) {
      const std::uint64_t step = std::max<std::uint64_t>(1, step_bytes / 4);
      for (std::uint64_t i0 = 0; i0 < n; i0 += step) {
        for (std::uint64_t i = i0; i < std::min(n, i0 + step); ++i) {
          float f;
          std::memcpy(&f, src + 4 * i, 4);
          const std::uint16_t b = bf16_from_f32(f);
          std::memcpy(out + at + 2 * i, &b, 2);
        }
      }
      at += 2 * n;
      continue;
    }
    // bf16 -> fp8 e4m3 with one scale per block: the scale is the block's largest finite
    // magnitude / 448 (1 for a block of zeros), so the block's values fill e4m3's range.
    const std::uint64_t block = layout.cast_block;
    std::uint8_t* q = out + at;
    std::uint8_t* scales = q + n;
    const std::uint64_t step = std::max<std::uint64_t>(1, step_bytes / 2 / block) * block;
    for (std::uint64_t i0 = 0; i0 < n; i0 += step) {
      for (std::uint64_t b0 = i0; b0 < std::min(n, i0 + step); b0 += block) {
        const std::uint64_t b1 = std::min(n, b0 + block);
        auto value = [&](std::uint64_t i) {
          std::uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);
          return f32_from_bf16(h);
        };
        float amax = 0.0f;
        for (std::uint64_t i = b0; i < b1; ++i) {
          const float v = std::fabs(value(i));
          if (std::isfinite(v)) amax = std::max(amax, v);
        }
        const float scale = amax > 0.0f ? amax / kFp8Max : 1.0f;
        for (std::uint64_t i = b0; i < b1; ++i)
          q[i] = fp32_to_fp8_e4m3(value(i) / scale);
        std::memcpy(scales + 4 * (b0 / block), &scale, 4);
      }
    }
    at += n + 4 * scale_blocks(n, block);
  }
}

}  // namespace sluice::core
