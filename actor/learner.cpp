#include "actor/learner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <string_view>
#include <utility>

#include "core/bytes.hpp"
#include "core/checksum.hpp"
#include "model/device.hpp"
#include "model/sampling.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::actor {

namespace {

using core::Result;
using core::Status;

// ---- input checks ----

// `scoring`: the trajectory is only scored (its behaviour log-probs and reward are not used).
Status check_trajectory(const rl::Trajectory& t, const model::GptConfig& g, bool scoring) {
  auto bad = [&](const std::string& what) {
    return core::invalid_argument("learner: trajectory '" + t.id + "': " + what);
  };
  if (t.prompt_tokens.empty()) return bad("empty prompt");
  if (t.response_tokens.empty()) return bad("empty response");
  if (!scoring && t.logprobs.size() == t.response_tokens.size()) {
    if (Status e = t.check_episode(); !e.is_ok()) return bad(e.message());
  }
  if (!scoring && t.logprobs.size() != t.response_tokens.size()) {
    return bad(std::to_string(t.logprobs.size()) + " behaviour log-probs for " +
               std::to_string(t.response_tokens.size()) + " response tokens");
  }
  const std::size_t length = t.prompt_tokens.size() + t.response_tokens.size();
  if (length > static_cast<std::size_t>(g.context)) {
    return bad("prompt + response is " + std::to_string(length) + " tokens, over the context of " +
               std::to_string(g.context));
  }
  for (const auto* part : {&t.prompt_tokens, &t.response_tokens}) {
    for (std::int32_t tok : *part) {
      if (tok < 0 || tok >= g.vocab) {
        return bad("token " + std::to_string(tok) + " outside the vocabulary of " +
                   std::to_string(g.vocab));
      }
    }
  }
  if (scoring) return {};
  for (float lp : t.logprobs) {
    if (!std::isfinite(lp) || lp > 0.0f) return bad("behaviour log-prob not finite or above 0");
  }
  if (!std::isfinite(t.reward)) return bad("reward is not finite");
  return {};
}

Status check_sample(const Sample& s, const model::GptConfig& g) {
  SLUICE_TRY(check_trajectory(s.trajectory, g, false));
  if (!std::isfinite(s.weight) || s.weight < 0.0) {
    return core::invalid_argument("learner: trajectory '" + s.trajectory.id +
                                  "': sample weight must be finite and >= 0");
  }
  return {};
}

// The sequences of a batch as the model sees them.
struct Sequences {
  std::vector<std::vector<std::int32_t>> seqs;  // prompt + response
  std::vector<std::size_t> prompt_len;
  rl::TokenLayout layout;  // response lengths

  void add(const rl::Trajectory& t) {
    std::vector<std::int32_t> s = t.prompt_tokens;
    s.insert(s.end(), t.response_tokens.begin(), t.response_tokens.end());
    seqs.push_back(std::move(s));
    prompt_len.push_back(t.prompt_tokens.size());
  }
  void finish() {
    std::vector<std::size_t> lengths;
    lengths.reserve(seqs.size());
    for (std::size_t i = 0; i < seqs.size(); ++i)
      lengths.push_back(seqs[i].size() - prompt_len[i]);
    layout = rl::TokenLayout(std::move(lengths));
  }
};

// One forward over sequences [begin, end) of `s`; writes the response tokens' log-probs (and,
// when `values` is given, the values at the same positions) into the flat per-token vectors at
// the batch layout's offsets.
Status score(model::Gpt& gpt, const Sequences& s, std::size_t begin, std::size_t end,
             std::vector<float>& logp, std::vector<float>* values) {
  std::vector<std::vector<std::int32_t>> sub(s.seqs.begin() + static_cast<std::ptrdiff_t>(begin),
                                             s.seqs.begin() + static_cast<std::ptrdiff_t>(end));
  SLUICE_ASSIGN_OR_RETURN(model::ForwardOutput out, gpt.forward(sub));
  for (std::size_t b = begin; b < end; ++b) {
    const std::size_t first = s.prompt_len[b] - 1;  // position predicting response token 0
    const std::size_t off = s.layout.offset(b);
    for (std::size_t j = 0; j < s.layout.length(b); ++j) {
      logp[off + j] = out.logprobs[b - begin][first + j];
      if (values != nullptr) (*values)[off + j] = out.values[b - begin][first + j];
    }
  }
  return {};
}

std::span<const float> slice(const std::vector<float>& v, std::size_t from, std::size_t to) {
  return std::span<const float>(v).subspan(from, to - from);
}

// ---- checkpoint encoding ----

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'L', 'N'};
constexpr std::uint32_t kFormatVersion = 1;

