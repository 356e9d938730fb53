// The reference-model engine against generation done directly with the model: the same tokens
// and log-probs under continuous batching, across a migration, across a weight store, and the
// rules that end a sequence or refuse one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <span>

#include "../support/store_process.hpp"
#include "actor/publisher.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "format/bf16.hpp"
#include "model/blas.hpp"
#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/model_engine.hpp"
#include "weightstore/client.hpp"

using namespace sluice;
using core::Millis;
using rollout::ModelEngine;
using rollout::ModelEngineConfig;
using rollout::SequenceState;

namespace {

constexpr std::int32_t kEos = rl::Tokenizer::kEos;

model::GptConfig tiny_gpt(std::uint64_t init_seed = 7) {
  model::GptConfig c;
  c.vocab = 20;
  c.context = 48;
  c.d_model = 32;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_ff = 64;
  c.init_seed = init_seed;
  return c;
}

ModelEngineConfig engine_config(double temperature, std::uint32_t max_sequences = 8) {
  ModelEngineConfig c;
  c.gpt = tiny_gpt();
  c.max_sequences = max_sequences;
  c.temperature = temperature;
  return c;
}

std::unique_ptr<ModelEngine> make_engine(const ModelEngineConfig& c) {
  model::set_blas_threads(1);  // small matrices on shared cores
  auto r = ModelEngine::create(c);
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  return std::move(r).value();
}

std::unique_ptr<model::Gpt> make_gpt(const model::GptConfig& c) {
  auto r = model::Gpt::create(c);
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

std::vector<std::uint8_t> bytes_of(const model::Gpt& m) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(m.params());
  return {p, p + m.param_bytes()};
}

// A prompt of ordinary tokens (no PAD, BOS or EOS).
std::vector<std::int32_t> prompt_of(std::size_t n, std::uint64_t seed) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t)
    x = 3 + static_cast<std::int32_t>(model::next_random(seed) % 17);
  return t;
}

SequenceState make_seq(const std::string& id, std::vector<std::int32_t> prompt,
                       std::uint64_t max_new, std::uint64_t rng) {
  SequenceState s;
  s.trajectory_id = id;
  s.prompt_id = "p-" + id;
  s.prompt_tokens = std::move(prompt);
  s.max_new_tokens = max_new;
  s.rng_state = rng;
  return s;
}

struct Generated {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
};

// The reference: the model alone, one prefill then one decode per token, with the engine's
// stopping rules.
Generated reference(model::Gpt& m, const std::vector<std::int32_t>& prompt, std::uint64_t max_new,
                    float temperature, std::uint64_t rng) {
  Generated g;
  model::KvCache cache = m.make_cache();
  std::vector<float> logits;
  REQUIRE(m.prefill(cache, prompt, logits).is_ok());
  const auto context = static_cast<std::size_t>(m.config().context);
  while (true) {
    auto s = model::sample(logits, temperature, rng);
    REQUIRE(s.is_ok());
    g.tokens.push_back(s->token);
    g.logprobs.push_back(s->logprob);
    if (s->token == kEos || g.tokens.size() >= max_new ||
        prompt.size() + g.tokens.size() >= context) {
      break;
    }
    model::KvCache* c = &cache;
    REQUIRE(m.decode(std::span<model::KvCache* const>(&c, 1),
                     std::span<const std::int32_t>(&s->token, 1), logits)
                .is_ok());
  }
  return g;
}

// Steps until the engine is empty; returns the finished sequences by id.
std::map<std::string, SequenceState> drain(ModelEngine& e) {
  std::map<std::string, SequenceState> out;
  for (int i = 0; i < 1000 && e.active() > 0; ++i) {
    auto r = e.step();
    CHECK(r.wait_s == 0.0);
    for (auto& s : r.finished)
      out[s.trajectory_id] = std::move(s);
  }
  CHECK(e.active() == 0);
  CHECK(e.kv_tokens_used() == 0);
  return out;
}

std::uint64_t rng_of(const ModelEngine& e, const std::string& id) {
  for (const auto& s : e.snapshot())
    if (s.trajectory_id == id) return s.rng_state;
  FAIL("sequence " << id << " is not active");
  return 0;
}

using Store = testing::StoreProcess;

}  // namespace

