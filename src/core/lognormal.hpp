// A lognormal given by its median and 99th percentile, drawn from a 64-bit key: the same key gives
// the same draw on every platform (Box-Muller over two SplitMix64 mixes of the key, not <random>,
// whose distributions are implementation-defined). Simulated response lengths and environment
// latencies are drawn so, each from a key of its own (a trajectory's id, an episode's turn).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>

#include "core/status.hpp"

namespace sluice::core {

class Lognormal {
 public:
  // median > 0, p99 >= median, both finite; invalid_argument naming `what` otherwise.
  static Result<Lognormal> from_median_p99(double median, double p99, const char* what);
  double draw(std::uint64_t key) const;
  double median() const;

 private:
  double mu_ = 0.0;     // log of the median
  double sigma_ = 0.0;  // log(p99 / median) / z_0.99
};

}  // namespace sluice::core