// The checkpoint's float arrays are the model's and optimizer's own bytes, in host order.
bool get_floats(core::ByteReader& r, std::vector<float>& v, std::size_t n) {
  if (r.left() / sizeof(float) < n) return false;
  v.resize(n);
  return r.copy(v.data(), n * sizeof(float));
}
void put_floats(core::ByteWriter& w, std::span<const float> v) {
  w.put(v.data(), v.size_bytes());
}

// A cosine from `base` at step 0 down to final_fraction x base at step `steps`, constant after
// (steps 0: constant).
float cosine_lr(float base, std::uint64_t step, std::uint64_t steps, float final_fraction) {
  if (steps == 0) return base;
  const double t = static_cast<double>(std::min(step, steps)) / static_cast<double>(steps);
  const double f = final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + std::cos(M_PI * t));
  return static_cast<float>(base * f);
}

std::vector<std::int32_t> shape_of(const model::GptConfig& g) {
  return {g.vocab, g.context, g.d_model, g.n_layer, g.n_head, g.d_ff, g.value_head ? 1 : 0};
}

// The samples of a batch that count: weight 0 contributes nothing, and leaving such samples out
// also keeps them out of the group means and of the token count that normalises the loss, so
// they change nothing at all.
struct TrainBatch {
  Sequences seq;
  std::vector<float> behaviour, weights;  // per token, per sequence
  // Per token: 1 the model's, 0 an episode's environment token (never trained on).
  std::vector<std::uint8_t> loss_mask;
  std::size_t env_tokens = 0;
  std::vector<double> rewards;
  std::vector<std::string> keys;  // prompt ids: GRPO's groups
  std::size_t skipped = 0;
};

TrainBatch gather(const std::vector<Sample>& batch) {
  TrainBatch tb;
  for (const auto& s : batch) {
    if (s.weight == 0.0) {
      ++tb.skipped;
      continue;
    }
    tb.seq.add(s.trajectory);
    tb.behaviour.insert(tb.behaviour.end(), s.trajectory.logprobs.begin(),
                        s.trajectory.logprobs.end());
    if (s.trajectory.is_episode()) {
      tb.loss_mask.insert(tb.loss_mask.end(), s.trajectory.loss_mask.begin(),
                          s.trajectory.loss_mask.end());
      tb.env_tokens += s.trajectory.response_tokens.size() - s.trajectory.model_tokens();
    } else {
      tb.loss_mask.insert(tb.loss_mask.end(), s.trajectory.response_tokens.size(), 1);
    }
    tb.weights.push_back(static_cast<float>(s.weight));
    tb.rewards.push_back(s.trajectory.reward);
    tb.keys.push_back(s.trajectory.prompt_id);
  }
  tb.seq.finish();
  return tb;
}

// The batch's advantages (and PPO's returns). Where they or the correction need the proximal
// log-probs before the first gradient, a pass without gradients fills `proximal` first; returns
// whether it did.
core::Result<bool> batch_advantages(model::Gpt& model, const LearnerConfig& config,
                                    const TrainBatch& tb, std::vector<float>& proximal,
                                    std::vector<float>& advantages, std::vector<float>& returns) {
  const Sequences& seq = tb.seq;
  const std::size_t n_seq = seq.seqs.size(), mb = config.minibatch;
  const bool ppo = config.algorithm == "ppo";
  bool have_proximal = false;
  if (config.correction == "m2po" && !ppo) {
    // M2PO's mask is over the whole batch, so every proximal log-prob is needed before the first
    // gradient: one pass without gradients (GRPO would otherwise take them from the first
    // epoch's forward passes). This pass is m2po's cost in the learner's time per step.
    for (std::size_t b = 0; b < n_seq; b += mb)
      SLUICE_TRY(score(model, seq, b, std::min(n_seq, b + mb), proximal, nullptr));
    have_proximal = true;
  }
  if (ppo) {
    // GAE needs every value of the batch (for the normalisation) before any gradient: one pass
    // without gradients gives the values and, on the way, the proximal log-probs.
    std::vector<float> values(seq.layout.tokens());
    for (std::size_t b = 0; b < n_seq; b += mb)
      SLUICE_TRY(score(model, seq, b, std::min(n_seq, b + mb), proximal, &values));
    SLUICE_ASSIGN_OR_RETURN(rl::GaeResult g, rl::gae(seq.layout, values, tb.rewards, config.gae));
    advantages = std::move(g.advantages);
    returns = std::move(g.returns);
    return true;
  }
  // GRPO needs no model output for its advantages; the proximal log-probs come from the first
  // epoch's own forward passes (the weights have not moved yet then).
  const std::vector<std::size_t> groups = rl::group_ids(tb.keys);
  SLUICE_ASSIGN_OR_RETURN(std::vector<float> per_traj,
                          rl::grpo_advantages(tb.rewards, groups, config.grpo));
  SLUICE_ASSIGN_OR_RETURN(advantages, rl::broadcast_to_tokens(seq.layout, per_traj));
  return have_proximal;
}

