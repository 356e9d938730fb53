// The actor's checkpoint: what a restarted actor needs to go on as if it had not died. The
// trainer's state (version counter, step, accounting, the ids of every consumed trajectory) is
// one file, `actor.ckpt`, in the checkpoint folder; the policy's state (weights, optimizer) is a
// numbered file beside it that actor.ckpt names. A checkpoint is written policy file first, then
// actor.ckpt under a temporary name, each fsynced, then renamed over actor.ckpt and the folder
// fsynced: actor.ckpt always names a complete policy file, so a kill at any point leaves the
// previous checkpoint or the new one, never a mix.
//
// actor.ckpt on disk: magic "SLUICEAC", format version (u32), body length (u64), the body (JSON,
// CheckpointState::describe), chunk_checksum of everything before it (u64); little-endian.
// Format 2 holds the consumed ids as a bounded set (consumed_group_size > 0); format 1, still
// read, listed every id in consumed_ids.
//
// Errors: no file is not_found; a damaged file (short, bad magic, bad checksum, sizes that do
// not add up, a body that does not parse) is data_loss; another format version is
// invalid_argument. Nothing is allocated before the sizes are checked.
//
// Thread safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "core/status.hpp"

namespace sluice::actor {

// The trainer's accounting that a checkpoint keeps (see Trainer's summary): the trainer holds it
// as it is and a checkpoint copies it whole, in and out.
struct TrainerTotals {
  std::uint64_t trained_tokens = 0, trained_samples = 0, taken = 0;
  double staleness_sum = 0;
  std::uint64_t staleness_max = 0, mixed_consumed = 0;
  double idle_s = 0, train_s = 0, publish_s = 0;
  double initial_accuracy = -1, last_accuracy = -1;

  template <typename V>
  void describe(V& v) {
    v("trained_tokens", trained_tokens);
    v("trained_samples", trained_samples);
    v("taken", taken);
    v("staleness_sum", staleness_sum);
    v("staleness_max", staleness_max);
    v("mixed_consumed", mixed_consumed);
    v("idle_s", idle_s);
    v("train_s", train_s);
    v("publish_s", publish_s);
    v("initial_accuracy", initial_accuracy);
    v("last_accuracy", last_accuracy);
  }
};

// The file's fields are flat: the totals' and the buffer counts' keys sit beside the others, in
// this order. The buffer counts are the experience buffer's, less what it held and had not
// consumed (that is sent again).
struct CheckpointState : TrainerTotals, KeptBufferCounts {
  std::uint64_t sequence = 0;  // checkpoints written so far by this actor (names policy files)
  std::string policy;          // "sim" or "gpt": a checkpoint of another policy is refused
  std::string policy_file;     // the policy's state, a file name in the checkpoint folder
  std::uint64_t steps = 0;     // training steps done
  std::uint64_t version = 0;   // the last version published (the weights of policy_file)
  std::uint64_t restarts = 0;  // times this actor resumed from a checkpoint

  std::string initial_by_terms = "null", last_by_terms = "null";  // JSON text
  // Every consumed id (trained on or dropped), as an IdSet (actor/id_set.hpp): its group size
  // (0: format 1, where consumed_ids lists every id), its floor and the ids above it. Bounded in
  // a long job, unlike a list of every id (50M ids overran the 1 GiB load cap).
  std::uint32_t consumed_group_size = 0;
  std::uint64_t consumed_floor = 0;
  std::vector<std::string> consumed_listed;
  // The summary's lists, in order (actor/consumed.hpp): cut at a bound in a long job, which
  // ids_complete then says.
  std::vector<std::string> consumed_ids;  // trained on or dropped
  std::vector<std::string> trained_ids;   // of those, trained on
  bool ids_complete = true;

  template <typename V>
  void describe(V& v) {
    v("sequence", sequence);
    v("policy", policy);
    v("policy_file", policy_file);
    v("steps", steps);
    v("version", version);
    v("restarts", restarts);
    TrainerTotals::describe(v);
    v("initial_by_terms", initial_by_terms);
    v("last_by_terms", last_by_terms);
    KeptBufferCounts::describe(v);
    v("consumed_ids", consumed_ids);
    v("trained_ids", trained_ids);
    v("consumed_group_size", consumed_group_size);
    v("consumed_floor", consumed_floor);
    v("consumed_listed", consumed_listed);
    v("ids_complete", ids_complete);
  }
};

// The name of the trainer's file in the checkpoint folder.
inline constexpr const char* kCheckpointFile = "actor.ckpt";

// Writes `state` as dir/actor.ckpt atomically (temporary name, fsync, rename, folder fsync).
// The policy file it names must already be written and synced (sync_file).
core::Status write_checkpoint(const std::string& dir, const CheckpointState& state);
// Reads a checkpoint written by write_checkpoint (see the header comment for the errors).
core::Result<CheckpointState> read_checkpoint(const std::string& path);

// Writes `bytes` to `path` atomically: path.tmp, fsync, rename, fsync of the folder.
core::Status write_file_atomic(const std::string& path, const std::string& bytes);
// Reads a whole file of at most `max_bytes` (data_loss beyond; not_found when missing).
core::Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes);
// fsync of a file or folder (opened read-only).
core::Status sync_file(const std::string& path);

}  // namespace sluice::actor
