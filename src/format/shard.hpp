// Resharding on the way: a rollout that runs the model tensor-parallel declares its layout, and
// reads from the trainer's version (published in the trainer's own layout and names) only the
// bytes its shard needs, assembled into its own tensors, optionally cast.
//
// A layout is a tensor-parallel rank and size, a split per tensor, a name map and a cast:
//   - Split::kRows    (column-parallel layers): dim 0 is cut into tp_size equal parts; rank r
//                     loads rows [r * n / tp, (r + 1) * n / tp), one contiguous range.
//   - Split::kColumns (row-parallel layers): dim 1 is cut; rank r loads its part of every row,
//                     a strided piece of each index of dim 0.
//   - Split::kReplicated: every rank loads the whole tensor (norms, biases of row-parallel
//                     layers). A tensor with no split given is replicated.
//   - names: trainer name -> rollout name, for every tensor of the version.
//   - cast: "" (none), "bf16" (F32 tensors to BF16, round to nearest even, NaN stays NaN) or
//     "fp8_e4m3" (BF16 tensors to OCP E4M3FN with one F32 scale per cast_block elements,
//     scale = amax / 448, in a tensor "<rollout name>.scale" that follows it). A cast converts
//     tensors of its source dtype only; others arrive as they are.
//
// Rank r's shard stream is its tensors' bytes in manifest order, before any cast: what the actor
// signs checksums of (Manifest::shards) and what a reader assembles and verifies, chunk_bytes at
// a time, before it casts.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "format/manifest.hpp"
#include "format/split.hpp"

namespace sluice::core {

struct ShardLayout {
  std::uint32_t tp_rank = 0;  // < tp_size
  std::uint32_t tp_size = 1;  // 1..kMaxTensorParallel
  // Trainer tensor name -> split; a tensor not listed is replicated. Every name must be a tensor
  // of the version.
  std::map<std::string, Split> splits;
  // Trainer tensor name -> rollout tensor name; every tensor of the version must be listed, the
  // rollout names must be distinct. Empty: every tensor keeps its name.
  std::map<std::string, std::string> names;
  std::string cast;                // "", "bf16" or "fp8_e4m3"
  std::uint32_t cast_block = 128;  // elements per fp8 scale block (> 0)
  // The tp_size of the host share that this host's relay holds (relay share_tp_size), which
  // divides tp_size: rank tp_rank then reads from the relays of share rank
  // tp_rank / (tp_size / host_tp_size) first, while they receive it. 0: none.
  std::uint32_t host_tp_size = 0;

