// A sequence moved between reference-model engines with its KV cache: no re-prefill, and the
// continuation is bit for bit what the sequence generates when it never moves. A cache computed
// by other weights is refused. Moved over UCX (rollout/kv_transfer.hpp), the cache is read from the
// source's registered memory; a read that fails or reads wrong bytes costs a re-prefill and
// nothing else.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "model/blas.hpp"
#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "rollout/kv_transfer.hpp"
#include "rollout/model_engine.hpp"
#include "wire/transfer.hpp"

using namespace sluice;
using rollout::KvState;
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
std::uint64_t long_seed(std::uint64_t from, int steps,
                        const std::vector<std::uint8_t>* w = nullptr) {
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

// Two transfer engines on one loop, one for each rollout, over loopback UCX on `tls`. The buffers
// a test makes are declared after it, so they are freed before the engines go.
struct Ucx {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> source, dest;
  explicit Ucx(const std::string& tls) {
    core::TransferOptions o;
    o.ucx_config = {{"TLS", tls}, {"NET_DEVICES", "lo"}};
    for (auto* e : {&source, &dest}) {
      auto r = core::TransferEngine::create(*loop, o);
      REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
      *e = std::move(r).value();
    }
  }
};

// A sequence of `rng` stepped `steps` times on a fresh engine, exported with its KV cache.
SequenceState exported_after(std::uint64_t rng, int steps) {
  auto source = engine();
  REQUIRE(source->admit(seq("moving", rng)).is_ok());
  for (int i = 0; i < steps; ++i)
    REQUIRE(source->step().finished.empty());
  auto out = source->export_sequence_with_kv("moving");
  REQUIRE(out.is_ok());
  REQUIRE(out->kv.has_value());
  return std::move(out).value();
}

// The sequence as it finishes on an engine that never moved it.
SequenceState unmoved_run(std::uint64_t rng) {
  auto e = engine();
  REQUIRE(e->admit(seq("moving", rng)).is_ok());
  return drain(*e)["moving"];
}

// Admits `s` on a fresh engine and runs it to the end; `prefill` is what the first step
// prefilled.
SequenceState continue_on_dest(SequenceState s, std::uint64_t& prefill) {
  auto dest = engine();
  REQUIRE(dest->admit(std::move(s)).is_ok());
  auto first = dest->step();
  prefill = first.prefill_tokens;
  auto done = drain(*dest);
  for (auto& f : first.finished)
    done[f.trajectory_id] = f;
  REQUIRE(done.count("moving") == 1);
  return done["moving"];
}

// `x` continued after a move as `y` did unmoved. With its cache moved the computation is the same,
// so the log-probabilities are too, bit for bit; re-prefilled, the cache is computed in one pass
// rather than token by token, which rounds differently: the same tokens, log-probabilities equal
// to within float rounding.
void check_same_continuation(const SequenceState& x, const SequenceState& y, bool bit_exact) {
  CHECK(x.generated.size() > 9);
  CHECK(x.generated == y.generated);
  CHECK(x.rng_state == y.rng_state);
  REQUIRE(x.logprobs.size() == y.logprobs.size());
  if (bit_exact) {
    CHECK(x.logprobs == y.logprobs);
  } else {
    for (std::size_t i = 0; i < x.logprobs.size(); ++i)
      CHECK(x.logprobs[i] == doctest::Approx(y.logprobs[i]).epsilon(1e-4));
  }
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

TEST_SUITE("rollout.kv_ucx") {
  TEST_CASE("a KV cache read over UCX continues the sequence bit for bit, with no re-prefill") {
    const std::uint64_t rng = long_seed(4242, 16);
    const SequenceState stayed = unmoved_run(rng);
    for (const std::string tls : {"tcp", "sm,self"}) {
      CAPTURE(tls);
      Ucx ucx(tls);
      SequenceState out = exported_after(rng, 9);
      const KvState sent = *out.kv;
      auto published = rollout::publish_kv(*ucx.source, sent, {"rollout-a", "moving"});
      REQUIRE_MESSAGE(published.is_ok(), published.status().to_string());
      CHECK(published->ref.bytes == sent.bytes());
      out.kv_ref = published->ref;
      out.kv.reset();

      // The manager's message carries the reference, not the floats.
      const nlohmann::json j = out.to_json();
      CHECK_FALSE(j.contains("kv"));
      CHECK(j.dump().size() < 2048);
      auto back = SequenceState::from_json(nlohmann::json::parse(j.dump()));
      REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
      REQUIRE(back->kv_ref.has_value());
      CHECK_FALSE(back->kv.has_value());

      auto dest_engine = engine();
      rollout::KvReadStats stats;
      auto st = rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, *back, "rollout-b",
                                     core::Millis(10000), stats);
      REQUIRE_MESSAGE(st.is_ok(), st.to_string());
      CHECK(stats.fetched == 1);
      CHECK(stats.fetched_bytes == sent.bytes());
      CHECK(stats.read_failed == 0);
      CHECK_FALSE(back->kv_ref.has_value());
      REQUIRE(back->kv.has_value());
      CHECK(back->kv->keys == sent.keys);  // bit for bit
      CHECK(back->kv->values == sent.values);
      CHECK(back->kv->version == sent.version);
      CHECK(back->kv->positions == sent.positions);

      std::uint64_t prefill = 99;
      SequenceState moved = continue_on_dest(std::move(back).value(), prefill);
      CHECK(prefill == 0);
      check_same_continuation(moved, stayed, /*bit_exact=*/true);
    }
  }

  TEST_CASE("a KV read that gets the wrong bytes or finds no buffer falls back to re-prefill") {
    const std::uint64_t rng = long_seed(4242, 16);
    const SequenceState stayed = unmoved_run(rng);
    Ucx ucx("tcp");
    SequenceState out = exported_after(rng, 9);
    const std::uint64_t tokens = out.kv_tokens();
    auto published = rollout::publish_kv(*ucx.source, *out.kv, {"rollout-a", "moving"});
    REQUIRE(published.is_ok());
    out.kv.reset();
    auto dest_engine = engine();
    rollout::KvReadStats stats;

    SequenceState corrupt = out;
    corrupt.kv_ref = published->ref;
    corrupt.kv_ref->checksum ^= 1;
    auto st = rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, corrupt, "rollout-b",
                                   core::Millis(10000), stats);
    CHECK(st.code() == core::Code::kDataLoss);
    CHECK(stats.read_failed == 1);
    CHECK(stats.fetched == 0);
    CHECK_FALSE(corrupt.kv.has_value());
    CHECK_FALSE(corrupt.kv_ref.has_value());

    // The source freed its buffer (its hold passed, or it went away).
    SequenceState orphan = out;
    orphan.kv_ref = published->ref;
    published->buffer.reset();
    st = rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, orphan, "rollout-b", core::Millis(5000),
                              stats);
    CHECK_FALSE(st.is_ok());
    CHECK(stats.read_failed == 2);
    CHECK(stats.fetched == 0);
    CHECK_FALSE(orphan.kv.has_value());
    CHECK_FALSE(orphan.kv_ref.has_value());

    // Either way the sequence itself is whole: re-prefilled, it generates what it would unmoved.
    for (SequenceState* s : {&corrupt, &orphan}) {
      std::uint64_t prefill = 0;
      SequenceState moved = continue_on_dest(*s, prefill);
      CHECK(prefill == tokens);
      check_same_continuation(moved, stayed, /*bit_exact=*/false);
    }
  }

  TEST_CASE(
      "a KV reference to another rollout's buffer, another sequence's, or issued to another "
      "rollout is refused, and the sequence re-prefills") {
    // A member that hands the manager a reference it did not get from publishing this sequence's
    // cache itself: the bytes behind it are consistent (their checksum matches), but they are
    // not this sequence's cache from that rollout.
    const std::uint64_t rng = long_seed(4242, 16);
    const SequenceState stayed = unmoved_run(rng);
    for (const std::string tls : {"tcp", "sm,self"}) {
      CAPTURE(tls);
      Ucx ucx(tls);
      SequenceState out = exported_after(rng, 9);
      const std::uint64_t tokens = out.kv_tokens();
      SequenceState other = exported_after(long_seed(77, 16), 9);
      auto own = rollout::publish_kv(*ucx.source, *out.kv, {"rollout-a", "moving"});
      auto theirs = rollout::publish_kv(*ucx.source, *other.kv, {"rollout-c", "moving"});
      auto elsewhere = rollout::publish_kv(*ucx.source, *other.kv, {"rollout-a", "elsewhere"});
      REQUIRE(own.is_ok());
      REQUIRE(theirs.is_ok());
      REQUIRE(elsewhere.is_ok());
      out.kv.reset();

      rollout::KvRef another_rollouts = theirs->ref;
      another_rollouts.source = "rollout-a";  // passed off as rollout-a's own
      rollout::KvRef another_sequences = elsewhere->ref;
      rollout::KvRef another_destination = own->ref;
      another_destination.destination = "rollout-x";
      auto dest_engine = engine();
      rollout::KvReadStats stats;
      std::uint64_t failed = 0;
      for (const rollout::KvRef& forged :
           {another_rollouts, another_sequences, another_destination}) {
        SequenceState s = out;
        s.kv_ref = forged;
        // Through the manager's message and back, as the destination receives it.
        auto back = SequenceState::from_json(nlohmann::json::parse(s.to_json().dump()));
        REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
        auto st = rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, *back, "rollout-b",
                                       core::Millis(10000), stats);
        CHECK(st.code() == core::Code::kPermissionDenied);
        CHECK(stats.read_failed == ++failed);
        CHECK(stats.fetched == 0);
        CHECK_FALSE(back->kv.has_value());
        CHECK_FALSE(back->kv_ref.has_value());
        std::uint64_t prefill = 0;
        SequenceState moved = continue_on_dest(std::move(back).value(), prefill);
        CHECK(prefill == tokens);
        check_same_continuation(moved, stayed, /*bit_exact=*/false);
      }
      // The reference as the manager issued it, to this rollout, is read.
      SequenceState issued = out;
      issued.kv_ref = own->ref;
      issued.kv_ref->destination = "rollout-b";
      auto st = rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, issued, "rollout-b",
                                     core::Millis(10000), stats);
      CHECK_MESSAGE(st.is_ok(), st.to_string());
      CHECK(stats.fetched == 1);
    }
  }

  TEST_CASE("an absurd KV reference is refused before anything is allocated for it") {
    Ucx ucx("tcp");
    auto dest_engine = engine();
    SequenceState s = exported_after(long_seed(7, 5), 3);
    auto published = rollout::publish_kv(*ucx.source, *s.kv, {"rollout-a", "moving"});
    REQUIRE(published.is_ok());
    s.kv.reset();

    // A shape of 2^20 x 2^20 x 2^20 (2^63 bytes): over what this engine could ever hold, refused
    // on its size (allocating it would fail otherwise, with another message).
    rollout::KvRef huge = published->ref;
    huge.layers = huge.width = huge.positions = 1u << 20;
    huge.bytes = huge.shape_bytes();
    rollout::FetchKvOptions o;
    o.max_bytes = dest_engine->capacity().max_kv_tokens * dest_engine->kv_bytes_per_token();
    auto r = rollout::fetch_kv(*ucx.dest, huge, o);
    CHECK(r.status().code() == core::Code::kInvalidArgument);
    CHECK(r.status().message().find("more than this engine holds") != std::string::npos);

    // A byte count that disagrees with the shape, and a region that is not a descriptor.
    rollout::KvRef lying = published->ref;
    lying.bytes += 4;
    CHECK(rollout::fetch_kv(*ucx.dest, lying, o).status().code() == core::Code::kInvalidArgument);
    rollout::KvRef garbled = published->ref;
    garbled.region = "not a descriptor";
    CHECK(rollout::fetch_kv(*ucx.dest, garbled, o).status().code() == core::Code::kInvalidArgument);

    // The wire form refuses the same before the reference exists.
    s.kv_ref = published->ref;
    nlohmann::json j = s.to_json();
    REQUIRE(SequenceState::from_json(j).is_ok());
    nlohmann::json bad = j;
    bad["kv_ref"]["bytes"] = 1ull << 62;
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);
    bad = j;
    bad["kv_ref"]["positions"] = 1ull << 40;
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);
    bad = j;
    bad["kv_ref"]["region"] = "zz";
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);
    bad = j;
    bad["kv_ref"]["region"] = "00ff";
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);
    bad = j;
    bad["kv_ref"]["checksum"] = 7;
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);
    bad = j;
    bad["kv"] = SequenceState(exported_after(long_seed(7, 5), 3)).to_json()["kv"];
    CHECK(SequenceState::from_json(bad).status().code() == core::Code::kProtocol);

    // The engine's own bound: a sequence's fetch is limited by its capacity.
    rollout::KvReadStats stats;
    SequenceState too_big = s;
    too_big.kv_ref = huge;
    CHECK(rollout::fetch_kv_of(ucx.dest.get(), *dest_engine, too_big, "rollout-b",
                               core::Millis(5000), stats)
              .code() == core::Code::kInvalidArgument);
    CHECK(stats.read_failed == 1);
    CHECK_FALSE(too_big.kv_ref.has_value());
  }
}
