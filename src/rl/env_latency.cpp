#include "rl/env_latency.hpp"

#include <algorithm>
#include <cmath>

#include "core/checksum.hpp"
#include "core/splitmix.hpp"

namespace sluice::rl {

core::Status EnvLatencyConfig::validate() const {
  SLUICE_TRY(core::Lognormal::from_median_p99(median_ms, p99_ms, "env_latency").status());
  if (!(max_ms >= median_ms) || !std::isfinite(max_ms))
    return core::invalid_argument("env_latency: max_ms must be finite and at least median_ms");
  return {};
}

core::Result<EnvLatency> EnvLatency::create(const EnvLatencyConfig& config, std::uint64_t seed) {
  SLUICE_TRY(config.validate());
  SLUICE_ASSIGN_OR_RETURN(core::Lognormal l, core::Lognormal::from_median_p99(
                                                 config.median_ms, config.p99_ms, "env_latency"));
  return EnvLatency(l, config.max_ms, seed);
}

double EnvLatency::delay_ms(std::string_view episode_id, std::uint32_t turn) const {
  const std::uint64_t key =
      core::mix64(core::chunk_checksum(episode_id.data(), episode_id.size()) ^
                  core::mix64(seed_ + core::kSplitMixGamma) ^ core::mix64(turn));
  return std::min(lognormal_.draw(key), max_ms_);
}

}  // namespace sluice::rl
