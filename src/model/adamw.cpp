#include "model/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace sluice::model {

using core::invalid_argument;

core::Status AdamWConfig::validate() const {
  if (!(lr > 0.0f) || !std::isfinite(lr)) return invalid_argument("adamw: lr must be > 0");
  if (!(beta1 >= 0.0f && beta1 < 1.0f)) return invalid_argument("adamw: beta1 must be in [0, 1)");
  if (!(beta2 >= 0.0f && beta2 < 1.0f)) return invalid_argument("adamw: beta2 must be in [0, 1)");
  if (!(eps > 0.0f)) return invalid_argument("adamw: eps must be > 0");
  if (!(weight_decay >= 0.0f)) return invalid_argument("adamw: weight_decay must be >= 0");
  if (!(max_grad_norm >= 0.0f)) return invalid_argument("adamw: max_grad_norm must be >= 0");
  return {};
}

AdamW::AdamW(const AdamWConfig& config, const Gpt& model)
    : config_(config),
      m_(model.param_count(), 0.0f),
      v_(model.param_count(), 0.0f),
      decay_(model.param_count(), 0) {
  for (const auto& t : model.tensors()) {
    if (t.shape.size() < 2) continue;
    const std::size_t first = t.offset / sizeof(float);
    std::fill_n(decay_.begin() + static_cast<std::ptrdiff_t>(first), t.bytes / sizeof(float), 1);
  }
}

core::Result<std::unique_ptr<AdamW>> AdamW::create(const AdamWConfig& config, const Gpt& model) {
  SLUICE_TRY(config.validate());
  return std::unique_ptr<AdamW>(new AdamW(config, model));
}

core::Result<float> AdamW::step(Gpt& model) {
  const std::size_t n = model.param_count();
  if (n != m_.size()) {
    return invalid_argument("adamw: model has " + std::to_string(n) +
                            " parameters, the optimizer was made for " + std::to_string(m_.size()));
  }
  const float* g = model.grads();
  double sq = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    sq += static_cast<double>(g[i]) * g[i];
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm)) return invalid_argument("adamw: gradient norm is not finite");
  float clip = 1.0f;
  if (config_.max_grad_norm > 0.0f && norm > config_.max_grad_norm) {
    clip = static_cast<float>(config_.max_grad_norm / norm);
  }
  ++steps_;
  const float b1 = config_.beta1;
  const float b2 = config_.beta2;
  const double t = static_cast<double>(steps_);
  const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
  const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
  const float lr = config_.lr;
  const float wd = config_.weight_decay;
  float* p = model.mutable_params();
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] * clip;
    m_[i] = b1 * m_[i] + (1.0f - b1) * gi;
    v_[i] = b2 * v_[i] + (1.0f - b2) * gi * gi;
    const float mhat = m_[i] / c1;
    const float vhat = v_[i] / c2;
    const float decay = decay_[i] ? wd * p[i] : 0.0f;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + config_.eps) + decay);
  }
  return static_cast<float>(norm);
}

core::Status AdamW::restore(std::span<const float> m, std::span<const float> v,
                            std::uint64_t steps) {
  if (m.size() != m_.size() || v.size() != v_.size()) {
    return invalid_argument("adamw restore: state of " + std::to_string(m.size()) + "/" +
                            std::to_string(v.size()) + " values, the optimizer has " +
                            std::to_string(m_.size()));
  }
  std::copy(m.begin(), m.end(), m_.begin());
  std::copy(v.begin(), v.end(), v_.begin());
  steps_ = steps;
  return {};
}

}  // namespace sluice::model
