#include "bench/result_table.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "bench/bench_util.hpp"
#include "rollout/manager.hpp"

namespace sluice::cli {

namespace {

const ModeFigures* find(const std::vector<ModeFigures>& rows, const std::string& mode) {
  for (const auto& r : rows) {
    if (r.mode == mode) return &r;
  }
  return nullptr;
}

}  // namespace

nlohmann::json mode_json(const ModeFigures& f) {
  nlohmann::json slots = nlohmann::json::object();
  for (const auto& [cause, frac] : f.free_slots)
    slots[cause] = frac;
  return {{"mode", f.mode},
          {"tokens_per_s", f.tokens_per_s},
          {"rollout_util", f.rollout_util},
          {"weight_stall_frac", f.weight_stall_frac},
          {"actor_idle_frac", f.actor_idle_frac},
          {"staleness_mean", f.staleness_mean},
          {"staleness_max", f.staleness_max},
          {"staleness_p50", f.staleness_p50},
          {"staleness_p99", f.staleness_p99},
          {"dropped_token_frac", f.dropped_token_frac},
          {"repacks", f.repacks},
          {"repack_overhead_s", f.repack_overhead_s},
          {"trained_tokens", f.trained_tokens},
          {"dropped_stale", f.dropped},
          {"wall_s", f.wall_s},
          {"steady_tokens_per_s", f.steady_tokens_per_s},
          {"steady_window_s", nlohmann::json::array({f.steady_from_s, f.steady_to_s})},
          {"free_slots", std::move(slots)}};
}

void print_mode_table(const std::vector<ModeFigures>& rows) {
  const ModeFigures* sync = find(rows, "sync");
  const ModeFigures* sl = find(rows, "sluice");
  std::printf("\n%-18s %10s %10s %8s %8s %8s %7s %6s %7s %9s %7s %7s %8s\n", "mode", "tokens/s",
              "steady/s", "util", "w-stall", "a-idle", "stale", "max", "repacks", "overhead",
              "dropped", "x sync", "sluice/x");
  for (const auto& r : rows) {
    std::printf(
        "%-18s %10.0f %10.0f %7.1f%% %7.2f%% %7.1f%% %7.2f %6llu %7llu %8.2fs %7llu %7s %8s\n",
        r.mode.c_str(), r.tokens_per_s, r.steady_tokens_per_s, 100 * r.rollout_util,
        100 * r.weight_stall_frac, 100 * r.actor_idle_frac, r.staleness_mean,
        static_cast<unsigned long long>(r.staleness_max),
        static_cast<unsigned long long>(r.repacks), r.repack_overhead_s,
        static_cast<unsigned long long>(r.dropped),
        sync ? fmt::format("{:.2f}", ratio(r.tokens_per_s, sync->tokens_per_s)).c_str() : "-",
        sl ? fmt::format("{:.2f}", ratio(sl->tokens_per_s, r.tokens_per_s)).c_str() : "-");
  }
}

void print_free_slots(const std::vector<ModeFigures>& rows, const std::string& heading) {
  std::printf("%s\n%-18s", heading.c_str(), "mode");
  for (const char* cause : rollout::kFreeSlotCauses)
    std::printf(" %9s", cause);
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("%-18s", r.mode.c_str());
    for (const auto& [cause, frac] : r.free_slots)
      std::printf(" %8.1f%%", 100 * frac);
    std::printf("\n");
  }
}

}  // namespace sluice::cli
