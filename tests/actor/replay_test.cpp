// A learner's updates recorded as the trainer records them (actor/batch_recorder.hpp), then
// replayed from the file (actor/replay.hpp): every step and the final weights match bit for bit;
// one flipped token, or a recorded digest that is not the weights', is reported as a mismatch at
// its step; another learner setting takes the same batches without comparison.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "actor/batch_record_file.hpp"
#include "actor/batch_recorder.hpp"
#include "actor/replay.hpp"
#include "format/safetensors.hpp"
#include "model/blas.hpp"
#include "rl/tokenizer.hpp"

using namespace sluice;
using namespace sluice::actor;
namespace fs = std::filesystem;

namespace {

// Small enough to run in a second: sums of two one-digit numbers.
LearnerConfig small_config() {
  LearnerConfig c;
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
  c.warmstart_steps = 3;
  c.warmstart_batch = 8;
  c.minibatch = 3;  // batches span several minibatches
  c.adamw.lr = 1e-3f;
  c.lr_decay_steps = 4;  // the lr changes from step to step
  c.eval_prompts = 8;
  c.eval_max_new_tokens = 6;
  return c;
}

std::unique_ptr<Learner> make(const LearnerConfig& c) {
  auto l = Learner::create(c);
  REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
  return std::move(l).value();
}

// Step `step`'s batch: 2 prompts x 4 responses sampled from the learner;
// one sample of weight 0 and one downweighted, as the buffer hands them out.
std::vector<Sample> batch(Learner& l, std::uint64_t step, std::uint64_t& rng) {
  std::vector<rl::Prompt> prompts;
  for (std::uint64_t i = 0; i < 2; ++i) {
    auto p = l.task().train_prompt(step * 2 + i);
    REQUIRE(p.is_ok());
    for (int k = 0; k < 4; ++k)
      prompts.push_back(*p);
  }
  auto gen = l.generate(prompts, 1.0f, 6, rng);
  REQUIRE_MESSAGE(gen.is_ok(), gen.status().to_string());
  std::vector<Sample> out;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Sample s;
    s.trajectory.id = prompts[i].id + "/" + std::to_string(i % 4);
    s.trajectory.prompt_id = prompts[i].id;
    s.trajectory.version = step;
    s.trajectory.versions = {step};
    s.trajectory.prompt_tokens = prompts[i].tokens;
    s.trajectory.response_tokens = (*gen)[i].tokens;
    s.trajectory.logprobs = (*gen)[i].logprobs;
    // The task's reward plus a spread within each group, so that every group has advantages
    // (an untrained model's group of wrong answers would have none, and nothing to compare).
    s.trajectory.reward =
        l.task().reward(prompts[i], (*gen)[i].tokens) + 0.25 * static_cast<double>(i % 4);
    out.push_back(std::move(s));
  }
  out[1].weight = 0.0;
  out[5].weight = 0.5;
  out[5].staleness = 3;
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("replay_test." + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A run of `steps` updates recorded to dir/actor-batches.bin as the trainer records them, its
// final weights in dir/final_weights.safetensors.
void record_run(const fs::path& dir, std::uint64_t steps) {
  model::set_blas_threads(1);
  auto l = make(small_config());
  REQUIRE(l->warm_start().is_ok());
  BatchRecorder rec((dir / "actor-batches.bin").string());
  rec.begin(*l);
  REQUIRE(rec.active());
  std::uint64_t rng = 7;
  for (std::uint64_t s = 1; s <= steps; ++s) {
    const std::vector<Sample> b = batch(*l, s, rng);
    rec.before_step(*l);
    auto stats = l->train(b);
    REQUIRE_MESSAGE(stats.is_ok(), stats.status().to_string());
    REQUIRE(stats->loss != 0.0);
    rec.after_step(s, s, b, *l, stats->loss, stats->grad_norm);
  }
  rec.sync();
  REQUIRE(rec.active());
  std::vector<core::SafetensorsInput> in;
  const auto* base = reinterpret_cast<const std::uint8_t*>(l->model().params());
  for (const auto& t : l->model().tensors())
    in.push_back({t.name, t.dtype, t.shape, base + t.offset, t.bytes});
  REQUIRE(core::write_safetensors((dir / "final_weights.safetensors").string(), in).is_ok());
}

struct Replayed {
  std::uint64_t steps = 0;
  std::uint64_t mismatch_step = 0;  // 0: none
  std::string mismatch;
  std::unique_ptr<Replay> replay;
};

Replayed replay_file(const fs::path& path, const std::vector<std::string>& overrides = {}) {
  auto reader = BatchRecordReader::open(path.string());
  REQUIRE_MESSAGE(reader.is_ok(), reader.status().to_string());
  auto config = replay_config((*reader)->start(), overrides);
  REQUIRE_MESSAGE(config.is_ok(), config.status().to_string());
  auto replay = Replay::create(*config, (*reader)->start(), overrides.empty());
  REQUIRE_MESSAGE(replay.is_ok(), replay.status().to_string());
  Replayed out;
  out.replay = std::move(*replay);
  while (true) {
    auto next = (*reader)->next();
    REQUIRE_MESSAGE(next.is_ok(), next.status().to_string());
    if (!*next) break;
    auto done = out.replay->step(**next);
    REQUIRE_MESSAGE(done.is_ok(), done.status().to_string());
    out.steps = (*next)->step;
    if (!done->mismatch.empty()) {
      out.mismatch_step = (*next)->step;
      out.mismatch = done->mismatch;
      break;
    }
  }
  return out;
}

// The record at `path` rewritten with `change` applied to each step (frames and checksums
// rebuilt, so only the learner can tell).
template <typename Change>
void rewrite(const fs::path& path, Change change) {
  auto reader = BatchRecordReader::open(path.string());
  REQUIRE(reader.is_ok());
  const RecordStart start = (*reader)->start();
  std::vector<RecordedStep> steps;
  while (true) {
    auto next = (*reader)->next();
    REQUIRE(next.is_ok());
    if (!*next) break;
    steps.push_back(std::move(**next));
  }
  reader->reset();
  auto w = BatchRecordWriter::create(path.string(), start);
  REQUIRE(w.is_ok());
  for (auto& s : steps) {
    change(s);
    REQUIRE((*w)->append(s).is_ok());
  }
}

}  // namespace

TEST_CASE("replay: a recorded learner's updates are reproduced bit for bit") {
  TempDir dir;
  record_run(dir.path, 4);
  Replayed r = replay_file(dir.path / "actor-batches.bin");
  CHECK(r.mismatch == "");
  CHECK(r.steps == 4);
  auto same = r.replay->compare_weights((dir.path / "final_weights.safetensors").string());
  REQUIRE(same.is_ok());
  CHECK(*same == "");
}

TEST_CASE("replay: one flipped token is a mismatch at its step") {
  TempDir dir;
  record_run(dir.path, 4);
  rewrite(dir.path / "actor-batches.bin", [](RecordedStep& s) {
    if (s.step != 3) return;
    std::int32_t& tok = s.batch[0].trajectory.response_tokens[0];
    tok = tok == 3 ? 4 : 3;
  });
  Replayed r = replay_file(dir.path / "actor-batches.bin");
  CHECK(r.mismatch_step == 3);
  CHECK(r.mismatch != "");
  MESSAGE("the mismatch: " << r.mismatch);
  // The weights stopped at step 3 are not the run's final ones.
  auto diff = r.replay->compare_weights((dir.path / "final_weights.safetensors").string());
  REQUIRE(diff.is_ok());
  CHECK(diff->find("differs") != std::string::npos);
}

TEST_CASE("replay: a recorded digest that is not of the weights is a mismatch naming them") {
  TempDir dir;
  record_run(dir.path, 2);
  rewrite(dir.path / "actor-batches.bin", [](RecordedStep& s) {
    if (s.step == 2) s.weights_digest.bytes[31] ^= 1;
  });
  Replayed r = replay_file(dir.path / "actor-batches.bin");
  CHECK(r.mismatch_step == 2);
  CHECK(r.mismatch.find("the weights after the update differ") != std::string::npos);
}

TEST_CASE("replay: another learner setting takes the same batches, uncompared") {
  TempDir dir;
  record_run(dir.path, 3);
  Replayed r = replay_file(dir.path / "actor-batches.bin", {"actor.learner.correction=none"});
  CHECK(r.replay->learner().config().correction == "none");
  CHECK_FALSE(r.replay->exact());
  CHECK(r.steps == 3);
  CHECK(r.mismatch == "");
  auto e = r.replay->learner().evaluate();
  REQUIRE(e.is_ok());
  CHECK(e->prompts == 8);

  auto reader = BatchRecordReader::open((dir.path / "actor-batches.bin").string());
  REQUIRE(reader.is_ok());
  auto unknown = replay_config((*reader)->start(), {"no_such_field=1"});
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.status().message().find("no_such_field") != std::string::npos);
  auto bad = replay_config((*reader)->start(), {"correction=clip"});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("correction") != std::string::npos);
}
