// The learner: trains the reference GPT (model::Gpt) on the arithmetic task (rl::ArithmeticTask),
// first with a supervised warm start on gold solutions, then with RL updates (GRPO or PPO) on
// trajectories that rollouts generated (actor::Sample). It owns the model and its optimizer; the
// actor process publishes model() as weight versions.
//
// One RL update (train):
//   - samples of weight 0 are set aside first: a batch behaves exactly as if they were absent;
//   - each sequence is prompt_tokens + response_tokens; the model's log-prob of response token j
//     is forward()'s log-prob at position (prompt length + j - 1), and PPO's value of the state
//     that generated token j is the value head at that same position;
//   - advantages: GRPO, per trajectory from the rewards of its group (Trajectory::prompt_id),
//     spread over its tokens; PPO, GAE over the value head's values with the reward on the last
//     token;
//   - the loss is the decoupled clipped surrogate (rl::clipped_surrogate): proximal = the log-probs
//     of the weights before this update, behaviour = Trajectory::logprobs, sample weight =
//     Sample::weight; PPO adds value_coef x the value loss (0.5 (V - R)^2 per token, each token
//     weighted by its sample's weight). Every term is a mean over the response tokens of the
//     batch. `correction` picks how stale samples (behaviour != proximal) are corrected:
//     "behaviour-cap" (the default) as just said, w = min(exp(proximal - behaviour), cap);
//     "none", the ratio taken against the behaviour log-probs directly (no proximal, w = 1: a
//     naive asynchronous PPO); "m2po", M2PO's second-moment trust region
//     (rl::second_moment_mask over log w for the whole batch, w uncapped on the kept tokens, the
//     masked tokens giving no loss and no gradient);
//   - the batch runs `minibatch` sequences per forward/backward, gradients accumulate over the
//     whole batch, and AdamW takes one step per epoch (`epochs` passes, the proximal log-probs
//     fixed at the first pass).
//
// Errors: a malformed config, or a malformed sample (response log-probs of another length than the
// response, an empty prompt or response, a token outside the vocabulary, a sequence longer than
// the context, a negative or non-finite weight), is invalid_argument naming the field or the
// trajectory; a rejected batch leaves the model and the optimizer unchanged.
//
// Thread safety: none. One thread uses a Learner (the model keeps activations between forward and
// backward); model() may be read by that thread between calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "core/status.hpp"
#include "model/adamw.hpp"
#include "model/gpt.hpp"
#include "rl/loss.hpp"
#include "rl/task.hpp"
#include "rl/trajectory.hpp"

namespace sluice::actor {

struct LearnerConfig {
  model::GptConfig gpt;  // vocab must cover rl::Tokenizer::kVocabSize; context >= task's
  // The RL optimizer. RL wants a far smaller step than AdamW's default 1e-3 (measured on the demo
  // model: 1e-3 collapses responses within 10 GRPO updates, 2e-4 drifts down, 5e-5 climbs).
  model::AdamWConfig adamw{.lr = 5e-5f, .max_grad_norm = 1.0f};
  rl::TaskConfig task;             // the prompts of the warm start and of evaluation
  std::string algorithm = "grpo";  // "grpo" or "ppo" (ppo needs gpt.value_head)
  // Where the model's matrix products run: "cpu" (OpenBLAS) or "cuda" (cuBLAS on device 0, see
  // model/device.hpp). Process-wide: the `sluice actor` role applies it at start-up
  // (model::use_device); Learner::create only checks the value.
  std::string device = "cpu";

  // Supervised warm start on gold solutions of training prompts.
  // Demo sizes: 250 steps of 32 at 1e-3 give about 20-25% held-out accuracy, 400 to 550 steps
  // 22-48%: it swings by +-10 points from step to step at a constant lr (examples/grpo_arith.json
  // uses 450, which lands at 22.8%; docs/benchmarks.md has the sweep).
  std::uint32_t warmstart_steps = 250;  // optimizer steps (0: no warm start)
  std::uint32_t warmstart_batch = 32;   // sequences per step, >= 1
  float warmstart_lr = 1e-3f;           // its learning rate (its own AdamW), > 0
  // The warm-start lr follows a cosine from warmstart_lr down to this fraction of it over the
  // warm start's steps (1: constant).
  float warmstart_lr_final = 1.0f;  // in (0, 1]

