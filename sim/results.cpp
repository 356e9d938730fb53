// The simulator's results: the bench's figures, where GPU time went, steady throughput.
#include <algorithm>
#include <cmath>

#include "sim/sim_state.hpp"
#include "sim/steady.hpp"

namespace sluice::sim {

ModeResult Sim::results(double end) const {
  ModeResult m;
  m.label = label_;
  m.wall_s = end;
  m.tokens_per_s = end > 0 ? static_cast<double>(trained_tokens_) / end : 0;
  m.trained_tokens = trained_tokens_;
  m.actor_idle_frac = end > 0 ? actor_idle_s_ / end : 0;
  m.staleness_mean = samples_ > 0 ? staleness_sum_ / static_cast<double>(samples_) : 0;
  m.staleness_max = staleness_max_;
  m.staleness_p50 = actor::staleness_quantile(staleness_counts_, 0.5);
  m.staleness_p99 = actor::staleness_quantile(staleness_counts_, 0.99);
  const actor::BufferCounts& bc = buffer_->counts();
  m.generated_tokens = bc.accepted_tokens;
  m.dropped_token_frac = bc.accepted_tokens > 0 ? static_cast<double>(bc.dropped_tokens) /
                                                      static_cast<double>(bc.accepted_tokens)
                                                : 0.0;
  m.mixed = mixed_;
  m.dropped = buffer_->counts().dropped_stale;
  m.repacks = mgr_->counts().repack_moves;
  m.steps = step_ends_.size();
  m.versions = version_;
  m.total_trajectories = in_.manager.prompts * in_.manager.group_size;
  m.trained_trajectories = trained_ids_.size();
  for (const auto& [id, n] : trained_ids_) {
    if (n > 1) ++m.trained_twice;
  }
  m.version_regressions = regressions_;
  m.events = n_events_;
  m.reports = n_reports_;

  // As the bench sums its rollouts' stats: time from each rollout's first weights on.
  const double g = in_.sim.gpus_per_rollout;
  double wall = 0, occ = 0, stall = 0, slot_s = 0;
  for (const auto& r : rollouts_) {
    const double w = r.first_load >= 0 ? end - r.first_load : 0;
    wall += w;
    occ += r.occ_s;
    stall += r.load_s + r.barrier_s;
    slot_s += w * r.cap.max_sequences;
    m.repack_overhead_s += r.reprefill_s;
    const double before = r.first_load >= 0 ? r.first_load : end;
    m.gpu.generating += g * r.gen_s;
    m.gpu.loading += g * (r.load_s + before);
    m.gpu.barrier += g * r.barrier_s;
  }
  m.gpus = static_cast<std::uint32_t>(rollouts_.size() * in_.sim.gpus_per_rollout);
  m.gpu.idle = std::max(0.0, m.gpus * end - m.gpu.generating - m.gpu.loading - m.gpu.barrier);
  m.rollout_util = wall > 0 ? occ / wall : 0;
  m.weight_stall_frac = wall > 0 ? stall / wall : 0;
  const nlohmann::json st = mgr_->status(tp(end)).fields;
  const nlohmann::json free = st.value("free_slot_s", nlohmann::json::object());
  for (const char* cause : rollout::kFreeSlotCauses) {
    m.free_slots.emplace_back(cause, slot_s > 0 ? free.value(cause, 0.0) / slot_s : 0.0);
  }

  double end_share = 0;
  for (const auto& [cause, frac] : m.free_slots) {
    if (cause == "end") end_share = frac;
  }
  m.generating_share = active_generating_share(m.rollout_util, end_share);

  // Steady state: the batches between the first and the last steady_trim of them.
  const SteadyWindow w = steady_window(step_ends_, in_.sim.steady_trim);
  m.steady_tokens_per_s = w.tokens_per_s;
  m.steady_from_s = w.from_s;
  m.steady_to_s = w.to_s;
  return m;
}

}  // namespace sluice::sim
