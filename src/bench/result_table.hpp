// The mode table that `sluice bench e2e` (measured) and `sluice simulate` (simulated) print: one
// row per mode with the same columns, so that the two can be read side by side, and the table of
// free rollout slots by cause.
//
// Thread safety: free functions, writing to stdout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cli {

// One mode's figures, as both tables print them.
struct ModeFigures {
  std::string mode;
  double tokens_per_s = 0, steady_tokens_per_s = 0;
  double rollout_util = 0, weight_stall_frac = 0, actor_idle_frac = 0;
  double staleness_mean = 0;
  std::uint64_t staleness_max = 0, repacks = 0, dropped = 0;
  double repack_overhead_s = 0;
  // Free rollout slots by cause (rollout::kFreeSlotCauses), as fractions of all slot time.
  std::vector<std::pair<std::string, double>> free_slots;
};

// A row's figures from a bench or simulator result that has the same field names.
template <typename Row>
ModeFigures mode_figures(const std::string& mode, const Row& r) {
  return ModeFigures{mode,
                     r.tokens_per_s,
                     r.steady_tokens_per_s,
                     r.rollout_util,
                     r.weight_stall_frac,
                     r.actor_idle_frac,
                     r.staleness_mean,
                     r.staleness_max,
                     r.repacks,
                     r.dropped,
                     r.repack_overhead_s,
                     r.free_slots};
}

// The mode table: throughput (whole job and steady), utilization, stalls, staleness, repacks,
// dropped trajectories, each mode against sync ("x sync") and sluice against each ("sluice/x";
// "-" where that row is missing).
void print_mode_table(const std::vector<ModeFigures>& rows);

// `heading`, then the share of slot time free per cause, a row per mode.
void print_free_slots(const std::vector<ModeFigures>& rows, const std::string& heading);

}  // namespace sluice::cli
