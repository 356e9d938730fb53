#include "bench/learner_runs.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/config.hpp"
#include "launch/job_setup.hpp"

namespace sluice::cli {

core::Result<JobConfig> load_learner_job(const std::string& path,
                                         const std::vector<std::string>& overrides,
                                         const std::vector<std::string>& more,
                                         const std::string& command) {
  SLUICE_ASSIGN_OR_RETURN(core::config::Json doc, read_job_file(path));
  for (const auto& o : overrides)
    SLUICE_TRY(core::config::apply_override(doc, o));
  for (const auto& o : more)
    SLUICE_TRY(core::config::apply_override(doc, o));
  JobConfig job;
  SLUICE_TRY(core::config::parse(doc, job));
  SLUICE_TRY(job.validate());
  if (job.actor.policy != "gpt") {
    return core::invalid_argument("the job's actor.policy is '" + job.actor.policy +
                                  "': " + command + " needs the gpt policy");
  }
  if (job.manager.group_size == 0 || job.manager.batch_trajectories % job.manager.group_size) {
    return core::invalid_argument(
        fmt::format("manager.batch_trajectories ({}) must be a multiple of manager.group_size ({})",
                    job.manager.batch_trajectories, job.manager.group_size));
  }
  return job;
}

std::uint32_t job_updates(const JobConfig& job) {
  const std::uint32_t per_update = job.manager.batch_trajectories / job.manager.group_size;
  return per_update == 0 ? 0 : static_cast<std::uint32_t>(job.manager.prompts / per_update);
}

core::Result<ScratchDir> ScratchDir::create(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("{}-{}", prefix, ::getpid());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::unavailable("cannot create " + dir.string() + ": " + ec.message());
  return ScratchDir(dir);
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

namespace {

// What a warm start depends on: configs that agree here share one.
std::string warm_start_key(const actor::LearnerConfig& c) {
  core::config::Json k;
  k["gpt"] = core::config::to_json(c.gpt);
  k["task"] = core::config::to_json(c.task);
  k["steps"] = c.warmstart_steps;
  k["batch"] = c.warmstart_batch;
  k["lr"] = c.warmstart_lr;
  k["lr_final"] = c.warmstart_lr_final;
  return k.dump();
}

}  // namespace

core::Result<std::string> WarmStarts::checkpoint(const actor::LearnerConfig& config,
                                                 const std::string& label) {
  const std::string key = warm_start_key(config);
  if (auto it = paths_.find(key); it != paths_.end()) return it->second;
  std::fprintf(stderr, "%s: warm start, %u steps\n", label.c_str(), config.warmstart_steps);
  SLUICE_ASSIGN_OR_RETURN(auto learner, actor::Learner::create(config));
  SLUICE_TRY(learner->warm_start().status());
  const std::string path = (dir_ / fmt::format("warm-{}.ckpt", paths_.size())).string();
  SLUICE_TRY(learner->save(path));
  paths_[key] = path;
  return path;
}

BatchShape BatchShape::of(const JobConfig& job) {
  BatchShape s;
  s.group = job.manager.group_size;
  s.per_update = job.manager.batch_trajectories / job.manager.group_size;
  s.temperature = static_cast<float>(job.rollout.gpt.temperature);
  s.max_new = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(job.manager.max_new_tokens, job.actor.learner.gpt.context));
  return s;
}

core::Result<SampledBatch> sample_batch(actor::Learner& generator, const BatchShape& shape,
                                        std::uint64_t& next_prompt, std::uint64_t& rng,
                                        std::uint64_t version) {
  std::vector<rl::Prompt> prompts;
  std::vector<std::string> ids;
  for (std::uint32_t p = 0; p < shape.per_update; ++p, ++next_prompt) {
    SLUICE_ASSIGN_OR_RETURN(rl::Prompt prompt, generator.task().train_prompt(next_prompt));
    for (std::uint32_t k = 0; k < shape.group; ++k) {
      prompts.push_back(prompt);
      ids.push_back(fmt::format("p{}", next_prompt));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(auto out,
                          generator.generate(prompts, shape.temperature, shape.max_new, rng));
  SampledBatch b;
  b.samples.resize(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    rl::Trajectory& t = b.samples[i].trajectory;
    t.prompt_id = ids[i];
    t.id = fmt::format("{}/{}", ids[i], i % shape.group);
    t.version = version;
    t.versions = {version};
    t.prompt_tokens = prompts[i].tokens;
    t.response_tokens = std::move(out[i].tokens);
    t.logprobs = std::move(out[i].logprobs);
    t.reward = generator.task().reward(prompts[i], t.response_tokens);
    b.mean_reward += t.reward / static_cast<double>(prompts.size());
  }
  return b;
}

std::uint64_t round_rng(std::uint32_t round) {
  return 0x5eedULL + round;
}

std::uint64_t round_first_prompt(std::uint32_t round, std::uint32_t updates,
                                 std::uint32_t per_update) {
  return static_cast<std::uint64_t>(round) * updates * per_update;
}

}  // namespace sluice::cli
