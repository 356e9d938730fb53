#include "rl/loss.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sluice::rl {

namespace {

core::Status wrong_size(std::string_view what, std::size_t got, std::size_t want,
                        std::string_view unit) {
  return core::invalid_argument(
      fmt::format("loss: {} has {} entries, the batch has {} {}", what, got, want, unit));
}

core::Status check_tokens(std::string_view what, std::span<const float> v, std::size_t n) {
  if (v.size() != n) return wrong_size(what, v.size(), n, "response tokens");
  return {};
}

// Mean and population std of v.
std::pair<double, double> mean_std(std::span<const float> v) {
  if (v.empty()) return {0.0, 0.0};
  double sum = 0.0;
  for (float x : v)
    sum += x;
  double mean = sum / static_cast<double>(v.size());
  double var = 0.0;
  for (float x : v)
    var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / static_cast<double>(v.size()))};
}

}  // namespace

TokenLayout::TokenLayout(std::vector<std::size_t> lengths) : lengths_(std::move(lengths)) {
  offsets_.resize(lengths_.size() + 1, 0);
  for (std::size_t b = 0; b < lengths_.size(); ++b)
    offsets_[b + 1] = offsets_[b] + lengths_[b];
}

core::Status GrpoOptions::validate() const {
  if (!(eps > 0.0)) return core::invalid_argument(fmt::format("grpo: eps is {}, must be > 0", eps));
  return {};
}

core::Status GaeOptions::validate() const {
  if (!(gamma >= 0.0 && gamma <= 1.0)) {
    return core::invalid_argument(fmt::format("gae: gamma is {}, must be in [0, 1]", gamma));
  }
  if (!(lambda >= 0.0 && lambda <= 1.0)) {
    return core::invalid_argument(fmt::format("gae: lambda is {}, must be in [0, 1]", lambda));
  }
  if (!(eps > 0.0)) return core::invalid_argument(fmt::format("gae: eps is {}, must be > 0", eps));
  return {};
}

core::Status SurrogateOptions::validate() const {
  if (!(clip_low >= 0.0 && clip_low < 1.0)) {
    return core::invalid_argument(
        fmt::format("surrogate: clip_low is {}, must be in [0, 1)", clip_low));
  }
  if (!(clip_high >= 0.0) || !std::isfinite(clip_high)) {
    return core::invalid_argument(
        fmt::format("surrogate: clip_high is {}, must be >= 0", clip_high));
  }
  if (!(behaviour_cap > 0.0)) {
    return core::invalid_argument(
        fmt::format("surrogate: behaviour_cap is {}, must be > 0", behaviour_cap));
  }
  return {};
}

core::Status ValueLossOptions::validate() const {
  if (!(clip >= 0.0)) {
    return core::invalid_argument(fmt::format("value loss: clip is {}, must be >= 0", clip));
  }
  return {};
}

std::vector<std::size_t> group_ids(std::span<const std::string> keys) {
  std::unordered_map<std::string, std::size_t> ids;
  std::vector<std::size_t> out;
  out.reserve(keys.size());
  for (const auto& k : keys) {
    auto [it, inserted] = ids.emplace(k, ids.size());
    out.push_back(it->second);
  }
  return out;
}

core::Result<std::vector<float>> grpo_advantages(std::span<const double> rewards,
                                                 std::span<const std::size_t> groups,
                                                 const GrpoOptions& options) {
  SLUICE_TRY(options.validate());
  if (groups.size() != rewards.size()) {
    return wrong_size("groups", groups.size(), rewards.size(), "trajectories");
  }
  struct Moments {
    double sum = 0.0;
    double sum_sq_dev = 0.0;
    std::size_t n = 0;
  };
  std::unordered_map<std::size_t, Moments> by_group;
  for (std::size_t b = 0; b < rewards.size(); ++b) {
    Moments& m = by_group[groups[b]];
    m.sum += rewards[b];
    ++m.n;
  }
  // Two passes (mean first, then squared deviations) so that equal rewards give exactly 0.
  for (std::size_t b = 0; b < rewards.size(); ++b) {
    Moments& m = by_group[groups[b]];
    double dev = rewards[b] - m.sum / static_cast<double>(m.n);
    m.sum_sq_dev += dev * dev;
  }
  std::vector<float> adv(rewards.size());
  for (std::size_t b = 0; b < rewards.size(); ++b) {
    const Moments& m = by_group[groups[b]];
    double a = rewards[b] - m.sum / static_cast<double>(m.n);
    if (options.scale_by_std) {
      a /= std::sqrt(m.sum_sq_dev / static_cast<double>(m.n)) + options.eps;
    }
    adv[b] = static_cast<float>(a);
  }
  return adv;
}

