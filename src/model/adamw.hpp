// AdamW for the reference model (decoupled weight decay, bias-corrected moments, optional clipping
// of the global gradient norm). Its state is two buffers the size of the parameters plus a step
// count; m(), v() and steps() expose them and restore() puts them back, for checkpoints.
//
// Weight decay applies to matrices only (tensors of two or more dimensions: embeddings and
// linear weights), not to biases or LayerNorm gains, as GPT-2 training does.
//
// Thread safety: one thread at a time, the same thread that uses the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.hpp"
#include "model/gpt.hpp"

namespace sluice::model {

struct AdamWConfig {
  float lr = 1e-3f;            // learning rate, > 0
  float beta1 = 0.9f;          // first-moment decay, in [0, 1)
  float beta2 = 0.95f;         // second-moment decay, in [0, 1)
  float eps = 1e-8f;           // denominator floor, > 0
  float weight_decay = 0.0f;   // decoupled decay per step (times lr), >= 0
  float max_grad_norm = 0.0f;  // clip the global gradient norm to this; 0 turns clipping off

  template <typename V>
  void describe(V& v) {
    v("lr", lr, "learning rate (default 0.001)");
    v("beta1", beta1, "first-moment decay (default 0.9)");
    v("beta2", beta2, "second-moment decay (default 0.95)");
    v("eps", eps, "denominator floor (default 1e-8)");
    v("weight_decay", weight_decay, "decoupled weight decay of matrices (default 0)");
    v("max_grad_norm", max_grad_norm, "global gradient-norm clip, 0 for none (default 0)");
  }
  core::Status validate() const;
};

class AdamW {
 public:
  // An optimizer for `model`'s parameters (their count and which of them decay).
  static core::Result<std::unique_ptr<AdamW>> create(const AdamWConfig& config, const Gpt& model);

  // Updates model's parameters from its gradients (which it leaves as they are: call
  // model.zero_grad() before the next accumulation). Returns the global gradient norm before
  // clipping. A non-finite gradient norm is invalid_argument and leaves everything unchanged; a
  // model of another size is invalid_argument.
  core::Result<float> step(Gpt& model);

  const AdamWConfig& config() const { return config_; }
  void set_lr(float lr) { config_.lr = lr; }  // for schedules

  std::uint64_t steps() const { return steps_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  // Puts back state saved from m(), v() and steps(); sizes must match.
  core::Status restore(std::span<const float> m, std::span<const float> v, std::uint64_t steps);

 private:
  AdamW(const AdamWConfig& config, const Gpt& model);

  AdamWConfig config_;
  std::vector<float> m_;
  std::vector<float> v_;
  std::vector<std::uint8_t> decay_;  // per parameter: 1 where weight decay applies
  std::uint64_t steps_ = 0;
};

}  // namespace sluice::model
