// A sequence moved between reference-model engines with its KV cache: no re-prefill, and the
// continuation is bit for bit what the sequence generates when it never moves. A cache computed
// by other weights is refused.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "model/blas.hpp"
#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "rollout/model_engine.hpp"

using namespace sluice;
using rollout::ModelEngine;
using rollout::ModelEngineConfig;
using rollout::SequenceState;

namespace {

ModelEngineConfig config() {
  ModelEngineConfig c;
  c.gpt.vocab = 20;
  c.gpt.context = 64;
  c.gpt.d_model = 32;
  c.gpt.n_layer = 2;
  c.gpt.n_head = 2;
  c.gpt.d_ff = 64;
  c.gpt.init_seed = 11;
  c.max_sequences = 4;
  c.temperature = 1.0;  // sampled, so the sequence's own random state must travel too
  return c;
}

std::unique_ptr<ModelEngine> engine() {
  model::set_blas_threads(1);
  auto r = ModelEngine::create(config());
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  return std::move(r).value();
}

SequenceState seq(const std::string& id, std::uint64_t rng) {
  SequenceState s;
  s.trajectory_id = id;
  s.prompt_id = "p-" + id;
  std::uint64_t x = rng;
  for (int i = 0; i < 6; ++i)
    s.prompt_tokens.push_back(3 + static_cast<std::int32_t>(model::next_random(x) % 17));
  s.max_new_tokens = 40;
  s.rng_state = rng;
  return s;
}

std::map<std::string, SequenceState> drain(ModelEngine& e) {
  std::map<std::string, SequenceState> out;
  for (int i = 0; i < 200 && e.active() > 0; ++i) {
    for (auto& s : e.step().finished)
      out[s.trajectory_id] = std::move(s);
  }
  REQUIRE(e.active() == 0);
  return out;
}

// The first sampling seed from `from` whose sequence generates more than `steps` tokens on
// weights `w` (version 0: the initial weights): long enough to move mid-way.
std::uint64_t long_seed(std::uint64_t from, int steps, const std::vector<std::uint8_t>* w = nullptr) {
  for (std::uint64_t rng = from; rng < from + 200; ++rng) {
    auto e = engine();
    if (w != nullptr) REQUIRE(e->load_weights(1, w->data(), w->size(), false).is_ok());
    REQUIRE(e->admit(seq("probe", rng)).is_ok());
    auto done = drain(*e);
    if (done["probe"].generated.size() > static_cast<std::size_t>(steps)) return rng;
  }
  FAIL("no sampling seed gives a sequence of more than " << steps << " tokens");
  return 0;
}

// Weights of another init seed, as bytes for load_weights.
std::vector<std::uint8_t> other_weights(std::uint64_t seed) {
  auto c = config().gpt;
  c.init_seed = seed;
  auto m = model::Gpt::create(c);
  REQUIRE(m.is_ok());
  const auto* p = reinterpret_cast<const std::uint8_t*>((*m)->params());
  return {p, p + (*m)->param_bytes()};
}

}  // namespace

