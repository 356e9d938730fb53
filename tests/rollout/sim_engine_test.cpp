#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/config.hpp"
#include "rollout/sim_engine.hpp"

using namespace sluice;
using namespace sluice::rollout;

namespace {

std::unique_ptr<SimEngine> make_engine(const SimEngineConfig& c) {
  auto e = SimEngine::create(c);
  REQUIRE(e.is_ok());
  return std::move(e).value();
}

SequenceState new_seq(const std::string& id, std::size_t prompt_len, std::uint64_t max_new) {
  SequenceState s;
  s.trajectory_id = id;
  s.prompt_id = id.substr(0, id.find('/'));
  for (std::size_t i = 0; i < prompt_len; ++i)
    s.prompt_tokens.push_back(static_cast<std::int32_t>(i % 7));
  s.max_new_tokens = max_new;
  return s;
}

// Steps until `id` finishes; returns its final state.
SequenceState run_to_end(SimEngine& e, const std::string& id) {
  for (int i = 0; i < 100000; ++i) {
    auto r = e.step();
    for (auto& f : r.finished) {
      if (f.trajectory_id == id) return f;
    }
  }
  FAIL("sequence " << id << " never finished");
  return {};
}

// An id whose drawn length is at least `min_len`.
std::string id_with_length(const SimEngine& e, std::uint64_t min_len) {
  for (int i = 0;; ++i) {
    std::string id = "p" + std::to_string(i) + "/0";
    if (e.response_length(id) >= min_len) return id;
  }
}

}  // namespace

