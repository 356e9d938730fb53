// The actor's driver (`sluice actor`): collects finished trajectories from the rollout manager
// into the experience buffer, takes a global batch under the staleness bound, trains on it, and
// publishes the next weight version through the weight store (the relays replicate it), then
// tells the manager. The trainer itself is pluggable: the simulated trainer sleeps for a time
// proportional to the batch's tokens and perturbs its weight bytes, so schedules can be measured
// without a model.
//
// At exit it writes a summary (JSON): trained tokens and samples, time idle waiting for data,
// time training, time blocked in publish, staleness of what it consumed, the buffer's counts and
// the ids of every consumed trajectory (accepted_ids: trained on or dropped; trained_ids: trained
// on), so tests can check exactly-once.
//
// Surviving kill -9 (checkpoint_dir set): every checkpoint_every_steps steps or
// checkpoint_every_s seconds, whichever first, and at the end, the trainer writes an atomic
// checkpoint (actor/checkpoint.hpp) of the policy's state, its version counter, step, accounting
// and the ids it consumed. A restarted actor resumes from it: it refuses ids it already consumed,
// and publishes above both the checkpoint's version and the store's latest. After a resume the
// summary's accepted_ids are the checkpoint's plus those consumed since; what a killed
// incarnation trained on after its last checkpoint is not in the weights and is not listed.
//
// With the manager (mgr.collect): `have` lists ids received since the last collect, `ack` ids
// whose effect is durable (in a checkpoint; without checkpoint_dir, on receipt, as before), and
// `epoch` is random per process start, so that a changed epoch tells the manager to send again
// everything not acknowledged. Acknowledgements not yet delivered go with the next call.
//
// Thread safety: one thread; run() is a driver loop making blocking control-plane calls.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "actor/trainer_config.hpp"
#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::actor {

// Between tries while the store is away (restarting): a publish, or the question for its latest.
inline constexpr core::Millis kStoreRetryPause{500};
// policy->prepare() runs the loop this long between its steps (heartbeats and reads go on).
inline constexpr core::Millis kPreparePump{1};
// The publisher's close at the end of a job; stopped by a signal, the launcher waits a few
// seconds only.
inline constexpr core::Millis kPublisherCloseWait{5000};
inline constexpr core::Millis kPublisherCloseWaitStopped{1000};

class Trainer {
 public:
  static core::Result<std::unique_ptr<Trainer>> create(core::EventLoop& loop, TrainerConfig config,
                                                       std::vector<std::string> environment);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // Runs to the end of the job; returns the summary.
  core::Result<nlohmann::json> run();
  void stop();
  struct Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::actor
