// `sluice replay RUN_DIR`: reproduces a finished run's learner updates from its run folder. It
// reads the actor's batch record (RUN_DIR/actor-batches.bin, actor/batch_record.hpp), rebuilds
// the learner from the recorded configuration and starting weights under the recorded BLAS
// threads and device, feeds it the recorded batches in order (actor/replay.hpp), and checks each
// step against the record (loss, gradient norm, a SHA-256 of the weights), then the last weights
// against RUN_DIR/final_weights.safetensors and the step count against actor-summary.json.
//
// With --set (another learner setting: --set correction=none), the same batches go through the
// changed learner without comparison, and its held-out accuracy is printed (--eval-every N, and
// at the end), beside the run's own final accuracy.
//
// Exit codes: 0 every step matched (or, with --set, the batches were fed through); 1 a mismatch
// (the first one is printed and replay stops there), a damaged or missing record or a learner
// error; 2 a usage error (an unknown --set field).
//
// Thread safety: main's thread only (it sets the process's BLAS threads and model device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct ReplayArgs {
  std::string run_dir;
  std::string record;                  // default RUN_DIR/actor-batches.bin
  std::vector<std::string> overrides;  // of the learner config: "correction=none"
  std::uint64_t eval_every = 0;        // held-out evaluation every N steps (0: none)
  bool eval = false;                   // evaluate at the end (always with --set)
  bool quiet = false;                  // the summary only, no line per step
};

int run_replay(const ReplayArgs& args);

}  // namespace sluice::cli
