// What the in-process learner commands share (`sluice bench learner`, `sluice study
// staleness`): a job read for them, warm starts shared between runs of equal warm-start settings
// (saved once as checkpoints), and one update's batch sampled from a learner's weights as
// rollouts would sample it.
//
// Thread safety: none; one thread uses these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "actor/learner.hpp"
#include "core/status.hpp"
#include "launch/job.hpp"

namespace sluice::cli {

// The job at `path` with `overrides`, then `more`, applied (`--set` syntax), validated, and checked
// for what an in-process learner run needs: actor.policy gpt, and manager.batch_trajectories a
// multiple of manager.group_size. `command` names the command in the errors.
core::Result<JobConfig> load_learner_job(const std::string& path,
                                         const std::vector<std::string>& overrides,
                                         const std::vector<std::string>& more,
                                         const std::string& command);

// Updates that the job's prompts make: manager.prompts / (batch_trajectories / group_size).
std::uint32_t job_updates(const JobConfig& job);

// A folder under the system's temporary folder, removed with everything in it on destruction.
class ScratchDir {
 public:
  static core::Result<ScratchDir> create(const std::string& prefix);
  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ScratchDir& operator=(ScratchDir&&) = delete;
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit ScratchDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

// Warm starts, one per distinct warm-start setting (the model, the task, the warm-start steps,
// batch and lr), each run once and saved as a checkpoint in `dir`.
class WarmStarts {
 public:
  explicit WarmStarts(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // The checkpoint of `config`'s warm start, run now (with a line on stderr naming `label`) if no
  // earlier call had the same warm-start settings.
  core::Result<std::string> checkpoint(const actor::LearnerConfig& config,
                                       const std::string& label);

 private:
  std::filesystem::path dir_;
  std::map<std::string, std::string> paths_;  // warm-start key -> checkpoint
};

// One update's batch as the job's rollouts make it: per_update prompts of the training stream
// (from `next_prompt` on, which advances), group_size samples of each from `generator` at
// rollout.gpt.temperature (up to manager.max_new_tokens), rewarded by the task; each trajectory
// is stamped with `version`, and its log-probs are the generator's (the behaviour log-probs).
struct BatchShape {
  std::uint32_t group = 0;       // manager.group_size
  std::uint32_t per_update = 0;  // prompts per update
  float temperature = 1.0f;
  std::uint32_t max_new = 0;
  static BatchShape of(const JobConfig& job);
};
struct SampledBatch {
  std::vector<actor::Sample> samples;
  double mean_reward = 0.0;
};
core::Result<SampledBatch> sample_batch(actor::Learner& generator, const BatchShape& shape,
                                        std::uint64_t& next_prompt, std::uint64_t& rng,
                                        std::uint64_t version);

// A round's (or a seed's) sampling stream, as `bench learner --rounds` numbers them: round r's
// RNG seed, and its first training prompt (after the prompts of rounds 0..r-1).
std::uint64_t round_rng(std::uint32_t round);
std::uint64_t round_first_prompt(std::uint32_t round, std::uint32_t updates,
                                 std::uint32_t per_update);

}  // namespace sluice::cli
