// A summary of response lengths (in tokens): the task's gold solutions (rl/task.hpp) and the
// simulated engine's drawn lengths (rollout/sim_engine.hpp) are summarized the same way.
//
// Thread safety: a plain value and a pure function.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sluice::rl {

struct LengthStats {
  std::uint64_t count = 0;
  double mean = 0.0;
  std::uint64_t p50 = 0;  // nearest-rank percentiles
  std::uint64_t p99 = 0;
  std::uint64_t max = 0;
  double tail_ratio() const {
    return p50 == 0 ? 0.0 : static_cast<double>(p99) / static_cast<double>(p50);
  }
};

// The summary of `lengths` (all zero when there are none).
inline LengthStats summarize_lengths(std::vector<std::uint64_t> lengths) {
  LengthStats s;
  const std::size_t n = lengths.size();
  if (n == 0) return s;
  std::sort(lengths.begin(), lengths.end());
  auto rank = [&](double q) {
    // Nearest rank: the smallest length with at least q of the lengths at or below it.
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(n)));
    return lengths[std::clamp<std::size_t>(r, 1, n) - 1];
  };
  double sum = 0.0;
  for (std::uint64_t l : lengths)
    sum += static_cast<double>(l);
  s.count = n;
  s.mean = sum / static_cast<double>(n);
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  s.max = lengths.back();
  return s;
}

}  // namespace sluice::rl
