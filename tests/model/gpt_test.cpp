#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/manifest.hpp"
#include "model/blas.hpp"
#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::model;
using sluice::model::testing::make_model;
using sluice::model::testing::perturb_and_batch;
using sluice::model::testing::random_tokens;
using sluice::model::testing::tiny_config;
using sluice::model::testing::WeightedBatch;

namespace {

// L = sum wl * logprob + sum wv * value, accumulated in double.
double weighted_loss(Gpt& m, const std::vector<std::vector<std::int32_t>>& seqs,
                     const std::vector<std::vector<float>>& wl,
                     const std::vector<std::vector<float>>& wv) {
  auto out = m.forward(seqs);
  REQUIRE(out.is_ok());
  double loss = 0.0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::size_t t = 0; t < wl[i].size(); ++t)
      loss += static_cast<double>(wl[i][t]) * out->logprobs[i][t];
    for (std::size_t t = 0; t < wv[i].size(); ++t)
      loss += static_cast<double>(wv[i][t]) * out->values[i][t];
  }
  return loss;
}

}  // namespace

TEST_SUITE("model.gpt") {
  TEST_CASE("the BLAS pool can be set to one thread for the process") {
    // The tests run on shared cores; one BLAS thread is also what they want.
    set_blas_threads(1);
    CHECK(blas_threads() == 1);
  }

  TEST_CASE("a config that cannot work is rejected with a reason") {
    GptConfig c = tiny_config();
    c.n_head = 3;
    auto r = Gpt::create(c);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("not a multiple of n_head") != std::string::npos);
    c = tiny_config();
    c.vocab = 1;
    CHECK(Gpt::create(c).status().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("tensors() is a valid manifest layout covering the parameter buffer") {
    for (bool value_head : {false, true}) {
      auto m = make_model(tiny_config(value_head));
      REQUIRE(m);
      auto t = m->tensors();
      REQUIRE_FALSE(t.empty());
      CHECK(t.front().name == "wte");
      CHECK((t.back().name == "value_head.bias") == value_head);
      auto man = core::make_manifest(
          "gpt", 1, t, reinterpret_cast<const std::uint8_t*>(m->params()), m->param_bytes(), 4096);
      REQUIRE_MESSAGE(man.is_ok(), man.status().to_string());
      CHECK(man->validate().is_ok());
      CHECK(man->total_bytes == m->param_bytes());
      CHECK(t.back().offset + t.back().bytes == m->param_bytes());
    }
  }

  TEST_CASE("the same seed gives the same bytes and another seed does not") {
    auto a = make_model(tiny_config());
    auto b = make_model(tiny_config());
    GptConfig other = tiny_config();
    other.init_seed = 8;
    auto c = make_model(other);
    REQUIRE((a && b && c));
    CHECK(std::memcmp(a->params(), b->params(), a->param_bytes()) == 0);
    CHECK(std::memcmp(a->params(), c->params(), a->param_bytes()) != 0);
  }

  TEST_CASE("load takes exactly param_bytes bytes") {
    auto a = make_model(tiny_config());
    GptConfig other = tiny_config();
    other.init_seed = 99;
    auto b = make_model(other);
    REQUIRE((a && b));
    std::vector<std::uint8_t> bytes(a->param_bytes());
    std::memcpy(bytes.data(), a->params(), bytes.size());
    core::Status short_load = b->load(bytes.data(), bytes.size() - 4);
    CHECK(short_load.code() == core::Code::kInvalidArgument);
    CHECK(std::memcmp(a->params(), b->params(), a->param_bytes()) != 0);
    REQUIRE(b->load(bytes.data(), bytes.size()).is_ok());
    CHECK(std::memcmp(a->params(), b->params(), a->param_bytes()) == 0);
  }

  TEST_CASE("forward rejects empty, too long and out-of-vocabulary sequences") {
    auto m = make_model(tiny_config());
    REQUIRE(m);
    CHECK(m->forward({}).status().code() == core::Code::kInvalidArgument);
    CHECK(m->forward(std::vector<std::vector<std::int32_t>>(1)).status().code() ==
          core::Code::kInvalidArgument);
    CHECK(m->forward({std::vector<std::int32_t>(13, 1)}).status().code() ==
          core::Code::kInvalidArgument);
    auto bad = m->forward({{1, 2, 11}});
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().message().find("token 11 at position 2") != std::string::npos);
    CHECK(m->backward({{0.0f}}, {}).code() != core::Code::kOk);
  }

  TEST_CASE("a batch gives each sequence what it gets alone") {
    auto m = make_model(tiny_config(true));
    REQUIRE(m);
    std::uint64_t rng = 3;
    std::vector<std::vector<std::int32_t>> seqs = {
        random_tokens(4, 11, rng), random_tokens(12, 11, rng), random_tokens(1, 11, rng)};
    auto batch = m->forward(seqs);
    REQUIRE(batch.is_ok());
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      auto alone = m->forward({seqs[i]});
      REQUIRE(alone.is_ok());
      REQUIRE(batch->logprobs[i].size() == seqs[i].size() - 1);
      REQUIRE(batch->values[i].size() == seqs[i].size());
      for (std::size_t t = 0; t < batch->logprobs[i].size(); ++t) {
        CHECK(batch->logprobs[i][t] == doctest::Approx(alone->logprobs[0][t]).epsilon(1e-5));
        CHECK(batch->logprobs[i][t] < 0.0f);
      }
      for (std::size_t t = 0; t < batch->values[i].size(); ++t)
        CHECK(batch->values[i][t] == doctest::Approx(alone->values[0][t]).epsilon(1e-5));
    }
  }

  TEST_CASE("gradients match central finite differences in every tensor") {
    GptConfig c = tiny_config(true);
    auto m = make_model(c);
    REQUIRE(m);
    std::uint64_t rng = 11;
    WeightedBatch b = perturb_and_batch(*m, c.vocab, rng);
    float* p = m->mutable_params();
    const auto& seqs = b.seqs;
    const auto& wl = b.wl;
    const auto& wv = b.wv;
    m->zero_grad();
    REQUIRE(m->forward(seqs).is_ok());
    REQUIRE(m->backward(wl, wv).is_ok());
    std::vector<float> analytic(m->grads(), m->grads() + m->param_count());

    const float kStep = 1e-2f;
    for (const auto& t : m->tensors()) {
      const std::size_t first = t.offset / sizeof(float);
      const std::size_t count = t.bytes / sizeof(float);
      double diff2 = 0.0, ref2 = 0.0;
      for (int s = 0; s < 6; ++s) {
        const std::size_t idx = first + next_random(rng) % count;
        const float saved = p[idx];
        p[idx] = saved + kStep;
        const double up = weighted_loss(*m, seqs, wl, wv);
        p[idx] = saved - kStep;
        const double down = weighted_loss(*m, seqs, wl, wv);
        p[idx] = saved;
        const double numeric = (up - down) / (2.0 * static_cast<double>(kStep));
        diff2 += (numeric - analytic[idx]) * (numeric - analytic[idx]);
        ref2 += numeric * numeric + static_cast<double>(analytic[idx]) * analytic[idx];
      }
      // Relative error of the sampled gradient as a vector; an absolute floor for tensors whose
      // sampled entries are all (near) zero.
      const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-3);
      INFO("tensor " << t.name << ": relative error " << rel);
      CHECK(rel < 5e-3);
    }
  }
}
