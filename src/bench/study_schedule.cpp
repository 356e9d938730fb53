#include "bench/study_schedule.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "actor/batch_record_file.hpp"
#include "actor/experience_buffer.hpp"
#include "actor/learner.hpp"
#include "actor/replay.hpp"
#include "model/blas.hpp"
#include "rl/task.hpp"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Versions older than this behind the current one are not kept (the study's own largest lag).
constexpr std::uint64_t kRingVersions = 65;
constexpr std::uint32_t kMaxSeeds = 16;

enum class Generate { kRecorded, kCurrent };

const char* label(Generate g) {
  return g == Generate::kRecorded ? "recorded" : "current";
}

struct Schedule {
  actor::RecordStart start;
  std::vector<actor::RecordedStep> steps;
};

core::Result<Schedule> read_schedule(const std::string& run_dir, std::uint32_t max_steps) {
  const std::string path = (std::filesystem::path(run_dir) / "actor-batches.bin").string();
  SLUICE_ASSIGN_OR_RETURN(auto reader, actor::BatchRecordReader::open(path));
  Schedule s;
  s.start = reader->start();
  while (max_steps == 0 || s.steps.size() < max_steps) {
    SLUICE_ASSIGN_OR_RETURN(std::optional<actor::RecordedStep> step, reader->next());
    if (!step) break;
    s.steps.push_back(std::move(*step));
  }
  if (s.steps.empty()) return core::invalid_argument(path + " records no training step");
  return s;
}

struct RunResult {
  Generate generate = Generate::kRecorded;
  std::uint32_t seed = 0;
  std::vector<std::uint64_t> at;  // steps done at each evaluation
  std::vector<double> accuracy;
  double staleness_mean = 0.0;  // of the regenerated samples, as trained
  std::uint64_t clamped = 0;    // samples whose version was older than the ring: its oldest
  double seconds = 0.0;
};

