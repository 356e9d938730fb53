#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::model;
using sluice::model::testing::make_model;
using sluice::model::testing::random_tokens;
using sluice::model::testing::tiny_config;

namespace {

struct Generated {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
};

// The reference: every new token recomputes the whole sequence with the training forward pass.
Generated generate_without_cache(Gpt& m, std::vector<std::int32_t> seq, int n, float temperature,
                                 std::uint64_t rng) {
  Generated g;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    REQUIRE(m.logits_without_cache(seq, logits).is_ok());
    auto s = sample(logits, temperature, rng);
    REQUIRE(s.is_ok());
    g.tokens.push_back(s->token);
    g.logprobs.push_back(s->logprob);
    seq.push_back(s->token);
  }
  return g;
}

// With the KV cache: one prefill, then one decode per token.
Generated generate_with_cache(Gpt& m, const std::vector<std::int32_t>& prompt, int n,
                              float temperature, std::uint64_t rng) {
  Generated g;
  KvCache cache = m.make_cache();
  std::vector<float> logits;
  REQUIRE(m.prefill(cache, prompt, logits).is_ok());
  for (int i = 0; i < n; ++i) {
    auto s = sample(logits, temperature, rng);
    REQUIRE(s.is_ok());
    g.tokens.push_back(s->token);
    g.logprobs.push_back(s->logprob);
    if (i + 1 == n) break;
    KvCache* c = &cache;
    REQUIRE(m.decode(std::span<KvCache* const>(&c, 1), std::span<const std::int32_t>(&s->token, 1),
                     logits)
                .is_ok());
  }
  CHECK(cache.length() == static_cast<std::int32_t>(prompt.size()) + n - 1);
  return g;
}

void check_same(const Generated& a, const Generated& b) {
  REQUIRE(a.tokens.size() == b.tokens.size());
  CHECK(a.tokens == b.tokens);
  for (std::size_t i = 0; i < a.logprobs.size(); ++i)
    CHECK(a.logprobs[i] == doctest::Approx(b.logprobs[i]).epsilon(1e-4));
}

}  // namespace

