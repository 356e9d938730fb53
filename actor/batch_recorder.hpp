// The trainer's side of the batch record (actor/batch_record.hpp): it starts the record from the
// learner's state once the warm start is done, or continues it after a resume from a checkpoint,
// appends each step with the batch trained on and a digest of the weights after it, and syncs
// before each checkpoint so that a checkpoint never runs ahead of the record.
//
// The record is a by-product: a failed write does not stop the job. The recorder logs it, moves
// the file aside to PATH.incomplete (so that `sluice replay` says there is no record rather than
// replaying part of one) and records nothing more.
//
// Thread safety: the trainer's thread; the learner is read between its updates only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actor/batch_record.hpp"
#include "actor/batch_record_file.hpp"
#include "actor/learner.hpp"

namespace sluice::actor {

// The learner's state now as a record's start: its configuration, the BLAS threads and the
// weights with their digest.
RecordStart record_start_of(const Learner& learner);
// SHA-256 of the learner's weights.
core::Digest weights_digest(const Learner& learner);

class BatchRecorder {
 public:
  explicit BatchRecorder(std::string path) : path_(std::move(path)) {}

  // A new record, starting from the learner as it is now (after its warm start).
  void begin(const Learner& learner);
  // Continues the record after a resume from a checkpoint at step `step`.
  void resume(std::uint64_t step);
  // Before an update: what the learner is about to use (its optimizer step and lr).
  void before_step(const Learner& learner);
  // After it: step `step`, trained at `actor_version`, on `batch`; `loss` and `grad_norm` as the
  // learner reported them.
  void after_step(std::uint64_t step, std::uint64_t actor_version, const std::vector<Sample>& batch,
                  const Learner& learner, double loss, double grad_norm);
  // Makes everything appended durable (before a checkpoint, and at the end).
  void sync();

  bool active() const { return writer_ != nullptr; }
  std::uint64_t bytes() const { return writer_ ? writer_->bytes() : 0; }

 private:
  void give_up(const core::Status& why);

  std::string path_;
  std::unique_ptr<BatchRecordWriter> writer_;
  std::uint64_t optimizer_step_ = 0;
  float lr_ = 0.0f;
};

}  // namespace sluice::actor