// The model's log-probs (and PPO's values) of the response tokens of sequences [b0, b1), into
// the batch's flat per-token arrays (`values_new` only when it is sized); their lengths.
std::vector<std::size_t> take_outputs(const Sequences& seq, std::size_t b0, std::size_t b1,
                                      const model::ForwardOutput& out, std::vector<float>& logp_new,
                                      std::vector<float>& values_new) {
  std::vector<std::size_t> lengths;
  for (std::size_t b = b0; b < b1; ++b) {
    const std::size_t first = seq.prompt_len[b] - 1;
    const std::size_t off = seq.layout.offset(b);
    lengths.push_back(seq.layout.length(b));
    for (std::size_t j = 0; j < seq.layout.length(b); ++j) {
      logp_new[off + j] = out.logprobs[b - b0][first + j];
      if (!values_new.empty()) values_new[off + j] = out.values[b - b0][first + j];
    }
  }
  return lengths;
}

// The surrogate's gradient as the model takes it: per sequence of [b0, b1), over every position
// (zero on the prompt's), scaled from the minibatch's mean to the batch's.
std::vector<std::vector<float>> policy_grads(const Sequences& seq, std::size_t b0, std::size_t b1,
                                             const model::ForwardOutput& out,
                                             const rl::SurrogateResult& sr, double scale) {
  const std::size_t t0 = seq.layout.offset(b0);
  std::vector<std::vector<float>> dlogp(out.logprobs.size());
  for (std::size_t b = b0; b < b1; ++b) {
    dlogp[b - b0].assign(out.logprobs[b - b0].size(), 0.0f);
    const std::size_t first = seq.prompt_len[b] - 1;
    const std::size_t off = seq.layout.offset(b);
    for (std::size_t j = 0; j < seq.layout.length(b); ++j)
      dlogp[b - b0][first + j] = static_cast<float>(sr.grad_logp_new[off - t0 + j] * scale);
  }
  return dlogp;
}

// PPO's value loss over sequences [b0, b1) of the batch, weighted per sample and normalised by
// the batch's tokens, added to `value_loss`, and its gradient into `dvalue` (scaled as the
// policy's is, times value_coef).
Status value_grads(const TrainBatch& tb, std::size_t b0, std::size_t b1,
                   const std::vector<float>& values_new, const std::vector<float>& returns,
                   double scale, double value_coef, const model::ForwardOutput& out,
                   std::vector<std::vector<float>>& dvalue, double& value_loss) {
  const Sequences& seq = tb.seq;
  const double total = static_cast<double>(seq.layout.tokens());
  const std::size_t t0 = seq.layout.offset(b0), t1 = seq.layout.offset(b1);
  SLUICE_ASSIGN_OR_RETURN(rl::ValueLossResult vr,
                          rl::value_loss(slice(values_new, t0, t1), slice(returns, t0, t1)));
  dvalue.resize(out.values.size());
  for (std::size_t b = b0; b < b1; ++b) {
    dvalue[b - b0].assign(out.values[b - b0].size(), 0.0f);
    const std::size_t first = seq.prompt_len[b] - 1;
    const std::size_t off = seq.layout.offset(b);
    const double w = tb.weights[b];
    for (std::size_t j = 0; j < seq.layout.length(b); ++j) {
      const double d = values_new[off + j] - returns[off + j];
      value_loss += w * 0.5 * d * d / total;
      dvalue[b - b0][first + j] =
          static_cast<float>(vr.grad_values[off - t0 + j] * scale * w * value_coef);
    }
  }
  return {};
}

}  // namespace

// ---- config ----

