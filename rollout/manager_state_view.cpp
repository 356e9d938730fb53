// The manager's state machine, read only: the status line and the state digest.
#include <fmt/format.h>

#include "core/checksum.hpp"
#include "rollout/manager_state.hpp"

namespace sluice::rollout {

using nlohmann::json;

std::string ManagerState::digest() const {
  std::string s = fmt::format("{} {} {} {} {} {} {} {}|", pool_.released(), latest_,
                              pool_.consumed(), counts_.acked, counts_.finished, counts_.duplicates,
                              outbox_.epoch(), recovering_);
  std::map<std::string, const Traj*> sorted;
  for (const auto& [id, t] : trajs_)
    sorted.emplace(id, &t);
  for (const auto& [id, t] : sorted) {
    s += fmt::format("{}:{}:{}:{};", id, static_cast<int>(t->state), t->rollout,
                     t->partial ? static_cast<std::int64_t>(t->partial->generated.size()) : -1);
  }
  s += "|";
  for (const auto& p : pending_)
    s += p.trajectory_id + ";";
  s += "|";
  for (const auto& p : resumes_)
    s += p.trajectory_id + ";";
  s += "|";
  outbox_.describe(s);
  s += "|";
  done_.describe(s);
  s += "|";
  for (const auto& id : pool_.doomed_prompts())
    s += id + ";";
  for (const auto& id : unclaimed_)
    s += id + ";";
  for (const auto& [id, m] : moves_)
    s += fmt::format("{}:{}>{}@{};", id, m.from, m.to, m.version);
  for (const auto& [id, r] : rollouts_) {
    s += fmt::format("|{} {} {} {} {} {} {} {} {}:", id, r.incarnation, r.alive, r.loading,
                     r.version, r.staged, r.reports, r.capacity.max_sequences,
                     r.capacity.max_kv_tokens);
    for (const auto& a : r.active)
      s += fmt::format("{}/{};", a.trajectory_id, a.kv_tokens);
    for (const auto& q : r.queued)
      s += q + ";";
    for (const auto& w : r.waiting)
      s += "w" + w + ";";
    for (const auto& [tid, w] : r.awaiting)
      s += tid + ";";
    for (const auto& q : r.to_import)
      s += q.trajectory_id + ";";
    for (const auto& q : r.to_export)
      s += q + ";";
    for (const auto& q : r.to_abandon)
      s += q + ";";
  }
  return fmt::format("{:016x}", core::chunk_checksum(s.data(), s.size()));
}

json ManagerState::status_fields(Clock::time_point now) const {
  json rs = json::array();
  for (const auto& [id, r] : rollouts_) {
    rs.push_back(json{{"id", id},
                      {"alive", r.alive},
                      {"version", r.version},
                      {"active", r.active.size()},
                      {"stats", r.stats}});
  }
  const ManagerCounts& c = counts_;
  double wall = std::chrono::duration<double>(now - started_).count();
  return json{{"mode", cfg_.mode},
              {"latest", latest_},
              {"wall_s", wall},
              {"released_prompts", pool_.released()},
              {"finished", c.finished},
              {"acked", c.acked},
              {"consumed", pool_.consumed()},
              {"done", done()},
              {"duplicates", c.duplicates},
              {"lost_replies", c.lost_replies},
              {"mixed_version_trajectories", c.mixed},
              {"restarted", c.restarted},
              {"resumed", c.resumed},
              {"dead_rollouts", c.dead},
              {"reclaimed", c.reclaimed},
              {"manager_stalls", c.stalls},
              {"repack_plans", c.repack_plans},
              {"repack_moves", c.repack_moves},
              {"repack_declined", c.repack_declined},
              {"moved_kv_tokens", c.moved_kv_tokens},
              {"kv_refs_dropped", c.kv_refs_dropped},
              {"move_failures", c.move_failures},
              {"moves_given_up", c.moves_given_up},
              {"returned", c.returned},
              {"abandoned", c.abandoned},
              {"recovering", recovering_},
              {"recovered", c.recovered},
              {"recovery_restarted", c.recovery_restarted},
              {"rollout_restarts", c.rollout_restarts},
              {"left", c.left},
              {"foreign_refused", c.foreign},
              {"tracked_trajectories", trajs_.size()},
              {"done_floor", done_.floor()},
              {"cross_version_moves", c.cross_version},
              {"mixed", c.mixed},
              {"free_slot_s",
               {{"environment", free_slots_.environment},
                {"loading", free_slots_.loading},
                {"draining", free_slots_.draining},
                {"budget", free_slots_.budget},
                {"backlog", free_slots_.backlog},
                {"end", free_slots_.end},
                {"other", free_slots_.other}}},
              {"rollouts", rs}};
}

ManagerStatus ManagerState::status(Clock::time_point now) const {
  ManagerStatus st;
  st.fields = status_fields(now);
  st.done = done();
  st.latest = latest_;
  return st;
}

}  // namespace sluice::rollout
