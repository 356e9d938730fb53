// The manager's prompt pool: release in order under admission, deterministic first states, groups
// complete and doomed.
#include "rollout/prompt_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "rollout/protocol.hpp"

namespace sluice::rollout {

namespace log = core::log;

namespace {

// A deterministic prompt for the simulated workload: token ids in [0, 32).
std::vector<std::int32_t> sim_prompt(std::uint64_t seed, std::uint64_t index, std::uint32_t n) {
  std::vector<std::int32_t> tokens(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + index + 1;
  for (auto& t : tokens) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<std::int32_t>(x % 32);
  }
  return tokens;
}

}  // namespace

PromptPool::PromptPool(const ManagerConfig& cfg, Mode mode, Admission admission,
                       std::optional<rl::ArithmeticTask> task)
    : prompts_(cfg.prompts),
      group_size_(cfg.group_size),
      prompt_tokens_(cfg.prompt_tokens),
      max_new_tokens_(task
                          ? std::min<std::uint64_t>(cfg.max_new_tokens, task->max_response_tokens())
                          : cfg.max_new_tokens),
      seed_(cfg.seed),
      admission_(admission),
      ahead_trajectories_(batches_ahead(mode, cfg.ahead_batches) * cfg.batch_trajectories),
      backlog_trajectories_(static_cast<std::uint64_t>(cfg.backlog_batches) *
                            cfg.batch_trajectories),
      task_(std::move(task)) {}

void PromptPool::restore(const ManagerSnapshot& snap) {
  next_prompt_ = snap.counters.next_prompt;
  consumed_ = snap.counters.consumed;
  // Every group below the done floor is complete; above it, a group's finished members are those
  // finished and not acknowledged, and those done (each id once: a database of an older build
  // kept acknowledged ids among the finished).
  const std::uint64_t floor = snap.counters.done_floor;
  complete_trajectories_ = floor * group_size_;
  std::set<std::string> members(snap.finished.begin(), snap.finished.end());
  members.insert(snap.done.begin(), snap.done.end());
  for (const auto& id : members) {
    auto ix = parse_trajectory_id(id);
    if (ix && ix->first >= floor) count_group_member(fmt::format("p{}", ix->first));
  }
  for (const auto& p : snap.doomed) {
    auto ix = parse_trajectory_id(p + "/0");
    if (!ix || ix->first >= floor) doomed_.insert(p);
  }
}

void PromptPool::forget_below(std::uint64_t floor) {
  // "p<N>" sorts as text, not by N: each is parsed.
  std::erase_if(doomed_, [&](const std::string& p) {
    auto ix = parse_trajectory_id(p + "/0");
    return ix && ix->first < floor;
  });
}

// Budget: while fewer than so many batches are released and unconsumed (in flight or not).
// Continuous: while the actor's queue of complete groups it has not taken is short of
// backlog_batches.
bool PromptPool::budget_left() const {
  if (admission_ == Admission::kContinuous) return ready_backlog() < backlog_trajectories_;
  std::uint64_t released = next_prompt_ * group_size_;
  return released + group_size_ <= consumed_ + ahead_trajectories_;
}

std::uint64_t PromptPool::ready_backlog() const {
  return complete_trajectories_ > consumed_ ? complete_trajectories_ - consumed_ : 0;
}

void PromptPool::count_group_member(const std::string& prompt_id) {
  std::uint32_t& n = group_finished_[prompt_id];
  if (++n < group_size_) return;
  group_finished_.erase(prompt_id);
  complete_trajectories_ += group_size_;
}

void PromptPool::consume(std::uint64_t consumed) {
  consumed_ = std::max(consumed_, consumed);
}

bool PromptPool::doom(const std::string& prompt_id, ManagerChanges* changes) {
  if (!doomed_.insert(prompt_id).second) return false;
  if (changes) changes->doomed.push_back(prompt_id);
  return true;
}

SequenceState PromptPool::fresh(const std::string& traj_id, const std::string& prompt_id,
                                std::vector<std::int32_t> prompt) const {
  SequenceState s;
  s.trajectory_id = traj_id;
  s.prompt_id = prompt_id;
  s.prompt_tokens = std::move(prompt);
  s.max_new_tokens = max_new_tokens_;
  s.rng_state = core::chunk_checksum(traj_id.data(), traj_id.size()) ^ seed_;
  return s;
}

// The prompt of index `p`, deterministic from the configuration (a restarted manager rebuilds the
// same prompt for a trajectory it has no record of).
core::Result<std::vector<std::int32_t>> PromptPool::prompt_of(std::uint64_t p) const {
  if (!task_) return sim_prompt(seed_, p, prompt_tokens_);
  SLUICE_ASSIGN_OR_RETURN(auto tp, task_->train_prompt(p));
  return std::vector<std::int32_t>(tp.tokens.begin(), tp.tokens.end());
}

core::Result<SequenceState> PromptPool::initial_of(const std::string& traj_id) const {
  auto ix = parse_trajectory_id(traj_id);
  if (!ix || ix->second >= group_size_ || ix->first >= next_prompt_) {
    return core::invalid_argument(
        fmt::format("trajectory {} is not one this manager released", traj_id));
  }
  SLUICE_ASSIGN_OR_RETURN(auto prompt, prompt_of(ix->first));
  return fresh(traj_id, fmt::format("p{}", ix->first), std::move(prompt));
}

std::vector<SequenceState> PromptPool::release() {
  std::vector<SequenceState> group;
  if (all_released() || !budget_left()) return group;
  // The cursor moves on even when the prompt cannot be built: the next call tries the next one.
  std::uint64_t p = next_prompt_++;
  std::string prompt_id = fmt::format("p{}", p);
  auto prompt = prompt_of(p);
  if (!prompt.is_ok()) {
    log::error("manager: prompt {}: {}", p, prompt.status().to_string());
    return group;
  }
  group.reserve(group_size_);
  for (std::uint32_t k = 0; k < group_size_; ++k)
    group.push_back(fresh(fmt::format("{}/{}", prompt_id, k), prompt_id, *prompt));
  return group;
}

}  // namespace sluice::rollout
