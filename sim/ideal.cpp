// The two computed rows of `sluice simulate`, beside the simulated modes:
//   limit         the finite job's limit (sim/limit.hpp): a lower bound on the job's wall time
//                 under any scheduler, from this job's own trajectories (their lengths are drawn
//                 per trajectory id, so they are known before the job runs).
//   steady-limit  the throughput limit: every rollout decodes at its full batch all the time (no
//                 prefill, no weight load, no barrier, no tail), and the trainer trains back to
//                 back (no wait for trajectories, no publish stall). Whichever of the two is
//                 slower bounds the trained tokens per second; the other waits for it, and that
//                 wait is reported as its idle share. A steady state has no start and no end, so
//                 this is the bar for a mode's steady figure, not for its whole job.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "rl/env_latency.hpp"
#include "rollout/manager.hpp"
#include "rollout/sim_engine.hpp"
#include "sim/limit.hpp"
#include "sim/simulator.hpp"
#include "sim/turns.hpp"
#include "sim/weights.hpp"

namespace sluice::sim {

namespace {

// Draws enough of the job's response lengths for a mean good to a fraction of a percent.
constexpr std::size_t kLengthDraws = 200000;

core::Status check_input(const SimInput& in) {
  SLUICE_TRY(in.engine.validate());
  SLUICE_TRY(in.sim.validate());
  if (in.rollouts == 0) return core::invalid_argument("simulate: no rollouts");
  return {};
}

// The earliest a rollout can hold the first version: staged, relayed and loaded as the
// simulator moves it (sim/weights.hpp), or broadcast as partial-broadcast sends it, whichever
// is sooner (the bound holds for either row).
double first_weights_s(const SimInput& in) {
  const std::uint64_t bytes = in.actor.weight_bytes;
  const Placement p = place(in.sim, in.rollouts);
  double relayed = -1;
  for (const RelayTimes& r : relay_times(in.sim, p.hosts, bytes, in.actor.chunk_bytes)) {
    const double end = load_window(in.sim, r, bytes, in.actor.chunk_bytes, 0).end_s;
    relayed = relayed < 0 ? end : std::min(relayed, end);
  }
  relayed = publish_stall_s(in.sim, bytes) + std::max(0.0, relayed);
  if (!(in.sim.broadcast_gbps > 0)) return relayed;
  return std::min(relayed, static_cast<double>(bytes) / (in.sim.broadcast_gbps * 1e9));
}

// The job as the limit sees it: every trajectory the manager will release ("p{prompt}/{k}", as
// rollout::PromptPool names them), with the length the simulated engine will give it.
core::Result<LimitJob> limit_job(const SimInput& in) {
  SLUICE_ASSIGN_OR_RETURN(rollout::LengthSampler lengths,
                          rollout::LengthSampler::create(in.engine.lengths, in.engine.seed));
  std::optional<rl::EnvLatency> env;
  if (in.engine.turns > 1) {
    SLUICE_ASSIGN_OR_RETURN(rl::EnvLatency e,
                            rl::EnvLatency::create(in.env_latency, in.engine.seed));
    env = e;
  }
  const std::uint32_t group = in.manager.group_size;
  if (group == 0 || in.actor.batch_trajectories < group) {
    return core::invalid_argument("simulate limit: a batch must hold at least one whole group");
  }
  LimitJob job;
  job.batch_groups = in.actor.batch_trajectories / group;
  job.groups.resize(in.manager.prompts);
  const std::uint64_t env_tokens = in.engine.env_tokens;
  for (std::uint64_t p = 0; p < in.manager.prompts; ++p) {
    auto& g = job.groups[p];
    g.resize(group);
    for (std::uint32_t k = 0; k < group; ++k) {
      const std::string id = fmt::format("p{}/{}", p, k);
      const std::uint64_t total = std::min(lengths.length(id), in.manager.max_new_tokens);
      LimitTrajectory& t = g[k];
      t.decode = total;
      t.prefill = in.manager.prompt_tokens;
      t.trained = total;
      if (env) {
        const std::uint32_t calls = episode_calls(total, in.engine.turns, env_tokens);
        t.prefill += calls * env_tokens;
        t.trained += calls * env_tokens;
        for (std::uint32_t turn = 1; turn <= calls; ++turn)
          t.wait_s += env->delay_ms(id, turn) / 1000.0;
      }
    }
  }
  const std::uint32_t cap = in.engine.capacity().max_sequences;
  for (const GpuType& g : rollout_timings(in)) {
    job.rollouts.push_back(
        LimitRollout{g.t0_ms / 1000.0, g.t1_ms / 1000.0, g.prefill_ms_per_token / 1000.0, cap});
  }
  job.train_fixed_s = in.actor.train_ms_fixed / 1000.0;
  job.train_s_per_token = in.actor.train_ms_per_token / 1000.0;
  // The actor's wait after a publish: staging, or partial-broadcast's broadcast if that is less.
  job.publish_s = publish_stall_s(in.sim, in.actor.weight_bytes);
  if (in.sim.broadcast_gbps > 0) {
    job.publish_s = std::min(
        job.publish_s, static_cast<double>(in.actor.weight_bytes) / (in.sim.broadcast_gbps * 1e9));
  }
  job.first_weights_s = first_weights_s(in);
  return job;
}

// What both computed rows share: the fleet, the job's size, and how the time splits between
// generating (at `generate` tokens/s of the fleet) and waiting.
ModeResult computed_row(const SimInput& in, const char* label, std::uint64_t trained_tokens,
                        double wall_s, double generate_share) {
  ModeResult m;
  m.label = label;
  m.total_trajectories = in.manager.prompts * in.manager.group_size;
  m.trained_trajectories = m.total_trajectories;
  m.trained_tokens = trained_tokens;
  m.generated_tokens = trained_tokens;
  m.wall_s = wall_s;
  m.tokens_per_s = wall_s > 0 ? static_cast<double>(trained_tokens) / wall_s : 0;
  m.steady_tokens_per_s = m.tokens_per_s;
  m.steady_to_s = wall_s;
  m.rollout_util = generate_share;
  m.generating_share = generate_share;
  m.gpus = in.rollouts * in.sim.gpus_per_rollout;
  m.gpu.generating = m.gpus * wall_s * generate_share;
  m.gpu.idle = m.gpus * wall_s - m.gpu.generating;
  // A slot that does not generate waits for the trainer (the actor's backlog).
  for (const std::string cause : rollout::kFreeSlotCauses)
    m.free_slots.emplace_back(cause, cause == "backlog" ? 1.0 - generate_share : 0.0);
  m.steps =
      in.actor.batch_trajectories > 0
          ? (m.total_trajectories + in.actor.batch_trajectories - 1) / in.actor.batch_trajectories
          : 0;
  return m;
}

}  // namespace

core::Result<ModeResult> limit_result(const SimInput& in) {
  SLUICE_TRY(check_input(in));
  SLUICE_ASSIGN_OR_RETURN(LimitJob job, limit_job(in));
  SLUICE_ASSIGN_OR_RETURN(JobLimit lim, job_limit(job));
  const double busy = lim.wall_s > 0 ? std::min(1.0, lim.generate_all_s / lim.wall_s) : 0.0;
  ModeResult m = computed_row(in, "limit", lim.trained_tokens, lim.wall_s, busy);
  m.steps = lim.steps;
  // The trainer works T(1) of the wall time at least.
  m.actor_idle_frac = lim.wall_s > 0 ? std::max(0.0, 1.0 - lim.train_all_s / lim.wall_s) : 0.0;
  return m;
}

core::Result<ModeResult> steady_limit_result(const SimInput& in) {
  SLUICE_TRY(check_input(in));
  SLUICE_ASSIGN_OR_RETURN(rollout::LengthSampler lengths,
                          rollout::LengthSampler::create(in.engine.lengths, in.engine.seed));
  double sum = 0;
  for (std::size_t i = 0; i < kLengthDraws; ++i) {
    const std::uint64_t n = lengths.length(fmt::format("ideal/{}", i));
    sum += static_cast<double>(std::min<std::uint64_t>(n, in.manager.max_new_tokens));
  }
  const double mean_len = sum / kLengthDraws;

  // Rollouts: each at its full batch, with its type's step time.
  const double batch = static_cast<double>(in.engine.capacity().max_sequences);
  double generate = 0;  // tokens/s of the whole fleet
  for (const GpuType& g : rollout_timings(in))
    generate += batch / ((g.t0_ms + g.t1_ms * batch) / 1000.0);

  // The trainer: one batch of the job's mean length a step, steps back to back.
  const double batch_tokens = static_cast<double>(in.actor.batch_trajectories) * mean_len;
  const double step_s =
      (in.actor.train_ms_fixed + in.actor.train_ms_per_token * batch_tokens) / 1000.0;
  const double train = step_s > 0 ? batch_tokens / step_s : generate;

  const double rate = std::min(generate, train);
  const std::uint64_t trajectories = in.manager.prompts * in.manager.group_size;
  const auto tokens = static_cast<std::uint64_t>(mean_len * static_cast<double>(trajectories));
  ModeResult m =
      computed_row(in, "steady-limit", tokens, rate > 0 ? static_cast<double>(tokens) / rate : 0,
                   generate > 0 ? rate / generate : 0);
  m.tokens_per_s = rate;
  m.steady_tokens_per_s = rate;
  m.actor_idle_frac = train > 0 ? 1.0 - rate / train : 0;
  return m;
}

}  // namespace sluice::sim
