// The CPU rule of the benches that emulate links (src/bench/cpu_busy.hpp): a figure taken while the
// cores were more than 70% busy is not a figure, and no ratio is made of it.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "bench/cpu_busy.hpp"

using sluice::cli::cpu_window;
using sluice::cli::CpuSample;
using sluice::cli::CpuVerdict;
using sluice::cli::CpuWindow;
using sluice::cli::gated_ratio;
using sluice::cli::judge_cpu;
using sluice::cli::kCpuBusyLimit;

namespace {

// Samples one second apart from t = 100 s, each interval busy by the given share of 200 jiffies
// (two cores at 100 Hz).
std::vector<CpuSample> samples(const std::vector<double>& busy) {
  std::vector<CpuSample> out;
  CpuSample s;
  s.t_s = 100;
  out.push_back(s);
  for (double b : busy) {
    s.t_s += 1;
    s.times.total += 200;
    s.times.busy += static_cast<unsigned long long>(std::llround(b * 200));
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("the limit is 70% busy") {
  CHECK(kCpuBusyLimit == doctest::Approx(0.70));
}

TEST_CASE("a window's CPU: the mean over its intervals and the busiest one") {
  auto s = samples({0.10, 0.20, 0.90, 0.40, 0.10});
  // 101 to 104 s holds the starts of the intervals 101-102, 102-103 and 103-104.
  CpuWindow w = cpu_window(s, 101, 104);
  CHECK(w.intervals == 3);
  CHECK(w.mean == doctest::Approx(0.50));
  CHECK(w.peak == doctest::Approx(0.90));
  // An interval counts for the window it starts in: 102.6 to 104 leaves out the busy 102-103,
  // which began before the window opened.
  CpuWindow after = cpu_window(s, 102.6, 104);
  CHECK(after.intervals == 1);
  CHECK(after.peak == doctest::Approx(0.40));
  // A window shorter than one interval is judged by the interval that holds it.
  CpuWindow point = cpu_window(s, 100.2, 100.3);
  CHECK(point.intervals == 1);
  CHECK(point.peak == doctest::Approx(0.10));
  // Before the first sample: nothing measured.
  CHECK(cpu_window(s, 10, 20).intervals == 0);
}

TEST_CASE("a figure taken above 70% busy is refused, at or below it admitted") {
  auto busy = cpu_window(samples({0.30, 0.71, 0.30}), 100, 103);
  CpuVerdict v = judge_cpu(busy);
  CHECK_FALSE(v.admitted);
  CHECK(v.reason.find("71.0% busy at peak") != std::string::npos);
  CHECK(v.reason.find("above 70%") != std::string::npos);

  // The peak decides, not the mean: one busy interval in a quiet wave is enough.
  auto spike = cpu_window(samples({0.10, 0.10, 0.95, 0.10, 0.10}), 100, 105);
  CHECK(spike.mean < kCpuBusyLimit);
  CHECK_FALSE(judge_cpu(spike).admitted);

  auto quiet = cpu_window(samples({0.30, 0.70, 0.50}), 100, 103);
  CHECK(judge_cpu(quiet).admitted);
  CHECK(judge_cpu(quiet).reason.empty());

  // Nothing measured is not a figure either.
  CpuVerdict none = judge_cpu(CpuWindow{});
  CHECK_FALSE(none.admitted);
  CHECK(none.reason.find("not measured") != std::string::npos);
}

TEST_CASE("a ratio is made only of admitted figures") {
  const CpuVerdict ok{true, ""};
  const CpuVerdict hot = judge_cpu(cpu_window(samples({0.92}), 100, 101));
  REQUIRE_FALSE(hot.admitted);

  auto r = gated_ratio(12.0, ok, 3.0, ok, "trainer", "many");
  REQUIRE(r.ratio.has_value());
  CHECK(*r.ratio == doctest::Approx(4.0));
  CHECK(r.refusal.empty());

  auto refused = gated_ratio(12.0, ok, 3.0, hot, "trainer", "many");
  CHECK_FALSE(refused.ratio.has_value());
  CHECK(refused.refusal.rfind("refused: CPU 92.0% busy", 0) == 0);
  CHECK(refused.refusal.find("(many)") != std::string::npos);

  auto both = gated_ratio(12.0, hot, 3.0, hot, "trainer", "many");
  CHECK_FALSE(both.ratio.has_value());
  CHECK(both.refusal.find("(trainer)") != std::string::npos);
  CHECK(both.refusal.find("(many)") != std::string::npos);

  // A design that measured nothing gives no ratio either.
  auto empty = gated_ratio(12.0, ok, 0.0, ok, "trainer", "many");
  CHECK_FALSE(empty.ratio.has_value());
  CHECK(empty.refusal.rfind("refused: ", 0) == 0);
}

TEST_CASE("the sampler reads /proc/stat until stopped") {
  sluice::cli::CpuSampler sampler(20);
  // At least a few samples within a bounded wait.
  for (int i = 0; i < 100 && sampler.samples().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  sampler.stop();
  auto s = sampler.samples();
  REQUIRE(s.size() >= 3);
  CHECK(s.back().t_s >= s.front().t_s);
  CHECK(s.back().times.total >= s.front().times.total);
  // Stopped: no more samples.
  auto n = s.size();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(sampler.samples().size() == n);
}
