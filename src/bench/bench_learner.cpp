#include "bench/bench_learner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "actor/learner.hpp"
#include "bench/learner_runs.hpp"
#include "core/config.hpp"
#include "launch/job.hpp"
#include "model/blas.hpp"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Variant {
  std::string label;
  std::vector<std::string> sets;
};

// "LABEL: key=value key=value ..."
core::Result<Variant> parse_variant(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    return core::invalid_argument("--variant '" + text +
                                  "': expected 'LABEL: key=value ...' (no ':' found)");
  }
  Variant v;
  std::istringstream label(text.substr(0, colon));
  std::string word;
  while (label >> word)
    v.label += (v.label.empty() ? "" : " ") + word;
  if (v.label.empty()) return core::invalid_argument("--variant '" + text + "': empty label");
  std::istringstream rest(text.substr(colon + 1));
  while (rest >> word) {
    if (word.find('=') == std::string::npos) {
      return core::invalid_argument("--variant '" + v.label + "': '" + word + "' is not key=value");
    }
    v.sets.push_back(word);
  }
  if (v.sets.empty()) {
    return core::invalid_argument("--variant '" + v.label + "': no key=value to change");
  }
  return v;
}

core::Result<JobConfig> variant_job(const BenchLearnerArgs& args, const Variant& v) {
  return load_learner_job(args.job, args.overrides, v.sets, "the learner bench");
}

struct Round {
  std::vector<std::uint32_t> at;  // updates done at each evaluation (0: the warm start)
  std::vector<double> accuracy;   // held-out accuracy at each
  double first_reward = 0.0;      // mean training reward over the first tenth of the updates
  double last_reward = 0.0;       // and over the last tenth
  double seconds = 0.0;           // RL wall time, evaluations included
  double end() const { return accuracy.back(); }
  double best() const { return *std::max_element(accuracy.begin() + 1, accuracy.end()); }
  double last3() const {
    const std::size_t n = std::min<std::size_t>(3, accuracy.size() - 1);
    double s = 0.0;
    for (std::size_t i = accuracy.size() - n; i < accuracy.size(); ++i)
      s += accuracy[i];
    return s / static_cast<double>(n);
  }
};

core::Result<Round> run_round(const JobConfig& job, const std::string& warm_path,
                              const std::string& label, std::uint32_t updates, std::uint32_t every,
                              std::uint32_t round) {
  SLUICE_ASSIGN_OR_RETURN(auto learner, actor::Learner::create(job.actor.learner));
  SLUICE_TRY(learner->load(warm_path));
  const BatchShape shape = BatchShape::of(job);
  Round r;
  SLUICE_ASSIGN_OR_RETURN(actor::EvalStats e0, learner->evaluate());
  r.at.push_back(0);
  r.accuracy.push_back(e0.accuracy);
  std::uint64_t rng = round_rng(round);
  std::uint64_t next_prompt = round_first_prompt(round, updates, shape.per_update);
  const std::uint32_t tenth = std::max<std::uint32_t>(1, updates / 10);
  const auto t0 = Clock::now();
  for (std::uint32_t u = 1; u <= updates; ++u) {
    SLUICE_ASSIGN_OR_RETURN(SampledBatch batch,
                            sample_batch(*learner, shape, next_prompt, rng, u - 1));
    const double reward = batch.mean_reward;
    SLUICE_TRY(learner->train(batch.samples).status());
    if (u <= tenth) r.first_reward += reward / tenth;
    if (u > updates - tenth) r.last_reward += reward / tenth;
    if (u % every == 0 || u == updates) {
      SLUICE_ASSIGN_OR_RETURN(actor::EvalStats e, learner->evaluate());
      r.at.push_back(u);
      r.accuracy.push_back(e.accuracy);
      std::fprintf(stderr, "  %s, round %u: update %u/%u, held-out accuracy %.1f%%\n",
                   label.c_str(), round + 1, u, updates, 100.0 * e.accuracy);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// The round with the median end accuracy (the lower middle one for an even count).
const Round& median_round(const std::vector<Round>& rounds) {
  std::vector<const Round*> order;
  for (const auto& r : rounds)
    order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const Round* a, const Round* b) { return a->end() < b->end(); });
  return *order[(order.size() - 1) / 2];
}

std::string pct(double x) {
  return fmt::format("{:.1f}%", 100.0 * x);
}

}  // namespace

