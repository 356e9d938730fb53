// The work a rollout holds for its manager: the queue of assigned work not yet admitted, and what
// goes back with the next report (finished trajectories, exported sequences, imports refused here
// and queued work handed back unstarted). A report carries copies (add_to); once the manager has
// answered, what it carried is forgotten (answered); unanswered, it all goes with the next. After
// an outage thousands of finished trajectories may be held: a report carries the prefix that fits
// in one message (fitting_prefix), the rest the next.
//
// Leaving, one last report hands back all of it (hand_back), the queue as returned work.
//
// Counted here: abandoned trajectories (WorkerStats::abandoned), episodes kept or re-prefilled at
// their next turn, and the finished trajectories on /metrics.
//
// Thread safety: none; the worker owns it on its thread.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "rl/trajectory.hpp"
#include "rollout/engine.hpp"
#include "rollout/protocol.hpp"
#include "rollout/worker_stats.hpp"

namespace sluice::rollout {

class HeldWork {
 public:
  // `stats` and `metrics` must outlive it; `rollout_id` names the finished trajectories.
  HeldWork(std::string rollout_id, WorkerStats& stats, WorkerMetrics& metrics);

  // The queue: assigned work at its back, an episode's next turn at its front.
  void queue(SequenceState s) { queue_.push_back(std::move(s)); }
  void queue_next_turn(SequenceState s) { queue_.push_front(std::move(s)); }
  bool queue_empty() const { return queue_.empty(); }
  const std::deque<SequenceState>& queued() const { return queue_; }
  // The first queued sequence that is not yet an episode (an agent claims it), if any.
  std::optional<SequenceState> take_unstarted();
  // Everything queued goes back to the manager unstarted (to start on a newer version elsewhere).
  void unqueue();
  // Under an agent: queued work that is not yet an episode and that calls at `now` have seen
  // queued for longer than `deadline` goes back to the manager unstarted (no agent is taking
  // work here: its agents may be gone, or looking for this rollout at an old address). Counted
  // (WorkerStats::agent_unclaimed); returns how many went. A sequence's time starts at the first
  // call that sees it queued.
  std::size_t return_unclaimed(core::Clock::time_point now, core::Millis deadline);
  // The manager handed the queue out again: forget it.
  void drop_queue() { queue_.clear(); }
  // Admits queued sequences while `engine` has room. `agent_claims`: unstarted work waits for the
  // agent to claim it. An episode back from its environment keeps its KV cache only on the
  // version that made it. A sequence the engine refuses is admitted without its cache if it is an
  // episode, else handed back (returned unstarted, else exported): never lost. Returns a copy of
  // the one handed back, if any.
  std::optional<SequenceState> admit_queued(Engine& engine, bool agent_claims);

  // A finished sequence, scored `reward`.
  void finish(const SequenceState& s, double reward);
  // A trajectory stopped here, sent back marked abandoned (its state up to now).
  void finish_abandoned(const SequenceState& s);
  // Takes `id` out of the queue and finishes it abandoned; false when it is not queued.
  bool abandon_queued(const std::string& id);
  std::size_t finished() const { return finished_.size(); }

  void add_exported(SequenceState s) { exported_.push_back(std::move(s)); }
  void add_refused(SequenceState s) { refused_.push_back(std::move(s)); }

  // Fills `req`'s queued, finished (the prefix that fits), exported, refused and returned with
  // copies; returns how many finished trajectories it carries, for answered().
  std::size_t add_to(ReportRequest& req) const;
  // The report that carried `finished_sent` finished trajectories was answered.
  void answered(std::size_t finished_sent);
  // Leaving: fills `req` with everything held (exported without their KV references: the buffers
  // go with this process), the queue as returned work, and what was taken out of the engine
  // (`running`: unstarted ones returned, the rest exported) and the episodes waiting on their
  // environment (`waiting`: exported, each resumes elsewhere at its call).
  void hand_back(ReportRequest& req, std::vector<SequenceState> running,
                 std::vector<SequenceState> waiting);
  // The leaving report was answered: nothing is held any more.
  void handed_back() { answered(finished_.size()); }

 private:
  std::string rollout_id_;
  WorkerStats* stats_;
  WorkerMetrics* metrics_;
  std::deque<SequenceState> queue_;  // assigned, not yet admitted
  std::vector<rl::Trajectory> finished_;
  std::vector<SequenceState> exported_;
  std::vector<SequenceState> refused_;
  std::vector<SequenceState> returned_;  // queued work handed back unstarted
  // Unstarted queued work under an agent: when return_unclaimed() first saw it.
  std::map<std::string, core::Clock::time_point> unclaimed_since_;
};

}  // namespace sluice::rollout
