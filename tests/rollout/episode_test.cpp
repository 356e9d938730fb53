// Episodes in the engines: a model turn that ends with a call leaves the engine, the environment's
// tokens are appended, and the next turn goes on, with its KV cache or re-prefilled. What the
// actor receives holds the sampled ids and the environment's ids exactly, each model token with
// the version that sampled it.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "../model/test_util.hpp"
#include "model/blas.hpp"
#include "model/gpt.hpp"
#include "rl/trajectory.hpp"
#include "rollout/model_engine.hpp"
#include "rollout/sim_engine.hpp"

using namespace sluice;
using rollout::SequenceState;

namespace {

// The model tests' tiny shape, with the task's vocabulary and room for a few turns.
model::GptConfig tiny_gpt(std::uint64_t init_seed) {
  model::GptConfig c = model::testing::tiny_config();
  c.vocab = 20;
  c.context = 64;
  c.init_seed = init_seed;
  return c;
}

std::unique_ptr<model::Gpt> make_gpt(std::uint64_t seed) {
  auto r = model::Gpt::create(tiny_gpt(seed));
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

std::vector<std::uint8_t> bytes_of(const model::Gpt& m) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(m.params());
  return {p, p + m.param_bytes()};
}

std::unique_ptr<rollout::ModelEngine> make_engine() {
  model::set_blas_threads(1);
  rollout::ModelEngineConfig c;
  c.gpt = tiny_gpt(7);
  c.max_sequences = 4;
  c.temperature = 1.0;
  auto e = rollout::ModelEngine::create(c);
  REQUIRE(e.is_ok());
  return std::move(e).value();
}

SequenceState episode(std::int32_t call_token) {
  SequenceState s;
  s.trajectory_id = "p7/0";
  s.prompt_id = "p7";
  s.prompt_tokens = {1, 5, 13, 6, 16};  // "^2+3="
  s.max_new_tokens = 40;
  s.call_token = call_token;
  return s;
}

// Steps until the one sequence leaves the engine; also the prefill tokens of its first step.
SequenceState run_turn(rollout::Engine& e, SequenceState s, std::uint64_t* prefilled = nullptr) {
  REQUIRE(e.admit(std::move(s)).is_ok());
  bool first = true;
  for (int i = 0; i < 100; ++i) {
    rollout::StepResult r = e.step();
    if (first && prefilled) *prefilled = r.prefill_tokens;
    first = false;
    if (!r.finished.empty()) return std::move(r.finished.front());
  }
  FAIL("the sequence never left the engine");
  return {};
}

// The log-prob `m` gives token `t` after `prefix` at temperature 1.
double logprob_of(model::Gpt& m, const std::vector<std::int32_t>& prefix, std::int32_t t) {
  std::vector<float> logits;
  REQUIRE(m.logits_without_cache(prefix, logits).is_ok());
  double mx = logits[0];
  for (float x : logits)
    mx = std::max(mx, static_cast<double>(x));
  double z = 0;
  for (float x : logits)
    z += std::exp(static_cast<double>(x) - mx);
  return static_cast<double>(logits[static_cast<std::size_t>(t)]) - mx - std::log(z);
}

// The first token an engine on `weights` (version 1) samples for the test's sequence.
std::int32_t first_sampled(const model::Gpt& weights) {
  auto e = make_engine();
  REQUIRE(e->load_weights(1, bytes_of(weights).data(), weights.param_bytes(), false).is_ok());
  SequenceState plain = episode(0);
  plain.call_token = -1;
  return run_turn(*e, plain).generated.front();
}

const std::vector<std::int32_t> kAnswer{7, 10, 3, 19};  // "4 70 " as the environment's ids

}  // namespace