  // {"tp_rank": 0, "tp_size": 2, "splits": {"w": "rows"|"columns"|"replicated"},
  //  "names": {"w": "model.w"}, "cast": "bf16", "cast_block": 128, "host_tp_size": 4}; every
  //  key optional, unknown keys and wrong types are errors naming the key. Checks what needs no
  //  manifest (rank < size, a known cast, a positive block, host_tp_size dividing tp_size).
  static Result<ShardLayout> from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  Status validate() const;
};

// One contiguous range of the version read into the shard stream.
struct ShardPiece {
  std::uint64_t src_offset = 0;  // in the version's bytes
  std::uint64_t dst_offset = 0;  // in the shard stream
  std::uint64_t bytes = 0;
};

struct ShardTensor {
  std::string source;                // the trainer's name
  std::string name;                  // the rollout's name
  std::string dtype;                 // as published
  std::vector<std::uint64_t> shape;  // the shard's shape
  Split split = Split::kReplicated;
  std::uint64_t offset = 0;  // in the shard stream
  std::uint64_t bytes = 0;
};

struct ShardPlan {
  std::uint32_t tp_rank = 0;
  std::uint32_t tp_size = 1;
  std::string splits;                // one Split letter per tensor (ShardChecksums::splits)
  std::vector<ShardTensor> tensors;  // manifest order
  // In shard-stream order; none crosses a chunk of the version (so each is read from the holders
  // of one chunk); contiguous neighbours are merged.
  std::vector<ShardPiece> pieces;
  std::uint64_t bytes = 0;  // the shard stream's length
};

// Maps a version and a layout to the pieces rank layout.tp_rank reads and its tensors. Refuses,
// naming the tensor, and before anything is read: a split dimension that tp_size does not
// divide (or that the tensor lacks), a tensor missing from a non-empty name map, a split or name
// for a tensor the version lacks, two tensors under one rollout name, and what validate() does.
Result<ShardPlan> plan_shard(const Manifest& m, const ShardLayout& layout);

// The split letters of `layout` for `m`'s tensors (plan_shard's checks on splits only).
Result<std::string> shard_splits(const Manifest& m, const ShardLayout& layout);

// The declared checksums for plan's layout and rank in m.shards; nullptr when not declared.
const std::vector<std::uint64_t>* declared_checksums(const Manifest& m, const ShardPlan& plan);
// The declared digests for plan's layout and rank; nullptr when not declared or without digests.
const std::vector<Digest>* declared_digests(const Manifest& m, const ShardPlan& plan);

// Computes every rank's shard checksums and digests of `layout`'s tp_size and splits over the
// version's bytes `data` (m.total_bytes of them) and adds them to m.shards (replacing the same
// layout's). For the actor, before it signs. Errors: plan_shard's, or too many layouts.
Status add_shard_checksums(Manifest& m, const ShardLayout& layout, const std::uint8_t* data);

// The checksums of a shard stream cut at chunk_bytes.
std::vector<std::uint64_t> stream_checksums(std::span<const std::uint8_t> stream,
                                            std::uint64_t chunk_bytes);

// Copies the pieces out of whole-version bytes into the shard stream (out: plan.bytes).
void assemble_shard(const ShardPlan& plan, const std::uint8_t* version, std::uint8_t* out);

// The rollout's tensors after the cast (names, dtypes, shapes, offsets in the cast output, fp8
// scales after their tensor) as a manifest of `m`'s model and version, its checksums computed
// by the caller over the output. total_bytes is the output's length.
Manifest shard_manifest(const Manifest& m, const ShardPlan& plan, const ShardLayout& layout);

// Casts the shard stream `in` (plan.bytes) into `out` (shard_manifest's total_bytes), tensor by
// tensor, at most `step_bytes` of input at a time (each tensor's fp8 blocks whole).
void cast_shard(const ShardPlan& plan, const ShardLayout& layout, const std::uint8_t* in,
                std::uint8_t* out, std::uint64_t step_bytes);

// Host shares. A relay that serves one host's rollouts holds one rank's shard stream of a
// coarser layout than theirs: with 8 GPUs a host and tp_size 32, host h loads ranks 8h..8h+7,
// whose rows (or columns) together are rank h of tp_size 4 under the same splits. The actor
// declares that coarser layout's checksums too, so the share is verified as a shard is. The
// store tracks a share's copies as versions of a model of its own, named by share_model(), whose
// manifest (share_manifest) follows from the version's signed manifest alone.
//
// "<model>~tp<T>.<R>~<16 hex digits of XXH3 of the split letters>", e.g. "policy~tp4.1~0a1b...".
std::string share_model(const std::string& model, std::uint32_t tp_size, std::uint32_t tp_rank,
                        std::string_view splits);
// Whether `name` is a share's model name (a '~' marks one: the parent's name never has one).
bool is_share_model(const std::string& name);
// The parent's model name of a share's (the name itself when it is not a share's).
std::string share_parent(const std::string& name);
// The manifest of the share `name` of version m (m's model and version): the shard tensors of
// rank R of tp_size T in stream order, their offsets in the stream, the declared checksums and
// digests of that rank, no shard checksums and no signature. invalid_argument for a name that is
// not a share of m's model; failed_precondition when m declares no layout of that tp_size and
// splits.
Result<Manifest> share_manifest(const Manifest& m, const std::string& name);
// ok when `share` is exactly the share manifest that `parent` (the version's manifest, checked
// by the caller as any version is) gives for share.model, and carries no signature of its own:
// how a share, which no actor signs, is trusted. invalid_argument saying which otherwise.
Status check_share_follows(const Manifest& parent, const Manifest& share);
// The split letters as a layout's split map over m's tensors (replicated ones left out).
std::map<std::string, Split> splits_by_name(const Manifest& m, std::string_view splits);

// Rebases `fine`'s pieces (offsets in the version) onto the stream of `coarse`, a shard of the
// same version that contains every byte of `fine` (same splits, a tp_size that divides fine's,
// the rank that holds fine's rows): each piece's src_offset becomes an offset in coarse's stream,
// cut where that stream's chunks (chunk_bytes) end. invalid_argument when some byte of `fine` is
// not in `coarse`.
Result<std::vector<ShardPiece>> rebase_pieces(const ShardPlan& fine, const ShardPlan& coarse,
                                              std::uint64_t chunk_bytes);

// The fp8 element casts (exposed for tests; fp32 <-> bf16 is format/bf16.hpp's): bf16 -> fp8
// e4m3fn of value / scale, round to nearest even, saturating at +-448, NaN to NaN (0x7f / 0xff).
std::uint8_t fp32_to_fp8_e4m3(float f);
float fp8_e4m3_to_fp32(std::uint8_t b);

}  // namespace sluice::core
