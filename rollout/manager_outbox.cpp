// The manager's outbox to the actor: held until acknowledged, sent once per epoch.
#include "rollout/manager_outbox.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/log.hpp"
#include "rollout/protocol.hpp"

namespace sluice::rollout {

namespace log = core::log;

void ActorOutbox::hold(rl::Trajectory tr, ManagerChanges* changes) {
  const std::string id = tr.id;
  if (changes) changes->unacked.emplace_back(id, tr.to_json().dump());
  unacked_[id] = Held{std::move(tr), false, false, {}};
  resendable_.erase(id);
  queue_.push_back(id);
}

std::size_t ActorOutbox::acknowledge(const std::vector<std::string>& ids, ManagerChanges* changes,
                                     std::vector<std::string>* dropped) {
  std::size_t n = 0;
  for (const auto& id : ids) {
    if (unacked_.erase(id) == 0) continue;  // a repeated ack is harmless
    resendable_.erase(id);
    ++n;
    if (changes) changes->acked.push_back(id);
    if (dropped) dropped->push_back(id);
  }
  return n;
}

void ActorOutbox::see_epoch(const std::string& epoch) {
  if (epoch == epoch_) return;
  // A restarted actor lost what it had not checkpointed: everything unacked goes again.
  if (!epoch_.empty())
    log::info("manager: actor epoch {} -> {}: re-sending unacked", epoch_, epoch);
  epoch_ = epoch;
  resendable_.clear();
  for (auto& [id, h] : unacked_) {
    h.have = false;
    if (h.sent) {
      h.sent = false;
      queue_.push_back(id);
    }
  }
}

void ActorOutbox::mark_have(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    auto it = unacked_.find(id);
    if (it != unacked_.end() && it->second.sent) {
      it->second.have = true;
      resendable_.erase(id);
    }
  }
}

std::vector<rl::Trajectory> ActorOutbox::take(std::size_t max, Clock::time_point now) {
  std::vector<rl::Trajectory> out;
  // Resend what was delivered a while ago and neither received (`have`) nor acknowledged: the
  // reply was lost. The actor's buffer refuses what it already has.
  // Bounded by bytes (kTrajectoryBytesPerMessage): a restarted actor is owed every unacknowledged
  // trajectory at once, and one reply with all of them was refused whole and sent again forever
  // (the job stalled under sluice chaos).
  std::size_t bytes = 0;
  auto fits = [&](const rl::Trajectory& t) {
    std::size_t b = approx_json_bytes(t);
    if (!out.empty() && bytes + b > kTrajectoryBytesPerMessage) return false;
    bytes += b;
    return true;
  };
  for (const auto& id : resendable_) {
    if (out.size() >= max) break;
    Held& h = unacked_.at(id);
    if (now - h.sent_at > resend_after_) {
      if (!fits(h.tr)) break;
      h.sent_at = now;
      out.push_back(h.tr);
    }
  }
  while (out.size() < max && !queue_.empty()) {
    auto it = unacked_.find(queue_.front());
    if (it == unacked_.end() || it->second.sent) {  // acknowledged meanwhile
      queue_.pop_front();
      continue;
    }
    if (!fits(it->second.tr)) break;  // the rest in the next reply
    queue_.pop_front();
    it->second.sent = true;
    it->second.sent_at = now;
    resendable_.insert(it->first);
    out.push_back(it->second.tr);
  }
  return out;
}

bool ActorOutbox::all_received() const {
  if (!queue_.empty()) return false;
  return std::all_of(unacked_.begin(), unacked_.end(),
                     [](const auto& u) { return u.second.sent && u.second.have; });
}

void ActorOutbox::describe(std::string& s) const {
  for (const auto& [id, h] : unacked_)
    s += fmt::format("{}:{}:{};", id, h.sent, h.have);
  for (const auto& id : queue_)
    s += id + ";";
}

}  // namespace sluice::rollout
