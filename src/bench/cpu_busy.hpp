// How busy this machine's cores were while a benchmark ran, and the rule that keeps a benchmark
// that emulates links (tc on network namespaces) from reporting a figure its CPUs paced: a figure
// taken while all cores together were more than kCpuBusyLimit busy is not a figure.
//
// Busy means user + nice + system + irq + softirq + steal over all jiffies, summed across cores
// (/proc/stat's "cpu" line); idle and iowait are not busy.
//
// Thread safety: the free functions are pure or read /proc only. CpuSampler samples on a thread of
// its own; samples() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::cli {

// The busiest that all cores together may be while a link-bound figure is taken. Above it the
// cores, not the emulated links, may have set the pace (the elastic bench's joiners took 2-5x
// longer than their links allow at 91-100% busy).
inline constexpr double kCpuBusyLimit = 0.70;

// The machine's CPU time so far (all cores, /proc/stat).
struct CpuTimes {
  unsigned long long busy = 0;   // jiffies not idle (user, nice, system, irq, softirq, steal)
  unsigned long long total = 0;  // all jiffies
};
CpuTimes read_cpu_times();
// The busy fraction of all cores between two readings (0 when nothing was counted).
double cpu_busy_fraction(const CpuTimes& before, const CpuTimes& after);
// /proc/loadavg's first three fields ("0.52 1.10 1.83"), or "unknown".
std::string load_average();

// One reading, at `t_s` seconds on the sampler's clock (seconds since the Unix epoch).
struct CpuSample {
  double t_s = 0;
  CpuTimes times;
};

// Busy over a window, from the intervals between consecutive samples that lie inside it.
struct CpuWindow {
  double from_s = 0, to_s = 0;  // the window asked for (Unix seconds)
  std::size_t intervals = 0;    // sampling intervals inside it (0: nothing measured)
  double mean = 0;              // busy over the whole window (jiffies busy / jiffies)
  double peak = 0;              // the busiest single interval
};
// The intervals [samples[i], samples[i+1]] that start in [from_s, to_s), samples sorted by time:
// what ran before the window (a start-up that ends where the window opens) is left out. A window
// that holds no interval's start is judged by the intervals it overlaps.
CpuWindow cpu_window(const std::vector<CpuSample>& samples, double from_s, double to_s);

// Whether a figure taken over `w` counts: measured (at least one interval) and no interval above
// `limit`. The reason when it does not ("CPU 83.0% busy at peak (mean 71.2%), above 70%").
struct CpuVerdict {
  bool admitted = false;
  std::string reason;  // empty when admitted
};
CpuVerdict judge_cpu(const CpuWindow& w, double limit = kCpuBusyLimit);

// A ratio of two figures, or why there is none: both figures must be admitted.
struct GatedRatio {
  std::optional<double> ratio;  // set when both figures count
  std::string refusal;          // "refused: CPU 83.0% busy at peak ... (many)" otherwise
};
GatedRatio gated_ratio(double numerator, const CpuVerdict& numerator_cpu, double denominator,
                       const CpuVerdict& denominator_cpu, const std::string& numerator_name,
                       const std::string& denominator_name);

// Samples read_cpu_times() every `period_ms` on its own thread from construction until stop() or
// destruction.
class CpuSampler {
 public:
  explicit CpuSampler(unsigned period_ms = 200);
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;

  void stop();
  // The samples so far (one taken at construction).
  std::vector<CpuSample> samples() const;

 private:
  void run();
  const unsigned period_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<CpuSample> samples_;
  std::thread thread_;
};

}  // namespace sluice::cli
