// `sluice study schedule RUN_DIR`: a real run's schedule through the staleness study's learner.
//
// A run's batch record (RUN_DIR/actor-batches.bin, actor/batch_record.hpp) says which
// trajectories each training step took, in which order, and which version generated each. This
// study keeps that schedule and regenerates every response in one process, as `sluice study
// staleness` does, in two settings from the run's own starting weights:
//
//   recorded  each response is sampled again, for the same prompt and in the same place of the
//             same step, by the version that generated it in the run (its behaviour version:
//             the oldest, for a trajectory that several versions generated), kept in a ring of
//             the learner's own past weights. The schedule's staleness is kept exactly.
//   current   the same, but every response is sampled by the current weights (staleness 0).
//
// Both train with the run's learner configuration. Their difference at equal samples is what the
// run's staleness costs with its batch composition held fixed; `current` against a sync run of
// the same seed is what the composition (which prompts, in which order) costs on its own. The
// run's real rollouts are out of the loop in both, so a gap between `recorded` and the run
// itself points at the rollouts (their sampling or log-probs), not at the schedule.
//
// A seed sets the sampling RNG; both settings of one seed use it alike. Output: a Markdown
// table (final held-out accuracy per seed and setting, the mean difference and its standard
// error) on stdout; progress on stderr; with --json, one JSON object per run on stdout instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct StudyScheduleArgs {
  std::string run_dir;                 // a finished run's folder with actor-batches.bin
  std::vector<std::string> overrides;  // learner settings, as `sluice replay --set` takes them
  std::uint32_t seeds = 1;             // sampling seeds, 1..16
  std::uint32_t every = 25;            // held-out accuracy every this many steps (and the end)
  double temperature = 1.0;            // the rollouts' sampling temperature, > 0
  std::uint32_t steps = 0;             // 0: every recorded step
  bool json = false;
};

int run_study_schedule(const StudyScheduleArgs& args);

}  // namespace sluice::cli
