#include "actor/replay.hpp"

#include <fmt/format.h>

#include <cstring>
#include <string_view>

#include "actor/batch_recorder.hpp"
#include "core/config.hpp"
#include "format/safetensors.hpp"

namespace sluice::actor {

namespace {

// "the loss 0.123 (recorded 0.124)": enough digits to tell bit patterns apart.
std::string differs(const char* what, double replayed, double recorded) {
  return fmt::format("{} {:.17g} (recorded {:.17g})", what, replayed, recorded);
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

core::Result<LearnerConfig> replay_config(const RecordStart& start,
                                          const std::vector<std::string>& overrides) {
  SLUICE_ASSIGN_OR_RETURN(
      core::config::Json doc,
      core::config::parse_json_text(start.learner_config, "the batch record's learner config"));
  constexpr std::string_view kPrefix = "actor.learner.";
  for (const std::string& o : overrides) {
    std::string_view a = o;
    if (a.starts_with(kPrefix)) a.remove_prefix(kPrefix.size());
    SLUICE_TRY(core::config::apply_override(doc, a));
  }
  LearnerConfig config;
  SLUICE_TRY(core::config::parse(doc, config).with_context("replay learner config"));
  SLUICE_TRY(config.validate());
  return config;
}

core::Result<std::unique_ptr<Replay>> Replay::create(const LearnerConfig& config,
                                                     const RecordStart& start, bool exact) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Learner> learner, Learner::create(config));
  SLUICE_TRY(learner->load_weights(start.weights).with_context("replay: the starting weights"));
  return std::unique_ptr<Replay>(new Replay(std::move(learner), exact));
}

core::Result<ReplayedStep> Replay::step(const RecordedStep& recorded) {
  ReplayedStep out;
  out.step = recorded.step;
  out.samples = recorded.batch.size();
  out.compared = exact_;
  const std::uint64_t optimizer_step = learner_->steps();
  const float lr = learner_->lr_at(optimizer_step);
  if (exact_ && optimizer_step != recorded.optimizer_step) {
    out.mismatch = fmt::format("the learner is at optimizer step {}, the run was at {}",
                               optimizer_step, recorded.optimizer_step);
    return out;
  }
  if (exact_ && std::memcmp(&lr, &recorded.lr, sizeof lr) != 0) {
    out.mismatch = differs("the learning rate", lr, recorded.lr);
    return out;
  }
  auto stats = learner_->train(recorded.batch);
  if (!stats.is_ok()) return stats.status().with_context(fmt::format("step {}", recorded.step));
  out.stats = *stats;
  if (!exact_) return out;
  if (!same_bits(out.stats.loss, recorded.loss)) {
    out.mismatch = differs("the loss", out.stats.loss, recorded.loss);
  } else if (!same_bits(out.stats.grad_norm, recorded.grad_norm)) {
    out.mismatch = differs("the gradient norm", out.stats.grad_norm, recorded.grad_norm);
  } else if (core::Digest d = weights_digest(*learner_); d != recorded.weights_digest) {
    out.mismatch = "the weights after the update differ: " + core::digest_hex(d) + " (recorded " +
                   core::digest_hex(recorded.weights_digest) + ")";
  }
  return out;
}

core::Result<std::string> Replay::compare_weights(const std::string& safetensors_path) const {
  SLUICE_ASSIGN_OR_RETURN(core::SafetensorsFile file, core::read_safetensors(safetensors_path));
  const model::Gpt& m = learner_->model();
  const auto* params = reinterpret_cast<const std::uint8_t*>(m.params());
  const std::vector<core::TensorSpec> specs = m.tensors();
  if (file.header.tensors.size() != specs.size()) {
    return fmt::format("{} holds {} tensors, the model has {}", safetensors_path,
                       file.header.tensors.size(), specs.size());
  }
  for (const auto& spec : specs) {
    const core::SafetensorsTensor* found = nullptr;
    for (const auto& t : file.header.tensors)
      if (t.name == spec.name) found = &t;
    if (found == nullptr) return fmt::format("{} has no tensor {}", safetensors_path, spec.name);
    if (found->end - found->begin != spec.bytes ||
        std::memcmp(file.data.data() + found->begin, params + spec.offset, spec.bytes) != 0) {
      return fmt::format("tensor {} differs from {}'s", spec.name, safetensors_path);
    }
  }
  return std::string();
}

}  // namespace sluice::actor
