// `sluice bench learner`: variants of the RL learner side by side, in one process.
//
// Every variant starts from the same supervised warm start (the job's actor.learner settings) and
// runs on-policy GRPO/PPO updates with no other process: per update it samples the job's batch
// (manager.batch_trajectories = prompts x manager.group_size) from the current weights at
// rollout.gpt.temperature, then trains on it (actor::Learner::train). So it measures what the
// learner does with its samples, without the runtime's scheduling or staleness; a tool to tune
// the learner quickly, not a measure of sluice's speed.
//
// A variant is "LABEL: key=value key=value ...", the keys being job keys as `sluice run --set`
// takes them (e.g. "lr 1e-4: actor.learner.adamw.lr=0.0001"); the job as given is always the
// first row, "base". Warm starts are shared between variants whose model, task and warm-start
// settings are the same. With --rounds N every variant runs N times with different sampling
// seeds and prompts (round r uses the training prompts after round r-1's), and the table shows
// each variant's median round.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct BenchLearnerArgs {
  std::string job;                     // the job file (a `sluice run` job with actor.policy gpt)
  std::vector<std::string> overrides;  // --set key=value, on every variant
  std::vector<std::string> variants;   // "LABEL: key=value ..."
  std::uint32_t updates = 0;           // 0: manager.prompts / prompts per update
  std::uint32_t eval_every = 0;        // 0: actor.eval_every (and the end)
  std::uint32_t rounds = 1;
  bool json = false;
};

int run_bench_learner(const BenchLearnerArgs& args);

}  // namespace sluice::cli
