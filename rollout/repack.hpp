// The repack planner: a pure function from the fleet's state to a list of moves. The manager runs
// it periodically and right after each publish (docs/architecture.md, "Trajectories, end to
// end").
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
// - A source is emptied only when it pays (RepackCost, unless weigh_cost is off): its expected
//   gain exceeds min_gain times its expected cost, both in GPU milliseconds.
//
// The cost model. A sequence that generated g tokens is expected to run R(g) = remaining_prior +
// remaining_per_generated x g more decode steps (long tails: the longer a sequence has run, the
// longer it is expected to go on). A rollout's step takes t0 + t1 x batch.
// - Gain, when the emptied source has work to go to (RolloutView::freed_has_work): the source's
//   remaining tail, R(longest of its sequences) x (t0 + t1 x its batch), is freed for the new
//   version at once instead of being spent decoding a small batch (that batch's tokens are still
//   made, at the destination, at the marginal t1 each: batch efficiency). Without such work the
//   gain is 0 and nothing moves: emptying a rollout that would then idle frees nothing.
// - Cost, summed over the source's sequences: moving it (re-prefill of prompt + generated at
//   prefill_ms_per_token, or the KV cache over the link, kv_bytes_per_token x tokens /
//   kv_link_gbps, whichever is cheaper; Move::with_kv says which) plus the destination's slowdown
//   from the larger batch, t1 x R(g); and per destination, when the longest arrival is expected to
//   outlast the destination's own sequences, that destination held on the old version for the
//   difference, (R(arrival) - R(its longest)) x its step time.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

struct SequenceView {
  std::string trajectory_id;
  std::uint64_t kv_tokens = 0;
  std::uint64_t generated = 0;  // tokens generated so far (kv_tokens less the prompt)
};

struct RolloutView {
  std::string id;
  std::uint64_t version = 0;
  Capacity capacity;
  std::uint32_t queued = 0;             // prompts assigned but not yet admitted
  std::uint32_t previous_active = 0;    // active sequences at the previous report
  std::vector<SequenceView> sequences;  // active sequences
  bool alive = true;
  // Once emptied, it has work to go to (a newer version to load, prompts left to generate);
  // false: freeing it gains nothing.
  bool freed_has_work = true;
};

// The inputs of the cost model (see the header comment). Times in ms; the defaults are the
// simulated engine's defaults (rollout/sim_engine.hpp). A job whose rollouts run the simulated
// engine takes t0, t1 and the prefill time from its engine settings instead (engine_timing; the
// launcher's settle_job), so that the planner prices moves with the times the rollouts take.
struct RepackCost {
  bool weigh_cost = true;                // false: every move that fits is made
  bool engine_timing = true;             // jobs on the simulated engine: timing from the engine
  double t0_ms = 2.0;                    // fixed time of a decode step, >= 0
  double t1_ms = 0.05;                   // added time per sequence in the batch, >= 0
  double prefill_ms_per_token = 0.005;   // re-prefill at the destination, >= 0
  double kv_bytes_per_token = 0;         // KV cache per token; 0: KV moves unavailable
  double kv_link_gbps = 0;               // KV transfer rate, GB/s; 0: KV moves unavailable
  double remaining_prior = 64;           // expected decode steps left of a sequence at g = 0
  double remaining_per_generated = 1.0;  // and per token it already generated
  double min_gain = 1.0;                 // move when gain > min_gain x cost, >= 0

  template <typename V>
  void describe(V& v) {
    v("weigh_cost", weigh_cost, "move only when the expected gain exceeds the cost (default on)");
    v("engine_timing", engine_timing,
      "rollouts on the simulated engine: t0_ms, t1_ms and prefill_ms_per_token are the engine's "
      "(rollout.sim, times its time_scale), not the figures here (default on)");
    v("t0_ms", t0_ms, "the rollouts' fixed decode step time in ms (default 2)");
    v("t1_ms", t1_ms, "decode step time per sequence in the batch in ms (default 0.05)");
    v("prefill_ms_per_token", prefill_ms_per_token, "re-prefill time per token in ms");
    v("kv_bytes_per_token", kv_bytes_per_token,
      "KV-cache bytes per token (0: sequences move by re-prefill only)");
    v("kv_link_gbps", kv_link_gbps, "rate at which a KV cache moves, GB/s (0: re-prefill only)");
    v("remaining_prior", remaining_prior,
      "expected decode steps left of a sequence that generated nothing yet");
    v("remaining_per_generated", remaining_per_generated,
      "expected decode steps left, added per token already generated");
    v("min_gain", min_gain, "a source is emptied when gain > min_gain x cost");
  }
  core::Status validate() const;
};

struct RepackPolicy {
  double ramp_down_occupancy = 0.5;
  // Headroom kept on destinations, as a fraction of max_kv_tokens (room for sequences to grow).
  double kv_headroom = 0.1;
  RepackCost cost;
};

struct Move {
  std::string trajectory_id;
  std::string from;
  std::string to;
  bool with_kv = false;  // moving the KV cache is cheaper than re-prefilling it
};

struct RepackPlan {
  std::vector<Move> moves;
  std::vector<std::string> freed;   // rollouts emptied by the plan
  double gain_ms = 0, cost_ms = 0;  // the cost model's totals over the moves made
  std::uint32_t declined = 0;       // sources that fit elsewhere but did not pay
};

RepackPlan plan_repack(const std::vector<RolloutView>& fleet, const RepackPolicy& policy);

// The cost model's pieces, for the planner and its tests.
double expected_remaining(const RepackCost& c, std::uint64_t generated);
double step_ms(const RepackCost& c, std::uint32_t batch);
// The cheaper way to move a sequence of `kv_tokens`, in ms; `with_kv` says whether it is the KV
// transfer.
double move_ms(const RepackCost& c, std::uint64_t kv_tokens, bool* with_kv);

}  // namespace sluice::rollout
