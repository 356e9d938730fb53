// The actor's checkpoint: the trainer's state file and each policy's state round-trip bit for
// bit, and a damaged or wrong-shape file is refused with an error that leaves the state as it
// was.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "actor/checkpoint.hpp"
#include "actor/gpt_policy.hpp"
#include "actor/learner.hpp"
#include "actor/sim_policy.hpp"
#include "rl/tokenizer.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temporary folder.
fs::path temp_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("sluice-ckpt-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string bytes_of(actor::Policy& p) {
  std::string out;
  for (const auto& t : p.tensors())
    out.append(reinterpret_cast<const char*>(t.data), t.bytes);
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Damaged copies of `good`: cut short, and one byte flipped in the middle.
std::vector<std::string> damaged(const std::string& good) {
  std::string flipped = good;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x5a);
  return {good.substr(0, good.size() / 2), good.substr(0, 4), flipped};
}

void wait_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

std::vector<actor::Sample> sim_batch(std::size_t n) {
  std::vector<actor::Sample> b;
  for (std::size_t i = 0; i < n; ++i) {
    actor::Sample s;
    s.trajectory.id = "t" + std::to_string(i);
    s.trajectory.response_tokens = {1, 2, 3};
    b.push_back(s);
  }
  return b;
}

// The learner tests' small model: sums of two one-digit numbers.
actor::LearnerConfig small_config() {
  actor::LearnerConfig c;
  c.gpt.vocab = rl::Tokenizer::kVocabSize;
  c.gpt.context = 16;
  c.gpt.d_model = 32;
  c.gpt.n_layer = 2;
  c.gpt.n_head = 2;
  c.gpt.d_ff = 64;
  c.task.min_terms = 2;
  c.task.max_terms = 2;
  c.task.median_terms = 2.0;
  c.task.p99_terms = 2.0;
  c.task.context_tokens = 16;
  c.warmstart_steps = 0;
  c.minibatch = 3;
  c.eval_prompts = 8;
  c.eval_max_new_tokens = 6;
  return c;
}

// A GRPO group of two on training prompt `index`: the gold answer (reward 1) and a wrong one.
std::vector<actor::Sample> gpt_batch(actor::Learner& l, std::uint64_t index) {
  auto p = l.task().train_prompt(index);
  REQUIRE(p.is_ok());
  std::vector<actor::Sample> out;
  for (bool right : {true, false}) {
    rl::Trajectory t;
    t.id = p->id + (right ? "/0" : "/1");
    t.prompt_id = p->id;
    t.prompt_tokens = p->tokens;
    std::string response = rl::Tokenizer::decode(l.task().solution(*p));
    if (!right) response = "0" + response;
    auto r = rl::Tokenizer::encode(response);
    REQUIRE(r.is_ok());
    t.response_tokens = *r;
    t.reward = right ? 1.0 : 0.0;
    auto lp = l.response_logprobs({t});
    REQUIRE_MESSAGE(lp.is_ok(), lp.status().to_string());
    t.logprobs = (*lp)[0];
    out.push_back({t, 1.0, 0});
  }
  return out;
}

}  // namespace

