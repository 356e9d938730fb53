// `sluice simulate`: a discrete-event simulation of a whole RL job in simulated time. A priority
// queue of timed events, no threads, no sleeping; one run per mode.
//
// Real code, driven with simulated time points: the rollout manager's state machine
// (rollout::ManagerState: prompt pool, assignment, the mode policies of rollout/mode_policy.hpp,
// the repack planner of rollout/repack.hpp, the hand-off to the actor), the typed messages it
// takes and gives, the response-length sampler of the simulated engine, and the actor's
// experience buffer (staleness policy, whole groups, exactly once).
//
// Modelled: a rollout's engine (continuous batching; a decode step of the batch takes
// t0 + t1 x batch, admitting a sequence costs prefill per token of its prompt, or of prompt and
// generated tokens for a migrated one), the rollout worker's handling of the manager's replies
// (as rollout/worker.cpp does it), the actor's training step (train_ms_fixed + train_ms_per_token
// x trained tokens), and weight movement (sim/weights.hpp).
//
// Reports: a rollout reports at its report_ms ticks, but only when it has something to say
// (finished or handed-back work, a new version loaded or pulled, its batch changed) or when the
// manager's state changed in a way its reply could reflect (a publish, the actor's consumption,
// work handed back to the pool, a repack plan, and in the global-update modes another rollout's
// version or drain). A report that would change nothing and be answered with nothing is skipped;
// this is what makes thousands of GPUs fast. With repack on, busy rollouts also report every
// refresh_ms so that the planner sees their KV use. Rollouts never fail here, so heartbeats and
// the partial-response pool are not exercised.
//
// Thread safety: simulate_mode is reentrant (each run owns its state); the manager's metrics go
// to the process registry.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"
#include "sim/config.hpp"
#include "sim/mode_result.hpp"

namespace sluice::sim {

// `label`: sync, one-step-off, stream, partial-rollout, sluice, sluice-norepack or
// sync-colocated: sync with the trainer and the rollouts on the same GPUs, time-sliced (verl's
// arrangement; sync never trains while it generates): a version costs no staging, relay or pull,
// only each rollout's switch (`in` gives the rollouts and the trainer's speed for the whole
// cluster; cli::colocated_input builds it). `in` must hold
// a job with a finite number of prompts. Errors: an invalid label or configuration, and a run
// that stops making progress or passes max_sim_s (with what it was waiting for).
// `label` may also be:
//   limit              the finite job's limit, computed (sim/limit.hpp): a lower bound on the
//                      job's wall time under any scheduler, its start and end included.
//   steady-limit       the throughput limit, computed (sim/ideal.cpp): every rollout decoding
//                      at its full batch and the trainer never idle; the slower of the two is the
//                      rate. The bar for a mode's steady figure.
//   partial-broadcast  partial-rollout as its users run it: budget admission, and each version
//                      broadcast from the trainer to every rollout at once at
//                      SimulateConfig::broadcast_gbps, with no relays; the trainer and every
//                      rollout pause for the broadcast, and the sequences in flight are
//                      re-prefilled on the new weights (their KV cache is not kept).
core::Result<ModeResult> simulate_mode(const SimInput& in, const std::string& label,
                                       const Progress& progress = {});

// The computed rows (see above).
core::Result<ModeResult> limit_result(const SimInput& in);
core::Result<ModeResult> steady_limit_result(const SimInput& in);

// The labels simulate_mode takes beyond the manager's modes and variants.
inline constexpr const char* kSimOnlyLabels =
    "sync-colocated, partial-broadcast, limit, steady-limit";
// The computed rows, not simulated: bounds for the others.
bool limit_label(const std::string& label);
bool sim_only_label(const std::string& label);

}  // namespace sluice::sim
