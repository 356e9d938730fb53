#include "rollout/held_work.hpp"

#include <algorithm>

#include "core/log.hpp"

namespace sluice::rollout {

namespace log = core::log;

HeldWork::HeldWork(std::string rollout_id, WorkerStats& stats, WorkerMetrics& metrics)
    : rollout_id_(std::move(rollout_id)), stats_(&stats), metrics_(&metrics) {}

std::optional<SequenceState> HeldWork::take_unstarted() {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [](const SequenceState& s) { return !s.is_episode(); });
  if (it == queue_.end()) return std::nullopt;
  SequenceState s = std::move(*it);
  queue_.erase(it);
  return s;
}

void HeldWork::unqueue() {
  for (auto& s : queue_)
    returned_.push_back(std::move(s));
  queue_.clear();
}

std::size_t HeldWork::return_unclaimed(core::Clock::time_point now, core::Millis deadline) {
  std::map<std::string, core::Clock::time_point> seen;
  std::size_t returned = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->is_episode()) {
      ++it;
      continue;
    }
    auto was = unclaimed_since_.find(it->trajectory_id);
    const core::Clock::time_point since = was == unclaimed_since_.end() ? now : was->second;
    if (now - since <= deadline) {
      seen.emplace(it->trajectory_id, since);
      ++it;
      continue;
    }
    returned_.push_back(std::move(*it));
    it = queue_.erase(it);
    ++returned;
  }
  // Only what is still queued is remembered: taken or handed back, it is forgotten.
  unclaimed_since_ = std::move(seen);
  if (returned > 0) {
    stats_->agent_unclaimed += returned;
    metrics_->agent_unclaimed.inc(static_cast<double>(returned));
    log::warn("rollout {}: no agent took {} queued trajectories in {} ms; handing them back",
              rollout_id_, returned, deadline.count());
  }
  return returned;
}

std::optional<SequenceState> HeldWork::admit_queued(Engine& engine, bool agent_claims) {
  while (!queue_.empty() && engine.can_admit(queue_.front().kv_tokens())) {
    // Under an agent, work starts when the agent takes it (take_unstarted).
    if (agent_claims && !queue_.front().is_episode()) break;
    SequenceState s = std::move(queue_.front());
    queue_.pop_front();
    // An episode back from its environment: its KV cache serves only the weights it was made
    // with (they may have changed while it queued), else it is re-prefilled.
    if (s.is_episode() && !s.generated.empty()) {
      if (s.kv && s.kv->version != engine.version()) s.kv.reset();
      if (s.kv) {
        ++stats_->env_kv_kept;
      } else {
        ++stats_->env_reprefills;
        stats_->env_reprefill_tokens += s.kv_tokens();
      }
    }
    // What is admitted without its cache when the engine refuses it, and handed back when the
    // engine refuses it even so: never lost.
    std::optional<KvState> kv = std::move(s.kv);
    s.kv.reset();
    SequenceState plain = s;
    s.kv = std::move(kv);
    auto st = engine.admit(std::move(s));
    if (!st.is_ok() && plain.is_episode()) st = engine.admit(plain);
    if (!st.is_ok()) {
      log::warn("rollout {}: admit of {} failed, handing it back: {}", rollout_id_,
                plain.trajectory_id, st.to_string());
      (plain.generated.empty() ? returned_ : exported_).push_back(plain);
      return plain;
    }
  }
  return std::nullopt;
}

void HeldWork::finish(const SequenceState& s, double reward) {
  metrics_->finished.inc();
  finished_.push_back(to_trajectory(s, reward, rollout_id_));
}

void HeldWork::finish_abandoned(const SequenceState& s) {
  rl::Trajectory t = to_trajectory(s, 0.0, rollout_id_);
  t.abandoned = true;
  ++stats_->abandoned;
  metrics_->finished.inc();
  finished_.push_back(std::move(t));
}

bool HeldWork::abandon_queued(const std::string& id) {
  auto q = std::find_if(queue_.begin(), queue_.end(),
                        [&](const SequenceState& s) { return s.trajectory_id == id; });
  if (q == queue_.end()) return false;
  SequenceState s = std::move(*q);
  queue_.erase(q);
  finish_abandoned(s);
  return true;
}

std::size_t HeldWork::add_to(ReportRequest& req) const {
  for (const auto& s : queue_)
    req.queued.push_back(s.trajectory_id);
  const std::size_t sent_finished = fitting_prefix(finished_);
  req.finished.assign(finished_.begin(),
                      finished_.begin() + static_cast<std::ptrdiff_t>(sent_finished));
  req.exported = exported_;
  req.refused = refused_;
  req.returned = returned_;
  return sent_finished;
}

void HeldWork::answered(std::size_t finished_sent) {
  finished_.erase(finished_.begin(),
                  finished_.begin() + static_cast<std::ptrdiff_t>(finished_sent));
  exported_.clear();
  refused_.clear();
  returned_.clear();
}

void HeldWork::hand_back(ReportRequest& req, std::vector<SequenceState> running,
                         std::vector<SequenceState> waiting) {
  req.finished = finished_;
  req.exported = exported_;
  // This process is going, and its KV buffers with it: the destinations re-prefill.
  for (auto& s : req.exported)
    s.kv_ref.reset();
  req.refused = refused_;
  req.returned = returned_;
  for (auto& s : queue_)
    req.returned.push_back(std::move(s));
  queue_.clear();
  // Nothing generated yet: back to the pool's front; else resumed on a rollout of its version.
  for (auto& s : running)
    (s.generated.empty() ? req.returned : req.exported).push_back(std::move(s));
  for (auto& s : waiting)
    req.exported.push_back(std::move(s));
}

}  // namespace sluice::rollout