core::Status LearnerConfig::validate() const {
  auto bad = [](const std::string& m) { return core::invalid_argument("learner config: " + m); };
  SLUICE_TRY(gpt.validate().with_context("learner config: gpt"));
  SLUICE_TRY(adamw.validate().with_context("learner config: adamw"));
  SLUICE_TRY(task.validate().with_context("learner config: task"));
  SLUICE_TRY(clip.validate().with_context("learner config: clip"));
  SLUICE_TRY(grpo.validate().with_context("learner config: grpo"));
  SLUICE_TRY(gae.validate().with_context("learner config: gae"));
  if (correction != "behaviour-cap" && correction != "none" && correction != "m2po") {
    return bad("correction must be behaviour-cap, none or m2po, not '" + correction + "'");
  }
  if (!(m2po_threshold >= 0.0) || !std::isfinite(m2po_threshold)) {
    return bad("m2po_threshold must be finite and >= 0");
  }
  if (algorithm != "grpo" && algorithm != "ppo") {
    return bad("algorithm must be grpo or ppo, not '" + algorithm + "'");
  }
  SLUICE_TRY(model::parse_device(device).status().with_context("learner config"));
  if (algorithm == "ppo" && !gpt.value_head) {
    return bad("algorithm ppo needs gpt.value_head = true");
  }
  if (gpt.vocab < rl::Tokenizer::kVocabSize) {
    return bad("gpt.vocab " + std::to_string(gpt.vocab) + " is below the tokenizer's " +
               std::to_string(rl::Tokenizer::kVocabSize) + " tokens");
  }
  if (task.context_tokens > static_cast<std::uint32_t>(gpt.context)) {
    return bad("task.context_tokens " + std::to_string(task.context_tokens) +
               " exceeds gpt.context " + std::to_string(gpt.context));
  }
  if (warmstart_batch < 1) return bad("warmstart_batch must be at least 1");
  if (!(warmstart_lr > 0.0f) || !std::isfinite(warmstart_lr)) {
    return bad("warmstart_lr must be > 0");
  }
  if (!(lr_final > 0.0f && lr_final <= 1.0f)) return bad("lr_final must be in (0, 1]");
  if (!(warmstart_lr_final > 0.0f && warmstart_lr_final <= 1.0f)) {
    return bad("warmstart_lr_final must be in (0, 1]");
  }
  if (!(value_coef >= 0.0) || !std::isfinite(value_coef)) return bad("value_coef must be >= 0");
  if (minibatch < 1) return bad("minibatch must be at least 1");
  if (epochs < 1) return bad("epochs must be at least 1");
  if (eval_prompts < 1) return bad("eval_prompts must be at least 1");
  if (eval_max_new_tokens < 1) return bad("eval_max_new_tokens must be at least 1");
  return {};
}

// ---- learner ----

Learner::Learner(LearnerConfig config, rl::ArithmeticTask task, std::unique_ptr<model::Gpt> model,
                 std::unique_ptr<model::AdamW> optimizer)
    : config_(std::move(config)),
      task_(std::move(task)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)) {}

Learner::~Learner() = default;

core::Result<std::unique_ptr<Learner>> Learner::create(const LearnerConfig& config) {
  SLUICE_TRY(config.validate());
  SLUICE_ASSIGN_OR_RETURN(rl::ArithmeticTask task, rl::ArithmeticTask::create(config.task));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<model::Gpt> gpt, model::Gpt::create(config.gpt));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<model::AdamW> opt,
                          model::AdamW::create(config.adamw, *gpt));
  return std::unique_ptr<Learner>(
      new Learner(config, std::move(task), std::move(gpt), std::move(opt)));
}

std::uint64_t Learner::steps() const {
  return optimizer_->steps();
}

float Learner::lr_at(std::uint64_t step) const {
  return cosine_lr(config_.adamw.lr, step, config_.lr_decay_steps, config_.lr_final);
}

core::Result<WarmStartStats> Learner::warm_start(const Progress& progress) {
  WarmStartStats stats;
  if (config_.warmstart_steps == 0) return stats;
  // Its own optimizer, so the RL optimizer starts with clean moments after the warm start.
  model::AdamWConfig oc = config_.adamw;
  oc.lr = config_.warmstart_lr;
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<model::AdamW> opt, model::AdamW::create(oc, *model_));
  std::vector<std::vector<std::int32_t>> seqs(config_.warmstart_batch);
  std::vector<std::int32_t> start(config_.warmstart_batch);
  // The tool form: a share of the solutions call the tool, the environment's answer masked out.
  std::vector<std::vector<std::uint8_t>> masks(task_.uses_tool() ? config_.warmstart_batch : 0);
  for (std::uint32_t step = 1; step <= config_.warmstart_steps; ++step) {
    for (std::uint32_t i = 0; i < config_.warmstart_batch; ++i) {
      const std::uint64_t index = next_train_prompt_++;
      SLUICE_ASSIGN_OR_RETURN(rl::Prompt p, task_.train_prompt(index));
      seqs[i] = p.tokens;
      start[i] = static_cast<std::int32_t>(p.tokens.size());
      if (task_.demo_uses_tool(index)) {
        rl::ToolSolution gold = task_.tool_solution(p);
        seqs[i].insert(seqs[i].end(), gold.tokens.begin(), gold.tokens.end());
        masks[i] = std::move(gold.mask);
        continue;
      }
      const std::vector<rl::Token> gold = task_.solution(p);
      seqs[i].insert(seqs[i].end(), gold.begin(), gold.end());
      if (!masks.empty()) masks[i].clear();
    }
    model_->zero_grad();
    SLUICE_ASSIGN_OR_RETURN(float loss, model_->sft_loss_and_grad(seqs, start, masks));
    opt->set_lr(cosine_lr(config_.warmstart_lr, step - 1, config_.warmstart_steps,
                          config_.warmstart_lr_final));
    SLUICE_TRY(opt->step(*model_).status().with_context("learner: warm-start step"));
    if (step == 1) stats.first_loss = loss;
    stats.last_loss = loss;
    stats.steps = step;
    if (progress) progress(step, loss);
  }
  model_->zero_grad();
  return stats;
}

