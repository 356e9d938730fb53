#include "actor/gpt_policy.hpp"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "format/safetensors.hpp"

namespace sluice::actor {

namespace {

// One thread that runs the learner's updates, so the actor's loop (heartbeats, serving reads of
// published versions) keeps running during a step that takes seconds. A single long-lived
// thread, not one per step: with device cuda each thread gets its own cuBLAS handle and scratch.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs `fn` on the worker; the future is ready when it returns.
  std::future<void> run(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    auto f = task.get_future();
    {
      std::lock_guard<std::mutex> g(mu_);
      task_ = std::move(task);
      has_task_ = true;
    }
    cv_.notify_one();
    return f;
  }

 private:
  void loop() {
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return quit_ || has_task_; });
        if (!has_task_) return;
        task = std::move(task_);
        has_task_ = false;
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::packaged_task<void()> task_;
  bool has_task_ = false;
  bool quit_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// How long the actor's loop runs between looks at a training step in progress.
constexpr double kTrainPollMs = 20.0;

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
                                     const std::function<void(double)>& wait) override {
    // The model is touched by the worker only until the future is ready; tensors() is read after.
    core::Result<TrainStats> r = core::internal_error("learner: train did not run");
    auto done = worker_.run([&] { r = learner_->train(batch); });
    while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      wait(kTrainPollMs);
    done.get();
    SLUICE_ASSIGN_OR_RETURN(TrainStats s, std::move(r));
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
                          {"eval_tool_use", e.tool_use},
                          {"accuracy_by_terms", std::move(by_terms)}};
  }

  core::Status save_state(const std::string& path) override { return learner_->save(path); }
  core::Status load_state(const std::string& path) override { return learner_->load(path); }

  core::Status save_weights(const std::string& path) override {
    std::vector<core::SafetensorsInput> in;
    for (const auto& t : tensors())
      in.push_back({t.name, t.dtype, t.shape, t.data, t.bytes});
    return core::write_safetensors(path, in, {{"format", "sluice reference gpt"}});
  }

  const Learner* learner() const override { return learner_.get(); }

 private:
  std::unique_ptr<Learner> learner_;
  Worker worker_;  // after learner_: joined before the learner goes
};

}  // namespace

core::Result<std::unique_ptr<Policy>> make_gpt_policy(const LearnerConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(auto learner, Learner::create(config));
  return std::unique_ptr<Policy>(new GptPolicy(std::move(learner)));
}

}  // namespace sluice::actor
