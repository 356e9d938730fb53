#include "core/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace sluice::core {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  buckets_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
  for (std::size_t i = 0; i <= bounds_.size(); ++i)
    buckets_[i].store(0);
}

void Histogram::observe(double v) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  auto idx = static_cast<std::size_t>(it - bounds_.begin());
  buckets_[idx].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::uint64_t run = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    run += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(run);
  }
  s.count = run;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> seconds_buckets() {
  std::vector<double> b;
  for (double v = 1e-4; v < 200.0; v *= 2.5)
    b.push_back(v);
  return b;
}

namespace {

bool valid_name(const std::string& n) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string label_text(const Labels& labels, const std::string& extra_key = {},
                       const std::string& extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += fmt::format("{}{}=\"{}\"", first ? "" : ",", k, escape_label(v));
    first = false;
  }
  if (!extra_key.empty())
    out += fmt::format("{}{}=\"{}\"", first ? "" : ",", extra_key, extra_value);
  return out + "}";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

}  // namespace

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help,
                                                 Kind kind) {
  if (!valid_name(name)) throw std::logic_error("metrics: invalid metric name '" + name + "'");
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  } else if (it->second.kind != kind) {
    throw std::logic_error("metrics: '" + name + "' already registered with another kind");
  }
  return it->second;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Kind::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                              const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Kind::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Kind::kHistogram).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return *slot;
}

std::string MetricsRegistry::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, c] : f.counters)
      out += fmt::format("{}{} {}\n", name, label_text(labels), number(c->value()));
    for (const auto& [labels, g] : f.gauges)
      out += fmt::format("{}{} {}\n", name, label_text(labels), number(g->value()));
    for (const auto& [labels, h] : f.histograms) {
      auto s = h->snapshot();
      for (std::size_t i = 0; i < s.bounds.size(); ++i)
        out += fmt::format("{}_bucket{} {}\n", name, label_text(labels, "le", number(s.bounds[i])),
                           s.cumulative[i]);
      out += fmt::format("{}_bucket{} {}\n", name, label_text(labels, "le", "+Inf"), s.count);
      out += fmt::format("{}_sum{} {}\n", name, label_text(labels), number(s.sum));
      out += fmt::format("{}_count{} {}\n", name, label_text(labels), s.count);
    }
  }
  return out;
}

std::string MetricsRegistry::json_line(std::int64_t ts_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  for (const auto& [name, f] : families_) {
    for (const auto& [labels, c] : f.counters)
      m[name + label_text(labels)] = c->value();
    for (const auto& [labels, g] : f.gauges)
      m[name + label_text(labels)] = g->value();
    for (const auto& [labels, h] : f.histograms) {
      auto s = h->snapshot();
      nlohmann::ordered_json hj;
      hj["count"] = s.count;
      hj["sum"] = s.sum;
      hj["bounds"] = s.bounds;
      hj["cumulative"] = s.cumulative;
      m[name + label_text(labels)] = std::move(hj);
    }
  }
  nlohmann::ordered_json line;
  line["ts_ms"] = ts_ms;
  line["metrics"] = std::move(m);
  return line.dump();
}

MetricsRegistry& process_metrics() {
  static MetricsRegistry registry;
  return registry;
}

}  // namespace sluice::core
