// The mode table that `sluice bench e2e` (measured) and `sluice simulate` (simulated) print: one
// row per mode with the same columns, so that the two can be read side by side, and the table of
// free rollout slots by cause; and the same figures as the JSON of their --json lines.
//
// Thread safety: free functions, writing to stdout.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cli {

// One mode's figures, as both tables and both JSON lines give them.
struct ModeFigures {
  std::string mode;
  double tokens_per_s = 0, steady_tokens_per_s = 0;
  double rollout_util = 0, weight_stall_frac = 0, actor_idle_frac = 0;
  double staleness_mean = 0;
  std::uint64_t staleness_max = 0, repacks = 0, dropped = 0;
  double repack_overhead_s = 0;
  // Free rollout slots by cause (rollout::kFreeSlotCauses), as fractions of all slot time.
  std::vector<std::pair<std::string, double>> free_slots;
  // The JSON lines only.
  std::uint64_t staleness_p50 = 0, staleness_p99 = 0, trained_tokens = 0;
  double dropped_token_frac = 0, wall_s = 0;
  double steady_from_s = 0, steady_to_s = 0;  // the steady window, in seconds of the job
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
                     r.free_slots,
                     r.staleness_p50,
                     r.staleness_p99,
                     r.trained_tokens,
                     r.dropped_token_frac,
                     r.wall_s,
                     r.steady_from_s,
                     r.steady_to_s};
}

// A mode's figures as a JSON object, the fields that both --json lines carry (the free slots
// as an object of cause -> fraction); each adds its own.
nlohmann::json mode_json(const ModeFigures& f);

// The mode table: throughput (whole job and steady), utilization, stalls, staleness, repacks,
// dropped trajectories, each mode against sync ("x sync") and sluice against each ("sluice/x";
// "-" where that row is missing).
void print_mode_table(const std::vector<ModeFigures>& rows);

// `heading`, then the share of slot time free per cause, a row per mode.
void print_free_slots(const std::vector<ModeFigures>& rows, const std::string& heading);

}  // namespace sluice::cli
