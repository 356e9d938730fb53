// The policy-gradient math of the actor: GRPO group-relative advantages, PPO's GAE, the clipped
// surrogate in its decoupled off-policy form, and PPO's value loss. Pure functions on plain
// vectors: they know nothing of the model, which supplies log-probabilities and values and takes
// back the gradients these functions return.
//
// Layout of a batch. A batch holds B trajectories; trajectory b has lengths[b] response tokens.
// Every per-token vector (log-probs, values, advantages, gradients) is flat: the response tokens
// of trajectory 0, then those of trajectory 1, and so on, sum(lengths) entries in all; token t of
// trajectory b is at layout.offset(b) + t. Per-trajectory vectors (rewards, group ids, sample
// weights) have B entries. Prompt tokens never appear: only response tokens carry a loss.
//
// Errors: a vector of the wrong size, or an option out of range, is an invalid_argument error
// that names it; nothing is computed then.
//
// Thread safety: stateless functions; TokenLayout is an immutable value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::rl {

class TokenLayout {
 public:
  TokenLayout() = default;
  explicit TokenLayout(std::vector<std::size_t> lengths);

  std::size_t trajectories() const { return lengths_.size(); }
  std::size_t tokens() const { return offsets_.empty() ? 0 : offsets_.back(); }
  std::size_t length(std::size_t b) const { return lengths_[b]; }
  std::size_t offset(std::size_t b) const { return offsets_[b]; }  // b in [0, trajectories()]
  const std::vector<std::size_t>& lengths() const { return lengths_; }

 private:
  std::vector<std::size_t> lengths_;
  std::vector<std::size_t> offsets_;  // B + 1 entries: offsets_[b] = sum of lengths_[0..b)
};

// ---- GRPO ----

struct GrpoOptions {
  bool scale_by_std = true;  // divide by the group's std (false: Dr. GRPO's r - mean only)
  double eps = 1e-6;         // added to the std before dividing, > 0

  template <typename V>
  void describe(V& v) {
    v("scale_by_std", scale_by_std, "divide advantages by the group's reward std (default true)");
    v("eps", eps, "added to the std before dividing (default 1e-6)");
  }
  core::Status validate() const;
};

// Dense group ids for group keys (Trajectory::prompt_id): equal keys get equal ids, numbered in
// order of first appearance.
std::vector<std::size_t> group_ids(std::span<const std::string> keys);

// Per-trajectory advantages A_b = (r_b - mean_g) / (std_g + eps), where g is b's group (the
// trajectories with the same group id, anywhere in the batch; they need not be adjacent) and
// std_g is the population standard deviation of g's rewards. Without scale_by_std,
// A_b = r_b - mean_g. A group whose rewards are all equal (a group of one included) gets 0.
core::Result<std::vector<float>> grpo_advantages(std::span<const double> rewards,
                                                 std::span<const std::size_t> groups,
                                                 const GrpoOptions& options = {});

// Repeats each trajectory's value on each of its response tokens (per trajectory -> per token).
core::Result<std::vector<float>> broadcast_to_tokens(const TokenLayout& layout,
                                                     std::span<const float> per_trajectory);

// ---- PPO: generalised advantage estimation ----

struct GaeOptions {
  double gamma = 1.0;     // discount, in [0, 1]
  double lambda = 0.95;   // GAE lambda, in [0, 1]
  bool normalize = true;  // normalise advantages over all tokens of the batch
  double eps = 1e-8;      // added to the std when normalising, > 0

  template <typename V>
  void describe(V& v) {
    v("gamma", gamma, "discount per token (default 1)");
    v("lambda", lambda, "GAE lambda (default 0.95)");
    v("normalize", normalize,
      "normalise advantages to mean 0, std 1 over the batch (default true)");
    v("eps", eps, "added to the std when normalising (default 1e-8)");
  }
  core::Status validate() const;
};

struct GaeResult {
  std::vector<float> advantages;  // per token; normalised when options.normalize
  std::vector<float> returns;     // per token: advantages + values, before any normalisation
};

// GAE over each trajectory with its reward on the last token only: for token t of a trajectory of
// length T, r_t = (t == T-1 ? reward : 0), V_T = 0 (nothing follows the end),
//   delta_t = r_t + gamma V_{t+1} - V_t,   A_t = delta_t + gamma lambda A_{t+1},   A_T = 0,
// and returns R_t = A_t + V_t. `values[i]` is the value estimate of the state in which response
// token i was generated. Normalisation (optional) is (A - mean) / (std + eps) over every token
// of the batch, population std.
core::Result<GaeResult> gae(const TokenLayout& layout, std::span<const float> values,
                            std::span<const double> rewards, const GaeOptions& options = {});

// ---- the clipped surrogate, decoupled form ----

struct SurrogateOptions {
  double clip_low = 0.2;       // ratio clipped below at 1 - clip_low, in [0, 1)
  double clip_high = 0.2;      // ratio clipped above at 1 + clip_high, >= 0 (larger: "clip higher")
  double behaviour_cap = 2.0;  // truncation of w = exp(logp_proximal - logp_behaviour), > 0

