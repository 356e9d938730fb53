#include "actor/batch_recorder.hpp"

#include <cstdio>
#include <filesystem>

#include "core/config.hpp"
#include "core/log.hpp"
#include "model/blas.hpp"

namespace sluice::actor {

core::Digest weights_digest(const Learner& learner) {
  const model::Gpt& m = learner.model();
  return core::chunk_digest(m.params(), m.param_count() * sizeof(float));
}

RecordStart record_start_of(const Learner& learner) {
  RecordStart s;
  s.learner_config = core::config::to_json(learner.config()).dump();
  s.blas_threads = static_cast<std::uint32_t>(model::blas_threads());
  const model::Gpt& m = learner.model();
  s.weights.assign(m.params(), m.params() + m.param_count());
  s.weights_digest = weights_digest(learner);
  return s;
}

void BatchRecorder::give_up(const core::Status& why) {
  core::log::error("actor: batch record '{}': {}; recording no more batches (the job goes on)",
                   path_, why.to_string());
  writer_.reset();
  const std::string aside = path_ + ".incomplete";
  if (std::rename(path_.c_str(), aside.c_str()) == 0) {
    core::log::warn("actor: batch record moved aside to '{}'", aside);
  }
}

void BatchRecorder::begin(const Learner& learner) {
  auto w = BatchRecordWriter::create(path_, record_start_of(learner));
  if (!w.is_ok()) return give_up(w.status());
  writer_ = std::move(*w);
  core::log::info("actor: recording batches to '{}'", path_);
}

void BatchRecorder::resume(std::uint64_t step) {
  std::error_code ec;
  const std::uint64_t before = std::filesystem::file_size(path_, ec);
  auto w = BatchRecordWriter::resume(path_, step);
  if (!w.is_ok()) return give_up(w.status());
  writer_ = std::move(*w);
  core::log::info("actor: batch record '{}' continues after step {} ({} bytes kept, {} cut)", path_,
                  step, writer_->bytes(), ec ? 0 : before - writer_->bytes());
}

void BatchRecorder::before_step(const Learner& learner) {
  optimizer_step_ = learner.steps();
  lr_ = learner.lr_at(optimizer_step_);
}

void BatchRecorder::after_step(std::uint64_t step, std::uint64_t actor_version,
                               const std::vector<Sample>& batch, const Learner& learner,
                               double loss, double grad_norm) {
  if (!writer_) return;
  RecordedStep r;
  r.step = step;
  r.actor_version = actor_version;
  r.optimizer_step = optimizer_step_;
  r.lr = lr_;
  r.loss = loss;
  r.grad_norm = grad_norm;
  r.batch = batch;
  r.weights_digest = weights_digest(learner);
  if (core::Status s = writer_->append(r); !s.is_ok()) give_up(s);
}

void BatchRecorder::sync() {
  if (!writer_) return;
  if (core::Status s = writer_->sync(); !s.is_ok()) give_up(s);
}

}  // namespace sluice::actor