core::Result<std::vector<std::vector<float>>> Learner::response_logprobs(
    const std::vector<rl::Trajectory>& trajectories) {
  Sequences s;
  for (const auto& t : trajectories) {
    SLUICE_TRY(check_trajectory(t, config_.gpt, true));
    s.add(t);
  }
  s.finish();
  std::vector<float> flat(s.layout.tokens());
  for (std::size_t b = 0; b < s.seqs.size(); b += config_.minibatch) {
    SLUICE_TRY(score(*model_, s, b, std::min(s.seqs.size(), b + config_.minibatch), flat, nullptr));
  }
  std::vector<std::vector<float>> out(trajectories.size());
  for (std::size_t b = 0; b < out.size(); ++b) {
    auto part = slice(flat, s.layout.offset(b), s.layout.offset(b + 1));
    out[b].assign(part.begin(), part.end());
  }
  return out;
}

core::Result<std::vector<std::vector<float>>> Learner::response_values(
    const std::vector<rl::Trajectory>& trajectories) {
  if (!config_.gpt.value_head) {
    return core::failed_precondition("learner: response_values needs a model with a value head");
  }
  Sequences s;
  for (const auto& t : trajectories) {
    SLUICE_TRY(check_trajectory(t, config_.gpt, true));
    s.add(t);
  }
  s.finish();
  std::vector<float> logp(s.layout.tokens());
  std::vector<float> values(s.layout.tokens());
  for (std::size_t b = 0; b < s.seqs.size(); b += config_.minibatch) {
    SLUICE_TRY(score(*model_, s, b, std::min(s.seqs.size(), b + config_.minibatch), logp, &values));
  }
  std::vector<std::vector<float>> out(trajectories.size());
  for (std::size_t b = 0; b < out.size(); ++b) {
    auto part = slice(values, s.layout.offset(b), s.layout.offset(b + 1));
    out[b].assign(part.begin(), part.end());
  }
  return out;
}

