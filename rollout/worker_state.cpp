#include "rollout/worker_state.hpp"

#include <algorithm>

namespace sluice::rollout {

using core::Clock;
using core::Millis;

WorkerState::WorkerState(const RolloutConfig& cfg, Clock::time_point now)
    : report_ms_(cfg.report_ms),
      retry_ms_(cfg.effective_report_retry_ms()),
      manager_timeout_ms_(cfg.manager_timeout_ms),
      max_held_finished_(cfg.max_held_finished),
      next_report_(now),
      last_heard_(now) {}

core::Status WorkerState::report_failed(Clock::time_point now, bool* first) {
  if (first) *first = !unreachable_;
  unreachable_ = true;
  if (std::chrono::duration<double>(now - last_heard_).count() * 1000 >
      static_cast<double>(manager_timeout_ms_)) {
    return core::unavailable("silent for " + std::to_string(manager_timeout_ms_) + " ms");
  }
  return {};
}

bool WorkerState::report_answered(Clock::time_point now) {
  const bool was = unreachable_;
  unreachable_ = false;
  last_heard_ = now;
  return was;
}

void WorkerState::schedule_report(Clock::time_point now) {
  next_report_ = now + Millis(unreachable_ ? std::max(report_ms_, retry_ms_) : report_ms_);
}

bool WorkerState::may_admit(std::size_t held_finished) const {
  return held_finished < max_held_finished_;
}

bool WorkerState::take_reply(const ReportReply& r) {
  if (r.rejoin) return false;
  done_ = r.done;
  state_ = r.state;
  abandon_before_ = r.abandon_before;
  latest_named(r.latest);
  return true;
}

void WorkerState::latest_named(std::uint64_t version) {
  latest_ = std::max(latest_, version);
}

bool WorkerState::should_pull(std::uint64_t loaded, std::uint64_t held, bool pulling) const {
  return latest_ > loaded && latest_ > held && !pulling;
}

bool WorkerState::load_waits(Clock::time_point since, Clock::time_point now) const {
  return now < since + kLoadVersionWait;
}

bool WorkerState::admits_import(std::uint64_t state_version, std::uint64_t loaded, bool continues,
                                bool fits) {
  if (!fits) return false;
  return state_version == loaded || (continues && state_version < loaded);
}

std::vector<std::string> WorkerState::stale(const std::vector<ActiveSequence>& active,
                                            std::uint64_t loaded, std::uint64_t before) {
  std::vector<std::string> out;
  if (before == 0) return out;
  for (const auto& a : active) {
    const std::uint64_t first = a.first_version == 0 ? loaded : a.first_version;
    if (first < before) out.push_back(a.trajectory_id);
  }
  return out;
}

}  // namespace sluice::rollout
