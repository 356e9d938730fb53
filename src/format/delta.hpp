// Bit-exact deltas between two versions of the same layout: a reader that holds version N can
// receive N+1 as a delta against N, usually a small fraction of N+1's bytes when an optimizer
// step changed few elements or changed them by little.
//
// The codec is chunk-aligned: chunk i of the delta rebuilds chunk i of the target from chunk i
// of the base alone, so a reader can apply and verify chunk by chunk (against the target's
// manifest checksums) and read just the chunks that fail in full. Each chunk is one of
//   same    the target chunk equals the base chunk (no payload);
//   xor     zstd(the XOR of target and base, its 4-byte words split into byte planes): small
//           relative changes of fp32/bf16 values leave the sign and exponent bytes equal, so
//           their planes are runs of zeros;
//   sparse  zstd(the indices of the 4-byte words that differ, as varint gaps, then their XORs
//           as byte planes, then the XOR of the tail bytes): smaller when few words changed;
//   sparse16 zstd(the indices of the 2-byte values that differ, as varint gaps, then each one's
//           difference target - base (mod 2^16, zigzag: -1 -> 1, +1 -> 2, -2 -> 3, ...) as two
//           byte planes, then the XOR of the tail byte): for bf16 versions, where an update
//           moves a value by one or two units in the last place or not at all. Measured on the
//           reference job's bf16 versions (docs/benchmarks.md): 1.3 to 1.8x smaller than xor at
//           7-23% of the values changed.
// The encoder picks, per chunk, the smallest of xor, sparse (tried when at most a quarter of the
// chunk's words changed) and sparse16 (tried when at most half of its 2-byte values changed).
//
// Wire format (all integers little-endian):
//   header   magic "SLDELTA\0" (8 bytes), format version u32 (kDeltaFormatVersion), flags u32
//            (0), base version u64, target version u64, total bytes u64, chunk bytes u64, chunk
//            count u64;  56 bytes
//   entries  per chunk: encoding u32 (0 same, 1 xor, 2 sparse, 3 sparse16), reserved u32 (0),
//            payload bytes u64;  16 bytes each
//   payloads one zstd frame (with its content checksum) per chunk that has one, in chunk order,
//            nothing after the last.
// parse_delta() checks all of it (sizes before anything is read or allocated) and refuses
// anything else with protocol_error naming what is wrong; apply_delta_chunk() checks each
// frame's declared size before it decompresses, and the frame's checksum after. A blob that
// still passes but is not the delta of these versions (made against another base, say) yields
// chunks that fail the target's checksums: callers verify every chunk they rebuild.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.hpp"

namespace sluice::core {

inline constexpr std::uint32_t kDeltaFormatVersion = 1;
inline constexpr std::size_t kDeltaHeaderBytes = 56;
inline constexpr std::size_t kDeltaEntryBytes = 16;

// Encoding 3 came after format version 1's first release: an older reader refuses a delta that
// uses it (an unknown encoding, a clear error, and the caller reads the version in full).
enum class DeltaEncoding : std::uint32_t { kSame = 0, kXor = 1, kSparse = 2, kSparse16 = 3 };

struct DeltaOptions {
  int zstd_level = 1;    // 1..19; 1 measured about as small as 3 on fp32 XORs, at twice the speed
  bool sparse = true;    // also try the sparse form (false: xor only, for measuring)
  bool sparse16 = true;  // also try the sparse16 form (false: not, for measuring)
};

struct DeltaHeader {
  std::uint64_t base_version = 0;
  std::uint64_t target_version = 0;
  std::uint64_t total_bytes = 0;  // of base and target alike
  std::uint64_t chunk_bytes = 0;  // the versions' chunk size
  std::uint64_t chunk_count = 0;
};

// What encode_delta saw, for benches and logs.
struct DeltaStats {
  std::uint64_t words = 0;          // 4-byte words compared
  std::uint64_t changed_words = 0;  // of them, those that differ
  std::uint64_t changed_bytes = 0;  // bytes that differ (tails included)
  std::uint64_t same_chunks = 0;
  std::uint64_t xor_chunks = 0;
  std::uint64_t sparse_chunks = 0;
  std::uint64_t sparse16_chunks = 0;
  std::uint64_t values16 = 0;          // 2-byte values compared
  std::uint64_t changed_values16 = 0;  // of them, those that differ
};

// The delta that turns `base` into `target` (same size, cut into chunks of `chunk_bytes`).
// invalid_argument when the sizes differ, a size is 0, or chunk_bytes is 0; internal when zstd
// fails.
Result<std::vector<std::uint8_t>> encode_delta(
    std::span<const std::uint8_t> base, std::span<const std::uint8_t> target,
    std::uint64_t base_version, std::uint64_t target_version, std::uint64_t chunk_bytes,
    const DeltaOptions& options = {}, DeltaStats* stats = nullptr);

// A checked view of a delta blob: its header and where each chunk's payload lies.
struct DeltaView {
  DeltaHeader header;
  struct Chunk {
    DeltaEncoding encoding = DeltaEncoding::kSame;
    std::uint64_t offset = 0;  // of the payload in the blob
    std::uint64_t bytes = 0;
  };
  std::vector<Chunk> chunks;

  std::uint64_t chunk_size(std::uint64_t i) const;  // of the target's chunk i
};

// Checks the header, the entries and that the payloads fill the blob exactly.
Result<DeltaView> parse_delta(std::span<const std::uint8_t> blob);

// Whether a parsed delta fits what a reader holds and wants: against `held_version` (the version
// whose bytes it would rebuild from), to `target_version`, for versions of `total_bytes` in chunks
// of `chunk_bytes`. failed_precondition naming both sides when the delta is against another base
// (a delta's bytes rebuilt on a base it was not made against are garbage) or to another target;
// invalid_argument when the layout differs. Check before applying: then nothing is written.
Status check_delta_fits(const DeltaHeader& header, std::uint64_t held_version,
                        std::uint64_t target_version, std::uint64_t total_bytes,
                        std::uint64_t chunk_bytes);

// Rebuilds target chunk `i` into `out` (chunk_size(i) bytes) from the base's chunk `i` (the same
// size). invalid_argument when the sizes are wrong or the payload does not decode to exactly
// what the chunk needs. `blob` is the one `view` was parsed from.
Status apply_delta_chunk(const DeltaView& view, std::span<const std::uint8_t> blob, std::uint64_t i,
                         std::span<const std::uint8_t> base_chunk, std::span<std::uint8_t> out);

// Rebuilds the whole target into `out` from `base` (both header.total_bytes). Stops at the first
// chunk that fails, with its error.
Status apply_delta(std::span<const std::uint8_t> blob, std::span<const std::uint8_t> base,
                   std::span<std::uint8_t> out);

// Synthetic versions, for benches and tests. fill_weights_fp32 writes fp32 values shaped like a
// model's weights (normal, standard deviation 0.02) from `seed`; optimizer_step_fp32 changes
// about `fraction` of the fp32 elements (each independently) by a small relative step (up to
// 1e-3, as one optimizer step does), every chosen element to a different value, and returns how
// many it changed. Bytes past the last whole fp32 element are left alone.
void fill_weights_fp32(std::span<std::uint8_t> data, std::uint64_t seed);
std::uint64_t optimizer_step_fp32(std::span<std::uint8_t> data, double fraction,
                                  std::uint64_t seed);

}  // namespace sluice::core