  template <typename V>
  void describe(V& v) {
    v("clip_low", clip_low, "ratio clipped below at 1 - clip_low (default 0.2)");
    v("clip_high", clip_high, "ratio clipped above at 1 + clip_high (default 0.2)");
    v("behaviour_cap", behaviour_cap,
      "cap on the behaviour weight exp(logp_proximal - logp_behaviour) (default 2)");
  }
  core::Status validate() const;
};

// Per-token and per-trajectory inputs of the surrogate (see the layout above).
struct PolicyBatch {
  // Per token: the policy being trained.
  std::span<const float> logp_new = {};
  // Per token: the policy that generated the tokens (Trajectory::logprobs).
  std::span<const float> logp_behaviour = {};
  // Per token, or empty: the proximal policy recomputed at the current version; empty means
  // proximal = behaviour and w = 1.
  std::span<const float> logp_proximal = {};
  // Per token.
  std::span<const float> advantages = {};
  // Per trajectory, or empty (all 1): the experience buffer's down-weighting of stale samples.
  std::span<const float> sample_weights = {};
  // Per token, or empty (all kept): 0 masks the token out (no loss, no gradient, not counted as
  // clipped; it still counts in N), as second_moment_mask returns.
  std::span<const std::uint8_t> token_mask = {};
};

struct SurrogateStats {
  std::size_t tokens = 0;
  double clip_fraction = 0.0;          // share of tokens whose clipped branch was taken (A > 0
                                       // and ratio > 1 + clip_high, or A < 0 and ratio <
                                       // 1 - clip_low): they give no gradient
  double mean_ratio = 0.0;             // mean of exp(logp_new - logp_proximal)
  double approx_kl = 0.0;              // mean of (ratio - 1) - log(ratio), an estimate of
                                       // KL(proximal || new), >= 0
  double mean_behaviour_weight = 0.0;  // mean of w
  double truncated_fraction = 0.0;     // share of tokens whose w hit behaviour_cap
  double masked_fraction = 0.0;        // share of tokens that token_mask masked
};

struct SurrogateResult {
  double loss = 0.0;
  std::vector<float> grad_logp_new;  // dL/dlogp_new, per token
  SurrogateStats stats;
};

// With ratio_t = exp(logp_new_t - logp_proximal_t),
//   w_t = min(exp(logp_proximal_t - logp_behaviour_t), behaviour_cap)   (no gradient through w)
//   loss = -(1/N) sum_b s_b sum_t w_t min(ratio_t A_t, clip(ratio_t, 1-clip_low, 1+clip_high) A_t)
// where N is the number of response tokens in the batch and s_b the sample weight of
// trajectory b. Where the clipped branch is taken the gradient is 0; elsewhere
// dL/dlogp_new_t = -(1/N) s_b w_t ratio_t A_t. A token that token_mask masks adds nothing to the
// sum and gets gradient 0 (N still counts it). A batch with no tokens is an error.
core::Result<SurrogateResult> clipped_surrogate(const TokenLayout& layout, const PolicyBatch& batch,
                                                const SurrogateOptions& options = {});

// ---- M2PO: the second-moment trust region ----

// M2PO's token mask (Zheng et al., "Prosperity before Collapse: How Far Can Off-Policy RL Reach
// with Stale Data on LLMs?", arXiv 2510.01161): with m_t = (log_w_t)^2, mask the tokens of
// largest m_t until the mean of m_t over the kept tokens is at most `threshold` (so the mean
// over all tokens may be at most threshold and nothing is masked). Returns one entry per token,
// 1 kept, 0 masked. Equivalently: the kept tokens are the K smallest m_t for the largest K whose
// mean is <= threshold (the mean of the k smallest only grows with k, so the greedy removal and
// this agree); among equal m_t the later token is masked first. When every m_t exceeds the
// threshold every token is masked; an empty input gives an empty mask. A threshold below 0, or
// a log_w that is not finite, is invalid_argument.
core::Result<std::vector<std::uint8_t>> second_moment_mask(std::span<const float> log_w,
                                                           double threshold);

// ---- PPO value loss ----

struct ValueLossOptions {
  double clip = 0.0;  // clip V to old_value +- clip in the clipped term; 0 turns clipping off

  template <typename V>
  void describe(V& v) {
    v("clip", clip, "value clipping around the old values, 0 = off (default 0)");
  }
  core::Status validate() const;
};

struct ValueLossResult {
  double loss = 0.0;
  std::vector<float> grad_values;  // dL/dV, per token
  double clip_fraction = 0.0;      // share of tokens whose clipped term was the larger
};

// loss = (1/N) sum_t 0.5 (V_t - R_t)^2 over the N tokens; with clip > 0 each term is
// 0.5 max((V_t - R_t)^2, (Vc_t - R_t)^2) with Vc_t = old_t + clamp(V_t - old_t, -clip, clip),
// as in PPO implementations; old_values is needed (per token) only when clip > 0.
core::Result<ValueLossResult> value_loss(std::span<const float> values,
                                         std::span<const float> returns,
                                         std::span<const float> old_values = {},
                                         const ValueLossOptions& options = {});

}  // namespace sluice::rl
