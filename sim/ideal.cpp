// The ideal row of `sluice simulate --scale`: the job's throughput limit, computed rather than
// simulated. Every rollout decodes at its full batch all the time (no prefill, no weight load,
// no barrier, no tail), and the trainer trains back to back (no wait for trajectories, no publish
// stall). Whichever of the two is slower bounds the trained tokens per second; the other waits
// for it, and that wait is reported as its idle share.
#include <fmt/format.h>

#include <algorithm>

#include "rollout/manager.hpp"
#include "rollout/sim_engine.hpp"
#include "sim/simulator.hpp"

namespace sluice::sim {

namespace {

// Draws enough of the job's response lengths for a mean good to a fraction of a percent.
constexpr std::size_t kLengthDraws = 200000;

}  // namespace

core::Result<ModeResult> ideal_result(const SimInput& in) {
  SLUICE_TRY(in.engine.validate());
  SLUICE_TRY(in.sim.validate());
  if (in.rollouts == 0) return core::invalid_argument("simulate ideal: no rollouts");
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
  ModeResult m;
  m.label = "ideal";
  m.total_trajectories = in.manager.prompts * in.manager.group_size;
  m.trained_trajectories = m.total_trajectories;
  m.trained_tokens =
      static_cast<std::uint64_t>(mean_len * static_cast<double>(m.total_trajectories));
  m.generated_tokens = m.trained_tokens;
  m.tokens_per_s = rate;
  m.steady_tokens_per_s = rate;
  m.wall_s = rate > 0 ? static_cast<double>(m.trained_tokens) / rate : 0;
  m.steady_to_s = m.wall_s;
  m.rollout_util = generate > 0 ? rate / generate : 0;
  m.generating_share = m.rollout_util;
  m.actor_idle_frac = train > 0 ? 1.0 - rate / train : 0;
  m.gpus = in.rollouts * in.sim.gpus_per_rollout;
  m.gpu.generating = m.gpus * m.wall_s * m.rollout_util;
  m.gpu.idle = m.gpus * m.wall_s - m.gpu.generating;
  // A slot that does not generate waits for the trainer (the actor's backlog).
  for (const std::string cause : rollout::kFreeSlotCauses)
    m.free_slots.emplace_back(cause, cause == "backlog" ? 1.0 - m.rollout_util : 0.0);
  m.steps =
      in.actor.batch_trajectories > 0
          ? (m.total_trajectories + in.actor.batch_trajectories - 1) / in.actor.batch_trajectories
          : 0;
  return m;
}

}  // namespace sluice::sim
