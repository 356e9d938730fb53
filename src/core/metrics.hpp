// Metrics: counters, gauges and histograms, counted where the work happens and exported in one
// place, as Prometheus text (exposition format 0.0.4) and as JSON lines (one object per snapshot).
//
// Thread safety: all metric operations and exports may run concurrently from any thread. Metric
// references returned by the registry stay valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::core {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the buckets, ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> cumulative;  // one per bound, then +Inf
    std::uint64_t count = 0;
    double sum = 0.0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // per bucket, not cumulative
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Buckets for durations in seconds, 100 us to about 100 s.
std::vector<double> seconds_buckets();

class MetricsRegistry {
 public:
  // Get-or-create. Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*); asking for an
  // existing name with another kind is a programming error (std::logic_error).
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help,
                       std::vector<double> bounds = seconds_buckets(), const Labels& labels = {});

  // Prometheus text exposition format.
  std::string prometheus_text() const;
  // One JSON object on one line (no trailing newline):
  // {"ts_ms":1700000000000,"metrics":{"name{label=\"v\"}":1.5,"hist":{"count":3,"sum":0.2,...}}}
  std::string json_line(std::int64_t ts_ms) const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, const std::string& help, Kind kind);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// The process's registry: every component of a role counts into it, and the role's /metrics
// endpoint (metrics_http.hpp) exports it.
MetricsRegistry& process_metrics();

}  // namespace sluice::core
