// The actor trainer's decisions (the rules are in actor/trainer.hpp): what a collect that got no
// answer means, which ids to acknowledge and when to stop sending them, which version to publish
// and what a failed publish leads to, when a checkpoint is due, which version a restarted actor
// publishes above, what the driver loop does next, and how often the last acknowledgement is
// tried. No sockets, no policy, no store, no clock: each call that needs the time takes it as
// `now`. The trainer (actor/trainer.cpp) calls the manager and the store, trains, writes the
// checkpoints, and asks this what to do.
//
// Thread safety: none; the trainer owns it on its thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actor/consumed.hpp"
#include "actor/trainer_config.hpp"
#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::actor {

// A version the store already knows (put by a killed incarnation that died before it was
// committed) is skipped; this many times at most.
inline constexpr int kPublishSkips = 4;
// The last acknowledgement to the manager: this many tries, each waiting this long.
inline constexpr int kFinalAckTries = 3;
inline constexpr core::Millis kFinalAckTimeout{2000};

class TrainerState {
 public:
  // `cfg` must have passed validate(). The manager counts as heard at `now`, and the trainer as
  // having made progress and checkpointed then (the clocks of the time-outs start).
  TrainerState(const TrainerConfig& cfg, core::Clock::time_point now);

  // How the ledger of consumed ids is kept for `cfg` (with checkpoints or not).
  static ConsumedOptions consumed_options(const TrainerConfig& cfg);

  // ---- the manager (mgr.collect) ----

  // What the next collect sends: ids whose effect is durable (ack) and ids received since the
  // last call that got through (have). Both are kept until a call is answered.
  const std::vector<std::string>& ack() const { return ack_; }
  const std::vector<std::string>& have() const { return have_; }
  // A call reached the manager (even one whose reply was an error): what it sent is delivered.
  void call_answered();
  // A collect failed at `now` because of `why`: unavailable once the manager was silent past
  // manager_timeout_ms (the actor ends); else ok, and the next collect tries again.
  core::Status collect_failed(core::Clock::time_point now, const core::Status& why) const;
  // A collect's reply at `now`: the manager's `done`, and whether it brought trajectories.
  void collect_reply(core::Clock::time_point now, bool done, bool trajectories);
  // Trajectory `id` arrived; `duplicate`: the buffer refused it as one it already had. Without
  // checkpoints it is acknowledged on receipt; a copy of one already durable (its
  // acknowledgement was lost, or the actor restarted before sending it) is acknowledged again.
  void received(const std::string& id, bool duplicate);
  bool manager_done() const { return manager_done_; }

  // ---- consumed ids and checkpoints ----

  // Trajectory `id` was consumed (`trained`: trained on, else dropped as stale). Acknowledged
  // after the next checkpoint (without checkpoints, it was acknowledged on receipt).
  void consume(const std::string& id, bool trained) { ledger_.consume(id, trained); }
  const Consumed& consumed() const { return ledger_; }
  // A training step ended at `now`.
  void trained(core::Clock::time_point now);
  std::uint64_t steps() const { return steps_; }
  // Whether the job's `steps` are done (0: no limit).
  bool steps_done() const { return steps_limit_ > 0 && steps_ >= steps_limit_; }
  // Whether to write a checkpoint at `now`: with checkpoint_dir, when something changed since
  // the last (none yet, a step, a version or consumed ids not yet synced) and it is due by
  // steps, by time or `force`d (at the end, or the idle flush). Nothing changed: never.
  bool checkpoint_due(core::Clock::time_point now, bool force) const;
  // Idle for checkpoint_idle_s (no arrival, no step) with consumed trajectories not yet
  // acknowledged: a checkpoint now lets them go (a manager may wait for them before it says
  // done).
  bool idle_flush_due(core::Clock::time_point now) const;
  // A checkpoint of the current step, version and ledger is on disk at `now`: what it holds is
  // durable and goes into the next collect's acks.
  void checkpoint_written(core::Clock::time_point now);

  // ---- the version counter and publishes ----

  // The version published last, or being published now.
  std::uint64_t version() const { return version_; }
  // A publish starts at `now`: returns the version to publish (the next one). The store is
  // given store_timeout_ms from here.
  std::uint64_t publish_begin(core::Clock::time_point now);
  enum class PublishRetry {
    kSameVersion,  // the store is away (timeout, unavailable): the same version after a pause
    kNextVersion,  // the version is taken (a killed incarnation's manifest): the next one now
    kFail,         // anything else, or the store away past store_timeout_ms, or skipped enough
  };
  // The publish of version() failed at `now` with `code` (`stopping`: the trainer is asked to
  // stop, so a store that is away is not waited for). kNextVersion has moved version() on.
  PublishRetry publish_failed(core::Clock::time_point now, core::Code code, bool stopping);

  // ---- start ----

  // Resumed from a checkpoint of `steps` and `version`, with the store's latest version `latest`
  // and the checkpoint's ledger: the next publish is above both versions.
  void resume(std::uint64_t steps, std::uint64_t version, std::uint64_t latest, Consumed ledger);
  // No checkpoint, but the store has `latest` (0: none): not the job's first actor. One killed
  // before its first checkpoint published versions that the rollouts now run; publishing 1 again
  // would sit below them, so the next publish is above `latest`.
  void start_above(std::uint64_t latest);

  // ---- the driver loop ----

  enum class Step {
    kTrain,   // the batch is full: train, publish the next version, then maybe checkpoint
    kFinish,  // the manager is done and the buffer holds nothing: leave (train a partial batch)
    kWait,    // wait collect_ms for more (first, with an empty batch, maybe an idle flush)
  };
  // What to do with `batch` trajectories in hand and `held` in the buffer.
  Step next_step(std::size_t batch, std::size_t held) const;
  core::Millis collect_wait() const { return collect_wait_; }
  // Whether to try the last acknowledgement once more after `tries` tries: something is left to
  // send, kFinalAckTries at most.
  bool final_ack_due(int tries) const;

 private:
  std::string manager_;
  std::uint64_t manager_timeout_ms_;
  std::uint64_t store_timeout_ms_;
  std::size_t batch_trajectories_;
  core::Millis collect_wait_;
  std::uint64_t steps_limit_;
  bool checkpoints_;
  std::uint64_t checkpoint_every_steps_;
  double checkpoint_every_s_;
  double checkpoint_idle_s_;

  core::Clock::time_point last_heard_;
  core::Clock::time_point last_progress_;  // the last step or arrival
  bool manager_done_ = false;
  std::vector<std::string> have_;  // received since the last collect that got through
  std::vector<std::string> ack_;   // durable, not acknowledged yet
  // What was consumed and what of it is durable: a re-sent copy of a durable one is
  // acknowledged again. Bounded in a long job (actor/consumed.hpp says why that is safe).
  Consumed ledger_;

  std::uint64_t steps_ = 0;
  std::uint64_t version_ = 0;
  core::Clock::time_point give_up_{};  // the publish under way fails past this
  int skips_ = 0;                      // versions skipped by the publish under way

  bool checkpointed_ = false;  // a checkpoint exists (written or resumed from)
  std::uint64_t checkpoint_steps_ = 0, checkpoint_version_ = 0;
  core::Clock::time_point last_checkpoint_;
};

}  // namespace sluice::actor
