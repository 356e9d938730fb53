#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "rl/task.hpp"

using namespace sluice::rl;

namespace {

ArithmeticTask make_task(TaskConfig cfg = {}) {
  auto t = ArithmeticTask::create(cfg);
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

std::vector<Token> tokens(const std::string& text) {
  return Tokenizer::encode(text).value();
}

Prompt prompt_of(const std::string& text) {
  return ArithmeticTask::parse_prompt(tokens("^" + text)).value();
}

}  // namespace

TEST_SUITE("rl.task") {
  TEST_CASE("a prompt, its gold solution and its tokens") {
    ArithmeticTask task = make_task();
    Prompt p = prompt_of("7+3+8+5=");
    CHECK(p.terms == std::vector<int>{7, 3, 8, 5});
    CHECK(p.answer() == 23);
    CHECK(p.text == "7+3+8+5=");
    CHECK(Tokenizer::decode(p.tokens) == "^7+3+8+5=");
    CHECK(Tokenizer::decode(task.solution(p)) == "10,18,23$");
    CHECK(Tokenizer::decode(task.solution(prompt_of("4+0="))) == "4$");
  }

  TEST_CASE("prompts are deterministic by seed and index") {
    ArithmeticTask a = make_task();
    ArithmeticTask b = make_task();
    TaskConfig other;
    other.seed = 2;
    ArithmeticTask c = make_task(other);
    int differ = 0;
    for (std::uint64_t i = 0; i < 300; ++i) {
      Prompt pa = a.train_prompt(i).value();
      Prompt pb = b.train_prompt(i).value();
      CHECK(pa.text == pb.text);
      CHECK(pa.tokens == pb.tokens);
      CHECK(pa.id == "train-" + std::to_string(i));
      CHECK(pa.terms.size() >= 2);
      CHECK(pa.terms.size() <= 16);
      differ += pa.text != c.train_prompt(i).value().text ? 1 : 0;
      CHECK(a.heldout_prompt(i).value().text == b.heldout_prompt(i).value().text);
    }
    // Short prompts repeat (there are only 100 of two terms), long ones almost never do.
    CHECK(differ > 150);
  }

  TEST_CASE("held-out prompts never come out of the training stream, for any seed") {
    ArithmeticTask task = make_task();
    std::set<std::string> heldout;
    for (std::uint64_t i = 0; i < 2000; ++i) {
      Prompt p = task.heldout_prompt(i).value();
      CHECK(task.is_heldout(p.text));
      CHECK(p.id == "heldout-" + std::to_string(i));
      heldout.insert(p.text);
    }
    // Enough distinct held-out prompts to measure accuracy on, short ones among them.
    CHECK(heldout.size() > 500);
    std::size_t two_terms = 0;
    for (const auto& t : heldout)
      two_terms += std::count(t.begin(), t.end(), '+') == 1 ? 1 : 0;
    CHECK(two_terms > 0);

    for (std::uint64_t seed : {1, 7}) {
      TaskConfig cfg;
      cfg.seed = seed;
      ArithmeticTask train = make_task(cfg);
      std::size_t overlap = 0;
      std::set<std::string> seen;
      for (std::uint64_t i = 0; i < 20000; ++i) {
        Prompt p = train.train_prompt(i).value();
        overlap += heldout.count(p.text);
        seen.insert(p.text);
      }
      CHECK(overlap == 0);
      CHECK(seen.size() > 5000);
    }
  }

  TEST_CASE("the reward: right, wrong and malformed responses") {
    ArithmeticTask task = make_task();
    Prompt p = prompt_of("7+3+8+5=");
    auto reward = [&](const std::string& response) { return task.reward(p, tokens(response)); };
    auto correct = [&](const std::string& response) { return task.correct(p, tokens(response)); };

    CHECK(reward("10,18,23$") == 1.0);
    CHECK(correct("10,18,23$"));
    CHECK(task.reward(p, task.solution(p)) == 1.0);
    // The final answer decides; a wrong running sum with the right answer still scores.
    CHECK(reward("10,17,23$") == 1.0);

    CHECK(reward("10,18,24$") == 0.0);  // wrong answer
    CHECK_FALSE(correct("10,18,24$"));
    CHECK(reward("10,18,23") == 0.0);     // no EOS
    CHECK(reward("10,18,23$$") == 0.0);   // EOS twice
    CHECK(reward("10,18,23$1") == 0.0);   // tokens after EOS
    CHECK(reward("23$") == 0.0);          // the running sums skipped
    CHECK(reward("10,18,5,23$") == 0.0);  // one number too many
    CHECK(reward("10,18,,23$") == 0.0);
    CHECK(reward("10,18,023$") == 0.0);  // a leading zero
    CHECK(reward("10,18,23,$") == 0.0);
    CHECK(reward("10+18,23$") == 0.0);
    CHECK(reward("10,18,23_$") == 0.0);  // PAD inside
    CHECK(reward("$") == 0.0);
    CHECK(reward("") == 0.0);
    CHECK_FALSE(correct("10,18,23"));

    Prompt zero = prompt_of("0+0=");
    CHECK(task.reward(zero, tokens("0$")) == 1.0);
    CHECK(task.reward(zero, tokens("00$")) == 0.0);
  }

  TEST_CASE("partial credit counts right running sums of a wrong but well-formed answer") {
    TaskConfig cfg;
    cfg.partial_credit = 0.3;
    ArithmeticTask task = make_task(cfg);
    Prompt p = prompt_of("7+3+8+5=");
    CHECK(task.reward(p, tokens("10,18,23$")) == 1.0);
    CHECK(task.reward(p, tokens("10,18,24$")) == doctest::Approx(0.3 * 2.0 / 3.0));
    CHECK(task.reward(p, tokens("11,18,24$")) == doctest::Approx(0.3 * 1.0 / 3.0));
    CHECK(task.reward(p, tokens("10,18$")) == 0.0);     // malformed: no credit
    CHECK_FALSE(task.correct(p, tokens("10,18,24$")));  // accuracy counts only full answers
  }

  TEST_CASE("a prompt parses back from its tokens, and malformed ones are errors") {
    ArithmeticTask task = make_task();
    for (std::uint64_t i = 0; i < 50; ++i) {
      Prompt p = task.train_prompt(i).value();
      auto back = ArithmeticTask::parse_prompt(p.tokens);
      REQUIRE(back.is_ok());
      CHECK(back->terms == p.terms);
      CHECK(back->text == p.text);
    }
    for (std::string bad : {"7+3=", "^7+3", "^7+=", "^+3=", "^7=", "^7+03=", "^7-3=", "^="}) {
      auto r = ArithmeticTask::parse_prompt(tokens(bad));
      CHECK_MESSAGE(!r.is_ok(), bad);
      CHECK(r.status().code() == sluice::core::Code::kInvalidArgument);
    }
  }

  TEST_CASE("the default response lengths have a long tail and fit the context") {
    ArithmeticTask task = make_task();
    auto stats = task.response_lengths(10000);
    REQUIRE(stats.is_ok());
    MESSAGE("response tokens over 10000 prompts: p50 " << stats->p50 << ", p99 " << stats->p99
                                                       << ", max " << stats->max << ", mean "
                                                       << stats->mean);
    CHECK(stats->count == 10000);
    CHECK(stats->p50 >= 2);
    CHECK(stats->tail_ratio() >= 4.0);
    CHECK(stats->tail_ratio() <= 12.0);
    CHECK(stats->max <= task.max_response_tokens());
    CHECK(task.max_prompt_tokens() + task.max_response_tokens() <= 96);
    for (std::uint64_t i = 0; i < 2000; ++i) {
      Prompt p = task.train_prompt(i).value();
      CHECK(p.tokens.size() + task.solution(p).size() <= 96);
    }
  }

  TEST_CASE("a configuration that cannot work is refused with a clear error") {
    TaskConfig cfg;
    cfg.max_terms = 30;
    cfg.p99_terms = 25;
    auto r = ArithmeticTask::create(cfg);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("context_tokens is 96") != std::string::npos);
    cfg.context_tokens = 200;
    CHECK(ArithmeticTask::create(cfg).is_ok());

    TaskConfig one;
    one.min_terms = 1;
    CHECK(ArithmeticTask::create(one).status().message().find("min_terms") != std::string::npos);

    TaskConfig none;
    none.heldout_fraction = 0.0;
    ArithmeticTask no_split = make_task(none);
    CHECK(no_split.heldout_prompt(0).status().code() == sluice::core::Code::kFailedPrecondition);
    CHECK(no_split.train_prompt(0).is_ok());
  }

  TEST_CASE("the task configuration parses strictly from JSON") {
    namespace config = sluice::core::config;
    TaskConfig cfg;
    auto doc = config::Json::parse(R"({"seed": 5, "p99_terms": 12.5, "max_terms": 14})");
    REQUIRE(config::parse(doc, cfg).is_ok());
    CHECK(cfg.seed == 5);
    CHECK(cfg.p99_terms == 12.5);
    CHECK(cfg.max_terms == 14);
    CHECK(config::to_json(cfg)["heldout_fraction"] == 0.1);

    TaskConfig bad;
    auto unknown = config::parse(config::Json::parse(R"({"max_term": 3})"), bad);
    CHECK(unknown.message().find("unknown key 'max_term'") != std::string::npos);
    auto range = config::parse(config::Json::parse(R"({"heldout_fraction": 0.9})"), bad);
    CHECK(range.message().find("heldout_fraction") != std::string::npos);
  }
}
