#include "core/lognormal.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "core/splitmix.hpp"

namespace sluice::core {

namespace {

// z of the standard normal's 99th percentile: p99 = median x exp(kZ99 x sigma).
constexpr double kZ99 = 2.3263478740408408;

// A uniform in the open interval (0, 1) from the top 53 bits.
double to_unit(std::uint64_t x) {
  return (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

Result<Lognormal> Lognormal::from_median_p99(double median, double p99, const char* what) {
  if (!(median > 0.0) || !std::isfinite(median)) {
    return invalid_argument(std::string(what) + ": the median must be positive and finite");
  }
  if (!(p99 >= median) || !std::isfinite(p99)) {
    return invalid_argument(std::string(what) + ": p99 must be finite and at least the median");
  }
  Lognormal l;
  l.mu_ = std::log(median);
  l.sigma_ = std::log(p99 / median) / kZ99;
  return l;
}

double Lognormal::draw(std::uint64_t key) const {
  const double u1 = to_unit(mix64(key + 1));
  const double u2 = to_unit(mix64(key + 2));
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return std::exp(mu_ + sigma_ * z);
}

double Lognormal::median() const {
  return std::exp(mu_);
}

}  // namespace sluice::core