TEST_SUITE("rollout.episode") {
  TEST_CASE("token exactness: sampled ids and the environment's, across a weight update") {
    auto v1 = make_gpt(7), v2 = make_gpt(8);
    // The token the engine samples first for this sequence is made its call token, so the first
    // turn is one token long and ends with a call.
    const std::int32_t first = first_sampled(*v1);
    auto e = make_engine();
    REQUIRE(e->load_weights(1, bytes_of(*v1).data(), v1->param_bytes(), false).is_ok());
    SequenceState s = run_turn(*e, episode(first));
    REQUIRE(s.awaits_environment());
    CHECK(s.generated == std::vector<std::int32_t>{first});
    CHECK(s.token_versions == std::vector<std::uint64_t>{1});
    REQUIRE(s.kv.has_value());  // the cache left with it
    // What the engine sampled, and what the environment answered, in order.
    std::vector<std::int32_t> expect = s.generated;
    rollout::record_environment(s, kAnswer);
    expect.insert(expect.end(), kAnswer.begin(), kAnswer.end());
    // The weights change while the environment answers: the cache is of the old ones.
    REQUIRE(e->load_weights(2, bytes_of(*v2).data(), v2->param_bytes(), false).is_ok());
    CHECK(e->admit(s).code() == core::Code::kFailedPrecondition);
    s.kv.reset();
    for (int turn = 0; turn < 10; ++turn) {
      const std::size_t before = s.generated.size();
      s = run_turn(*e, std::move(s));
      expect.insert(expect.end(), s.generated.begin() + static_cast<std::ptrdiff_t>(before),
                    s.generated.end());
      if (!s.awaits_environment()) break;
      rollout::record_environment(s, kAnswer);
      expect.insert(expect.end(), kAnswer.begin(), kAnswer.end());
      s.kv.reset();
    }
    REQUIRE(!s.awaits_environment());

    // What the actor receives, through JSON as the manager carries it.
    rl::Trajectory sent = rollout::to_trajectory(s, 1.0, "r0");
    auto got = rl::Trajectory::from_json(nlohmann::json::parse(sent.to_json().dump()));
    REQUIRE_MESSAGE(got.is_ok(), got.status().to_string());
    const rl::Trajectory& t = *got;
    CHECK(t.response_tokens == expect);
    CHECK(t.prompt_tokens == episode(0).prompt_tokens);
    CHECK(t.version == 1);
    CHECK(t.turns >= 2);
    REQUIRE(t.loss_mask.size() == expect.size());
    // Each model token's version is the one whose weights give its log-prob; the environment's
    // tokens are masked out with no log-prob and no version.
    std::vector<std::int32_t> prefix = t.prompt_tokens;
    std::size_t env_tokens = 0, v2_tokens = 0;
    for (std::size_t i = 0; i < expect.size(); ++i) {
      if (t.loss_mask[i] == 0) {
        ++env_tokens;
        CHECK(t.token_versions[i] == 0);
        CHECK(t.logprobs[i] == 0.0f);
      } else {
        const std::uint64_t v = t.token_versions[i];
        REQUIRE((v == 1 || v == 2));
        v2_tokens += v == 2 ? 1 : 0;
        model::Gpt& m = v == 1 ? *v1 : *v2;
        CHECK(t.logprobs[i] == doctest::Approx(logprob_of(m, prefix, expect[i])).epsilon(1e-4));
      }
      prefix.push_back(expect[i]);
    }
    CHECK(env_tokens == kAnswer.size() * (t.turns - 1));
    CHECK(v2_tokens > 0);
    CHECK(t.model_tokens() == expect.size() - env_tokens);
  }

  TEST_CASE("a kept KV cache continues exactly as a re-prefill does, prefilling only the answer") {
    auto v1 = make_gpt(7);
    const std::int32_t first = first_sampled(*v1);
    SequenceState results[2];
    std::uint64_t prefilled[2] = {0, 0};
    for (int keep = 0; keep < 2; ++keep) {
      auto e = make_engine();
      REQUIRE(e->load_weights(1, bytes_of(*v1).data(), v1->param_bytes(), false).is_ok());
      SequenceState s = run_turn(*e, episode(first));
      REQUIRE(s.awaits_environment());
      rollout::record_environment(s, kAnswer);
      if (keep == 0) s.kv.reset();
      s = run_turn(*e, std::move(s), &prefilled[keep]);
      results[keep] = std::move(s);
    }
    // Re-prefilled: the prompt, the call and the answer; kept: the call and the answer.
    CHECK(prefilled[0] == 5 + 1 + kAnswer.size());
    CHECK(prefilled[1] == 1 + kAnswer.size());
    CHECK(results[0].generated == results[1].generated);
    REQUIRE(results[0].logprobs.size() == results[1].logprobs.size());
    for (std::size_t i = 0; i < results[0].logprobs.size(); ++i)
      CHECK(results[0].logprobs[i] == doctest::Approx(results[1].logprobs[i]).epsilon(1e-4));
  }

  TEST_CASE("the simulated engine splits an episode into turns, each ending with a call") {
    rollout::SimEngineConfig c;
    c.turns = 3;
    c.lengths.median = 30;
    c.lengths.p99 = 30;
    c.time_scale = 0;
    auto e = rollout::SimEngine::create(c).value();
    REQUIRE(e->load_weights(5, nullptr, 0, false).is_ok());
    SequenceState s;
    s.trajectory_id = "p1/2";
    s.prompt_id = "p1";
    s.prompt_tokens = std::vector<std::int32_t>(10, 4);
    s.max_new_tokens = 1000;
    s.call_token = rollout::kSimVocab - 1;
    const std::uint64_t target = e->response_length(s.trajectory_id);
    std::uint32_t calls = 0;
    std::uint64_t prefilled = 0;
    for (int turn = 0; turn < 10; ++turn) {
      s = run_turn(*e, std::move(s), &prefilled);
      if (turn > 0) CHECK(prefilled == 1 + 8);  // the kept (modelled) cache: call and answer
      if (!s.awaits_environment()) break;
      ++calls;
      REQUIRE(s.kv.has_value());
      rollout::record_environment(s, std::vector<std::int32_t>(8, 3));
    }
    CHECK(calls == 2);
    CHECK(s.turns == 3);
    rl::Trajectory t = rollout::to_trajectory(s, 0, "r");
    CHECK(t.check_episode().is_ok());
    CHECK(t.model_tokens() == target);
    CHECK(t.response_tokens.size() == target + 2 * 8);
    // The call token appears only where a turn ends.
    std::size_t call_tokens = 0;
    for (std::size_t i = 0; i < t.response_tokens.size(); ++i)
      call_tokens += t.loss_mask[i] == 1 && t.response_tokens[i] == s.call_token ? 1 : 0;
    CHECK(call_tokens == 2);
  }

  TEST_CASE("the model engine ends a turn at a stop sequence, whose tokens then leave it") {
    auto v1 = make_gpt(7);
    auto run = [&](SequenceState s) {
      auto e = make_engine();
      REQUIRE(e->load_weights(1, bytes_of(*v1).data(), v1->param_bytes(), false).is_ok());
      return run_turn(*e, std::move(s));
    };
    // A sequence whose free turn (to EOS or max_new_tokens) is long enough to stop inside.
    SequenceState free_run;
    SequenceState start = episode(2);
    for (int i = 0; i < 20 && free_run.generated.size() < 6; ++i) {
      start.trajectory_id = "p7/" + std::to_string(i);
      free_run = run(start);
    }
    const std::vector<std::int32_t> g = free_run.generated;
    REQUIRE(g.size() >= 6);
    // Its tokens 3 and 4 as the stop: the turn ends at their first appearance (sampling repeats:
    // the same id, weights and state draw the same tokens).
    const std::vector<std::int32_t> stop{g[3], g[4]};
    std::size_t end = 1;
    while (!(g[end - 1] == stop[0] && g[end] == stop[1]))
      ++end;
    start.stop.sequences = {stop};
    SequenceState s = run(start);
    REQUIRE(s.awaits_environment());
    CHECK(s.stop_length() == 2);
    CHECK(s.generated == std::vector<std::int32_t>(g.begin(), g.begin() + end + 1));
    REQUIRE(rollout::cut_stop(s));
    CHECK(s.stop.hit);
    CHECK(s.generated == std::vector<std::int32_t>(g.begin(), g.begin() + end - 1));
    CHECK(s.logprobs.size() == s.generated.size());
    CHECK(s.loss_mask.size() == s.generated.size());
    CHECK(s.token_versions.size() == s.generated.size());
    CHECK_FALSE(s.kv.has_value());  // it held the cut tokens
    CHECK_FALSE(rollout::cut_stop(s));
  }

  TEST_CASE("a sequence state's episode fields travel and are checked") {
    SequenceState s = episode(16);
    s.generated = {3, 16, 7, 19, 2};
    s.logprobs = {-0.5f, -0.25f, 0.0f, 0.0f, -0.125f};
    s.versions = {4};
    s.loss_mask = {1, 1, 0, 0, 1};
    s.token_versions = {4, 4, 0, 0, 4};
    s.turns = 2;
    auto back = SequenceState::from_json(nlohmann::json::parse(s.to_json().dump()));
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->call_token == 16);
    CHECK(back->loss_mask == s.loss_mask);
    CHECK(back->token_versions == s.token_versions);
    CHECK(back->turns == 2);
    // An environment token with a log-prob, or a model token without its version, is refused.
    nlohmann::json j = s.to_json();
    j["logprobs"][2] = -1.0;
    CHECK(SequenceState::from_json(j).status().code() == core::Code::kProtocol);
    j = s.to_json();
    j["token_versions"][4] = 9;
    CHECK(SequenceState::from_json(j).status().code() == core::Code::kProtocol);
    j = s.to_json();
    j["loss_mask"] = {1, 1};
    CHECK(SequenceState::from_json(j).status().code() == core::Code::kProtocol);
    // A single-turn state has none of these fields.
    SequenceState plain = episode(16);
    plain.call_token = -1;
    CHECK(!plain.to_json().contains("loss_mask"));
  }
}