core::Result<std::vector<float>> broadcast_to_tokens(const TokenLayout& layout,
                                                     std::span<const float> per_trajectory) {
  if (per_trajectory.size() != layout.trajectories()) {
    return wrong_size("per-trajectory values", per_trajectory.size(), layout.trajectories(),
                      "trajectories");
  }
  std::vector<float> out(layout.tokens());
  for (std::size_t b = 0; b < layout.trajectories(); ++b) {
    std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(layout.offset(b)), layout.length(b),
                per_trajectory[b]);
  }
  return out;
}

core::Result<GaeResult> gae(const TokenLayout& layout, std::span<const float> values,
                            std::span<const double> rewards, const GaeOptions& options) {
  SLUICE_TRY(options.validate());
  SLUICE_TRY(check_tokens("values", values, layout.tokens()));
  if (rewards.size() != layout.trajectories()) {
    return wrong_size("rewards", rewards.size(), layout.trajectories(), "trajectories");
  }
  GaeResult out;
  out.advantages.resize(layout.tokens());
  out.returns.resize(layout.tokens());
  for (std::size_t b = 0; b < layout.trajectories(); ++b) {
    const std::size_t begin = layout.offset(b);
    const std::size_t n = layout.length(b);
    double next_value = 0.0;  // V after the last token: the episode has ended
    double next_adv = 0.0;
    for (std::size_t t = n; t-- > 0;) {
      const double v = values[begin + t];
      const double r = t + 1 == n ? rewards[b] : 0.0;
      const double delta = r + options.gamma * next_value - v;
      const double a = delta + options.gamma * options.lambda * next_adv;
      out.advantages[begin + t] = static_cast<float>(a);
      out.returns[begin + t] = static_cast<float>(a + v);
      next_value = v;
      next_adv = a;
    }
  }
  if (options.normalize && !out.advantages.empty()) {
    auto [mean, std] = mean_std(out.advantages);
    for (float& a : out.advantages)
      a = static_cast<float>((a - mean) / (std + options.eps));
  }
  return out;
}

core::Result<SurrogateResult> clipped_surrogate(const TokenLayout& layout, const PolicyBatch& batch,
                                                const SurrogateOptions& options) {
  SLUICE_TRY(options.validate());
  const std::size_t n = layout.tokens();
  if (n == 0) return core::invalid_argument("loss: the batch has no response tokens");
  SLUICE_TRY(check_tokens("logp_new", batch.logp_new, n));
  SLUICE_TRY(check_tokens("logp_behaviour", batch.logp_behaviour, n));
  SLUICE_TRY(check_tokens("advantages", batch.advantages, n));
  const bool decoupled = !batch.logp_proximal.empty();
  if (decoupled) SLUICE_TRY(check_tokens("logp_proximal", batch.logp_proximal, n));
  if (!batch.sample_weights.empty() && batch.sample_weights.size() != layout.trajectories()) {
    return wrong_size("sample_weights", batch.sample_weights.size(), layout.trajectories(),
                      "trajectories");
  }
  if (!batch.token_mask.empty() && batch.token_mask.size() != n) {
    return wrong_size("token_mask", batch.token_mask.size(), n, "response tokens");
  }

  const double lo = 1.0 - options.clip_low;
  const double hi = 1.0 + options.clip_high;
  const double inv_n = 1.0 / static_cast<double>(n);
  SurrogateResult out;
  out.grad_logp_new.resize(n);
  double objective = 0.0;  // sum of s w min(...); the loss is its negated mean
  std::size_t clipped = 0;
  std::size_t truncated = 0;
  std::size_t masked = 0;
  double sum_ratio = 0.0;
  double sum_kl = 0.0;
  double sum_w = 0.0;
  for (std::size_t b = 0; b < layout.trajectories(); ++b) {
    const double s = batch.sample_weights.empty() ? 1.0 : batch.sample_weights[b];
    for (std::size_t i = layout.offset(b); i < layout.offset(b + 1); ++i) {
      const double prox = decoupled ? batch.logp_proximal[i] : batch.logp_behaviour[i];
      const double log_ratio = static_cast<double>(batch.logp_new[i]) - prox;
      const double ratio = std::exp(log_ratio);
      double w = 1.0;
      if (decoupled) {
        w = std::exp(prox - batch.logp_behaviour[i]);
        if (w >= options.behaviour_cap) {
          w = options.behaviour_cap;
          ++truncated;
        }
      }
      const bool kept = batch.token_mask.empty() || batch.token_mask[i] != 0;
      sum_ratio += ratio;
      sum_kl += (ratio - 1.0) - log_ratio;
      sum_w += w;
      if (!kept) {  // no loss, no gradient, not counted as clipped
        ++masked;
        out.grad_logp_new[i] = 0.0f;
        continue;
      }
      const double a = batch.advantages[i];
      const double unclipped = ratio * a;
      const double clipped_term = std::clamp(ratio, lo, hi) * a;
      // min(unclipped, clipped): the clipped branch wins only when it is strictly smaller, which
      // happens exactly when the ratio left the trust region in the advantage's direction.
      const bool take_clipped = clipped_term < unclipped;
      objective += s * w * (take_clipped ? clipped_term : unclipped);
      out.grad_logp_new[i] = take_clipped ? 0.0f : static_cast<float>(-inv_n * s * w * unclipped);
      clipped += take_clipped ? 1 : 0;
    }
  }
  out.loss = -objective * inv_n;
  out.stats.tokens = n;
  out.stats.clip_fraction = static_cast<double>(clipped) * inv_n;
  out.stats.mean_ratio = sum_ratio * inv_n;
  out.stats.approx_kl = sum_kl * inv_n;
  out.stats.mean_behaviour_weight = sum_w * inv_n;
  out.stats.truncated_fraction = static_cast<double>(truncated) * inv_n;
  out.stats.masked_fraction = static_cast<double>(masked) * inv_n;
  return out;
}