TEST_SUITE("actor checkpoint") {
  TEST_CASE("the trainer's state file round-trips and refuses damage") {
    fs::path dir = temp_dir("state");
    actor::CheckpointState s;
    s.sequence = 3;
    s.policy = "sim";
    s.policy_file = "policy-000003.state";
    s.steps = 12;
    s.version = 17;
    s.restarts = 2;
    s.trained_tokens = 12345;
    s.staleness_sum = 0.1 + 0.2;  // not exactly representable in decimal
    s.idle_s = 1.0 / 3.0;
    s.initial_accuracy = 0.25;
    s.initial_by_terms = R"([[2,10,3]])";
    s.dropped_stale = 4;
    s.consumed_ids = {"p0/0", "p0/1", "p1/0"};
    s.trained_ids = {"p0/0", "p0/1"};
    REQUIRE(actor::write_checkpoint(dir.string(), s).is_ok());
    const fs::path file = dir / actor::kCheckpointFile;
    CHECK_FALSE(fs::exists(file.string() + ".tmp"));

    auto back = actor::read_checkpoint(file.string());
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->sequence == 3);
    CHECK(back->policy == "sim");
    CHECK(back->policy_file == s.policy_file);
    CHECK(back->steps == 12);
    CHECK(back->version == 17);
    CHECK(back->restarts == 2);
    CHECK(back->trained_tokens == 12345);
    CHECK(back->staleness_sum == s.staleness_sum);  // bit for bit
    CHECK(back->idle_s == s.idle_s);
    CHECK(back->initial_accuracy == 0.25);
    CHECK(back->initial_by_terms == s.initial_by_terms);
    CHECK(back->dropped_stale == 4);
    CHECK(back->consumed_ids == s.consumed_ids);
    CHECK(back->trained_ids == s.trained_ids);

    const std::string good = read_all(file);
    for (const auto& bad : damaged(good)) {
      write_all(file, bad);
      auto r = actor::read_checkpoint(file.string());
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == core::Code::kDataLoss);
    }
    fs::remove(file);
    CHECK(actor::read_checkpoint(file.string()).status().code() == core::Code::kNotFound);
    fs::remove_all(dir);
  }

  TEST_CASE("the sim policy's state round-trips, damage and another size are refused") {
    fs::path dir = temp_dir("sim");
    actor::SimPolicyOptions o;
    o.weight_bytes = 4096;
    o.train_ms_per_token = 0;
    auto a = actor::make_sim_policy(o);
    REQUIRE(a->train(sim_batch(2), wait_ms).is_ok());
    REQUIRE(a->train(sim_batch(2), wait_ms).is_ok());
    const fs::path file = dir / "a.state";
    REQUIRE(a->save_state(file.string()).is_ok());

    auto b = actor::make_sim_policy(o);
    const std::string fresh = bytes_of(*b);
    REQUIRE(fresh != bytes_of(*a));
    auto st = b->load_state(file.string());
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
    CHECK(bytes_of(*b) == bytes_of(*a));
    // The update counter came back too: the next update makes the same bytes on both.
    REQUIRE(a->train(sim_batch(1), wait_ms).is_ok());
    REQUIRE(b->train(sim_batch(1), wait_ms).is_ok());
    CHECK(bytes_of(*b) == bytes_of(*a));

    const std::string good = read_all(file);
    for (const auto& bad : damaged(good)) {
      write_all(file, bad);
      auto c = actor::make_sim_policy(o);
      CHECK_FALSE(c->load_state(file.string()).is_ok());
      CHECK(bytes_of(*c) == fresh);
    }
    write_all(file, good);
    actor::SimPolicyOptions other = o;
    other.weight_bytes = 8192;
    auto d = actor::make_sim_policy(other);
    const std::string before = bytes_of(*d);
    auto wrong = d->load_state(file.string());
    CHECK(wrong.code() == core::Code::kInvalidArgument);
    CHECK(bytes_of(*d) == before);
    fs::remove_all(dir);
  }

  TEST_CASE("the gpt policy's state round-trips weights and optimizer, damage is refused") {
    fs::path dir = temp_dir("gpt");
    const actor::LearnerConfig cfg = small_config();
    auto ref = actor::Learner::create(cfg);
    REQUIRE_MESSAGE(ref.is_ok(), ref.status().to_string());
    const auto batch0 = gpt_batch(**ref, 0);
    const auto batch1 = gpt_batch(**ref, 1);

    auto a = actor::make_gpt_policy(cfg);
    REQUIRE(a.is_ok());
    auto t = (*a)->train(batch0, wait_ms);
    REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
    const fs::path file = dir / "a.state";
    REQUIRE((*a)->save_state(file.string()).is_ok());

    auto b = actor::make_gpt_policy(cfg);
    REQUIRE(b.is_ok());
    const std::string fresh = bytes_of(**b);
    REQUIRE(fresh != bytes_of(**a));
    auto st = (*b)->load_state(file.string());
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
    CHECK(bytes_of(**b) == bytes_of(**a));
    // The optimizer's moments and step came back too: one more update agrees bit for bit.
    REQUIRE((*a)->train(batch1, wait_ms).is_ok());
    REQUIRE((*b)->train(batch1, wait_ms).is_ok());
    CHECK(bytes_of(**b) == bytes_of(**a));

    const std::string good = read_all(file);
    for (const auto& bad : damaged(good)) {
      write_all(file, bad);
      auto c = actor::make_gpt_policy(cfg);
      REQUIRE(c.is_ok());
      CHECK_FALSE((*c)->load_state(file.string()).is_ok());
      CHECK(bytes_of(**c) == fresh);
    }
    write_all(file, good);
    actor::LearnerConfig wider = cfg;
    wider.gpt.d_ff = 128;
    auto d = actor::make_gpt_policy(wider);
    REQUIRE(d.is_ok());
    const std::string before = bytes_of(**d);
    CHECK_FALSE((*d)->load_state(file.string()).is_ok());
    CHECK(bytes_of(**d) == before);
    fs::remove_all(dir);
  }
}