TEST_SUITE("rollout.sim_engine") {
  TEST_CASE("a response length depends on the seed and the trajectory id only") {
    LengthConfig lc;
    auto a = LengthSampler::create(lc, 7).value();
    auto b = LengthSampler::create(lc, 7).value();
    auto other_seed = LengthSampler::create(lc, 8).value();
    std::set<std::uint64_t> distinct;
    int differs_by_seed = 0;
    for (int i = 0; i < 200; ++i) {
      std::string id = "prompt-" + std::to_string(i) + "/3";
      CHECK(a.length(id) == b.length(id));
      CHECK(a.length(id) == a.length(id));
      distinct.insert(a.length(id));
      differs_by_seed += a.length(id) != other_seed.length(id) ? 1 : 0;
    }
    CHECK(distinct.size() > 50);
    CHECK(differs_by_seed > 150);
  }

  TEST_CASE("lognormal lengths have the configured p99 over median, truncated at max_len") {
    LengthConfig lc;  // median 64, p99 640, max_len 1024
    auto st = length_stats(lc, 1, 20000);
    REQUIRE(st.is_ok());
    CHECK(st->count == 20000);
    const double ratio = static_cast<double>(st->p99) / static_cast<double>(st->p50);
    CHECK(ratio > 10.0 * 0.8);
    CHECK(ratio < 10.0 * 1.2);
    CHECK(st->p50 > 64 * 0.9);
    CHECK(st->p50 < 64 * 1.1);
    CHECK(st->max <= 1024);

    lc.max_len = 300;  // below the p99: the tail piles up at max_len
    auto cut = length_stats(lc, 1, 20000);
    REQUIRE(cut.is_ok());
    CHECK(cut->max == 300);
    CHECK(cut->p99 == 300);
  }

  TEST_CASE("lengths from a file are chosen per trajectory, and a bad file is named") {
    const std::string path = "/tmp/sluice_sim_lengths_" + std::to_string(::getpid()) + ".txt";
    {
      std::ofstream f(path);
      f << "# lengths\n5\n\n17\n  2000\n";
    }
    LengthConfig lc;
    lc.kind = "file";
    lc.file = path;
    lc.max_len = 1000;
    auto s = LengthSampler::create(lc, 3);
    REQUIRE(s.is_ok());
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 100; ++i)
      seen.insert(s->length("q" + std::to_string(i)));
    CHECK(seen == std::set<std::uint64_t>{5, 17, 1000});
    {
      std::ofstream f(path);
      f << "5\nten\n";
    }
    auto bad = LengthSampler::create(lc, 3);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().message().find(path + ":2: 'ten'") != std::string::npos);
    std::remove(path.c_str());
    lc.file = path;  // now missing
    CHECK(LengthSampler::create(lc, 3).status().message().find("cannot read") != std::string::npos);
  }

  TEST_CASE("the configuration parses strictly and validates") {
    SimEngineConfig c;
    auto doc = core::config::Json::parse(R"({"max_sequences": 8, "lengths": {"median": 32}})");
    REQUIRE(core::config::parse(doc, c).is_ok());
    CHECK(c.max_sequences == 8);
    CHECK(c.lengths.median == 32.0);
    CHECK(c.lengths.p99 == 640.0);

    SimEngineConfig d;
    auto bad_kind = core::config::Json::parse(R"({"lengths": {"kind": "pareto"}})");
    CHECK(core::config::parse(bad_kind, d).message().find("kind must be lognormal or file") !=
          std::string::npos);
    SimEngineConfig e;
    auto bad_p99 = core::config::Json::parse(R"({"lengths": {"median": 100, "p99": 50}})");
    CHECK(core::config::parse(bad_p99, e).message().find("p99") != std::string::npos);
    SimEngineConfig f;
    f.max_sequences = 0;
    CHECK(SimEngine::create(f).status().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("a sequence stops at min(drawn length, max_new_tokens)") {
    SimEngineConfig c;
    auto e = make_engine(c);
    const std::string long_id = id_with_length(*e, 20);
    REQUIRE(e->admit(new_seq(long_id, 4, 10)).is_ok());
    auto done = run_to_end(*e, long_id);
    CHECK(done.generated.size() == 10);
    CHECK(done.logprobs.size() == 10);
    for (std::size_t i = 0; i < done.generated.size(); ++i) {
      CHECK(done.generated[i] >= 0);
      CHECK(done.generated[i] < kSimVocab);
      CHECK(done.logprobs[i] < 0.0f);
    }
    CHECK(e->active() == 0);
    CHECK(e->kv_tokens_used() == 0);

    REQUIRE(e->admit(new_seq(long_id, 4, 100000)).is_ok());
    CHECK(run_to_end(*e, long_id).generated.size() == e->response_length(long_id));
  }

  TEST_CASE("admission enforces the batch bound and the KV budget with a clear error") {
    SimEngineConfig c;
    c.max_sequences = 2;
    c.max_kv_tokens = 100;
    auto e = make_engine(c);
    REQUIRE(e->admit(new_seq("a/0", 30, 50)).is_ok());
    CHECK(e->kv_tokens_used() == 30);
    CHECK(e->can_admit(70));
    CHECK_FALSE(e->can_admit(71));
    auto too_big = e->admit(new_seq("b/0", 71, 50));
    CHECK(too_big.code() == core::Code::kResourceExhausted);
    CHECK(too_big.message().find("needs 71 KV tokens, 70 of 100 free") != std::string::npos);
    CHECK(e->admit(new_seq("a/0", 1, 50)).code() == core::Code::kAlreadyExists);
    REQUIRE(e->admit(new_seq("c/0", 10, 50)).is_ok());
    CHECK_FALSE(e->can_admit(1));
    auto full = e->admit(new_seq("d/0", 1, 50));
    CHECK(full.code() == core::Code::kResourceExhausted);
    CHECK(full.message().find("batch full (2 of 2 sequences)") != std::string::npos);
    CHECK(e->active() == 2);
    CHECK(e->admit(new_seq("e/0", 1, 0)).code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("a sequence exported mid-way finishes elsewhere exactly as if never moved") {
    SimEngineConfig c;
    auto reference = make_engine(c);
    const std::string id = id_with_length(*reference, 40);
    const std::uint64_t len = reference->response_length(id);
    REQUIRE(reference->admit(new_seq(id, 12, 5000)).is_ok());
    SequenceState unmoved = run_to_end(*reference, id);
    REQUIRE(unmoved.generated.size() == len);

    auto src = make_engine(c);
    auto dst = make_engine(c);
    REQUIRE(src->admit(new_seq(id, 12, 5000)).is_ok());
    std::string other;  // a neighbour that outlives the move
    for (int i = 0; other.empty(); ++i) {
      std::string o = "o" + std::to_string(i) + "/0";
      if (o != id && src->response_length(o) >= len) other = o;
    }
    REQUIRE(src->admit(new_seq(other, 3, 5000)).is_ok());
    for (std::uint64_t i = 0; i < len / 2; ++i)
      CHECK(src->step().finished.empty());
    auto moved = src->export_sequence(id);
    REQUIRE(moved.is_ok());
    CHECK(moved->generated.size() == len / 2);
    CHECK(src->active() == 1);
    CHECK(src->kv_tokens_used() == 3 + len / 2);  // only the neighbour's KV is left
    CHECK(src->export_sequence(id).status().code() == core::Code::kNotFound);

    // It travels as JSON.
    auto back = SequenceState::from_json(moved->to_json());
    REQUIRE(back.is_ok());
    REQUIRE(dst->admit(std::move(back).value()).is_ok());
    auto first = dst->step();
    CHECK(first.prefill_tokens == 12 + len / 2);  // the destination re-prefills
    SequenceState finished = run_to_end(*dst, id);
    CHECK(finished.generated == unmoved.generated);
    CHECK(finished.logprobs == unmoved.logprobs);
    CHECK(finished.versions == unmoved.versions);
    CHECK(finished.kv_tokens() == unmoved.kv_tokens());
  }

  TEST_CASE("export_all and snapshot hand out every active sequence") {
    auto e = make_engine(SimEngineConfig{});
    REQUIRE(e->admit(new_seq(id_with_length(*e, 5), 2, 100)).is_ok());
    REQUIRE(e->admit(new_seq("x/1", 3, 100)).is_ok());
    e->step();
    auto snap = e->snapshot();
    CHECK(snap.size() == e->active());
    CHECK(e->active() >= 1);
    auto all = e->export_all();
    CHECK(all.size() == snap.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      CHECK(all[i].to_json() == snap[i].to_json());
    CHECK(e->active() == 0);
    CHECK(e->kv_tokens_used() == 0);
  }

  TEST_CASE("weights load only when idle unless allowed, and versions record every switch") {
    auto e = make_engine(SimEngineConfig{});
    REQUIRE(e->load_weights(3, nullptr, 0, false).is_ok());
    CHECK(e->version() == 3);
    const std::string id = id_with_length(*e, 6);
    REQUIRE(e->admit(new_seq(id, 2, 1000)).is_ok());
    e->step();
    auto refused = e->load_weights(4, nullptr, 0, false);
    CHECK(refused.code() == core::Code::kFailedPrecondition);
    CHECK(e->version() == 3);
    REQUIRE(e->load_weights(4, nullptr, 0, true).is_ok());  // partial rollout
    e->step();
    auto running = e->active_sequences();  // still names the version that began it
    REQUIRE(running.size() == 1);
    CHECK(running[0].trajectory_id == id);
    CHECK(running[0].first_version == 3);
    auto done = run_to_end(*e, id);
    CHECK(done.versions == std::vector<std::uint64_t>{3, 4});
    REQUIRE(e->load_weights(5, nullptr, 0, false).is_ok());  // idle again

    // A sequence exported under 5 and admitted where 6 is loaded records both.
    auto other = make_engine(SimEngineConfig{});
    REQUIRE(other->load_weights(6, nullptr, 0, false).is_ok());
    REQUIRE(e->admit(new_seq(id, 2, 1000)).is_ok());
    e->step();
    auto moved = e->export_sequence(id);
    REQUIRE(moved.is_ok());
    CHECK(moved->versions == std::vector<std::uint64_t>{5});
    REQUIRE(other->admit(std::move(moved).value()).is_ok());
    CHECK(run_to_end(*other, id).versions == std::vector<std::uint64_t>{5, 6});
  }

  TEST_CASE("the modelled step time grows with the batch as t0 + t1 x batch, plus prefill") {
    SimEngineConfig c;
    c.t0_ms = 2.0;
    c.t1_ms = 0.5;
    c.prefill_ms_per_token = 0.25;
    c.lengths.median = 1000;
    c.lengths.p99 = 1000;  // every sequence is 1000 tokens long
    auto e = make_engine(c);
    CHECK(e->step().wait_s == 0.0);  // idle
    REQUIRE(e->admit(new_seq("a/0", 8, 5000)).is_ok());
    auto r1 = e->step();
    CHECK(r1.batch == 1);
    CHECK(r1.prefill_tokens == 8);
    CHECK(r1.wait_s == doctest::Approx((2.0 + 0.5 * 1 + 0.25 * 8) / 1000.0));
    auto r1b = e->step();
    CHECK(r1b.prefill_tokens == 0);
    CHECK(r1b.wait_s == doctest::Approx((2.0 + 0.5) / 1000.0));
    for (int i = 1; i < 4; ++i)
      REQUIRE(e->admit(new_seq("b/" + std::to_string(i), 4, 5000)).is_ok());
    e->step();
    auto r4 = e->step();
    CHECK(r4.batch == 4);
    CHECK(r4.tokens == 4);
    CHECK(r4.wait_s == doctest::Approx((2.0 + 0.5 * 4) / 1000.0));

    c.time_scale = 3.0;
    auto scaled = make_engine(c);
    REQUIRE(scaled->admit(new_seq("a/0", 8, 5000)).is_ok());
    CHECK(scaled->step().wait_s == doctest::Approx(3.0 * (2.0 + 0.5 + 0.25 * 8) / 1000.0));
  }

  TEST_CASE("a sequence state round-trips through JSON and a malformed one names the field") {
    SequenceState s = new_seq("p/1", 3, 9);
    s.generated = {4, 5};
    s.logprobs = {-0.5f, -1.25f};
    s.versions = {2};
    s.rng_state = 0xfedcba9876543210ULL;
    auto back = SequenceState::from_json(s.to_json());
    REQUIRE(back.is_ok());
    CHECK(back->to_json() == s.to_json());
    CHECK(back->rng_state == s.rng_state);

    auto j = s.to_json();
    SUBCASE("missing field") {
      j.erase("rng_state");
      auto r = SequenceState::from_json(j);
      CHECK(r.status().code() == core::Code::kProtocol);
      CHECK(r.status().message().find("'rng_state'") != std::string::npos);
    }
    SUBCASE("wrong type") {
      j["generated"] = "abc";
      CHECK(SequenceState::from_json(j).status().message().find("'generated'") !=
            std::string::npos);
    }
    SUBCASE("negative count") {
      j["max_new_tokens"] = -1;
      CHECK(SequenceState::from_json(j).status().message().find("'max_new_tokens'") !=
            std::string::npos);
    }
    SUBCASE("token out of range") {
      j["prompt_tokens"] = {1, 5000000000LL};
      CHECK(SequenceState::from_json(j).status().message().find("'prompt_tokens'") !=
            std::string::npos);
    }
    SUBCASE("log-probs that do not match the tokens") {
      j["logprobs"] = {-0.5};
      CHECK(SequenceState::from_json(j).status().message().find("1 'logprobs' for 2") !=
            std::string::npos);
    }
    SUBCASE("not an object") {
      CHECK(SequenceState::from_json(nlohmann::json::array()).status().code() ==
            core::Code::kProtocol);
    }
  }
}