core::Result<std::vector<std::uint8_t>> second_moment_mask(std::span<const float> log_w,
                                                           double threshold) {
  if (!(threshold >= 0.0) || !std::isfinite(threshold)) {
    return core::invalid_argument(
        fmt::format("second-moment mask: threshold is {}, must be finite and >= 0", threshold));
  }
  const std::size_t n = log_w.size();
  std::vector<double> m(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(log_w[i])) {
      return core::invalid_argument(
          fmt::format("second-moment mask: log_w[{}] is {}, not finite", i, log_w[i]));
    }
    m[i] = static_cast<double>(log_w[i]) * static_cast<double>(log_w[i]);
  }
  // Ascending by m, then by position: keeping a prefix of this order masks the largest first,
  // and among equal values the later token first.
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return m[a] != m[b] ? m[a] < m[b] : a < b; });
  // The mean of the k smallest is nondecreasing in k: keep the longest prefix whose sum is at
  // most threshold x its length (a sum, not a division, so that the edge is exact).
  std::vector<std::uint8_t> keep(n, 0);
  double sum = 0.0;
  for (std::size_t k = 0; k < n; ++k) {
    sum += m[order[k]];
    if (sum > threshold * static_cast<double>(k + 1)) break;
    keep[order[k]] = 1;
  }
  return keep;
}

core::Result<ValueLossResult> value_loss(std::span<const float> values,
                                         std::span<const float> returns,
                                         std::span<const float> old_values,
                                         const ValueLossOptions& options) {
  SLUICE_TRY(options.validate());
  const std::size_t n = values.size();
  if (n == 0) return core::invalid_argument("loss: the batch has no response tokens");
  SLUICE_TRY(check_tokens("returns", returns, n));
  const bool clip = options.clip > 0.0;
  if (clip) SLUICE_TRY(check_tokens("old_values", old_values, n));
  const double inv_n = 1.0 / static_cast<double>(n);
  ValueLossResult out;
  out.grad_values.resize(n);
  double sum = 0.0;
  std::size_t clipped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = values[i];
    const double r = returns[i];
    const double err = v - r;
    double loss_i = 0.5 * err * err;
    double grad_i = err;
    if (clip) {
      const double old = old_values[i];
      const double vc = old + std::clamp(v - old, -options.clip, options.clip);
      const double loss_c = 0.5 * (vc - r) * (vc - r);
      // The clipped term is larger only when V left old +- clip (otherwise vc == v): then V has
      // no influence on it and its gradient is 0.
      if (loss_c > loss_i) {
        loss_i = loss_c;
        grad_i = 0.0;
        ++clipped;
      }
    }
    sum += loss_i;
    out.grad_values[i] = static_cast<float>(grad_i * inv_n);
  }
  out.loss = sum * inv_n;
  out.clip_fraction = static_cast<double>(clipped) * inv_n;
  return out;
}

}  // namespace sluice::rl