// One setting of one seed: the schedule replayed with every response sampled again.
core::Result<RunResult> run_one(const Schedule& sched, const actor::LearnerConfig& config,
                                Generate generate, std::uint32_t seed,
                                const StudyScheduleArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<actor::Learner> learner, actor::Learner::create(config));
  SLUICE_TRY(learner->load_weights(sched.start.weights).with_context("the starting weights"));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<actor::Learner> generator,
                          actor::Learner::create(config));
  const model::Gpt& m = learner->model();
  const auto weights_now = [&] {
    return std::vector<float>(m.params(), m.params() + m.param_count());
  };
  std::map<std::uint64_t, std::vector<float>> ring;  // version -> weights
  std::uint64_t rng = 0x5eedULL + 7919ULL * seed;
  const auto max_new = static_cast<std::uint32_t>(config.gpt.context);

  RunResult r;
  r.generate = generate;
  r.seed = seed;
  SLUICE_ASSIGN_OR_RETURN(actor::EvalStats e0, learner->evaluate());
  r.at.push_back(0);
  r.accuracy.push_back(e0.accuracy);
  double staleness_sum = 0.0;
  std::uint64_t samples = 0;
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < sched.steps.size(); ++i) {
    const actor::RecordedStep& step = sched.steps[i];
    const std::uint64_t now = step.actor_version;
    ring[now] = weights_now();
    while (!ring.empty() && ring.begin()->first + kRingVersions <= now)
      ring.erase(ring.begin());

    // Which version samples each response, then one generate() per version.
    std::map<std::uint64_t, std::vector<std::size_t>> by_version;
    for (std::size_t k = 0; k < step.batch.size(); ++k) {
      std::uint64_t v = now;
      if (generate == Generate::kRecorded) {
        v = std::min(actor::behaviour_version(step.batch[k].trajectory), now);
        auto it = ring.lower_bound(v);
        if (it->first != v) ++r.clamped;  // older than the ring (or a gap): the nearest newer
        v = it->first;
      }
      by_version[v].push_back(k);
    }
    std::vector<actor::Sample> batch = step.batch;
    for (const auto& [v, members] : by_version) {
      actor::Learner* g = learner.get();
      if (v != now) {
        SLUICE_TRY(generator->load_weights(ring.at(v)));
        g = generator.get();
      }
      std::vector<rl::Prompt> prompts;
      for (std::size_t k : members) {
        const auto& tokens = step.batch[k].trajectory.prompt_tokens;
        SLUICE_ASSIGN_OR_RETURN(rl::Prompt p, rl::ArithmeticTask::parse_prompt(tokens));
        p.tokens = tokens;
        prompts.push_back(std::move(p));
      }
      SLUICE_ASSIGN_OR_RETURN(
          auto out, g->generate(prompts, static_cast<float>(args.temperature), max_new, rng));
      for (std::size_t j = 0; j < members.size(); ++j) {
        actor::Sample& s = batch[members[j]];
        rl::Trajectory& t = s.trajectory;
        t.response_tokens = std::move(out[j].tokens);
        t.logprobs = std::move(out[j].logprobs);
        t.version = v;
        t.versions = {v};
        t.loss_mask.clear();
        t.token_versions.clear();
        t.turns = 1;
        t.reward = learner->task().reward(prompts[j], t.response_tokens);
        s.staleness = now - v;
        staleness_sum += static_cast<double>(s.staleness);
        ++samples;
      }
    }
    SLUICE_TRY(learner->train(batch).status().with_context(fmt::format("step {}", step.step)));
    const std::uint64_t done = i + 1;
    if (done % args.every == 0 || done == sched.steps.size()) {
      SLUICE_ASSIGN_OR_RETURN(actor::EvalStats e, learner->evaluate());
      r.at.push_back(done);
      r.accuracy.push_back(e.accuracy);
      std::fprintf(
          stderr, "study schedule: seed %u, %s: step %llu/%zu, held-out accuracy %.2f%% (%.0f s)\n",
          seed, label(generate), static_cast<unsigned long long>(done), sched.steps.size(),
          100.0 * e.accuracy, std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  r.staleness_mean = samples ? staleness_sum / static_cast<double>(samples) : 0.0;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

nlohmann::json to_json(const RunResult& r) {
  return {{"generate", label(r.generate)},
          {"seed", r.seed},
          {"at", r.at},
          {"accuracy", r.accuracy},
          {"staleness_mean", r.staleness_mean},
          {"clamped", r.clamped},
          {"seconds", r.seconds}};
}

// The run's own end-of-run accuracy, when its summary is there (-1 otherwise).
double run_accuracy(const std::string& run_dir) {
  std::ifstream f(std::filesystem::path(run_dir) / "actor-summary.json");
  if (!f) return -1.0;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object() || !j.contains("final_accuracy") || !j["final_accuracy"].is_number())
    return -1.0;
  return j["final_accuracy"].get<double>();
}

}  // namespace

int run_study_schedule(const StudyScheduleArgs& args) {
  auto fail = [](const core::Status& st) {
    std::fprintf(stderr, "study schedule: %s\n", st.to_string().c_str());
    return 2;
  };
  if (args.seeds == 0 || args.seeds > kMaxSeeds)
    return fail(core::invalid_argument(fmt::format("--seeds must be 1..{}", kMaxSeeds)));
  if (args.every == 0) return fail(core::invalid_argument("--every must be at least 1"));
  if (!(args.temperature > 0.0) || !std::isfinite(args.temperature))
    return fail(core::invalid_argument("--temperature must be > 0"));
  auto sched = read_schedule(args.run_dir, args.steps);
  if (!sched.is_ok()) return fail(sched.status());
  auto config = actor::replay_config(sched->start, args.overrides);
  if (!config.is_ok()) return fail(config.status());
  if (config->task.tool != "none" && !config->task.tool.empty()) {
    return fail(core::invalid_argument(
        "the run's task uses a tool: study schedule regenerates single-turn responses only"));
  }
  model::set_blas_threads(static_cast<int>(sched->start.blas_threads));

  std::vector<RunResult> runs;
  for (std::uint32_t seed = 0; seed < args.seeds; ++seed) {
    for (Generate g : {Generate::kRecorded, Generate::kCurrent}) {
      auto r = run_one(*sched, *config, g, seed, args);
      if (!r.is_ok()) return fail(r.status());
      if (args.json) std::printf("%s\n", to_json(*r).dump().c_str());
      runs.push_back(std::move(*r));
    }
  }
  if (args.json) return 0;

  const double own = run_accuracy(args.run_dir);
  std::printf("%s: %zu steps, the run's own end accuracy %s\n\n", args.run_dir.c_str(),
              sched->steps.size(), own < 0 ? "unknown" : fmt::format("{:.2f}%", 100 * own).c_str());
  std::printf(
      "| seed | recorded versions | current version | recorded - current | staleness (recorded) "
      "|\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::vector<double> diffs;
  for (std::size_t i = 0; i + 1 < runs.size(); i += 2) {
    const RunResult& a = runs[i];
    const RunResult& b = runs[i + 1];
    const double d = 100.0 * (a.accuracy.back() - b.accuracy.back());
    diffs.push_back(d);
    std::printf("| %u | %.2f%% | %.2f%% | %+.2f | %.2f (%llu clamped) |\n", a.seed,
                100.0 * a.accuracy.back(), 100.0 * b.accuracy.back(), d, a.staleness_mean,
                static_cast<unsigned long long>(a.clamped));
  }
  double mean = 0.0;
  for (double d : diffs)
    mean += d / static_cast<double>(diffs.size());
  double var = 0.0;
  for (double d : diffs)
    var += (d - mean) * (d - mean);
  if (diffs.size() > 1) {
    const double se =
        std::sqrt(var / static_cast<double>(diffs.size() - 1) / static_cast<double>(diffs.size()));
    std::printf("\nrecorded - current: mean %+.2f points, standard error %.2f, %zu seeds\n", mean,
                se, diffs.size());
  } else {
    std::printf("\nrecorded - current: %+.2f points, 1 seed\n", mean);
  }
  return 0;
}

}  // namespace sluice::cli