TEST_SUITE("model.generation") {
  TEST_CASE("prefill logits equal the full forward pass") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    std::uint64_t rng = 5;
    auto seq = random_tokens(9, 11, rng);
    KvCache cache = m->make_cache();
    std::vector<float> cached, full;
    // In two pieces, so the second prefill attends to what the first cached.
    REQUIRE(m->prefill(cache, std::span(seq).first(4), cached).is_ok());
    REQUIRE(m->prefill(cache, std::span(seq).subspan(4), cached).is_ok());
    CHECK(cache.length() == 9);
    REQUIRE(m->logits_without_cache(seq, full).is_ok());
    REQUIRE(cached.size() == 11);
    for (std::size_t v = 0; v < cached.size(); ++v)
      CHECK(cached[v] == doctest::Approx(full[v]).epsilon(1e-4));
  }

  TEST_CASE("greedy generation with the KV cache equals generation without it") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    std::vector<std::int32_t> prompt = {3, 1, 4, 1};
    check_same(generate_with_cache(*m, prompt, 8, 0.0f, 0),
               generate_without_cache(*m, prompt, 8, 0.0f, 0));
  }

  TEST_CASE("sampled generation under a seed is the same with and without the KV cache") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    std::vector<std::int32_t> prompt = {2, 7};
    auto a = generate_with_cache(*m, prompt, 10, 1.3f, 42);
    check_same(a, generate_without_cache(*m, prompt, 10, 1.3f, 42));
    // Another seed draws another sequence (10 draws from 11 tokens at a high temperature).
    CHECK(a.tokens != generate_with_cache(*m, prompt, 10, 1.3f, 43).tokens);
  }

  TEST_CASE("batched decode of sequences of different lengths that join and leave") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    const float temperature = 0.9f;
    std::vector<std::vector<std::int32_t>> prompts = {
        {1, 2}, {5, 5, 6, 7, 8}, {9, 0, 3, 3, 10, 2, 4}};
    // Sequence s joins at step join[s]; it leaves when its cache is full (context 12).
    const std::vector<int> join = {0, 1, 3};
    const int context = tiny_config().context;
    std::vector<KvCache> caches;
    std::vector<std::uint64_t> rng = {100, 200, 300};
    std::vector<Generated> got(prompts.size());
    std::vector<std::int32_t> next(prompts.size(), -1);
    std::vector<float> logits;
    for (std::size_t s = 0; s < prompts.size(); ++s)
      caches.push_back(m->make_cache());
    std::vector<KvCache*> batch;
    std::vector<std::int32_t> tokens;
    std::vector<std::size_t> who;
    for (int step = 0; step < 20; ++step) {
      for (std::size_t s = 0; s < prompts.size(); ++s) {
        if (join[s] != step) continue;
        REQUIRE(m->prefill(caches[s], prompts[s], logits).is_ok());
        auto x = sample(logits, temperature, rng[s]);
        REQUIRE(x.is_ok());
        got[s].tokens.push_back(x->token);
        got[s].logprobs.push_back(x->logprob);
        next[s] = x->token;
      }
      batch.clear();
      tokens.clear();
      who.clear();
      for (std::size_t s = 0; s < prompts.size(); ++s) {
        if (next[s] < 0 || caches[s].length() >= context) continue;
        batch.push_back(&caches[s]);
        tokens.push_back(next[s]);
        who.push_back(s);
      }
      if (batch.empty()) break;
      REQUIRE(m->decode(batch, tokens, logits).is_ok());
      REQUIRE(logits.size() == batch.size() * 11);
      for (std::size_t b = 0; b < batch.size(); ++b) {
        const std::size_t s = who[b];
        auto x = sample(std::span<const float>(logits).subspan(b * 11, 11), temperature, rng[s]);
        REQUIRE(x.is_ok());
        got[s].tokens.push_back(x->token);
        got[s].logprobs.push_back(x->logprob);
        next[s] = x->token;
      }
    }
    std::vector<std::uint64_t> seeds = {100, 200, 300};
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      CAPTURE(s);
      // Every sequence ran to a full context, plus the token sampled from the last logits.
      CHECK(caches[s].length() == context);
      const int n = context - static_cast<int>(prompts[s].size()) + 1;
      REQUIRE(static_cast<int>(got[s].tokens.size()) == n);
      check_same(got[s], generate_without_cache(*m, prompts[s], n, temperature, seeds[s]));
    }
  }

  TEST_CASE("a model loaded from another's bytes generates the same tokens") {
    GptConfig ca = tiny_config();
    GptConfig cb = tiny_config();
    cb.init_seed = 1234;
    auto a = make_model(ca);
    auto b = make_model(cb);
    REQUIRE((a && b));
    std::vector<std::int32_t> prompt = {4, 4, 2};
    auto from_a = generate_with_cache(*a, prompt, 9, 1.0f, 77);
    std::vector<std::uint8_t> bytes(a->param_bytes());
    std::memcpy(bytes.data(), a->params(), bytes.size());
    REQUIRE(b->load(bytes.data(), bytes.size()).is_ok());
    auto from_b = generate_with_cache(*b, prompt, 9, 1.0f, 77);
    CHECK(from_a.tokens == from_b.tokens);
    CHECK(from_a.logprobs == from_b.logprobs);
  }

  TEST_CASE("a sequence moved mid-generation continues identically") {
    auto a = make_model(tiny_config());
    auto b = make_model(tiny_config());
    REQUIRE((a && b));
    std::vector<std::int32_t> prompt = {1, 9, 8};
    auto whole = generate_with_cache(*a, prompt, 8, 1.0f, 555);

    // Generate 3 tokens on a, then move (tokens so far + the one uint64 of RNG state) to b,
    // whose cache is rebuilt by prefill.
    std::uint64_t rng = 555;
    KvCache cache = a->make_cache();
    std::vector<float> logits;
    std::vector<std::int32_t> seq = prompt;
    std::vector<std::int32_t> out;
    REQUIRE(a->prefill(cache, seq, logits).is_ok());
    for (int i = 0; i < 3; ++i) {
      auto s = sample(logits, 1.0f, rng);
      REQUIRE(s.is_ok());
      out.push_back(s->token);
      seq.push_back(s->token);
      KvCache* c = &cache;
      REQUIRE(a->decode(std::span<KvCache* const>(&c, 1), std::span(&s->token, 1), logits).is_ok());
    }
    KvCache moved = b->make_cache();
    REQUIRE(b->prefill(moved, seq, logits).is_ok());
    for (int i = 3; i < 8; ++i) {
      auto s = sample(logits, 1.0f, rng);
      REQUIRE(s.is_ok());
      out.push_back(s->token);
      KvCache* c = &moved;
      REQUIRE(b->decode(std::span<KvCache* const>(&c, 1), std::span(&s->token, 1), logits).is_ok());
    }
    CHECK(out == whole.tokens);
  }

  TEST_CASE("prefill and decode refuse what does not fit") {
    auto m = make_model(tiny_config());
    GptConfig other = tiny_config();
    other.context = 16;
    auto o = make_model(other);
    REQUIRE((m && o));
    std::vector<float> logits;
    KvCache c = m->make_cache();
    CHECK(m->prefill(c, std::vector<std::int32_t>(13, 1), logits).code() ==
          core::Code::kInvalidArgument);
    CHECK(c.length() == 0);
    CHECK(m->prefill(c, std::vector<std::int32_t>{}, logits).code() ==
          core::Code::kInvalidArgument);
    CHECK(m->prefill(c, std::vector<std::int32_t>{1, 11}, logits).code() ==
          core::Code::kInvalidArgument);
    REQUIRE(m->prefill(c, std::vector<std::int32_t>(12, 1), logits).is_ok());
    std::vector<KvCache*> full = {&c};
    std::vector<std::int32_t> one = {1};
    auto s = m->decode(full, one, logits);
    CHECK(s.message().find("is full") != std::string::npos);

    KvCache d = m->make_cache();
    KvCache e = m->make_cache();
    std::vector<KvCache*> twice = {&d, &d};
    std::vector<std::int32_t> two = {1, 2};
    CHECK(m->decode(twice, two, logits).message().find("appears twice") != std::string::npos);
    KvCache foreign = o->make_cache();
    std::vector<KvCache*> mixed = {&e, &foreign};
    CHECK(m->decode(mixed, two, logits).message().find("not made by a model of this shape") !=
          std::string::npos);
    CHECK(e.length() == 0);
  }

  TEST_CASE("sampling: greedy takes the largest logit, the RNG state alone decides a draw") {
    std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
    std::uint64_t rng = 9;
    auto g = sample(logits, 0.0f, rng);
    REQUIRE(g.is_ok());
    CHECK(g->token == 1);
    CHECK(rng == 9);
    double z = std::exp(0.1 - 2.0) + 1.0 + std::exp(-3.0) + 1.0;
    CHECK(g->logprob == doctest::Approx(-std::log(z)).epsilon(1e-5));

    // Draw frequencies follow softmax(logits / T).
    const float T = 0.7f;
    std::vector<int> counts(4, 0);
    const int kDraws = 20000;
    for (int i = 0; i < kDraws; ++i) {
      auto s = sample(logits, T, rng);
      REQUIRE(s.is_ok());
      ++counts[static_cast<std::size_t>(s->token)];
    }
    double zt = 0.0;
    for (float l : logits)
      zt += std::exp(l / T);
    for (std::size_t v = 0; v < 4; ++v) {
      const double p = std::exp(logits[v] / T) / zt;
      CHECK(std::fabs(static_cast<double>(counts[v]) / kDraws - p) < 0.012);
    }
    // Same state, same draw.
    std::uint64_t s1 = 1234, s2 = 1234;
    auto d1 = sample(logits, T, s1);
    auto d2 = sample(logits, T, s2);
    CHECK(d1->token == d2->token);
    CHECK(s1 == s2);
    CHECK(d1->logprob == doctest::Approx(std::log(
                             std::exp(logits[static_cast<std::size_t>(d1->token)] / T) / zt)));
    CHECK(sample(std::vector<float>{}, 1.0f, s1).status().code() == core::Code::kInvalidArgument);
  }
}
