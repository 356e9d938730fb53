#include "model/sampling.hpp"

#include <cmath>

namespace sluice::model {

std::uint64_t next_random(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double next_uniform(std::uint64_t& state) {
  return static_cast<double>(next_random(state) >> 11) * 0x1.0p-53;
}

core::Result<Sampled> sample(std::span<const float> logits, float temperature,
                             std::uint64_t& rng_state) {
  if (logits.empty()) return core::invalid_argument("sample: empty logits");
  if (!std::isfinite(temperature)) {
    return core::invalid_argument("sample: temperature must be finite");
  }
  const std::size_t n = logits.size();
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  const double mx = logits[best];
  // Greedy: log-probability at temperature 1.
  if (temperature <= 0.0f) {
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      sum += std::exp(static_cast<double>(logits[i]) - mx);
    return Sampled{static_cast<std::int32_t>(best), static_cast<float>(-std::log(sum))};
  }
  // Sums in double so that the cumulative walk below lands on the same token however the sum was
  // rounded; the scaled max is 0, so every term is at most 1.
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    sum += std::exp((static_cast<double>(logits[i]) - mx) * inv_t);
  const double target = next_uniform(rng_state) * sum;
  double acc = 0.0;
  std::size_t chosen = n - 1;
  for (std::size_t i = 0; i < n; ++i) {
    acc += std::exp((static_cast<double>(logits[i]) - mx) * inv_t);
    if (target < acc) {
      chosen = i;
      break;
    }
  }
  // Rounding could leave `chosen` on a zero-probability tail token; walk back to one that can be
  // drawn.
  while (chosen > 0 && std::exp((static_cast<double>(logits[chosen]) - mx) * inv_t) == 0.0)
    --chosen;
  const double logp = (static_cast<double>(logits[chosen]) - mx) * inv_t - std::log(sum);
  return Sampled{static_cast<std::int32_t>(chosen), static_cast<float>(logp)};
}

}  // namespace sluice::model
