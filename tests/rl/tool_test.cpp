// The agentic task's pieces: the calculator tool, the environment's latency and the tool form of
// the arithmetic task.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "rl/calculator.hpp"
#include "rl/env_latency.hpp"
#include "rl/task.hpp"

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

  TEST_CASE("the calculator refuses 19- and 20-digit operands without overflowing") {
    auto refused = [](std::string_view e, const rl::CalculatorLimits& l, const std::string& says) {
      auto v = rl::calculate(e, l);
      REQUIRE_MESSAGE(!v.is_ok(), std::string(e));
      CHECK_MESSAGE(v.status().message().find(says) != std::string::npos, v.status().message());
    };
    const rl::CalculatorLimits plain;
    // The cap itself is a number; one digit more is refused, never wrapped past int64.
    CHECK(*rl::calculate("1000000000000000000") == 1000000000000000000);
    refused("9999999999999999999", plain, "a number beyond");
    refused("99999999999999999999", plain, "a number beyond");
    refused("1+9999999999999999999", plain, "a number beyond");
    // A cap as large as int64 holds: its bound is exact, and sums and products past it refused.
    rl::CalculatorLimits wide;
    wide.max_chars = 64;
    wide.max_abs = 9223372036854775807;
    CHECK(*rl::calculate("9223372036854775807", wide) == 9223372036854775807);
    CHECK(*rl::calculate("0-9223372036854775807", wide) == -9223372036854775807);
    refused("9223372036854775808", wide, "a number beyond");
    refused("92233720368547758070", wide, "a number beyond");
    refused("99999999999999999999", wide, "a number beyond");
    refused("9223372036854775807+1", wide, "a sum beyond");
    refused("0-9223372036854775807-9223372036854775807", wide, "a sum beyond");
    refused("4611686018427387904*2", wide, "a product beyond");
    refused("3037000500*3037000500", wide, "a product beyond");
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

namespace {

sluice::rl::ArithmeticTask tool_task(std::uint32_t max_operand = 99) {
  sluice::rl::TaskConfig c;
  c.tool = "calc";
  c.max_operand = max_operand;
  c.max_terms = 6;
  c.median_terms = 3;
  c.p99_terms = 6;
  auto t = sluice::rl::ArithmeticTask::create(c);
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  return std::move(t).value();
}

std::vector<sluice::rl::Token> toks(const std::string& text) {
  return sluice::rl::Tokenizer::encode(text).value();
}

}  // namespace

TEST_SUITE("rl.tool_task") {
  using sluice::rl::ArithmeticTask;
  using sluice::rl::Tokenizer;

  TEST_CASE("the calculator answers a call with the value and a space, or ': ' when it fails") {
    ArithmeticTask task = tool_task();
    CHECK(Tokenizer::decode(task.tool_answer(toks("37+48+95=")).value()) == "180 ");
    // Only the expression since the environment's last answer counts.
    CHECK(Tokenizer::decode(task.tool_answer(toks("9+9=18 2*3-10=")).value()) == "-4 ");
    CHECK(Tokenizer::decode(task.tool_answer(toks("3+=")).value()) == ": ");
    CHECK(Tokenizer::decode(task.tool_answer(toks("=")).value()) == ": ");
    // Not a call: refused.
    CHECK(task.tool_answer(toks("37+48")).status().code() == sluice::core::Code::kInvalidArgument);
    CHECK(task.ends_with_call(toks("1+2=")));
    CHECK(!task.ends_with_call(toks("1+2= 3")));
  }

  TEST_CASE("the tool form's reward: a right answer after a call, running sums without one") {
    ArithmeticTask task = tool_task();
    auto p = ArithmeticTask::parse_prompt(toks("^37+48+95=")).value();
    CHECK(task.reward(p, toks("37+48+95=180 180$")) == 1.0);
    CHECK(task.correct(p, toks("37+48+95=180 180$")));
    CHECK(task.reward(p, toks("37+48+95=180 181$")) == 0.0);
    CHECK(task.reward(p, toks("37+48+95=180 180")) == 0.0);    // no EOS
    CHECK(task.reward(p, toks("37+48+95=")) == 0.0);           // a call never answered
    CHECK(task.reward(p, toks("37+48+95=180 0180$")) == 0.0);  // a leading zero
    CHECK(task.reward(p, toks("85,180$")) == 1.0);             // no call: the running sums
    CHECK(task.reward(p, toks("180$")) == 0.0);                // no call, not the running sums
    // The same tokens in the single-turn task are malformed.
    auto plain = ArithmeticTask::create({}).value();
    CHECK(plain.reward(p, toks("37+48+95=180 180$")) == 0.0);
  }

  TEST_CASE("the tool form's gold solution: the model's tokens and the environment's, masked") {
    ArithmeticTask task = tool_task();
    std::size_t demos = 0;
    for (std::uint64_t i = 0; i < 400; ++i) {
      auto p = task.train_prompt(i).value();
      auto s = task.tool_solution(p);
      REQUIRE(s.mask.size() == s.tokens.size());
      CHECK(task.reward(p, s.tokens) == 1.0);
      CHECK(s.tokens.size() <= task.max_response_tokens());
      // The masked-out tokens are exactly what the calculator answers.
      std::vector<sluice::rl::Token> env;
      for (std::size_t k = 0; k < s.tokens.size(); ++k)
        if (s.mask[k] == 0) env.push_back(s.tokens[k]);
      CHECK(Tokenizer::decode(env) == std::to_string(p.answer()) + " ");
      demos += task.demo_uses_tool(i) ? 1 : 0;
    }
    // tool_demos 0.25 of 400.
    CHECK(demos > 70);
    CHECK(demos < 130);
  }

  TEST_CASE("the tool form's settings are checked") {
    sluice::rl::TaskConfig c;
    c.tool = "abacus";
    CHECK(ArithmeticTask::create(c).status().message().find("tool") != std::string::npos);
    c.tool = "calc";
    c.max_turns = 1;
    CHECK(ArithmeticTask::create(c).status().message().find("max_turns") != std::string::npos);
    c.max_turns = 3;
    c.tool_demos = 1.5;
    CHECK(!ArithmeticTask::create(c).is_ok());
  }
}
