// What the actor trains: the simulated policy (time proportional to tokens, weight bytes that
// change each version) or the reference GPT under GRPO/PPO. The trainer drives either the same
// way: prepare once (a supervised warm start), train on each global batch, publish tensors(),
// evaluate now and then.
//
// Thread safety: the actor's thread only.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "actor/publisher.hpp"
#include "core/status.hpp"

namespace sluice::actor {

class Learner;

class Policy {
 public:
  virtual ~Policy() = default;
  // One-time preparation before version 1 is published (a warm start); `idle` is called between
  // units of work so the caller's loop keeps running.
  virtual core::Status prepare(const std::function<void()>& idle) {
    (void)idle;
    return {};
  }
  // One update on a global batch; returns figures for the metrics line (loss, reward_mean, ...).
  // `wait` lets time pass with the caller's loop running: the simulated policy waits its modelled
  // time through it; the GPT policy trains on a worker thread and waits in slices, so the
  // caller's heartbeats keep going during a long step.
  virtual core::Result<nlohmann::json> train(const std::vector<Sample>& batch,
                                             const std::function<void(double ms)>& wait) = 0;
  // The weights to publish as the next version; valid until the next train().
  virtual std::vector<TensorView> tensors() = 0;
  // Held-out evaluation ({"accuracy": ..} and more), or an empty object when there is none.
  virtual core::Result<nlohmann::json> evaluate() { return nlohmann::json::object(); }
  // Checkpoints: writes everything a restarted actor needs to go on training as if it had not
  // died (weights, optimizer, step, RNG) to `path` (atomically, by rename); load_state reads it
  // back. A file of another shape, of another policy, or damaged is an error, and leaves the
  // policy unchanged.
  virtual core::Status save_state(const std::string& path) = 0;
  virtual core::Status load_state(const std::string& path) = 0;
  // Writes the weights as a safetensors file (the run folder's final weights).
  virtual core::Status save_weights(const std::string& path) {
    (void)path;
    return {};
  }
  // The learner behind the policy, read between train() calls (the batch record,
  // actor/batch_recorder.hpp); nullptr when there is none (the simulated policy).
  virtual const Learner* learner() const { return nullptr; }
};

}  // namespace sluice::actor