core::Result<TrainStats> Learner::train(const std::vector<Sample>& batch) {
  TrainStats stats;
  // Everything is checked before anything changes.
  for (const auto& s : batch)
    SLUICE_TRY(check_sample(s, config_.gpt));

  TrainBatch tb = gather(batch);
  stats.skipped = tb.skipped;
  const Sequences& seq = tb.seq;
  const std::vector<float>&behaviour = tb.behaviour, &weights = tb.weights;
  const std::vector<double>& rewards = tb.rewards;
  const std::size_t n_seq = seq.seqs.size();
  if (n_seq == 0) return stats;
  const std::size_t n_tok = seq.layout.tokens();
  const std::size_t n_env = tb.env_tokens, n_model = n_tok - n_env;
  stats.samples = n_seq;
  stats.tokens = n_model;
  stats.env_tokens = n_env;
  if (n_env > 0 && config_.algorithm == "ppo") {
    return core::invalid_argument(
        "learner: ppo does not train on episodes with environment tokens (its values and GAE "
        "would run across them): use grpo");
  }
  if (n_model == 0) return core::invalid_argument("learner: the batch has no model tokens");
  for (double r : rewards)
    stats.mean_reward += r / static_cast<double>(n_seq);

  const bool ppo = config_.algorithm == "ppo";
  const bool m2po = config_.correction == "m2po";
  const std::size_t mb = config_.minibatch;
  std::vector<float> proximal(n_tok), advantages, returns;
  SLUICE_ASSIGN_OR_RETURN(bool have_proximal,
                          batch_advantages(*model_, config_, tb, proximal, advantages, returns));

  // The correction of stale samples (LearnerConfig::correction).
  //   none: the proximal is left out of the surrogate, so its ratio is taken against the
  //     behaviour log-probs and w = 1 (proximal log-probs are still computed, for behaviour_kl).
  //   m2po: the mask of rl::second_moment_mask over log w = proximal - behaviour, for the whole
  //     batch, fixed for every epoch. Two choices, from the paper (arXiv 2510.01161,
  //     its objective J_M2PO = mean over tokens of M_t r_t A_t): the kept tokens take the full,
  //     uncapped importance weight, because the second-moment bound is what replaces truncation
  //     and clipping (the paper's point is that clipping throws away the informative,
  //     high-entropy tokens of stale data; a cap would do the same to exactly the tokens the
  //     mask chose to keep); and the clip stays, but only against the proximal policy (the
  //     current weights), where with one epoch (the default) it never acts and with more it
  //     bounds how far the epochs move from the current weights; the paper's r_t is against the
  //     behaviour policy with no clip at all, which this matches at one epoch.
  rl::SurrogateOptions clip = config_.clip;
  // Environment tokens are masked out (no loss, no gradient); m2po's bound is taken over the
  // model's tokens alone, and its mask joins theirs.
  std::vector<std::uint8_t> mask = tb.loss_mask;
  if (m2po) {
    clip.behaviour_cap = std::numeric_limits<double>::infinity();
    std::vector<float> log_w;
    log_w.reserve(n_model);
    for (std::size_t i = 0; i < n_tok; ++i)
      if (mask[i]) log_w.push_back(proximal[i] - behaviour[i]);
    SLUICE_ASSIGN_OR_RETURN(std::vector<std::uint8_t> kept,
                            rl::second_moment_mask(log_w, config_.m2po_threshold));
    for (std::size_t i = 0, k = 0; i < n_tok; ++i)
      if (mask[i]) mask[i] = kept[k++];
  }
  const bool use_mask = m2po || n_env > 0;
  const bool use_proximal = config_.correction != "none";

  // The loss is a mean over the model's tokens (the environment's count for nothing).
  const double total = static_cast<double>(n_model);
  std::vector<float> logp_new(n_tok), values_new(ppo ? n_tok : 0);
  for (std::uint32_t epoch = 0; epoch < config_.epochs; ++epoch) {
    model_->zero_grad();
    double policy_loss = 0.0, value_loss = 0.0, clipped = 0.0, kl = 0.0, truncated = 0.0;
    double masked = 0.0;
    double behaviour_kl = 0.0;
    for (std::size_t b0 = 0; b0 < n_seq; b0 += mb) {
      const std::size_t b1 = std::min(n_seq, b0 + mb);
      std::vector<std::vector<std::int32_t>> sub(
          seq.seqs.begin() + static_cast<std::ptrdiff_t>(b0),
          seq.seqs.begin() + static_cast<std::ptrdiff_t>(b1));
      SLUICE_ASSIGN_OR_RETURN(model::ForwardOutput out, model_->forward(sub));
      const std::size_t t0 = seq.layout.offset(b0), t1 = seq.layout.offset(b1);
      const std::vector<std::size_t> lengths = take_outputs(seq, b0, b1, out, logp_new, values_new);
      if (!have_proximal)
        std::copy(logp_new.begin() + t0, logp_new.begin() + t1, proximal.begin() + t0);
      const rl::TokenLayout sub_layout(lengths);
      rl::PolicyBatch pb;
      pb.logp_new = slice(logp_new, t0, t1);
      pb.logp_behaviour = slice(behaviour, t0, t1);
      if (use_proximal) pb.logp_proximal = slice(proximal, t0, t1);
      pb.advantages = slice(advantages, t0, t1);
      pb.sample_weights = slice(weights, b0, b1);
      if (use_mask) pb.token_mask = std::span<const std::uint8_t>(mask).subspan(t0, t1 - t0);
      SLUICE_ASSIGN_OR_RETURN(rl::SurrogateResult sr, rl::clipped_surrogate(sub_layout, pb, clip));
      // The surrogate is a mean over this minibatch's tokens; rescale to the batch's.
      const double n_sub = static_cast<double>(t1 - t0);
      const double scale = n_sub / total;
      policy_loss += sr.loss * scale;
      clipped += sr.stats.clip_fraction * n_sub;
      kl += sr.stats.approx_kl * n_sub;
      truncated += sr.stats.truncated_fraction * n_sub;
      masked += sr.stats.masked_fraction * n_sub;

      std::vector<std::vector<float>> dlogp = policy_grads(seq, b0, b1, out, sr, scale);
      std::vector<std::vector<float>> dvalue;
      if (ppo) {
        SLUICE_TRY(value_grads(tb, b0, b1, values_new, returns, scale, config_.value_coef, out,
                               dvalue, value_loss));
      }
      SLUICE_TRY(model_->backward(dlogp, dvalue));
    }
    if (epoch == 0) {
      for (std::size_t i = 0; i < n_tok; ++i) {
        if (!tb.loss_mask[i]) continue;
        const double log_w = static_cast<double>(proximal[i]) - behaviour[i];
        behaviour_kl += (std::exp(log_w) - 1.0) - log_w;
      }
      stats.behaviour_kl = behaviour_kl / total;
    }
    have_proximal = true;
    optimizer_->set_lr(lr_at(optimizer_->steps()));
    SLUICE_ASSIGN_OR_RETURN(float norm, optimizer_->step(*model_));
    stats.grad_norm = norm;
    stats.policy_loss = policy_loss;
    stats.value_loss = value_loss;
    stats.loss = policy_loss + config_.value_coef * value_loss;
    stats.clip_fraction = clipped / total;
    stats.approx_kl = kl / total;
    stats.truncated_fraction = truncated / total;
    stats.masked_fraction = (masked - static_cast<double>(n_env)) / total;  // m2po's alone
  }
  model_->zero_grad();
  return stats;
}

