#include "actor/trainer_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace sluice::actor {

using core::Clock;
using core::Millis;

namespace {
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

TrainerState::TrainerState(const TrainerConfig& cfg, Clock::time_point now)
    : manager_(cfg.manager),
      manager_timeout_ms_(cfg.manager_timeout_ms),
      store_timeout_ms_(cfg.store_timeout_ms),
      batch_trajectories_(cfg.batch_trajectories),
      collect_wait_(cfg.collect_ms),
      steps_limit_(cfg.steps),
      checkpoints_(!cfg.checkpoint_dir.empty()),
      checkpoint_every_steps_(cfg.checkpoint_every_steps),
      checkpoint_every_s_(cfg.checkpoint_every_s),
      checkpoint_idle_s_(cfg.checkpoint_idle_s),
      last_heard_(now),
      last_progress_(now),
      ledger_(consumed_options(cfg)),
      last_checkpoint_(now) {}

ConsumedOptions TrainerState::consumed_options(const TrainerConfig& cfg) {
  ConsumedOptions o;
  o.group_size = cfg.group_size;
  o.checkpoints = !cfg.checkpoint_dir.empty();
  return o;
}

void TrainerState::call_answered() {
  ack_.clear();
  have_.clear();
}

core::Status TrainerState::collect_failed(Clock::time_point now, const core::Status& why) const {
  if (seconds(now - last_heard_) * 1000 > static_cast<double>(manager_timeout_ms_)) {
    return core::unavailable(fmt::format("actor: manager {} silent for {} ms: {}", manager_,
                                         manager_timeout_ms_, why.to_string()));
  }
  return {};
}

void TrainerState::collect_reply(Clock::time_point now, bool done, bool trajectories) {
  last_heard_ = now;
  manager_done_ = done;
  if (trajectories) last_progress_ = now;
}

void TrainerState::received(const std::string& id, bool duplicate) {
  have_.push_back(id);
  // Without checkpoints nothing survives this process, so waiting for durability gains
  // nothing: acknowledged on receipt, as before. (Acknowledging on consumption instead would
  // hold back the ids of a partial last batch, which is trained only once the manager says
  // done - and the manager says done only once everything is acknowledged.)
  if (!checkpoints_) ack_.push_back(id);
  if (duplicate && ledger_.durable(id)) ack_.push_back(id);
}

void TrainerState::trained(Clock::time_point now) {
  ++steps_;
  last_progress_ = now;
}

bool TrainerState::checkpoint_due(Clock::time_point now, bool force) const {
  if (!checkpoints_) return false;
  const bool changed = !checkpointed_ || steps_ != checkpoint_steps_ ||
                       version_ != checkpoint_version_ || ledger_.unsynced();
  if (!changed) return false;
  const bool by_steps =
      checkpoint_every_steps_ > 0 && steps_ - checkpoint_steps_ >= checkpoint_every_steps_;
  const bool by_time =
      checkpoint_every_s_ > 0 && seconds(now - last_checkpoint_) >= checkpoint_every_s_;
  return force || by_steps || by_time;
}

bool TrainerState::idle_flush_due(Clock::time_point now) const {
  return checkpoints_ && ledger_.unsynced() && checkpoint_idle_s_ > 0 &&
         seconds(now - last_progress_) >= checkpoint_idle_s_;
}

void TrainerState::checkpoint_written(Clock::time_point now) {
  checkpointed_ = true;
  checkpoint_steps_ = steps_;
  checkpoint_version_ = version_;
  last_checkpoint_ = now;
  for (auto& id : ledger_.synced())
    ack_.push_back(std::move(id));
}

std::uint64_t TrainerState::publish_begin(Clock::time_point now) {
  give_up_ = now + Millis(store_timeout_ms_);
  skips_ = 0;
  return ++version_;
}

TrainerState::PublishRetry TrainerState::publish_failed(Clock::time_point now, core::Code code,
                                                        bool stopping) {
  if ((code == core::Code::kTimeout || code == core::Code::kUnavailable) && now < give_up_ &&
      !stopping) {
    // The store is away (restarting, say): the same version again once it answers. A manifest
    // that did reach it makes the retry find the version taken, and skip it below.
    return PublishRetry::kSameVersion;
  }
  if (skips_ < kPublishSkips &&
      (code == core::Code::kAlreadyExists || code == core::Code::kFailedPrecondition)) {
    // A killed incarnation put this version's manifest and died before it was committed.
    ++skips_;
    ++version_;
    return PublishRetry::kNextVersion;
  }
  return PublishRetry::kFail;
}

void TrainerState::resume(std::uint64_t steps, std::uint64_t version, std::uint64_t latest,
                          Consumed ledger) {
  steps_ = checkpoint_steps_ = steps;
  version_ = std::max(version, latest);
  checkpoint_version_ = version;
  checkpointed_ = true;
  ledger_ = std::move(ledger);
}

void TrainerState::start_above(std::uint64_t latest) {
  version_ = std::max(version_, latest);
}

TrainerState::Step TrainerState::next_step(std::size_t batch, std::size_t held) const {
  if (batch >= batch_trajectories_) return Step::kTrain;
  if (manager_done_ && held == 0) return Step::kFinish;
  return Step::kWait;
}

bool TrainerState::final_ack_due(int tries) const {
  return tries < kFinalAckTries && (!ack_.empty() || !have_.empty());
}

}  // namespace sluice::actor
