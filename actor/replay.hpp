// A run's learner rebuilt from its batch record (actor/batch_record.hpp) and fed the recorded
// batches in order, one step at a time (`sluice replay RUN_DIR`, src/launch/replay_cmd.hpp).
//
// Exact replay (no overrides): the learner is built from the recorded configuration with the
// recorded starting weights, and each step is checked against what the run recorded: the
// optimizer step and learning rate it was about to use, the loss and gradient norm it reported
// (bit for bit) and the SHA-256 of the weights after it. Bit for bit needs the same arithmetic:
// the caller applies the recorded BLAS thread count and device before create() (as the actor
// role does at start-up).
//
// With overrides (another learner setting, e.g. "correction=none"), the same batches in the same
// order go through the changed learner, nothing is compared (its weights leave the run's at the
// first step), and evaluate() gives its held-out accuracy: the real system's batches fed to the
// staleness study's learner.
//
// Errors: a recorded configuration that does not parse, or an override that names no field or
// breaks a constraint, is invalid_argument; starting weights of another size too. A batch the
// learner refuses is its error, with the step as context. A mismatch is not an error: step()
// reports it.
//
// Thread safety: none; one thread uses a Replay.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actor/batch_record.hpp"
#include "actor/learner.hpp"
#include "core/status.hpp"

namespace sluice::actor {

// The learner configuration a record holds, with `overrides` ("a.b=c", paths within
// LearnerConfig; a leading "actor.learner." is accepted) applied, parsed and validated.
core::Result<LearnerConfig> replay_config(const RecordStart& start,
                                          const std::vector<std::string>& overrides);

struct ReplayedStep {
  std::uint64_t step = 0;
  std::size_t samples = 0;
  TrainStats stats;
  bool compared = false;  // exact replay: checked against the record
  std::string mismatch;   // what differed first (empty: it matched, or was not compared)
};

class Replay {
 public:
  // A learner of `config` with the record's starting weights. `exact`: compare each step.
  static core::Result<std::unique_ptr<Replay>> create(const LearnerConfig& config,
                                                      const RecordStart& start, bool exact);

  // One recorded step through the learner.
  core::Result<ReplayedStep> step(const RecordedStep& recorded);
  // The weights now against a safetensors file of the run's final weights (tensor by tensor,
  // bytes equal): an empty string when they match, else what differs.
  core::Result<std::string> compare_weights(const std::string& safetensors_path) const;

  Learner& learner() { return *learner_; }
  bool exact() const { return exact_; }

 private:
  Replay(std::unique_ptr<Learner> learner, bool exact)
      : learner_(std::move(learner)), exact_(exact) {}
  std::unique_ptr<Learner> learner_;
  bool exact_ = true;
};

}  // namespace sluice::actor