TEST_SUITE("rollout.model_engine") {
  TEST_CASE("the engine generates what the model generates alone, as sequences join and leave") {
    for (double temperature : {0.0, 1.0}) {
      CAPTURE(temperature);
      auto e = make_engine(engine_config(temperature, 4));
      auto m = make_gpt(tiny_gpt());
      // Prompt lengths, budgets and seeds differ; "s5" comes without a seed (derived from its id).
      struct Spec {
        std::size_t prompt;
        std::uint64_t max_new;
        std::uint64_t rng;
      };
      const std::vector<Spec> specs = {{3, 12, 101},  {9, 30, 102}, {1, 6, 103},
                                       {14, 20, 104}, {5, 40, 105}, {7, 9, 0}};
      std::map<std::string, std::uint64_t> rng;
      std::map<std::string, std::vector<std::int32_t>> prompts;
      std::map<std::string, SequenceState> finished;
      std::set<int> finish_steps;
      std::size_t next = 0;
      std::uint32_t widest = 0;
      for (int step = 0; step < 500 && (next < specs.size() || e->active() > 0); ++step) {
        // One new sequence joins every other step while there is room.
        if (next < specs.size() && step % 2 == 0 && e->can_admit(specs[next].prompt)) {
          const std::string id = "s" + std::to_string(next);
          prompts[id] = prompt_of(specs[next].prompt, 1000 + next);
          REQUIRE(
              e->admit(make_seq(id, prompts[id], specs[next].max_new, specs[next].rng)).is_ok());
          rng[id] = rng_of(*e, id);  // the derived state for "s5"
          ++next;
        }
        auto r = e->step();
        widest = std::max(widest, r.batch);
        CHECK(r.tokens == r.batch);
        for (auto& s : r.finished) {
          finish_steps.insert(step);
          finished[s.trajectory_id] = std::move(s);
        }
      }
      REQUIRE(finished.size() == specs.size());
      CHECK(widest >= 3);               // several sequences really shared decode steps
      CHECK(finish_steps.size() >= 4);  // and left at different steps
      CHECK(rng["s5"] != 0);
      for (std::size_t i = 0; i < specs.size(); ++i) {
        const std::string id = "s" + std::to_string(i);
        CAPTURE(id);
        const SequenceState& s = finished[id];
        Generated want =
            reference(*m, prompts[id], specs[i].max_new, static_cast<float>(temperature), rng[id]);
        CHECK(s.generated == want.tokens);
        REQUIRE(s.logprobs.size() == want.logprobs.size());
        for (std::size_t t = 0; t < want.logprobs.size(); ++t)
          CHECK(s.logprobs[t] == doctest::Approx(want.logprobs[t]).epsilon(1e-5));
        CHECK(s.versions == std::vector<std::uint64_t>{0});
        CHECK(s.prompt_tokens == prompts[id]);
      }
    }
  }

  TEST_CASE("a sequence migrated mid-way finishes exactly as if it had not moved") {
    auto a = make_engine(engine_config(1.0));
    auto b = make_engine(engine_config(1.0));
    auto unmoved = make_engine(engine_config(1.0));
    const auto prompt = prompt_of(6, 77);
    for (auto* e : {a.get(), unmoved.get()}) {
      REQUIRE(e->admit(make_seq("moving", prompt, 30, 4242)).is_ok());
      REQUIRE(e->admit(make_seq("staying", prompt_of(4, 78), 30, 4343)).is_ok());
    }
    for (int i = 0; i < 7; ++i) {
      auto r = a->step();
      REQUIRE(r.finished.empty());
    }
    auto before = a->snapshot();
    CHECK(a->active() == 2);  // snapshot leaves sequences in place
    auto out = a->export_sequence("moving");
    REQUIRE(out.is_ok());
    CHECK(out->generated.size() == 7);
    CHECK(a->active() == 1);
    CHECK(a->kv_tokens_used() == 4 + 7);
    CHECK(a->export_sequence("moving").status().code() == core::Code::kNotFound);

    // Through the wire format, into another engine with the same weights.
    auto back = SequenceState::from_json(nlohmann::json::parse(out->to_json().dump()));
    REQUIRE(back.is_ok());
    REQUIRE(b->admit(std::move(back).value()).is_ok());
    auto first = b->step();
    CHECK(first.prefill_tokens == 6 + 7);  // prompt + generated re-prefilled
    auto moved = drain(*b);
    if (!first.finished.empty()) moved["moving"] = first.finished[0];
    auto stayed = drain(*unmoved);
    REQUIRE(moved.count("moving") == 1);
    const SequenceState& x = moved["moving"];
    const SequenceState& y = stayed["moving"];
    CHECK(x.generated.size() > 7);
    CHECK(x.generated == y.generated);
    CHECK(x.logprobs == y.logprobs);
    CHECK(x.versions == y.versions);

    // export_all hands back everything left.
    auto rest = a->export_all();
    REQUIRE(rest.size() == 1);
    CHECK(rest[0].trajectory_id == "staying");
    CHECK(a->active() == 0);
    CHECK(a->kv_tokens_used() == 0);
  }

  TEST_CASE("end of sequence, max_new_tokens and the context end a sequence") {
    SUBCASE("end of sequence") {
      // Weights that always say EOS: the final norm outputs ones, EOS's embedding row is ones.
      auto m = make_gpt(tiny_gpt());
      float* p = m->mutable_params();
      for (const auto& t : m->tensors()) {
        float* w = p + t.offset / sizeof(float);
        const std::size_t n = t.bytes / sizeof(float);
        if (t.name == "ln_f.weight") std::fill_n(w, n, 0.0f);
        if (t.name == "ln_f.bias") std::fill_n(w, n, 1.0f);
        if (t.name == "wte") std::fill_n(w + kEos * 32, 32, 1.0f);
      }
      const auto w = bytes_of(*m);
      for (double temperature : {0.0, 1.0}) {
        auto e = make_engine(engine_config(temperature));
        REQUIRE(e->load_weights(1, w.data(), w.size(), false).is_ok());
        REQUIRE(e->admit(make_seq("a", prompt_of(5, 1), 10, 1)).is_ok());
        REQUIRE(e->admit(make_seq("b", prompt_of(2, 2), 10, 2)).is_ok());
        auto r = e->step();
        REQUIRE(r.finished.size() == 2);
        for (const auto& s : r.finished) {
          CHECK(s.generated == std::vector<std::int32_t>{kEos});
          CHECK(s.logprobs[0] == doctest::Approx(0.0).epsilon(1e-4));
          CHECK(s.versions == std::vector<std::uint64_t>{1});
        }
        CHECK(e->active() == 0);
      }
    }
    SUBCASE("max_new_tokens") {
      auto e = make_engine(engine_config(0.0));
      REQUIRE(e->admit(make_seq("a", prompt_of(3, 5), 5, 1)).is_ok());
      auto done = drain(*e);
      REQUIRE(done.size() == 1);
      CHECK(done["a"].generated.size() == 5);
      CHECK(std::count(done["a"].generated.begin(), done["a"].generated.end(), kEos) == 0);
    }
    SUBCASE("the context") {
      auto e = make_engine(engine_config(0.0));
      REQUIRE(e->admit(make_seq("a", prompt_of(40, 6), 100, 1)).is_ok());
      auto done = drain(*e);
      REQUIRE(done.size() == 1);
      CHECK(done["a"].generated.size() == 8);
      CHECK(done["a"].kv_tokens() == 48);
      CHECK(std::count(done["a"].generated.begin(), done["a"].generated.end(), kEos) == 0);
    }
    SUBCASE("a migrated sequence that is already complete finishes without a token") {
      auto e = make_engine(engine_config(1.0));
      auto s = make_seq("a", prompt_of(3, 7), 2, 1);
      s.generated = {5, 6};
      s.logprobs = {-1.0f, -2.0f};
      s.versions = {3};
      REQUIRE(e->admit(s).is_ok());
      auto r = e->step();
      REQUIRE(r.finished.size() == 1);
      CHECK(r.tokens == 0);
      CHECK(r.finished[0].generated == s.generated);
      CHECK(r.finished[0].versions == std::vector<std::uint64_t>{3, 0});
    }
  }

  TEST_CASE("the device setting is checked by name") {
    auto c = engine_config(1.0);
    CHECK(c.device == "cpu");
    c.device = "cuda";
    CHECK(c.validate().is_ok());
    c.device = "gpu0";
    CHECK(c.validate().code() == core::Code::kInvalidArgument);
    CHECK(ModelEngine::create(c).status().message().find("'gpu0'") != std::string::npos);
  }

  TEST_CASE("admission enforces the capacity and refuses malformed sequences") {
    auto c = engine_config(1.0, 2);
    c.max_kv_tokens = 30;
    auto e = make_engine(c);
    CHECK(e->capacity().max_sequences == 2);
    CHECK(e->capacity().max_kv_tokens == 30);
    CHECK(make_engine(engine_config(1.0, 3))->capacity().max_kv_tokens == 3 * 48);

    REQUIRE(e->admit(make_seq("a", prompt_of(20, 1), 5, 1)).is_ok());
    CHECK(e->kv_tokens_used() == 20);
    CHECK_FALSE(e->can_admit(11));
    auto st = e->admit(make_seq("b", prompt_of(11, 2), 5, 1));
    CHECK(st.code() == core::Code::kResourceExhausted);
    CHECK(st.message().find("KV tokens") != std::string::npos);
    CHECK(e->admit(make_seq("a", prompt_of(2, 2), 5, 1)).code() == core::Code::kAlreadyExists);
    REQUIRE(e->admit(make_seq("b", prompt_of(10, 2), 5, 1)).is_ok());
    CHECK_FALSE(e->can_admit(0));
    st = e->admit(make_seq("c", prompt_of(1, 3), 5, 1));
    CHECK(st.code() == core::Code::kResourceExhausted);
    CHECK(st.message().find("batch full") != std::string::npos);
    CHECK(e->active() == 2);
    auto ids = e->active_sequences();
    REQUIRE(ids.size() == 2);
    CHECK(ids[0].trajectory_id == "a");
    CHECK(ids[0].kv_tokens == 20);
    CHECK(ids[0].first_version == 0);  // nothing generated yet

    auto f = make_engine(engine_config(1.0));
    CHECK(f->admit(make_seq("", {3}, 5, 1)).code() == core::Code::kInvalidArgument);
    CHECK(f->admit(make_seq("x", {3}, 0, 1)).code() == core::Code::kInvalidArgument);
    CHECK(f->admit(make_seq("x", {}, 5, 1)).code() == core::Code::kInvalidArgument);
    CHECK(f->admit(make_seq("x", {3, 20}, 5, 1)).code() == core::Code::kInvalidArgument);
    CHECK(f->admit(make_seq("x", prompt_of(49, 1), 5, 1)).code() == core::Code::kInvalidArgument);
    auto bad = make_seq("x", {3}, 5, 1);
    bad.generated = {4};
    CHECK(f->admit(bad).code() == core::Code::kInvalidArgument);  // no log-prob for it
    CHECK(f->active() == 0);

    auto cfg = engine_config(-1.0);
    CHECK(ModelEngine::create(cfg).status().code() == core::Code::kInvalidArgument);
    cfg = engine_config(1.0, 0);
    CHECK(ModelEngine::create(cfg).status().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("a bf16 version loads as its exact fp32 widening, and other sizes are refused") {
    auto m = make_gpt(tiny_gpt(8));
    const auto w = bytes_of(*m);
    std::vector<std::uint8_t> half(w.size() / 2);
    REQUIRE(core::round_to_bf16({reinterpret_cast<const float*>(w.data()), w.size() / 4}, half)
                .is_ok());
    std::vector<float> widened(w.size() / 4);
    REQUIRE(core::widen_bf16(half, widened).is_ok());
    const auto* wb = reinterpret_cast<const std::uint8_t*>(widened.data());

    // Greedy generation from the bf16 version equals generation from its widened fp32 values.
    auto from_bf16 = make_engine(engine_config(0.0));
    auto from_f32 = make_engine(engine_config(0.0));
    REQUIRE(from_bf16->load_weights(3, half.data(), half.size(), false).is_ok());
    REQUIRE(from_f32->load_weights(3, wb, w.size(), false).is_ok());
    CHECK(from_bf16->version() == 3);
    for (auto* e : {from_bf16.get(), from_f32.get()})
      REQUIRE(e->admit(make_seq("a", prompt_of(6, 4), 12, 5)).is_ok());
    auto x = drain(*from_bf16), y = drain(*from_f32);
    CHECK(x["a"].generated == y["a"].generated);
    CHECK(x["a"].logprobs == y["a"].logprobs);

    // A size that is neither: refused, nothing loaded, the message names both sizes.
    auto st = from_bf16->load_weights(4, half.data(), half.size() - 2, false);
    CHECK(st.code() == core::Code::kInvalidArgument);
    CHECK(st.message().find(std::to_string(w.size()) + " (f32) or " + std::to_string(half.size()) +
                            " (bf16)") != std::string::npos);
    CHECK(from_bf16->version() == 3);
  }

  TEST_CASE("weights load by version, refused while active unless allowed, then recomputed") {
    auto e = make_engine(engine_config(1.0));
    auto m1 = make_gpt(tiny_gpt(8));
    const auto w1 = bytes_of(*m1);
    CHECK(e->version() == 0);
    CHECK(e->weight_bytes() == w1.size());

    auto st = e->load_weights(1, w1.data(), w1.size() - 4, false);
    CHECK(st.code() == core::Code::kInvalidArgument);
    CHECK(e->version() == 0);

    const auto prompt = prompt_of(5, 9);
    REQUIRE(e->admit(make_seq("a", prompt, 20, 31)).is_ok());
    for (int i = 0; i < 3; ++i)
      REQUIRE(e->step().finished.empty());
    st = e->load_weights(1, w1.data(), w1.size(), false);
    CHECK(st.code() == core::Code::kFailedPrecondition);
    CHECK(e->version() == 0);

    // Continued on new weights: the next token comes from prompt + generated re-prefilled with
    // version 1, sampled with the sequence's own state.
    const SequenceState mid = e->snapshot().at(0);
    REQUIRE(e->load_weights(1, w1.data(), w1.size(), true).is_ok());
    CHECK(e->version() == 1);
    auto r = e->step();
    CHECK(r.prefill_tokens == 5 + 3);
    const SequenceState after = r.finished.empty() ? e->snapshot().at(0) : std::move(r.finished[0]);
    std::vector<std::int32_t> seq = mid.prompt_tokens;
    seq.insert(seq.end(), mid.generated.begin(), mid.generated.end());
    model::KvCache cache = m1->make_cache();
    std::vector<float> logits;
    REQUIRE(m1->prefill(cache, seq, logits).is_ok());
    std::uint64_t rng = mid.rng_state;
    auto want = model::sample(logits, 1.0f, rng);
    REQUIRE(want.is_ok());
    REQUIRE(after.generated.size() == 4);
    CHECK(after.generated[3] == want->token);
    CHECK(after.logprobs[3] == doctest::Approx(want->logprob).epsilon(1e-5));
    CHECK(after.rng_state == rng);
    CHECK(after.versions == std::vector<std::uint64_t>{0, 1});

    // A sequence admitted now records only version 1.
    REQUIRE(e->admit(make_seq("b", prompt, 3, 32)).is_ok());
    auto done = drain(*e);
    CHECK(done["b"].versions == std::vector<std::uint64_t>{1});
    CHECK(done["a"].versions == std::vector<std::uint64_t>{0, 1});
  }

  TEST_CASE("a model published and pulled generates the same tokens under the same seed") {
    Store store;
    auto loop = core::EventLoop::create().value();
    auto transfer = core::TransferEngine::create(*loop, {}).value();
    auto client =
        weightstore::StoreClient::create(*loop, store.endpoint, core::Security::plain()).value();
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = 16 * 1024;
    auto pub = actor::Publisher::create(*loop, *transfer, *client, po);
    REQUIRE_MESSAGE(pub.is_ok(), pub.status().to_string());

    // The trained model differs from the engines' initial weights (init_seed 7).
    auto m = make_gpt(tiny_gpt(99));
    std::vector<actor::TensorView> views;
    const auto* base = reinterpret_cast<const std::uint8_t*>(m->params());
    for (const auto& t : m->tensors())
      views.push_back({t.name, t.dtype, t.shape, base + t.offset, t.bytes});
    auto manifest = (*pub)->publish(1, views);
    REQUIRE_MESSAGE(manifest.is_ok(), manifest.status().to_string());

    auto pulled = weightstore::pull(*transfer, *client, "policy", 0, {});
    REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
    CHECK(pulled->manifest.version == 1);
    REQUIRE(pulled->manifest.total_bytes == m->param_bytes());

    auto local = make_engine(engine_config(1.0));
    auto remote = make_engine(engine_config(1.0));
    auto untrained = make_engine(engine_config(1.0));
    REQUIRE(local->load_weights(1, base, m->param_bytes(), false).is_ok());
    REQUIRE(remote->load_weights(1, pulled->buffer->data(), pulled->manifest.total_bytes, false)
                .is_ok());
    for (auto* e : {local.get(), remote.get(), untrained.get()}) {
      for (int i = 0; i < 4; ++i) {
        const std::string id = "t" + std::to_string(i);
        REQUIRE(e->admit(make_seq(id, prompt_of(3 + 2 * static_cast<std::size_t>(i), 50 + i), 24,
                                  500 + static_cast<std::uint64_t>(i)))
                    .is_ok());
      }
    }
    auto x = drain(*local);
    auto y = drain(*remote);
    auto z = drain(*untrained);
    REQUIRE(x.size() == 4);
    REQUIRE(y.size() == 4);
    bool any_differs_from_untrained = false;
    for (const auto& [id, s] : x) {
      CAPTURE(id);
      CHECK(s.generated == y[id].generated);
      CHECK(s.logprobs == y[id].logprobs);
      CHECK(y[id].versions == std::vector<std::uint64_t>{1});
      if (s.generated != z[id].generated) any_differs_from_untrained = true;
    }
    CHECK(any_differs_from_untrained);  // the pulled weights were really used
  }
}
