// What the actor has consumed (trained on, or dropped as too stale), for exactly-once across its
// restarts and the manager's. The trainer tells it each consumed trajectory and each checkpoint
// written; it answers whether a re-sent trajectory is already durable (then the actor
// acknowledges it again instead of training on it twice), and puts itself into and takes itself
// out of the checkpoint.
//
// Why the memory stays bounded and exactly-once still holds: the consumed ids are an IdSet
// (actor/id_set.hpp), exact, and compact for the ids the manager issues, so a checkpoint of a
// 50M-trajectory job holds a floor and the ids of the few prompts above it, not 50M ids. A
// duplicate is refused exactly when a plain set of every id would refuse it, whichever of the
// actor or the manager restarted; nothing relies on the manager never sending an old id again.
//
// The summary's id lists (accepted_ids, trained_ids: for tests and audits) are kept only up to
// `list_max` ids; past that they stop growing and ids_complete() says so.
//
// Thread safety: none (the trainer's thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actor/checkpoint.hpp"
#include "actor/id_set.hpp"
#include "core/status.hpp"

namespace sluice::actor {

struct ConsumedOptions {
  std::uint32_t group_size = 1;  // trajectories per prompt, as the manager releases them
  // With checkpoints a trajectory is durable once a checkpoint holds it; without, on receipt.
  bool checkpoints = false;
  std::uint64_t list_max = 1'000'000;  // ids listed for the summary, at most
};

class Consumed {
 public:
  explicit Consumed(ConsumedOptions options);

  // Trajectory `id` was consumed (`trained`: trained on, else dropped).
  void consume(const std::string& id, bool trained);
  // Whether a checkpoint (or, without checkpoints, the receipt) made `id`'s consumption durable.
  bool durable(const std::string& id) const { return durable_.contains(id); }
  // Consumed since the last checkpoint (checkpoints only).
  bool unsynced() const { return !unsynced_.empty(); }
  // A checkpoint holding save()'s state is on disk: what it holds is durable. Returns the ids
  // that became durable (to acknowledge to the manager).
  std::vector<std::string> synced();

  // Into and out of a checkpoint. restore() refuses (data_loss) a saved set that is damaged.
  void save(CheckpointState& s) const;
  core::Status restore(const CheckpointState& s);

  const IdSet& ids() const { return consumed_; }
  std::uint64_t count() const { return consumed_.size(); }
  // The summary's lists, in order of consumption, and whether they list every id.
  const std::vector<std::string>& listed() const { return listed_; }
  const std::vector<std::string>& trained_listed() const { return trained_; }
  bool ids_complete() const { return complete_; }

 private:
  ConsumedOptions options_;
  IdSet consumed_;
  IdSet durable_;
  std::vector<std::string> unsynced_;
  std::vector<std::string> listed_, trained_;
  bool complete_ = true;
};

}  // namespace sluice::actor
