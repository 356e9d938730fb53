// How long an environment takes to answer a turn: a lognormal with a long tail (most tool calls
// answer in milliseconds, a few take seconds), truncated at a bound. Each draw comes from a key of
// the job's seed, the episode's id and the turn, so a turn re-run after a rollout died waits as
// long as it did the first time, and runs repeat.
//
// Thread safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "core/lognormal.hpp"
#include "core/status.hpp"

namespace sluice::rl {

struct EnvLatencyConfig {
  double median_ms = 20.0;  // > 0
  double p99_ms = 2000.0;   // >= median_ms
  double max_ms = 60000.0;  // draws above it wait this long; >= median_ms

  template <typename V>
  void describe(V& v) {
    v("median_ms", median_ms, "median time an environment takes to answer a turn (default 20)");
    v("p99_ms", p99_ms, "its 99th percentile (default 2000): the long tail");
    v("max_ms", max_ms, "no answer takes longer than this (default 60000)");
  }
  core::Status validate() const;
};

class EnvLatency {
 public:
  static core::Result<EnvLatency> create(const EnvLatencyConfig& config, std::uint64_t seed);
  // Turn `turn` of episode `episode_id`, in milliseconds, in (0, max_ms].
  double delay_ms(std::string_view episode_id, std::uint32_t turn) const;

 private:
  EnvLatency(core::Lognormal l, double max_ms, std::uint64_t seed)
      : lognormal_(l), max_ms_(max_ms), seed_(seed) {}
  core::Lognormal lognormal_;
  double max_ms_ = 0.0;
  std::uint64_t seed_ = 0;
};

}  // namespace sluice::rl
