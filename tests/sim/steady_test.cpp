// Steady throughput (sim/steady.hpp): the window leaves out the first and last share of the
// steps, is smaller than the job, and its rate counts only the steps inside it.
#include <doctest/doctest.h>

#include <cmath>

#include "sim/steady.hpp"

using sluice::sim::steady_window;
using sluice::sim::StepEnd;

TEST_CASE("the steady window leaves out a tenth of the steps at each end") {
  // A slow start (10 s), eight steps a second apart, a slow end (20 s), 100 tokens each.
  std::vector<StepEnd> steps;
  double t = 10;
  steps.push_back({t, 100});
  for (int i = 0; i < 8; ++i)
    steps.push_back({t += 1, 100});
  steps.push_back({t += 20, 100});
  const auto w = steady_window(steps, 0.1);
  CHECK(w.steps == 8);
  CHECK(w.from_s == doctest::Approx(10));
  CHECK(w.to_s == doctest::Approx(18));
  CHECK(w.tokens_per_s == doctest::Approx(100));
  CHECK(std::isfinite(w.tokens_per_s));
  CHECK(w.to_s - w.from_s < steps.back().t);
}

TEST_CASE("too few steps give no steady figure rather than a wrong one") {
  CHECK(steady_window({}, 0.1).tokens_per_s == 0);
  CHECK(steady_window({{1.0, 10}}, 0.45).steps == 1);
  CHECK(steady_window({{1.0, 10}, {2.0, 10}}, 0.0).tokens_per_s == doctest::Approx(10));
}