  // RL.
  // The RL learning rate follows a cosine from adamw.lr down to lr_final x adamw.lr over the
  // first lr_decay_steps optimizer steps, and stays there (0 steps: constant).
  std::uint32_t lr_decay_steps = 0;
  float lr_final = 0.1f;  // in (0, 1]
  rl::SurrogateOptions clip;
  // How stale samples are corrected (see the header comment): "behaviour-cap", "none" or "m2po".
  std::string correction = "behaviour-cap";
  // m2po: the largest mean of (log w)^2 over the kept tokens; 0.04 is the value of the M2PO paper
  // (Zheng et al., arXiv 2510.01161, "Prosperity before Collapse").
  double m2po_threshold = 0.04;
  rl::GrpoOptions grpo;
  rl::GaeOptions gae;
  double value_coef = 0.5;       // weight of the value loss (ppo), >= 0
  std::uint32_t minibatch = 16;  // sequences per forward/backward, >= 1
  std::uint32_t epochs = 1;      // passes (optimizer steps) over a batch, >= 1

  // Evaluation: greedy decoding of held-out prompts.
  std::uint32_t eval_prompts = 200;        // the first N prompts of the held-out stream, >= 1
  std::uint32_t eval_max_new_tokens = 48;  // tokens generated per prompt at most, >= 1

  template <typename V>
  void describe(V& v) {
    v("gpt", gpt, "the model");
    v("adamw", adamw, "the RL optimizer (defaults here: lr 5e-5, max_grad_norm 1)");
    v("task", task, "the arithmetic task");
    v("algorithm", algorithm, "grpo or ppo (ppo needs gpt.value_head) (default grpo)");
    v("device", device,
      "where the model's matrix products run: cpu (OpenBLAS) or cuda (cuBLAS, operands copied "
      "per product: a correctness path, not a speed path) (default cpu)");
    v("warmstart_steps", warmstart_steps, "supervised warm-start steps, 0 for none (default 250)");
    v("warmstart_batch", warmstart_batch, "sequences per warm-start step (default 32)");
    v("warmstart_lr", warmstart_lr, "warm-start learning rate (default 0.001)");
    v("warmstart_lr_final", warmstart_lr_final,
      "the warm-start lr's final fraction of warmstart_lr, reached by a cosine over the warm "
      "start's steps; 1 for a constant lr (default 1)");
    v("lr_decay_steps", lr_decay_steps,
      "RL steps over which the lr decays by a cosine to lr_final x adamw.lr, 0 for a constant lr "
      "(default 0)");
    v("lr_final", lr_final, "the RL lr's final fraction of adamw.lr (default 0.1)");
    v("clip", clip, "the clipped surrogate");
    v("correction", correction,
      "correction of stale samples: behaviour-cap (decoupled PPO, w capped at "
      "clip.behaviour_cap), none (ratio against the behaviour log-probs, w = 1) or m2po "
      "(second-moment trust region: mask the tokens of largest (log w)^2) (default "
      "behaviour-cap)");
    v("m2po_threshold", m2po_threshold,
      "m2po: the mean of (log w)^2 over the kept tokens is at most this (default 0.04, the "
      "M2PO paper's)");
    v("grpo", grpo, "GRPO advantages");
    v("gae", gae, "PPO's generalised advantage estimation");
    v("value_coef", value_coef, "weight of the PPO value loss (default 0.5)");
    v("minibatch", minibatch, "sequences per forward/backward (default 16)");
    v("epochs", epochs, "optimizer steps per batch (default 1)");
    v("eval_prompts", eval_prompts, "held-out prompts per evaluation (default 200)");
    v("eval_max_new_tokens", eval_max_new_tokens,
      "tokens generated per held-out prompt at most (default 48)");
  }
  core::Status validate() const;
};

struct WarmStartStats {
  std::uint32_t steps = 0;
  float first_loss = 0.0f;  // SFT loss (mean NLL per response token) of the first step
  float last_loss = 0.0f;   // and of the last
};

struct TrainStats {
  double loss = 0.0;           // total: surrogate + value_coef x value loss (last epoch)
  double policy_loss = 0.0;    // the clipped surrogate (last epoch)
  double value_loss = 0.0;     // ppo only (last epoch)
  double mean_reward = 0.0;    // over the samples trained on (weight > 0)
  double clip_fraction = 0.0;  // share of tokens clipped (last epoch; 0 with one epoch)
  double approx_kl = 0.0;      // KL(proximal || current), last epoch (0 with one epoch)
  double behaviour_kl = 0.0;   // approximate KL(behaviour || proximal): how off-policy the batch is
  double truncated_fraction = 0.0;  // share of tokens whose behaviour weight hit the cap
  double masked_fraction = 0.0;     // m2po: share of tokens masked by the second-moment bound
  double grad_norm = 0.0;           // global gradient norm before clipping (last epoch)
  std::size_t tokens = 0;           // response tokens trained on (the model's)
  std::size_t env_tokens = 0;       // episodes' environment tokens, masked out
  std::size_t samples = 0;          // samples trained on (weight > 0)
  std::size_t skipped = 0;          // samples of weight 0, set aside
};

struct EvalStats {
  std::size_t prompts = 0;
  double accuracy = 0.0;     // share of prompts answered fully right (ArithmeticTask::correct)
  double mean_reward = 0.0;  // ArithmeticTask::reward
  double mean_response_tokens = 0.0;  // generated tokens, EOS included
  double tool_use = 0.0;  // the tool form: share of prompts whose response called the tool
  // The same prompts by their number of terms (ascending): where the policy fails.
  struct ByTerms {
    std::uint32_t terms = 0;
    std::size_t prompts = 0;
    std::size_t correct = 0;
  };
  std::vector<ByTerms> by_terms;
};

class Learner {
 public:
  // Called after each warm-start step with the step (1-based) and its SFT loss.
  using Progress = std::function<void(std::uint32_t step, float loss)>;

