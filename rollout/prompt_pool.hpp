// The rollout manager's prompt pool: which prompts are released, each trajectory's state as first
// assigned, which groups are complete or doomed, and whether admission lets another group out.
// One of the parts ManagerState (rollout/manager_state.hpp) is composed of; what happens to a
// trajectory after it is released (assigned, sent back, finished) is ManagerState's.
//
// The rules:
// - Prompts are released in order, p0, p1, ..., at most `prompts` of them (0: no end), each as a
//   group of group_size trajectories "p<N>/0" .. "p<N>/<group_size - 1>".
// - A prompt's tokens and a trajectory's first state are deterministic from the configuration, so
//   a restarted manager rebuilds the first state of any trajectory it released from its id.
// - Admission (rollout/mode_policy.hpp, Admission): under budget, a group is released while the
//   trajectories released and not consumed by the actor, with the group's, stay within the
//   batches the mode runs ahead; under continuous, while the actor's queue of complete groups it
//   has not taken is short of backlog_batches batches.
// - A group is complete when its group_size-th finished member is counted; its trajectories then
//   join the actor's queue, once. (The caller counts each trajectory once: see
//   ManagerState::on_finished.)
// - What the actor consumed only grows: a lower figure (an older message) changes nothing.
// - A doomed group (the actor will drop it: abandon_stale) stays doomed.
//
// Durability: a newly doomed prompt is recorded into the ManagerChanges passed in (null: in memory
// only); the prompt cursor and what was consumed are counters ManagerState commits (released(),
// consumed()); restore() takes all of it back from the database's snapshot.
//
// Thread safety: none; ManagerState owns it on the manager's loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.hpp"
#include "rl/task.hpp"
#include "rollout/engine.hpp"
#include "rollout/manager_config.hpp"
#include "rollout/manager_db.hpp"
#include "rollout/mode_policy.hpp"

namespace sluice::rollout {

class PromptPool {
 public:
  // `cfg` passed validate(); `task`: the prompts of prompt_source task (nullopt: simulated
  // prompts of prompt_tokens token ids). A task's responses are capped at its longest answer.
  PromptPool(const ManagerConfig& cfg, Mode mode, Admission admission,
             std::optional<rl::ArithmeticTask> task);

  // Takes back what the database held: the prompt cursor, what was consumed, the groups' finished
  // members (done below the floor, finished or done above it) and the doomed prompts.
  void restore(const ManagerSnapshot& snap);
  // Every trajectory of the prompts below `floor` is done: their doomed marks are dropped (the
  // manager's state stays bounded).
  void forget_below(std::uint64_t floor);

  // The next group, member k at index k, when admission allows one (else empty: every prompt is
  // released, the budget ahead is used up, or the prompt could not be built, which is logged).
  std::vector<SequenceState> release();
  // The trajectory "p<N>/<k>" as first assigned, rebuilt from its id; an error when it is not one
  // this pool released.
  core::Result<SequenceState> initial_of(const std::string& traj_id) const;

  // Whether admission lets another group out now (ignoring whether any prompt is left).
  bool budget_left() const;
  // A finished member of the group of `prompt_id` (call once per trajectory).
  void count_group_member(const std::string& prompt_id);
  // The actor has taken `consumed` trajectories (trained on or dropped), a running total.
  void consume(std::uint64_t consumed);
  // `prompt_id`'s group will be dropped. True when it was not doomed before (then recorded in
  // `changes`, unless null).
  bool doom(const std::string& prompt_id, ManagerChanges* changes);

  bool doomed(const std::string& prompt_id) const { return doomed_.count(prompt_id) > 0; }
  const std::set<std::string>& doomed_prompts() const { return doomed_; }
  // Prompts released so far (the cursor).
  std::uint64_t released() const { return next_prompt_; }
  std::uint64_t consumed() const { return consumed_; }
  bool all_released() const { return prompts_ != 0 && next_prompt_ >= prompts_; }
  std::uint64_t total_trajectories() const { return prompts_ * group_size_; }
  std::uint32_t group_size() const { return group_size_; }
  Admission admission() const { return admission_; }
  // Trajectories in complete groups that the actor has not taken yet.
  std::uint64_t ready_backlog() const;

 private:
  SequenceState fresh(const std::string& traj_id, const std::string& prompt_id,
                      std::vector<std::int32_t> prompt) const;
  core::Result<std::vector<std::int32_t>> prompt_of(std::uint64_t p) const;

  std::uint64_t prompts_;
  std::uint32_t group_size_;
  std::uint32_t prompt_tokens_;
  std::uint64_t max_new_tokens_;
  std::uint64_t seed_;
  Admission admission_;
  // Budget: released and unconsumed trajectories at most. Continuous: the actor's queue of
  // complete groups that pauses it, in trajectories.
  std::uint64_t ahead_trajectories_;
  std::uint64_t backlog_trajectories_;
  std::optional<rl::ArithmeticTask> task_;

  std::uint64_t next_prompt_ = 0;
  std::uint64_t consumed_ = 0;  // trajectories the actor has taken (trained on or dropped)
  // Finished members of groups not yet complete, by prompt id, and the trajectories of the
  // complete groups (for continuous admission's backlog).
  std::unordered_map<std::string, std::uint32_t> group_finished_;
  std::uint64_t complete_trajectories_ = 0;
  std::set<std::string> doomed_;  // prompts whose group the actor will drop (abandon_stale)
};

}  // namespace sluice::rollout
