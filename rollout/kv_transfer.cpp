#include "rollout/kv_transfer.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "core/bytes.hpp"
#include "core/checksum.hpp"

namespace sluice::rollout {

namespace {

// Reads go in chunks of this size so that several GETs are in flight; the checksum covers the
// whole and is checked once the read is done.
constexpr std::uint64_t kChunkBytes = 4ull << 20;

// The header, little-endian: "SLKV", u16 version, u16 0, u16 rollout id bytes, u16 trajectory
// id bytes, u32 0, then the rollout id in 128 bytes and the trajectory id in 128 (zero-padded).
constexpr char kKvMagic[4] = {'S', 'L', 'K', 'V'};
constexpr std::uint16_t kKvHeaderVersion = 1;
constexpr std::size_t kFieldsBytes = 16;  // before the ids
static_assert(kFieldsBytes + 2 * kMaxKvIdBytes <= kKvHeaderBytes);

void write_header(std::uint8_t* h, const KvOwner& owner) {
  core::ByteWriter w(h, kKvHeaderBytes);
  w.put(kKvMagic, sizeof(kKvMagic)).u16(kKvHeaderVersion).u16(0);
  w.u16(static_cast<std::uint16_t>(owner.rollout.size()));
  w.u16(static_cast<std::uint16_t>(owner.trajectory.size())).u32(0);
  w.put(owner.rollout).zeros(kMaxKvIdBytes - owner.rollout.size());
  w.put(owner.trajectory).zeros(kMaxKvIdBytes - owner.trajectory.size());
  w.zeros(kKvHeaderBytes - w.pos());
}

// Who the header says the buffer belongs to; nothing when it is no KV header.
std::optional<KvOwner> read_header(const std::uint8_t* h) {
  core::ByteReader r(h, kKvHeaderBytes);
  if (r.view(sizeof(kKvMagic)) != std::string_view(kKvMagic, sizeof(kKvMagic)) ||
      r.u16() != kKvHeaderVersion) {
    return std::nullopt;
  }
  r.skip(2);
  const std::size_t rollout_bytes = r.u16(), trajectory_bytes = r.u16();
  r.skip(4);
  if (rollout_bytes > kMaxKvIdBytes || trajectory_bytes > kMaxKvIdBytes) return std::nullopt;
  KvOwner o;
  o.rollout = r.view(kMaxKvIdBytes).substr(0, rollout_bytes);
  o.trajectory = r.view(kMaxKvIdBytes).substr(0, trajectory_bytes);
  return o;
}

bool valid_id(const std::string& id) {
  return !id.empty() && id.size() <= kMaxKvIdBytes;
}

}  // namespace

core::Result<PublishedKv> publish_kv(core::TransferEngine& engine, const KvState& kv,
                                     const KvOwner& owner) {
  const std::uint64_t want = std::uint64_t{kv.layers} * kv.width * kv.positions;
  if (want == 0 || kv.keys.size() != want || kv.values.size() != want) {
    return core::invalid_argument("kv publish: keys and values must hold layers x width x " +
                                  std::to_string(kv.positions) + " positions, and not none");
  }
  if (!valid_id(owner.rollout) || !valid_id(owner.trajectory)) {
    return core::invalid_argument("kv publish: rollout and trajectory ids of 1 to " +
                                  std::to_string(kMaxKvIdBytes) + " bytes");
  }
  const std::size_t half = kv.keys.size() * sizeof(float);
  SLUICE_ASSIGN_OR_RETURN(auto buffer,
                          engine.allocate(kKvHeaderBytes + 2 * half, /*prefault=*/false));
  write_header(buffer->data(), owner);
  std::uint8_t* payload = buffer->data() + kKvHeaderBytes;
  std::memcpy(payload, kv.keys.data(), half);
  std::memcpy(payload + half, kv.values.data(), half);
  PublishedKv out;
  out.ref.version = kv.version;
  out.ref.layers = kv.layers;
  out.ref.width = kv.width;
  out.ref.positions = kv.positions;
  out.ref.bytes = 2 * half;
  out.ref.checksum = core::chunk_checksum(payload, 2 * half);
  out.ref.region = buffer->descriptor().encode();
  out.ref.source = owner.rollout;
  out.buffer = std::move(buffer);
  return out;
}

core::Result<KvState> fetch_kv(core::TransferEngine& engine, const KvRef& ref,
                               const FetchKvOptions& options) {
  // Everything about the reference is checked before anything is allocated for it.
  if (!ref.destination.empty() && ref.destination != options.self) {
    return core::permission_denied("kv fetch: the reference was issued to " + ref.destination +
                                   ", not to " + options.self);
  }
  if (ref.bytes == 0 || ref.bytes != ref.shape_bytes()) {
    return core::invalid_argument("kv fetch: " + std::to_string(ref.bytes) +
                                  " bytes for a shape of " + std::to_string(ref.shape_bytes()));
  }
  if (ref.bytes > options.max_bytes) {
    return core::invalid_argument("kv fetch: " + std::to_string(ref.bytes) +
                                  " bytes is more than this engine holds (" +
                                  std::to_string(options.max_bytes) + ")");
  }
  auto region = core::RegionDescriptor::decode(ref.region);
  if (!region.is_ok()) {
    return core::invalid_argument("kv fetch: " + region.status().message());
  }
  const std::uint64_t total = kKvHeaderBytes + ref.bytes;
  if (region->length < total) {
    return core::invalid_argument("kv fetch: the region holds " + std::to_string(region->length) +
                                  " bytes, not " + std::to_string(total));
  }
  std::vector<core::ChunkRead> chunks;
  for (std::uint64_t off = 0; off < total; off += kChunkBytes) {
    core::ChunkRead c;
    c.src_offset = c.dst_offset = off;
    c.bytes = std::min(kChunkBytes, total - off);
    chunks.push_back(c);
  }
  SLUICE_ASSIGN_OR_RETURN(auto dst, engine.allocate(total, /*prefault=*/false));
  core::ReadOptions ro;
  ro.verify = false;  // one checksum covers all chunks: checked below
  ro.total_timeout = options.timeout;
  ro.op_timeout = options.timeout;
  ro.max_total_bytes = options.max_bytes + kKvHeaderBytes;
  auto read = engine.read_sync({{"kv-source", std::move(region).value()}}, std::move(chunks), *dst,
                               std::move(ro));
  if (!read.is_ok()) return read.status().with_context("kv fetch");
  auto owner = read_header(dst->data());
  if (!owner) return core::permission_denied("kv fetch: the region is not a published KV cache");
  if (owner->rollout != ref.source || owner->trajectory != options.trajectory) {
    return core::permission_denied("kv fetch: the region holds " + owner->rollout + "'s cache of " +
                                   owner->trajectory + ", not " + ref.source + "'s of " +
                                   options.trajectory);
  }
  const std::uint8_t* payload = dst->data() + kKvHeaderBytes;
  const std::uint64_t sum = core::chunk_checksum(payload, ref.bytes);
  if (sum != ref.checksum) {
    return core::data_loss("kv fetch: checksum " + core::checksum_hex(sum) +
                           " of the bytes read, " + core::checksum_hex(ref.checksum) +
                           " published");
  }
  KvState kv;
  kv.version = ref.version;
  kv.layers = ref.layers;
  kv.width = ref.width;
  kv.positions = ref.positions;
  const std::size_t n = static_cast<std::size_t>(ref.bytes / 2 / sizeof(float));
  kv.keys.resize(n);
  kv.values.resize(n);
  std::memcpy(kv.keys.data(), payload, n * sizeof(float));
  std::memcpy(kv.values.data(), payload + n * sizeof(float), n * sizeof(float));
  return kv;
}

core::Status fetch_kv_of(core::TransferEngine* transfer, const Engine& engine, SequenceState& s,
                         const std::string& self, core::Millis timeout, KvReadStats& stats) {
  if (!s.kv_ref) return {};
  KvRef ref = std::move(*s.kv_ref);
  s.kv_ref.reset();
  const std::uint64_t per_token = engine.kv_bytes_per_token();
  core::Result<KvState> kv =
      core::failed_precondition("kv fetch: no transfer engine, or an engine without a KV cache");
  if (transfer != nullptr && per_token > 0) {
    FetchKvOptions o;
    o.timeout = timeout;
    o.self = self;
    o.trajectory = s.trajectory_id;
    const std::uint64_t max_tokens = engine.capacity().max_kv_tokens;
    constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
    o.max_bytes = max_tokens > kMax / per_token ? kMax : max_tokens * per_token;
    kv = fetch_kv(*transfer, ref, o);
  }
  if (!kv.is_ok()) {
    ++stats.read_failed;
    return kv.status();
  }
  ++stats.fetched;
  stats.fetched_bytes += ref.bytes;
  s.kv = std::move(kv).value();
  return {};
}

}  // namespace sluice::rollout