core::Result<std::vector<Learner::Generated>> Learner::generate(
    const std::vector<rl::Prompt>& prompts, float temperature, std::uint32_t max_new_tokens,
    std::uint64_t& rng) {
  if (max_new_tokens == 0) return core::invalid_argument("generate: max_new_tokens must be >= 1");
  // Caches for a chunk of prompts at a time bound the memory (about 220 KB each by default).
  constexpr std::size_t kChunk = 64;
  const std::size_t n = prompts.size();
  const std::size_t vocab = static_cast<std::size_t>(config_.gpt.vocab);
  std::vector<Generated> out(n);
  std::vector<float> logits;
  for (std::size_t c0 = 0; c0 < n; c0 += kChunk) {
    const std::size_t m = std::min(n, c0 + kChunk) - c0;
    std::vector<model::KvCache> caches(m);
    std::vector<std::vector<float>> next(m);  // the logits each sequence continues from
    std::vector<std::size_t> active(m);
    for (std::size_t i = 0; i < m; ++i) {
      caches[i] = model_->make_cache();
      SLUICE_TRY(model_->prefill(caches[i], prompts[c0 + i].tokens, next[i]));
      active[i] = i;
    }
    while (!active.empty()) {
      std::vector<std::size_t> still, fed;
      std::vector<model::KvCache*> feed;
      std::vector<std::int32_t> tokens;
      for (std::size_t i : active) {
        SLUICE_ASSIGN_OR_RETURN(model::Sampled s, model::sample(next[i], temperature, rng));
        Generated& g = out[c0 + i];
        g.tokens.push_back(s.token);
        g.logprobs.push_back(s.logprob);
        const std::size_t room =
            static_cast<std::size_t>(caches[i].capacity()) -
            std::min(prompts[c0 + i].tokens.size(), static_cast<std::size_t>(caches[i].capacity()));
        bool done = s.token == rl::Tokenizer::kEos || g.tokens.size() >= max_new_tokens ||
                    g.tokens.size() >= room;
        if (!done && task_.ends_with_call(g.tokens)) {
          // The tool form: the calculator answers and the next turn starts from the call and the
          // answer, prefilled; a call in the last turn, or without room for its answer, ends it.
          SLUICE_ASSIGN_OR_RETURN(std::vector<rl::Token> answer, task_.tool_answer(g.tokens));
          const std::size_t after = g.tokens.size() + answer.size();
          done = g.turns >= task_.config().max_turns || after >= max_new_tokens || after >= room;
          if (done) continue;
          std::vector<std::int32_t> feed_in{s.token};
          feed_in.insert(feed_in.end(), answer.begin(), answer.end());
          g.tokens.insert(g.tokens.end(), answer.begin(), answer.end());
          g.logprobs.insert(g.logprobs.end(), answer.size(), 0.0f);
          ++g.turns;
          SLUICE_TRY(model_->prefill(caches[i], feed_in, next[i]));
          still.push_back(i);
          continue;
        }
        if (done) continue;
        still.push_back(i);
        fed.push_back(i);
        feed.push_back(&caches[i]);
        tokens.push_back(s.token);
      }
      if (!fed.empty()) {
        SLUICE_TRY(model_->decode(feed, tokens, logits));
        for (std::size_t r = 0; r < fed.size(); ++r) {
          next[fed[r]].assign(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                              logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
        }
      }
      active = std::move(still);
    }
  }
  return out;
}

core::Result<EvalStats> Learner::evaluate() {
  const std::size_t n = config_.eval_prompts;
  EvalStats stats;
  stats.prompts = n;
  std::vector<rl::Prompt> prompts;
  for (std::size_t i = 0; i < n; ++i) {
    SLUICE_ASSIGN_OR_RETURN(rl::Prompt p, task_.heldout_prompt(i));
    prompts.push_back(std::move(p));
  }
  std::uint64_t rng = 0;  // untouched by greedy decoding
  SLUICE_ASSIGN_OR_RETURN(std::vector<Generated> responses,
                          generate(prompts, 0.0f, config_.eval_max_new_tokens, rng));
  double correct = 0.0, reward = 0.0, length = 0.0;
  std::map<std::uint32_t, EvalStats::ByTerms> by_terms;
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<rl::Token>& r = responses[i].tokens;
    const bool right = task_.correct(prompts[i], r);
    correct += right ? 1.0 : 0.0;
    const auto terms = static_cast<std::uint32_t>(prompts[i].terms.size());
    auto& k = by_terms[terms];
    k.terms = terms;
    ++k.prompts;
    k.correct += right ? 1 : 0;
    reward += task_.reward(prompts[i], r);
    length += static_cast<double>(r.size());
    stats.tool_use += responses[i].turns > 1 ? 1.0 : 0.0;
  }
  const double count = static_cast<double>(n);
  stats.accuracy = correct / count;
  stats.mean_reward = reward / count;
  stats.mean_response_tokens = length / count;
  stats.tool_use /= count;
  for (const auto& [terms, k] : by_terms)
    stats.by_terms.push_back(k);
  return stats;
}