int run_bench_learner(const BenchLearnerArgs& args) {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "sluice bench learner: %s\n", what.c_str());
    return 2;
  };
  if (args.rounds == 0) return fail("--rounds must be >= 1");
  std::vector<Variant> variants{{"base", {}}};
  std::vector<JobConfig> jobs;
  for (const auto& text : args.variants) {
    auto v = parse_variant(text);
    if (!v.is_ok()) return fail(v.status().message());
    for (const auto& have : variants) {
      if (have.label == v->label) return fail("two variants are labelled '" + v->label + "'");
    }
    variants.push_back(std::move(*v));
  }
  for (const auto& v : variants) {
    auto job = variant_job(args, v);
    if (!job.is_ok()) return fail(v.label + ": " + job.status().to_string());
    jobs.push_back(std::move(*job));
  }
  // The same numbers of updates and evaluations for every variant: the base job's.
  const JobConfig& base = jobs.front();
  const std::uint32_t per_update = base.manager.batch_trajectories / base.manager.group_size;
  const std::uint32_t updates = args.updates > 0 ? args.updates : job_updates(base);
  if (updates == 0) return fail("no updates: manager.prompts is below one batch's prompts");
  const std::uint32_t every = args.eval_every > 0 ? args.eval_every
                              : base.actor.eval_every > 0
                                  ? static_cast<std::uint32_t>(base.actor.eval_every)
                                  : updates;

  model::set_blas_threads(1);  // as the actor runs
  auto scratch = ScratchDir::create("sluice-bench-learner");
  if (!scratch.is_ok()) return fail(scratch.status().to_string());
  WarmStarts warm_starts(scratch->path());
  std::vector<std::vector<Round>> results(variants.size());
  for (std::size_t i = 0; i < variants.size(); ++i) {
    auto warm = warm_starts.checkpoint(jobs[i].actor.learner, variants[i].label);
    if (!warm.is_ok()) return fail(variants[i].label + ": " + warm.status().to_string());
    for (std::uint32_t round = 0; round < args.rounds; ++round) {
      auto r = run_round(jobs[i], *warm, variants[i].label, updates, every, round);
      if (!r.is_ok()) return fail(variants[i].label + ": " + r.status().to_string());
      results[i].push_back(std::move(*r));
    }
  }

  if (args.json) {
    for (std::size_t i = 0; i < variants.size(); ++i) {
      core::config::Json j;
      j["variant"] = variants[i].label;
      j["set"] = variants[i].sets;
      j["updates"] = updates;
      j["trajectories_per_update"] = jobs[i].manager.batch_trajectories;
      const Round& m = median_round(results[i]);
      j["warm_start"] = m.accuracy.front();
      j["median_end"] = m.end();
      for (const auto& r : results[i]) {
        core::config::Json jr;
        jr["at"] = r.at;
        jr["accuracy"] = r.accuracy;
        jr["end"] = r.end();
        jr["best"] = r.best();
        jr["first_reward"] = r.first_reward;
        jr["last_reward"] = r.last_reward;
        jr["seconds"] = r.seconds;
        j["rounds"].push_back(jr);
      }
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  std::printf(
      "%u on-policy updates of %u prompts x %u samples per variant, %u round(s), held-out "
      "accuracy of %u prompts every %u updates (the median round by end accuracy):\n\n",
      updates, per_update, base.manager.group_size, args.rounds, base.actor.learner.eval_prompts,
      every);
  std::printf(
      "| variant | warm start | end | gain | best | mean of last 3 | end, all rounds | training "
      "reward first -> last tenth | RL s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- "
      "|\n");
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const Round& m = median_round(results[i]);
    std::string all;
    for (const auto& r : results[i])
      all += (all.empty() ? "" : ", ") + pct(r.end());
    std::printf("| %s | %s | %s | %+.1f | %s | %s | %s | %.3f -> %.3f | %.1f |\n",
                variants[i].label.c_str(), pct(m.accuracy.front()).c_str(), pct(m.end()).c_str(),
                100.0 * (m.end() - m.accuracy.front()), pct(m.best()).c_str(),
                pct(m.last3()).c_str(), all.c_str(), m.first_reward, m.last_reward, m.seconds);
  }
  std::printf("\nheld-out accuracy along the way (the same rounds):\n\n| variant |");
  const Round& shape = median_round(results.front());
  for (auto at : shape.at)
    std::printf(" %u |", at);
  std::printf("\n| --- |");
  for (std::size_t k = 0; k < shape.at.size(); ++k)
    std::printf(" --- |");
  std::printf("\n");
  for (std::size_t i = 0; i < variants.size(); ++i) {
    std::printf("| %s |", variants[i].label.c_str());
    for (double a : median_round(results[i]).accuracy)
      std::printf(" %.1f |", 100.0 * a);
    std::printf("\n");
  }
  for (std::size_t i = 0; i < variants.size(); ++i) {
    if (!variants[i].sets.empty()) {
      std::string sets;
      for (const auto& s : variants[i].sets)
        sets += " --set " + s;
      std::printf("%s%s:%s\n", i == 1 ? "\nvariants:\n" : "", variants[i].label.c_str(),
                  sets.c_str());
    }
  }
  return 0;
}

}  // namespace sluice::cli
