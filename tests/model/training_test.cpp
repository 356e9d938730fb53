#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/adamw.hpp"
#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::model;
using sluice::model::testing::make_model;
using sluice::model::testing::tiny_config;

TEST_SUITE("model.training") {
  TEST_CASE("AdamW on the SFT loss memorises a few responses") {
    GptConfig c = tiny_config();
    auto m = make_model(c);
    REQUIRE(m);
    AdamWConfig oc;
    oc.lr = 1e-2f;
    oc.weight_decay = 0.01f;
    oc.max_grad_norm = 1.0f;
    auto opt = AdamW::create(oc, *m);
    REQUIRE(opt.is_ok());
    // Prompt: two tokens; response: a fixed continuation per prompt.
    std::vector<std::vector<std::int32_t>> seqs = {{1, 2, 7, 3, 9, 9, 0, 4},
                                                   {2, 1, 5, 5, 6, 1, 8, 2},
                                                   {3, 3, 10, 0, 2, 7, 7, 1},
                                                   {4, 0, 6, 8, 3, 2, 10, 5}};
    std::vector<std::int32_t> start(seqs.size(), 2);
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 80; ++step) {
      m->zero_grad();
      auto loss = m->sft_loss_and_grad(seqs, start);
      REQUIRE(loss.is_ok());
      if (step == 0) first = *loss;
      last = *loss;
      auto norm = (*opt)->step(*m);
      REQUIRE(norm.is_ok());
      CHECK(std::isfinite(*norm));
    }
    CHECK((*opt)->steps() == 80);
    // Uniform guessing over 11 tokens costs log(11) = 2.4 nats.
    CHECK(first > 2.0f);
    CHECK(last < 0.1f * first);
    // And greedy decoding now reproduces every response from its prompt.
    for (const auto& s : seqs) {
      KvCache cache = m->make_cache();
      std::vector<float> logits;
      REQUIRE(m->prefill(cache, std::span(s).first(2), logits).is_ok());
      std::vector<std::int32_t> out;
      std::uint64_t rng = 0;
      for (std::size_t t = 2; t < s.size(); ++t) {
        auto x = sample(logits, 0.0f, rng);
        REQUIRE(x.is_ok());
        out.push_back(x->token);
        KvCache* cp = &cache;
        REQUIRE(
            m->decode(std::span<KvCache* const>(&cp, 1), std::span(&x->token, 1), logits).is_ok());
      }
      CHECK(out == std::vector<std::int32_t>(s.begin() + 2, s.end()));
    }
  }

  TEST_CASE("sft rejects response starts outside the sequence") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    CHECK(m->sft_loss_and_grad({{1, 2, 3}}, {0}).status().code() == core::Code::kInvalidArgument);
    CHECK(m->sft_loss_and_grad({{1, 2, 3}}, {3}).status().code() == core::Code::kInvalidArgument);
    CHECK(m->sft_loss_and_grad({{1, 2, 3}}, {}).status().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("sft: tokens masked out (an environment's) give no loss and no gradient") {
    auto a = make_model(tiny_config());
    auto b = make_model(tiny_config());
    REQUIRE((a && b));
    // The last two response tokens masked out train exactly as the sequence without them: the
    // model is causal, so the earlier tokens' log-probs do not depend on them.
    const std::vector<std::int32_t> full{1, 5, 6, 7, 8, 9, 10};
    const std::vector<std::int32_t> cut{1, 5, 6, 7, 8};
    a->zero_grad();
    b->zero_grad();
    auto masked = a->sft_loss_and_grad({full}, {2}, {{1, 1, 1, 0, 0}});
    auto plain = b->sft_loss_and_grad({cut}, {2});
    REQUIRE(masked.is_ok());
    REQUIRE(plain.is_ok());
    CHECK(*masked == doctest::Approx(*plain).epsilon(1e-6));
    double diff = 0;
    for (std::size_t i = 0; i < a->param_count(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(a->grads()[i] - b->grads()[i])));
    CHECK(diff < 1e-6);
    // With the mask off they differ: the test can fail.
    a->zero_grad();
    auto unmasked = a->sft_loss_and_grad({full}, {2});
    REQUIRE(unmasked.is_ok());
    CHECK(*unmasked != doctest::Approx(*plain).epsilon(1e-6));
    // A mask of the wrong length, or one that trains nothing, is refused.
    CHECK(a->sft_loss_and_grad({full}, {2}, {{1, 1}}).status().code() ==
          core::Code::kInvalidArgument);
    CHECK(a->sft_loss_and_grad({full}, {2}, {{0, 0, 0, 0, 0}}).status().code() ==
          core::Code::kInvalidArgument);
  }

  TEST_CASE("AdamW state saved and restored continues the same trajectory") {
    auto a = make_model(tiny_config());
    auto b = make_model(tiny_config());
    REQUIRE((a && b));
    AdamWConfig oc;
    oc.lr = 5e-3f;
    auto oa = AdamW::create(oc, *a);
    auto ob = AdamW::create(oc, *b);
    REQUIRE((oa.is_ok() && ob.is_ok()));
    std::vector<std::vector<std::int32_t>> seqs = {{1, 2, 3, 4, 5}, {6, 7, 8}};
    std::vector<std::int32_t> start = {1, 1};
    for (int i = 0; i < 3; ++i) {
      a->zero_grad();
      REQUIRE(a->sft_loss_and_grad(seqs, start).is_ok());
      REQUIRE((*oa)->step(*a).is_ok());
    }
    // Checkpoint: parameters and optimizer state into b.
    REQUIRE(b->load(reinterpret_cast<const std::uint8_t*>(a->params()), a->param_bytes()).is_ok());
    REQUIRE((*ob)->restore((*oa)->m(), (*oa)->v(), (*oa)->steps()).is_ok());
    for (auto* pair : {&a, &b}) {
      Gpt& m = **pair;
      AdamW& o = pair == &a ? **oa : **ob;
      m.zero_grad();
      REQUIRE(m.sft_loss_and_grad(seqs, start).is_ok());
      REQUIRE(o.step(m).is_ok());
    }
    CHECK(std::memcmp(a->params(), b->params(), a->param_bytes()) == 0);
    CHECK((*ob)->restore(std::vector<float>(3), (*oa)->v(), 1).code() ==
          core::Code::kInvalidArgument);
  }

  TEST_CASE("AdamW decays matrices only and reports the gradient norm before clipping") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    AdamWConfig oc;
    oc.lr = 0.1f;
    oc.weight_decay = 0.5f;
    oc.max_grad_norm = 1e-3f;
    auto opt = AdamW::create(oc, *m);
    REQUIRE(opt.is_ok());
    std::vector<float> before(m->params(), m->params() + m->param_count());
    m->zero_grad();
    float* g = m->mutable_grads();
    g[0] = 3.0f;  // in wte
    g[1] = 4.0f;
    auto norm = (*opt)->step(*m);
    REQUIRE(norm.is_ok());
    CHECK(*norm == doctest::Approx(5.0f));
    for (const auto& t : m->tensors()) {
      const std::size_t i = t.offset / sizeof(float) + 2;  // a parameter with zero gradient
      if (i >= t.offset / sizeof(float) + t.bytes / sizeof(float)) continue;
      INFO(t.name);
      if (t.shape.size() >= 2) {
        CHECK(m->params()[i] == doctest::Approx(before[i] * (1.0f - 0.1f * 0.5f)));
      } else {
        CHECK(m->params()[i] == before[i]);
      }
    }
    g[5] = NAN;
    std::vector<float> kept(m->params(), m->params() + m->param_count());
    CHECK((*opt)->step(*m).status().code() == core::Code::kInvalidArgument);
    CHECK(std::memcmp(kept.data(), m->params(), m->param_bytes()) == 0);
    AdamWConfig bad;
    bad.beta2 = 1.0f;
    CHECK(AdamW::create(bad, *m).status().code() == core::Code::kInvalidArgument);
  }
}
