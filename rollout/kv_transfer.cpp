#include "rollout/kv_transfer.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/checksum.hpp"

namespace sluice::rollout {

namespace {

// Reads go in chunks of this size so that several GETs are in flight; the checksum covers the
// whole and is checked once the read is done.
constexpr std::uint64_t kChunkBytes = 4ull << 20;

}  // namespace

core::Result<PublishedKv> publish_kv(core::TransferEngine& engine, const KvState& kv) {
  const std::uint64_t want = std::uint64_t{kv.layers} * kv.width * kv.positions;
  if (want == 0 || kv.keys.size() != want || kv.values.size() != want) {
    return core::invalid_argument("kv publish: keys and values must hold layers x width x " +
                                  std::to_string(kv.positions) + " positions, and not none");
  }
  const std::size_t half = kv.keys.size() * sizeof(float);
  SLUICE_ASSIGN_OR_RETURN(auto buffer, engine.allocate(2 * half, /*prefault=*/false));
  std::memcpy(buffer->data(), kv.keys.data(), half);
  std::memcpy(buffer->data() + half, kv.values.data(), half);
  PublishedKv out;
  out.ref.version = kv.version;
  out.ref.layers = kv.layers;
  out.ref.width = kv.width;
  out.ref.positions = kv.positions;
  out.ref.bytes = 2 * half;
  out.ref.checksum = core::chunk_checksum(buffer->data(), 2 * half);
  out.ref.region = buffer->descriptor().encode();
  out.buffer = std::move(buffer);
  return out;
}

core::Result<KvState> fetch_kv(core::TransferEngine& engine, const KvRef& ref,
                               const FetchKvOptions& options) {
  // Everything about the reference is checked before anything is allocated for it.
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
  if (region->length < ref.bytes) {
    return core::invalid_argument("kv fetch: the region holds " + std::to_string(region->length) +
                                  " bytes, not " + std::to_string(ref.bytes));
  }
  std::vector<core::ChunkRead> chunks;
  for (std::uint64_t off = 0; off < ref.bytes; off += kChunkBytes) {
    core::ChunkRead c;
    c.src_offset = c.dst_offset = off;
    c.bytes = std::min(kChunkBytes, ref.bytes - off);
    chunks.push_back(c);
  }
  SLUICE_ASSIGN_OR_RETURN(auto dst, engine.allocate(ref.bytes, /*prefault=*/false));
  core::ReadOptions ro;
  ro.verify = false;  // one checksum covers all chunks: checked below
  ro.total_timeout = options.timeout;
  ro.op_timeout = options.timeout;
  ro.max_total_bytes = options.max_bytes;
  auto read = engine.read_sync({{"kv-source", std::move(region).value()}}, std::move(chunks), *dst,
                               std::move(ro));
  if (!read.is_ok()) return read.status().with_context("kv fetch");
  const std::uint64_t sum = core::chunk_checksum(dst->data(), ref.bytes);
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
  std::memcpy(kv.keys.data(), dst->data(), n * sizeof(float));
  std::memcpy(kv.values.data(), dst->data() + n * sizeof(float), n * sizeof(float));
  return kv;
}

core::Status fetch_kv_of(core::TransferEngine* transfer, const Engine& engine, SequenceState& s,
                         core::Millis timeout, KvReadStats& stats) {
  if (!s.kv_ref) return {};
  KvRef ref = std::move(*s.kv_ref);
  s.kv_ref.reset();
  const std::uint64_t per_token = engine.kv_bytes_per_token();
  core::Result<KvState> kv =
      core::failed_precondition("kv fetch: no transfer engine, or an engine without a KV cache");
  if (transfer != nullptr && per_token > 0) {
    FetchKvOptions o;
    o.timeout = timeout;
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