TEST_SUITE("rollout.kv_move") {
  TEST_CASE("engine: a sequence moved with its KV cache continues bit for bit as if unmoved") {
    auto source = engine();
    auto dest = engine();
    auto unmoved = engine();
    const std::uint64_t moving = long_seed(4242, 16);
    const std::uint64_t staying = long_seed(moving + 1, 12);
    // Each engine runs the same batch: the moving sequence and one that stays (on the
    // destination, one that was already there).
    for (auto* e : {source.get(), unmoved.get()}) {
      REQUIRE(e->admit(seq("moving", moving)).is_ok());
      REQUIRE(e->admit(seq("staying", staying)).is_ok());
    }
    REQUIRE(dest->admit(seq("staying", staying)).is_ok());
    for (int i = 0; i < 9; ++i) {
      REQUIRE(source->step().finished.empty());
      REQUIRE(dest->step().finished.empty());
    }
    auto out = source->export_sequence_with_kv("moving");
    REQUIRE(out.is_ok());
    REQUIRE(out->kv.has_value());
    CHECK(out->generated.size() == 9);
    CHECK(out->kv->positions + 1 == out->kv_tokens());  // all but the last token, fed next
    CHECK(out->kv->version == 0);
    CHECK(out->kv->bytes() == 2ull * 2 * 32 * out->kv->positions * sizeof(float));
    CHECK(source->active() == 1);
    CHECK(source->kv_tokens_used() == 6 + 9);

    // Through the wire format, into the destination: no re-prefill.
    auto back = SequenceState::from_json(nlohmann::json::parse(out->to_json().dump()));
    REQUIRE(back.is_ok());
    REQUIRE(back->kv.has_value());
    CHECK(back->kv->keys == out->kv->keys);  // bit for bit after JSON
    CHECK(back->kv->values == out->kv->values);
    REQUIRE(dest->admit(std::move(back).value()).is_ok());
    CHECK(dest->kv_tokens_used() == 2 * (6 + 9));  // both sequences: prompt + generated
    auto first = dest->step();
    CHECK(first.prefill_tokens == 0);
    CHECK(first.batch == 2);

    auto moved = drain(*dest);
    for (auto& s : first.finished)
      moved[s.trajectory_id] = s;
    auto stayed = drain(*unmoved);
    REQUIRE(moved.count("moving") == 1);
    const SequenceState& x = moved["moving"];
    const SequenceState& y = stayed["moving"];
    CHECK(x.generated.size() > 9);
    CHECK(x.generated == y.generated);
    CHECK(x.logprobs == y.logprobs);  // exact float equality: the same computation
    CHECK(x.rng_state == y.rng_state);
    CHECK(x.versions == y.versions);
    CHECK_FALSE(x.kv.has_value());
  }

  TEST_CASE("engine: a KV cache of other weights is refused, and changes nothing") {
    auto source = engine();
    auto dest = engine();
    const auto w1 = other_weights(21);
    const auto w2 = other_weights(22);
    REQUIRE(source->load_weights(1, w1.data(), w1.size(), false).is_ok());
    REQUIRE(dest->load_weights(2, w2.data(), w2.size(), false).is_ok());
    REQUIRE(source->admit(seq("moving", long_seed(99, 6, &w1))).is_ok());
    for (int i = 0; i < 4; ++i)
      REQUIRE(source->step().finished.empty());
    auto out = source->export_sequence_with_kv("moving");
    REQUIRE(out.is_ok());
    REQUIRE(out->kv.has_value());
    CHECK(out->kv->version == 1);

    auto st = dest->admit(*out);
    CHECK(st.code() == core::Code::kFailedPrecondition);
    CHECK(st.message().find("version 1") != std::string::npos);
    CHECK(dest->active() == 0);
    CHECK(dest->kv_tokens_used() == 0);

    // Without its cache it may go anywhere: re-prefilled with the weights loaded there.
    SequenceState plain = *out;
    plain.kv.reset();
    REQUIRE(dest->admit(plain).is_ok());
    CHECK(dest->step().prefill_tokens == 6 + 4);
  }

  TEST_CASE("engine: a KV cache of the wrong shape or length is refused") {
    auto source = engine();
    auto dest = engine();
    REQUIRE(source->admit(seq("s", long_seed(7, 5))).is_ok());
    for (int i = 0; i < 3; ++i)
      REQUIRE(source->step().finished.empty());
    auto out = source->export_sequence_with_kv("s");
    REQUIRE(out.is_ok());
    REQUIRE(out->kv.has_value());
    SequenceState short_by_one = *out;
    short_by_one.generated.pop_back();
    short_by_one.logprobs.pop_back();
    CHECK(dest->admit(short_by_one).code() == core::Code::kInvalidArgument);
    SequenceState wide = *out;
    wide.kv->width = 64;
    CHECK(dest->admit(wide).code() == core::Code::kInvalidArgument);
    CHECK(dest->active() == 0);
    // A sequence not stepped since admission has no cache yet: exported without one.
    REQUIRE(source->admit(seq("fresh", 8)).is_ok());
    auto fresh = source->export_sequence_with_kv("fresh");
    REQUIRE(fresh.is_ok());
    CHECK_FALSE(fresh->kv.has_value());
    REQUIRE(dest->admit(*out).is_ok());
  }
}
