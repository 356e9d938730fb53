#include "bench/cpu_busy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

namespace sluice::cli {

CpuTimes read_cpu_times() {
  CpuTimes t;
  std::ifstream f("/proc/stat");
  std::string line;
  if (!std::getline(f, line) || line.rfind("cpu ", 0) != 0) return t;
  std::istringstream in(line.substr(4));
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  unsigned long long v[8] = {};
  for (auto& x : v)
    if (!(in >> x)) break;
  for (auto x : v)
    t.total += x;
  t.busy = t.total - v[3] - v[4];
  return t;
}

double cpu_busy_fraction(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total) return 0.0;
  return static_cast<double>(after.busy - before.busy) /
         static_cast<double>(after.total - before.total);
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

CpuWindow cpu_window(const std::vector<CpuSample>& samples, double from_s, double to_s) {
  CpuWindow w;
  w.from_s = from_s;
  w.to_s = std::max(from_s, to_s);
  unsigned long long busy = 0, total = 0;
  auto add = [&](const CpuSample& a, const CpuSample& b) {
    if (b.times.total <= a.times.total || b.times.busy < a.times.busy) return;  // no jiffies
    ++w.intervals;
    busy += b.times.busy - a.times.busy;
    total += b.times.total - a.times.total;
    w.peak = std::max(w.peak, cpu_busy_fraction(a.times, b.times));
  };
  for (std::size_t i = 0; i + 1 < samples.size(); ++i) {
    if (samples[i].t_s >= w.from_s && samples[i].t_s < w.to_s) add(samples[i], samples[i + 1]);
  }
  if (w.intervals == 0) {
    // A window shorter than an interval: the intervals it overlaps.
    for (std::size_t i = 0; i + 1 < samples.size(); ++i) {
      if (samples[i + 1].t_s >= w.from_s && samples[i].t_s <= w.to_s)
        add(samples[i], samples[i + 1]);
    }
  }
  if (total > 0) w.mean = static_cast<double>(busy) / static_cast<double>(total);
  return w;
}

CpuVerdict judge_cpu(const CpuWindow& w, double limit) {
  if (w.intervals == 0) {
    return {false, "the CPU was not measured over the figure's window"};
  }
  if (w.peak > limit) {
    return {false, fmt::format("CPU {:.1f}% busy at peak (mean {:.1f}%), above {:.0f}%",
                               100.0 * w.peak, 100.0 * w.mean, 100.0 * limit)};
  }
  return {true, ""};
}

GatedRatio gated_ratio(double numerator, const CpuVerdict& numerator_cpu, double denominator,
                       const CpuVerdict& denominator_cpu, const std::string& numerator_name,
                       const std::string& denominator_name) {
  GatedRatio r;
  std::vector<std::string> why;
  if (!numerator_cpu.admitted) why.push_back(numerator_cpu.reason + " (" + numerator_name + ")");
  if (!denominator_cpu.admitted) {
    why.push_back(denominator_cpu.reason + " (" + denominator_name + ")");
  }
  if (!why.empty()) {
    r.refusal = "refused: " + why[0] + (why.size() > 1 ? "; " + why[1] : "");
    return r;
  }
  if (!(denominator > 0) || !(numerator > 0)) {
    r.refusal = "refused: no figure to divide (" + numerator_name + " or " + denominator_name +
                " measured nothing)";
    return r;
  }
  r.ratio = numerator / denominator;
  return r;
}

namespace {

constexpr std::size_t kMaxSamples = 100000;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

CpuSampler::CpuSampler(unsigned period_ms) : period_ms_(std::max(period_ms, 10u)) {
  samples_.push_back({unix_now(), read_cpu_times()});
  thread_ = std::thread([this] { run(); });
}

CpuSampler::~CpuSampler() {
  stop();
}

void CpuSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<CpuSample> CpuSampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

void CpuSampler::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // A timed wait: a sample every period, or stop() at once.
    cv_.wait_for(lock, std::chrono::milliseconds(period_ms_), [this] { return stopping_; });
    // Bounded: a day of samples at 1 s, hours at 200 ms; a bench that runs longer keeps its first.
    if (samples_.size() < kMaxSamples) samples_.push_back({unix_now(), read_cpu_times()});
  }
}

}  // namespace sluice::cli
