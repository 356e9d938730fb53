#include "actor/gpt_policy.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/safetensors.hpp"

namespace sluice::actor {

namespace {

class GptPolicy final : public Policy {
 public:
  explicit GptPolicy(std::unique_ptr<Learner> learner) : learner_(std::move(learner)) {}

  core::Status prepare(const std::function<void()>& idle) override {
    auto ws = learner_->warm_start([&](std::uint32_t step, float loss) {
      if (step % 50 == 0) core::log::info("actor: warm start step {}: loss {:.3f}", step, loss);
      idle();
    });
    if (!ws.is_ok()) return ws.status().with_context("warm start");
    core::log::info("actor: warm start done: {} steps, loss {:.3f} -> {:.3f}", ws->steps,
                    ws->first_loss, ws->last_loss);
    return {};
  }

  core::Result<nlohmann::json> train(const std::vector<Sample>& batch,
                                     const std::function<void(double)>&) override {
    SLUICE_ASSIGN_OR_RETURN(TrainStats s, learner_->train(batch));
    return nlohmann::json{{"loss", s.loss},
                          {"reward_mean", s.mean_reward},
                          {"clip_fraction", s.clip_fraction},
                          {"behaviour_kl", s.behaviour_kl},
                          {"grad_norm", s.grad_norm}};
  }

  std::vector<TensorView> tensors() override {
    const model::Gpt& m = learner_->model();
    const auto* base = reinterpret_cast<const std::uint8_t*>(m.params());
    std::vector<TensorView> out;
    for (const auto& t : m.tensors())
      out.push_back({t.name, t.dtype, t.shape, base + t.offset, t.bytes});
    return out;
  }

  core::Result<nlohmann::json> evaluate() override {
    SLUICE_ASSIGN_OR_RETURN(EvalStats e, learner_->evaluate());
    nlohmann::json by_terms = nlohmann::json::array();  // [terms, prompts, correct] each
    for (const auto& k : e.by_terms)
      by_terms.push_back({k.terms, k.prompts, k.correct});
    return nlohmann::json{{"accuracy", e.accuracy},
                          {"eval_reward", e.mean_reward},
                          {"eval_response_tokens", e.mean_response_tokens},
                          {"eval_prompts", e.prompts},
                          {"accuracy_by_terms", std::move(by_terms)}};
  }

  core::Status save_weights(const std::string& path) override {
    std::vector<core::SafetensorsInput> in;
    for (const auto& t : tensors())
      in.push_back({t.name, t.dtype, t.shape, t.data, t.bytes});
    return core::write_safetensors(path, in, {{"format", "sluice reference gpt"}});
  }

 private:
  std::unique_ptr<Learner> learner_;
};

}  // namespace

core::Result<std::unique_ptr<Policy>> make_gpt_policy(const LearnerConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(auto learner, Learner::create(config));
  return std::unique_ptr<Policy>(new GptPolicy(std::move(learner)));
}

}  // namespace sluice::actor
