// The repack planner: a pure function from the fleet's state to a list of moves. The manager runs
// it periodically and right after each publish (../shared/design.md, "Rollouts, asynchrony and
// repack").
//
// Rules:
// - Rollouts are grouped by loaded version; a sequence only ever moves to a rollout of the same
//   version.
// - A rollout is in ramp-down when it has no queued work and its occupancy (active sequences over
//   max_sequences) is at most `ramp_down_occupancy` and not rising (active <= previous_active).
// - Among the ramp-down rollouts of one version, the least loaded are emptied onto the others:
//   best fit, each sequence to the destination with the least room left that still fits it by
//   both KV tokens and the decode batch bound. A source is emptied completely or not at all (a
//   half-emptied source frees nothing). Destinations are never also sources in one plan.
// - Nothing moves when the version's ramp-down group has fewer than two rollouts.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/engine.hpp"

namespace sluice::rollout {

struct SequenceView {
  std::string trajectory_id;
  std::uint64_t kv_tokens = 0;
};

struct RolloutView {
  std::string id;
  std::uint64_t version = 0;
  Capacity capacity;
  std::uint32_t queued = 0;             // prompts assigned but not yet admitted
  std::uint32_t previous_active = 0;    // active sequences at the previous report
  std::vector<SequenceView> sequences;  // active sequences
  bool alive = true;
};

struct RepackPolicy {
  double ramp_down_occupancy = 0.5;
  // Headroom kept on destinations, as a fraction of max_kv_tokens (room for sequences to grow).
  double kv_headroom = 0.1;
};

struct Move {
  std::string trajectory_id;
  std::string from;
  std::string to;
};

struct RepackPlan {
  std::vector<Move> moves;
  std::vector<std::string> freed;  // rollouts emptied by the plan
};

RepackPlan plan_repack(const std::vector<RolloutView>& fleet, const RepackPolicy& policy);

}  // namespace sluice::rollout
