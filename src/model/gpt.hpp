// The reference model: a small decoder-only transformer (GPT-2 shaped) in plain fp32, written in
// the style of llm.c, with OpenBLAS sgemm for the matrix products (or cuBLAS: model/device.hpp).
// It learns on a CPU in minutes and serves both sides of sluice: rollouts generate with a KV cache
// under continuous batching; the actor trains it (GRPO/PPO, or a supervised warm start).
//
// Architecture: token + learned position embeddings; n_layer pre-LayerNorm blocks (causal
// multi-head self-attention, then an MLP with tanh-GELU), each added to the residual stream; a
// final LayerNorm; the output head is TIED to the token embedding (logits = h @ wte^T, as GPT-2),
// which saves vocab x d_model parameters. With `value_head`, a scalar head (d_model -> 1) reads the
// final normed hidden state (PPO's critic).
//
// Parameters live in ONE contiguous float buffer whose layout tensors() describes (names, shapes,
// byte offsets, in offset order, no gaps), so a weight version's bytes are exactly params(),
// param_bytes() long. Gradients live in a second buffer with the same layout.
//
// Thread safety: a Gpt is used by one thread at a time (forward keeps activations for backward;
// prefill/decode reuse scratch buffers). Distinct Gpt objects are independent. A KvCache belongs to
// the caller and to one sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "format/tensor_spec.hpp"
#include "model/gpt_types.hpp"

namespace sluice::model {

// Internal (model/gpt_internal.hpp): the parameter layout and the buffers Gpt keeps between calls.
struct GptLayout;
struct GptActivations;
struct GptInferScratch;

// What forward() computes for a batch: logprobs[i][t-1] = log p(seqs[i][t] | seqs[i][<t]) for
// t >= 1 (so length - 1 values), and, with the value head, values[i][t] for every position t
// (length values; empty vectors without the head).
struct ForwardOutput {
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<float>> values;
};

class Gpt {
 public:
  // Validates the config and initialises the weights from config.init_seed (GPT-2 style: normal
  // 0.02, residual projections scaled by 1/sqrt(2 n_layer), LayerNorm weights 1, biases 0).
  static core::Result<std::unique_ptr<Gpt>> create(const GptConfig& config);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }

  // ---- parameters ----
  // The layout of params() (and of grads()): dtype F32, in offset order, covering the buffer.
  // Names follow GPT-2: "wte", "wpe", "h.<l>.ln_1.weight", "h.<l>.attn.c_attn.weight" [3C, C],
  // ..., "ln_f.weight", "ln_f.bias", and "value_head.weight" [1, C], "value_head.bias" [1].
  std::vector<core::TensorSpec> tensors() const;
  std::size_t param_count() const { return params_.size(); }
  std::size_t param_bytes() const { return params_.size() * sizeof(float); }
  const float* params() const { return params_.data(); }
  float* mutable_params() { return params_.data(); }
  // Replaces every parameter with `bytes` bytes laid out as tensors() (as a pulled version is).
  // A size other than param_bytes() is invalid_argument and leaves the parameters unchanged.
  core::Status load(const std::uint8_t* data, std::size_t bytes);

  // ---- training ----
  const float* grads() const { return grads_.data(); }
  float* mutable_grads() { return grads_.data(); }
  void zero_grad();

  // Runs the batch (sequences of 1..context tokens, each token in [0, vocab)) with every position
  // stacked, and keeps what backward() needs until the next forward().
  core::Result<ForwardOutput> forward(const std::vector<std::vector<std::int32_t>>& seqs);
  // Given dL/dlogprob (the shape of ForwardOutput::logprobs) and dL/dvalue (the shape of
  // ForwardOutput::values; empty means no value gradient, and is the only choice without the
  // value head), ACCUMULATES dL/dparams into grads(). Needs a forward() first and may be called
  // again on the same forward; a shape mismatch is invalid_argument, no forward at all is
  // failed_precondition.
  core::Status backward(const std::vector<std::vector<float>>& dlogprob,
                        const std::vector<std::vector<float>>& dvalue);
  // Supervised warm start: the mean negative log-likelihood of the response tokens (positions
  // t >= response_start[i], with 1 <= response_start[i] < length) over the whole batch, and its
  // gradient accumulated into grads().
  // `masks`, when not empty, holds per sequence one 0/1 per response token (or nothing: all 1):
  // tokens at 0 (an environment's, in an episode) give no loss, and the mean is over the rest.
  core::Result<float> sft_loss_and_grad(const std::vector<std::vector<std::int32_t>>& seqs,
                                        const std::vector<std::int32_t>& response_start,
                                        const std::vector<std::vector<std::uint8_t>>& masks = {});

  // ---- inference ----
  KvCache make_cache() const;
  // Appends `tokens` (at least one) to the cache and writes the logits of the last one into
  // `logits` (resized to vocab). Fails, leaving the cache unchanged, if the tokens do not fit in
  // the context, a token is out of range or the cache belongs to another shape of model.
  core::Status prefill(KvCache& cache, std::span<const std::int32_t> tokens,
                       std::vector<float>& logits);
  // Appends tokens[b] to *caches[b] for every b in one batched pass (linear layers over all rows
  // at once; attention per sequence over its own cache) and writes sequence b's logits into row b
  // of `logits` ([batch, vocab], resized). Caches must be distinct; sequences may be of any
  // lengths and may change from call to call. Allocates nothing once its scratch has grown to the
  // largest batch seen.
  core::Status decode(std::span<KvCache* const> caches, std::span<const std::int32_t> tokens,
                      std::vector<float>& logits);
  // The reference for the cache: the logits of the last position of `tokens` computed by the
  // training forward pass over the whole sequence, no cache. Discards what forward() kept.
  core::Status logits_without_cache(std::span<const std::int32_t> tokens,
                                    std::vector<float>& logits);

 private:
  using Layout = GptLayout;
  using Activations = GptActivations;
  using InferScratch = GptInferScratch;

  explicit Gpt(const GptConfig& config);
  void init_weights();
  core::Status check_tokens(std::span<const std::int32_t> tokens, const char* what) const;
  // Shared by prefill and decode: runs `n` new rows (row r is tokens[r] at position pos[r] of
  // *cache[r]) and writes logits for the rows listed in out_rows.
  void run_rows(int n, const std::int32_t* tokens, KvCache* const* cache, const std::int32_t* pos,
                const int* out_rows, int n_out, float* logits);

  GptConfig config_;
  std::unique_ptr<Layout> layout_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::unique_ptr<Activations> acts_;
  std::unique_ptr<InferScratch> infer_;
};

}  // namespace sluice::model
