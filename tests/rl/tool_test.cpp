// The agentic task's pieces: the calculator tool and the environment's latency.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "rl/calculator.hpp"
#include "rl/env_latency.hpp"

using namespace sluice;

TEST_SUITE("rl.tool") {
  TEST_CASE("the calculator takes products first, then sums left to right") {
    auto is = [](std::string_view e, std::int64_t want) {
      auto v = rl::calculate(e);
      REQUIRE_MESSAGE(v.is_ok(), v.status().to_string());
      CHECK_MESSAGE(*v == want, e);
    };
    is("7", 7);
    is("3+4*2", 11);
    is("10-4-3", 3);
    is("2*3*4-5+6*7", 61);
    is("5-9", -4);
    is("0*123456789+1", 1);
    is("999999999999999999+1", 1000000000000000000);
  }

  TEST_CASE("the calculator refuses bad input, saying what and where") {
    auto refused = [](std::string_view e, const std::string& says) {
      auto v = rl::calculate(e);
      REQUIRE_FALSE(v.is_ok());
      CHECK(v.status().code() == core::Code::kInvalidArgument);
      CHECK_MESSAGE(v.status().message().find(says) != std::string::npos, v.status().message());
    };
    refused("", "empty");
    refused("3+", "'+' at the end");
    refused("+3", "without an operand before it");
    refused("3**4", "without an operand before it");
    refused("3+x", "'x' at 2");
    refused("3=4", "'=' at 1");
    refused("1000000000000000001", "a number beyond");
    refused("1000000000*1000000000*10", "a product beyond");
    refused("1000000000000000000+1", "a sum beyond");
    refused(std::string(65, '1'), "65 characters");
  }

  TEST_CASE(
      "environment latency: a long tail at the configured median and p99, the same per turn") {
    rl::EnvLatencyConfig c;
    c.median_ms = 20;
    c.p99_ms = 2000;
    c.max_ms = 60000;
    auto lat = rl::EnvLatency::create(c, 7);
    REQUIRE(lat.is_ok());
    std::vector<double> d;
    for (int i = 0; i < 20000; ++i)
      d.push_back(lat->delay_ms("p" + std::to_string(i) + "/0", static_cast<std::uint32_t>(i % 5)));
    std::sort(d.begin(), d.end());
    CHECK(d[d.size() / 2] == doctest::Approx(20).epsilon(0.05));
    CHECK(d[d.size() * 99 / 100] == doctest::Approx(2000).epsilon(0.15));
    CHECK(d.front() > 0.0);
    CHECK(d.back() <= 60000.0);
    // A turn waits as long when it is run again; another turn or seed draws anew.
    CHECK(lat->delay_ms("p3/1", 2) == lat->delay_ms("p3/1", 2));
    CHECK(lat->delay_ms("p3/1", 2) != lat->delay_ms("p3/1", 3));
    CHECK(rl::EnvLatency::create(c, 8)->delay_ms("p3/1", 2) != lat->delay_ms("p3/1", 2));

    rl::EnvLatencyConfig bad = c;
    bad.p99_ms = 10;
    CHECK(rl::EnvLatency::create(bad, 1).status().message().find("p99") != std::string::npos);
    bad = c;
    bad.max_ms = 5;
    CHECK(rl::EnvLatency::create(bad, 1).status().message().find("max_ms") != std::string::npos);
    bad = c;
    bad.median_ms = 0;
    CHECK_FALSE(rl::EnvLatency::create(bad, 1).is_ok());
  }
}
