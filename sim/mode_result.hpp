// What one simulated run reports (sim/simulator.hpp runs it): the job's rates, where the GPU
// time went, and the exactly-once counts.
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::sim {

// Where the fleet's GPU time went, in GPU-seconds over the whole job (they add up to GPUs x the
// job's simulated time): generating (decoding or prefilling), loading weights (waiting for a
// version and switching to it, and before the first), at a barrier (the mode holds it back until
// others drain), idle (nothing to run: no work given, or the job's end).
struct GpuTime {
  double generating = 0, loading = 0, barrier = 0, idle = 0;
};

struct ModeResult {
  std::string label;  // a mode, sluice-norepack or sync-colocated
  // As `sluice bench e2e` reports them.
  double tokens_per_s = 0;  // trained tokens per simulated second over the whole job
  double rollout_util = 0, weight_stall_frac = 0, actor_idle_frac = 0, staleness_mean = 0;
  std::uint64_t staleness_max = 0, repacks = 0, trained_tokens = 0, dropped = 0, mixed = 0;
  double repack_overhead_s = 0, wall_s = 0;  // wall_s: the job's simulated time
  // The staleness of what was trained (actor version - behaviour version): median, 99th
  // percentile (max is staleness_max). Generated tokens the actor received, and the share of them
  // dropped as too stale (abandoned trajectories count what they generated before they stopped).
  std::uint64_t staleness_p50 = 0, staleness_p99 = 0;
  std::uint64_t generated_tokens = 0;
  double dropped_token_frac = 0;
  // The share of slot time generating outside start-up and the final drain (sim/steady.hpp).
  double generating_share = 0;
  std::vector<std::pair<std::string, double>> free_slots;
  // Beyond the bench.
  double steady_tokens_per_s = 0;  // over the middle batches (SimulateConfig::steady_trim)
  double steady_from_s = 0, steady_to_s = 0;  // that window, in simulated seconds
  GpuTime gpu;
  std::uint32_t gpus = 0;
  std::uint64_t steps = 0, versions = 0;
  std::uint64_t total_trajectories = 0;
  std::uint64_t trained_trajectories = 0;  // distinct ids trained on
  std::uint64_t trained_twice = 0;         // ids trained on more than once (must be 0)
  std::uint64_t version_regressions = 0;   // a rollout or the actor going back a version (0)
  std::uint64_t events = 0, reports = 0;
  double run_s = 0;  // real seconds the simulation took
};

// One line of progress (for stderr): called now and then on long runs.
using Progress = std::function<void(const std::string&)>;

}  // namespace sluice::sim
