#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/metrics.hpp"

using namespace sluice::core;

TEST_SUITE("core.metrics") {
  TEST_CASE("counters and gauges export as Prometheus text") {
    MetricsRegistry reg;
    reg.counter("sluice_chunks_total", "chunks read", {{"source", "relay-1"}}).inc(3);
    reg.counter("sluice_chunks_total", "chunks read", {{"source", "relay-1"}}).inc();
    reg.gauge("sluice_latest_version", "newest committed version").set(12);
    std::string text = reg.prometheus_text();
    CHECK(text.find("# TYPE sluice_chunks_total counter") != std::string::npos);
    CHECK(text.find("sluice_chunks_total{source=\"relay-1\"} 4\n") != std::string::npos);
    CHECK(text.find("# TYPE sluice_latest_version gauge") != std::string::npos);
    CHECK(text.find("sluice_latest_version 12\n") != std::string::npos);
  }

  TEST_CASE("histograms have cumulative buckets, sum and count") {
    MetricsRegistry reg;
    auto& h = reg.histogram("sluice_read_seconds", "read time", {0.1, 1.0});
    h.observe(0.05);
    h.observe(0.5);
    h.observe(5.0);
    std::string text = reg.prometheus_text();
    CHECK(text.find("sluice_read_seconds_bucket{le=\"0.1\"} 1\n") != std::string::npos);
    CHECK(text.find("sluice_read_seconds_bucket{le=\"1\"} 2\n") != std::string::npos);
    CHECK(text.find("sluice_read_seconds_bucket{le=\"+Inf\"} 3\n") != std::string::npos);
    CHECK(text.find("sluice_read_seconds_count 3\n") != std::string::npos);
    CHECK(text.find("sluice_read_seconds_sum 5.55\n") != std::string::npos);
  }

  TEST_CASE("a JSON line holds every metric and parses back") {
    MetricsRegistry reg;
    reg.counter("a_total", "a", {{"k", "v"}}).inc(2);
    reg.gauge("b", "b").set(-1.5);
    reg.histogram("c_seconds", "c", {1.0}).observe(0.5);
    std::string line = reg.json_line(1234);
    CHECK(line.find('\n') == std::string::npos);
    auto j = nlohmann::json::parse(line);
    CHECK(j["ts_ms"] == 1234);
    CHECK(j["metrics"]["a_total{k=\"v\"}"] == 2.0);
    CHECK(j["metrics"]["b"] == -1.5);
    CHECK(j["metrics"]["c_seconds"]["count"] == 1);
  }

  TEST_CASE("concurrent increments are all counted") {
    MetricsRegistry reg;
    auto& c = reg.counter("n_total", "n");
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < 10000; ++i)
          c.inc();
      });
    for (auto& t : ts)
      t.join();
    CHECK(c.value() == 40000.0);
  }

  TEST_CASE("a bad name or a kind clash is refused") {
    MetricsRegistry reg;
    CHECK_THROWS_AS(reg.counter("bad name", "x"), std::logic_error);
    reg.counter("x_total", "x");
    CHECK_THROWS_AS(reg.gauge("x_total", "x"), std::logic_error);
  }
}