  // Validates the config and builds the model (initial weights from gpt.init_seed), the task and
  // the optimizer.
  static core::Result<std::unique_ptr<Learner>> create(const LearnerConfig& config);
  ~Learner();
  Learner(const Learner&) = delete;
  Learner& operator=(const Learner&) = delete;

  const LearnerConfig& config() const { return config_; }
  const rl::ArithmeticTask& task() const { return task_; }
  // The weights, for publishing: model().tensors() describe model().params().
  const model::Gpt& model() const { return *model_; }
  // RL optimizer steps taken so far (warm-start steps not included).
  std::uint64_t steps() const;
  // The learning rate of RL optimizer step `step` (0-based): adamw.lr decayed by the cosine of
  // lr_decay_steps / lr_final.
  float lr_at(std::uint64_t step) const;

  // Supervised fine-tuning on gold solutions of the training prompts (warmstart_steps steps of
  // warmstart_batch sequences, fresh prompts each step, its own AdamW at warmstart_lr). May be
  // called more than once (it continues the training stream).
  core::Result<WarmStartStats> warm_start(const Progress& progress = {});

  // One RL update on `batch` (see the header comment). A batch with no sample of positive weight
  // changes nothing and reports tokens = 0.
  core::Result<TrainStats> train(const std::vector<Sample>& batch);

  // The current weights' log-prob of every response token of each trajectory (what train() uses
  // as the proximal policy). Checked as train() checks, except that the behaviour log-probs and
  // the reward are not needed.
  core::Result<std::vector<std::vector<float>>> response_logprobs(
      const std::vector<rl::Trajectory>& trajectories);
  // The value head's value at each response token's state (ppo models only).
  core::Result<std::vector<std::vector<float>>> response_values(
      const std::vector<rl::Trajectory>& trajectories);

  // Greedy decoding (KV cache: prefill, then batched decode) of the first eval_prompts held-out
  // prompts, each up to eval_max_new_tokens tokens or EOS.
  core::Result<EvalStats> evaluate();

  // One response per prompt from the current weights: KV-cache prefill, then batched decode,
  // each response up to max_new_tokens tokens, EOS, or until prompt + response fill the context.
  // Tokens are drawn at `temperature` (0: greedy) from `rng` (see model::sample); logprobs[j] is
  // what model::sample reports for token j. The model's weights are not changed.
  // A response; in the tool form an episode, the calculator's answers in `tokens` at log-prob 0.
  struct Generated {
    std::vector<rl::Token> tokens;
    std::vector<float> logprobs;
    std::uint32_t turns = 1;
  };
  core::Result<std::vector<Generated>> generate(const std::vector<rl::Prompt>& prompts,
                                                float temperature, std::uint32_t max_new_tokens,
                                                std::uint64_t& rng);

  // A checkpoint: the config's model shape, the weights, the RL optimizer's state and the step
  // count, in one binary file (written to a temporary name, then renamed). load() needs a learner
  // with the same model shape; a file of another shape or a damaged file is an error and leaves
  // the learner unchanged.
  core::Status save(const std::string& path) const;
  core::Status load(const std::string& path);
  // Replaces the weights only (model().param_count() floats, as model().params() holds them);
  // the optimizer's state and the step count are unchanged. For generating from a copy of older
  // weights (sluice study staleness). A buffer of another size is invalid_argument.
  core::Status load_weights(std::span<const float> params);

 private:
  Learner(LearnerConfig config, rl::ArithmeticTask task, std::unique_ptr<model::Gpt> model,
          std::unique_ptr<model::AdamW> optimizer);

  LearnerConfig config_;
  rl::ArithmeticTask task_;
  std::unique_ptr<model::Gpt> model_;
  std::unique_ptr<model::AdamW> optimizer_;
  std::uint64_t next_train_prompt_ = 0;  // the warm start's position in the training stream
};

}  // namespace sluice::actor
