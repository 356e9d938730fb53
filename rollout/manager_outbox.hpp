// The rollout manager's outbox to the actor: finished trajectories waiting for the actor to make
// them durable. One of the parts ManagerState (rollout/manager_state.hpp) is composed of. No
// sockets, no clock: every call that needs the time takes it as `now`.
//
// The rules:
// - A finished trajectory is held until the actor acknowledges it (the actor does so once its
//   checkpoint holds it), whatever happens to the actor meanwhile.
// - Each is sent once to an actor epoch (one run of the actor process), in the order it was held.
//   One sent more than `resend_after` ago that the actor has neither acknowledged nor said it has
//   (`have`) goes again: the reply carrying it was lost.
// - A new epoch (a restarted actor lost what it had not checkpointed) re-sends everything still
//   unacknowledged, and nothing that was acknowledged.
// - Acknowledging an id that is not held (acknowledged already, or never held) changes nothing.
// - One reply carries at most `max` trajectories and about kTrajectoryBytesPerMessage bytes of
//   them (at least one); the rest wait for the next.
//
// Durability: the changes the manager's database keeps are recorded into the ManagerChanges
// passed in (null: in memory only): a newly held trajectory's JSON (`unacked`) and each
// acknowledged id (`acked`). The epoch and what was sent are not kept: after a manager restart
// every held trajectory is sent again, and the actor's buffer refuses what it already has.
//
// Thread safety: none; ManagerState owns it on the manager's loop thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rl/trajectory.hpp"
#include "rollout/manager_db.hpp"

namespace sluice::rollout {

using Clock = std::chrono::steady_clock;

class ActorOutbox {
 public:
  explicit ActorOutbox(Clock::duration resend_after) : resend_after_(resend_after) {}

  // Holds `tr` until the actor acknowledges it, queued to go out in the next replies. `changes`:
  // where its JSON is recorded for the database (null: not recorded, as for one loaded from it).
  void hold(rl::Trajectory tr, ManagerChanges* changes);
  // Drops every id of `ids` that is held, recording it in `changes` (null: not recorded) and
  // appending it to `dropped` (null: not listed). Returns how many were held.
  std::size_t acknowledge(const std::vector<std::string>& ids, ManagerChanges* changes,
                          std::vector<std::string>* dropped = nullptr);
  // The actor's epoch, as its collect names it. A new one (not the first) re-queues everything
  // sent to the previous epoch and forgets what that epoch said it had.
  void see_epoch(const std::string& epoch);
  // The actor says it received these in this epoch: a lost reply will not re-send them. Ids not
  // held, or not sent to this epoch, are ignored.
  void mark_have(const std::vector<std::string>& ids);
  // The trajectories for one reply at `now`: first those to re-send (sent over `resend_after`
  // ago, neither acknowledged nor had), then queued ones in order, each marked sent.
  std::vector<rl::Trajectory> take(std::size_t max, Clock::time_point now);

  // Every held trajectory was sent to this epoch and the actor said it has it (true when nothing
  // is held).
  bool all_received() const;
  // Finished trajectories not acknowledged yet.
  std::size_t held() const { return unacked_.size(); }
  bool empty() const { return unacked_.empty(); }
  // The actor's epoch as last seen ("" before any).
  const std::string& epoch() const { return epoch_; }
  // Appends the state acted on (held ids with their marks, then the queue) to a digest's text.
  void describe(std::string& s) const;

 private:
  struct Held {
    rl::Trajectory tr;
    bool sent = false;  // to the current epoch
    bool have = false;  // the actor said it received it (this epoch)
    Clock::time_point sent_at;
  };

  Clock::duration resend_after_;
  // Held trajectories by id; `queue_` orders those not yet sent to the current epoch (an id
  // acknowledged or sent meanwhile is skipped when it comes up).
  std::map<std::string, Held> unacked_;
  std::deque<std::string> queue_;
  // The ids of unacked_ sent to this epoch and not had (the ones take() may re-send), in the
  // map's order: take() looks at these alone rather than walking every held trajectory, which
  // made a collect cost the whole backlog (most of a long simulated job's time).
  std::set<std::string> resendable_;
  std::string epoch_;
};

}  // namespace sluice::rollout
