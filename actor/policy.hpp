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
  // `wait` lets modelled time pass with the caller's loop running (for the simulated policy).
  virtual core::Result<nlohmann::json> train(const std::vector<Sample>& batch,
                                             const std::function<void(double ms)>& wait) = 0;
  // The weights to publish as the next version; valid until the next train().
  virtual std::vector<TensorView> tensors() = 0;
  // Held-out evaluation ({"accuracy": ..} and more), or an empty object when there is none.
  virtual core::Result<nlohmann::json> evaluate() { return nlohmann::json::object(); }
  // Writes the weights as a safetensors file (the run folder's final weights).
  virtual core::Status save_weights(const std::string& path) {
    (void)path;
    return {};
  }
};

}  // namespace sluice::actor