// ---- checkpoints ----

core::Status Learner::save(const std::string& path) const {
  std::string bytes;
  core::ByteWriter w(bytes);
  w.put(kMagic, sizeof(kMagic)).u32(kFormatVersion);
  for (std::int32_t x : shape_of(config_.gpt))
    w.u32(static_cast<std::uint32_t>(x));
  w.u64(optimizer_->steps()).u64(next_train_prompt_).u64(model_->param_count());
  put_floats(w, std::span<const float>(model_->params(), model_->param_count()));
  put_floats(w, optimizer_->m());
  put_floats(w, optimizer_->v());
  w.u64(core::chunk_checksum(bytes.data(), bytes.size()));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return core::unavailable("learner: cannot write checkpoint '" + tmp + "'");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) return core::unavailable("learner: writing checkpoint '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return core::unavailable("learner: cannot rename '" + tmp + "' to '" + path + "'");
  }
  return {};
}

core::Status Learner::load_weights(std::span<const float> params) {
  if (params.size() != model_->param_count()) {
    return core::invalid_argument("learner: load_weights got " + std::to_string(params.size()) +
                                  " floats, the model has " +
                                  std::to_string(model_->param_count()));
  }
  return model_->load(reinterpret_cast<const std::uint8_t*>(params.data()),
                      params.size() * sizeof(float));
}

core::Status Learner::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return core::not_found("learner: cannot open checkpoint '" + path + "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto damaged = [&](const std::string& what) {
    return core::data_loss("learner: checkpoint '" + path + "': " + what);
  };
  if (bytes.size() < sizeof(kMagic) + sizeof(std::uint64_t)) return damaged("too short");
  // The checksum trails what it covers; everything else is read from the front.
  const std::size_t body = bytes.size() - sizeof(std::uint64_t);
  const std::uint64_t stored = core::ByteReader(bytes.data() + body, sizeof(std::uint64_t)).u64();
  core::ByteReader r(bytes.data(), body);
  if (r.view(sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) {
    return damaged("not a checkpoint");
  }
  if (core::chunk_checksum(bytes.data(), body) != stored) return damaged("checksum mismatch");

  const std::uint32_t version = r.u32();  // 0 when the file ends first
  if (version != kFormatVersion) {
    return core::invalid_argument("learner: checkpoint '" + path + "' has format version " +
                                  std::to_string(version) + ", expected " +
                                  std::to_string(kFormatVersion));
  }
  for (std::int32_t want : shape_of(config_.gpt)) {
    const auto got = static_cast<std::int32_t>(r.u32());
    if (!r.ok()) return damaged("truncated");
    if (got != want) {
      return core::invalid_argument("learner: checkpoint '" + path +
                                    "' holds a model of another shape");
    }
  }
  const std::uint64_t steps = r.u64(), next_prompt = r.u64(), count = r.u64();
  if (!r.ok()) return damaged("truncated");
  if (count != model_->param_count()) return damaged("parameter count mismatch");
  std::vector<float> params, m, v;
  if (!get_floats(r, params, count) || !get_floats(r, m, count) || !get_floats(r, v, count) ||
      !r.at_end()) {
    return damaged("wrong size");
  }
  SLUICE_TRY(optimizer_->restore(m, v, steps));
  SLUICE_TRY(model_->load(reinterpret_cast<const std::uint8_t*>(params.data()),
                          params.size() * sizeof(float)));
  next_train_prompt_ = next_prompt;
  return {};
}

}  // namespace sluice::actor
