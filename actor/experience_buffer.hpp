// The experience buffer: completed trajectories tagged with their behaviour version, fed to the
// actor under a staleness bound.
//
// - Exactly once: a trajectory id is accepted once; a second arrival (a resumed trajectory whose
//   first copy also landed, a retried send) is refused and counted as a duplicate. Ids of
//   trajectories already consumed stay remembered, so a late duplicate is refused too; they are
//   an IdSet (actor/id_set.hpp), so remembering them all takes bounded memory in a long job.
// - Groups: with group_size G > 1 (GRPO), trajectories are released only as whole groups of G
//   sharing a prompt_id.
// - Abandoned trajectories (stopped by the fleet because they could no longer be trained on)
//   complete their group, which is then dropped under either policy and counted as stale.
// - Staleness of a trajectory = actor version - behaviour version (its oldest version). Beyond
//   `max_staleness` it is dropped (policy drop) or handed out with weight `stale_weight`
//   (policy downweight); either way it is counted. What `take` returns never exceeds the bound
//   under policy drop.
//
// Thread safety: none; owned by the actor's loop.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "actor/id_set.hpp"
#include "core/status.hpp"
#include "rl/trajectory.hpp"

namespace sluice::actor {

enum class StalenessPolicy { kDrop, kDownweight };

struct BufferOptions {
  std::uint32_t group_size = 1;
  std::uint64_t max_staleness = 4;
  StalenessPolicy policy = StalenessPolicy::kDrop;
  double stale_weight = 0.0;  // used by kDownweight
};

struct Sample {
  rl::Trajectory trajectory;
  double weight = 1.0;
  std::uint64_t staleness = 0;
};

// The counts an actor checkpoint keeps (actor/checkpoint.hpp): CheckpointState holds them as they
// are, and the trainer copies them whole, in and out.
struct KeptBufferCounts {
  std::uint64_t accepted = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t consumed = 0;
  std::uint64_t dropped_stale = 0;
  std::uint64_t downweighted = 0;
  std::uint64_t abandoned = 0;  // arrived abandoned (their groups are dropped, in dropped_stale)

  template <typename V>
  void describe(V& v) {
    v("accepted", accepted);
    v("duplicates", duplicates);
    v("consumed", consumed);
    v("dropped_stale", dropped_stale);
    v("downweighted", downweighted);
    v("abandoned", abandoned);
  }
};

struct BufferCounts : KeptBufferCounts {
  // Response tokens of the trajectories accepted, and of those dropped (stale, or in a group with
  // an abandoned member: what it generated before it stopped). Not kept in actor checkpoints:
  // they count from the process's start.
  std::uint64_t accepted_tokens = 0;
  std::uint64_t dropped_tokens = 0;
};

// The behaviour version of a trajectory: its oldest, so a partial rollout that mixed versions is
// as stale as its first tokens.
std::uint64_t behaviour_version(const rl::Trajectory& t);

// Samples taken, by staleness: counts[s] is how many had staleness s.
using StalenessCounts = std::vector<std::uint64_t>;
void count_staleness(StalenessCounts& counts, std::uint64_t staleness);
// The smallest staleness at or below which a share `q` (in [0, 1]) of the counted samples lie;
// 0 when none were counted.
std::uint64_t staleness_quantile(const StalenessCounts& counts, double q);

class ExperienceBuffer {
 public:
  explicit ExperienceBuffer(BufferOptions options);

  // Accepts a trajectory; an already seen id gets kAlreadyExists (and is counted).
  core::Status add(rl::Trajectory t);

  // Takes up to `n` trajectories (whole groups when group_size > 1, so up to n rounded down to
  // groups), oldest first, as seen by an actor at `actor_version`. Stale groups are dropped or
  // downweighted first, as the policy says (a group's staleness is its stalest member's).
  std::vector<Sample> take(std::size_t n, std::uint64_t actor_version);

  // Trajectories ready to take (in complete groups).
  std::size_t ready() const;
  // Trajectories held, complete groups or not.
  std::size_t held() const;
  const BufferCounts& counts() const { return counts_; }
  // Every id ever accepted (for an actor checkpoint: consumed ids must survive a restart).
  const IdSet& seen() const { return seen_; }
  // Restores the seen set from a checkpoint.
  void restore_seen(IdSet ids) { seen_ = std::move(ids); }
  // Ids of the trajectories take() dropped (stale, or in a group with an abandoned member) since
  // the last call, in the order dropped.
  std::vector<std::string> drain_dropped_ids();
  // The counts less what is held and not consumed yet (for a checkpoint: a restarted actor gets
  // those trajectories again and counts them then).
  BufferCounts counts_without_held() const;
  // Restores counts from a checkpoint.
  void restore_counts(const BufferCounts& c) { counts_ = c; }

 private:
  BufferOptions options_;
  BufferCounts counts_;
  IdSet seen_;
  std::vector<std::string> dropped_ids_;  // since the last drain_dropped_ids()
  std::map<std::string, std::vector<rl::Trajectory>> partial_groups_;  // by prompt_id
  std::deque<std::vector<rl::Trajectory>> ready_groups_;               // arrival order
};

}  // namespace sluice::actor
