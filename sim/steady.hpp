// Throughput over the steady middle of a job: the trained batches between the first and the last
// `trim` share of them, so that start-up (rollouts filling, the first version) and the job's final
// drain (the last long trajectories, a partial batch) do not distort a short job's figure. Used by
// `sluice simulate` (simulated step ends) and `sluice bench e2e` (the actor's metrics.jsonl).
//
// Thread safety: a pure function.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sluice::sim {

struct StepEnd {
  double t = 0;              // when the step ended, seconds from the job's start
  std::uint64_t tokens = 0;  // tokens trained in that step
};

struct SteadyWindow {
  double tokens_per_s = 0;      // 0 when there are too few steps to leave any out
  double from_s = 0, to_s = 0;  // the window: the end of the step before it .. its last step's end
  std::uint64_t steps = 0;      // steps inside the window
};

// `steps` in time order; `trim` in [0, 0.5). The window starts where the last left-out step
// ended (the job's start when none is left out) and ends with its own last step.
inline SteadyWindow steady_window(const std::vector<StepEnd>& steps, double trim) {
  SteadyWindow w;
  const std::size_t n = steps.size();
  const auto cut = static_cast<std::size_t>(std::floor(static_cast<double>(n) * trim));
  const std::size_t lo = cut, hi = n - cut;
  if (hi <= lo) return w;
  w.from_s = lo == 0 ? 0.0 : steps[lo - 1].t;
  w.to_s = steps[hi - 1].t;
  w.steps = hi - lo;
  std::uint64_t tokens = 0;
  for (std::size_t i = lo; i < hi; ++i)
    tokens += steps[i].tokens;
  if (w.to_s > w.from_s) w.tokens_per_s = static_cast<double>(tokens) / (w.to_s - w.from_s);
  return w;
}

// The share of rollout slot time spent generating outside start-up and the job's final drain:
// `occupancy`, the occupied share of all slot time counted from each rollout's first weights on,
// over the share that was not idle for want of work left in the job (`end_share`).
// The two come from different clocks (occupancy from the rollouts, free slots sampled by the
// manager), so the ratio can pass 1 by the sampling error; it is capped there.
inline double active_generating_share(double occupancy, double end_share) {
  return end_share < 1 ? std::min(1.0, occupancy / (1 - end_share)) : 0.0;
}

}  // namespace sluice::sim
