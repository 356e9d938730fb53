// What each of the rollout manager's modes decides (see rollout/manager.hpp for the modes): when
// a rollout loads a newer version, whether it is given new work, how far generation may run ahead
// of the actor, and whether repack runs. Everything else the manager does is the same in every
// mode (rollout/manager_state.hpp).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"

namespace sluice::rollout {

enum class Mode { kSync, kOneStepOff, kStream, kPartialRollout, kSluice };

// "sync", "one-step-off", "stream", "partial-rollout" or "sluice"; anything else is an error.
core::Result<Mode> parse_mode(const std::string& s);

// Weight updates in these modes are global: nobody loads the new version until every rollout
// has drained the old one.
bool global_update(Mode m);

// Batches of trajectories that may be released ahead of what the actor consumed.
std::uint64_t batches_ahead(Mode m, std::uint32_t ahead_batches);

// Whether the actor's `consumed` count in a collect opens room for new trajectories. In the
// batch-synchronous modes the next batch opens with the next version (a publish), not when the
// actor takes the current one (else it would be generated with the old weights).
bool collect_opens_budget(Mode m);

// A rollout with nothing to run and none given: "barrier" in the batch-synchronous modes (the next
// batch waits for new weights), "idle" otherwise.
const char* out_of_work_state(Mode m);

// Whether repack consolidates long tails (sluice mode only).
bool repacks(Mode m);

// One rollout's versions, as the manager last heard them.
struct RolloutVersions {
  std::uint64_t version = 0;  // loaded
  std::uint64_t staged = 0;   // newest it holds (loaded, or pulled in the background)
  bool loading = false;
};

// Whether a rollout is given new work on its version: on the newest one, or (sluice mode) still
// pulling the newest one while at most `max_assign_lag` behind. Otherwise it drains.
bool takes_work(Mode m, const RolloutVersions& r, std::uint64_t latest,
                std::uint32_t max_assign_lag);

// What a rollout behind the newest version is told in a report's reply.
struct LoadDecision {
  std::uint64_t load = 0;     // the version to load now (0: none)
  bool allow_active = false;  // load with trajectories in flight (they continue on it)
  bool barrier = false;       // wait: others still hold work of the old version
};

// `has_work`: the rollout holds or is sent trajectories; `others_behind_with_work`: some live
// rollout (or waiting resumable state) still has work on a version below `latest` (read only by
// the global-update modes).
LoadDecision decide_load(Mode m, const RolloutVersions& r, std::uint64_t latest, bool has_work,
                         bool others_behind_with_work, std::uint32_t max_assign_lag);

// Sluice mode: a rollout that holds the newest version and is draining its old one would start
// its queued trajectories on the old version as slots free up, making them stale and delaying its
// swap. It hands them back instead, for rollouts on the newest version.
bool hands_back_queued(Mode m, const RolloutVersions& r, std::uint64_t latest, bool has_queued);

}  // namespace sluice::rollout
