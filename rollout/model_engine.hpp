// The reference-model engine: really generates with the reference GPT (src/model) and a KV cache
// per sequence, under continuous batching, for the built-in tasks' tokenizer (end of sequence is
// rl::Tokenizer::kEos).
//
// - admit() takes a new sequence (generated empty) or a migrated one (generated non-empty). Either
//   way the next step() prefills prompt + generated into the sequence's KV cache with the loaded
//   weights and samples its next token from the prefill logits; from then on the sequence takes
//   part in one batched decode per step (model::Gpt::decode), one token each.
// - Every sampled token is appended to `generated`, its log-prob (model::sample's: under the
//   temperature-scaled distribution; under temperature 1 when greedy) to `logprobs`, and the
//   sampling state `rng_state` advances in place, so an exported sequence continues elsewhere
//   exactly as it would have here. A new sequence with rng_state 0 gets one derived from its id.
// - A sequence finishes when it samples end-of-sequence, reaches max_new_tokens, or when prompt +
//   generated fills the model's context; step() returns it and frees its slot.
// - A migrated sequence that comes with its KV cache (SequenceState::kv, from
//   export_sequence_with_kv) is not re-prefilled: its cache is imported as it was, and its next
//   token comes from the next batched decode, exactly as on the engine it left. admit() refuses
//   such a cache (kFailedPrecondition) unless it was computed by the version loaded here, and
//   (kInvalidArgument) unless it fits the model's shape and holds prompt + generated but the last.
// - `versions` gets the loaded version appended when it differs from its last entry, on admission
//   and on every token.
// - load_weights() replaces the weights (Gpt::load, size checked against the model's layout):
//   the model's fp32 bytes, or half as many, a bf16 version (the actor's publish_dtype bf16),
//   widened exactly to fp32 before the load. Any other size is refused, nothing loaded. It
//   is refused while sequences are active unless allow_active; then every active sequence's KV
//   cache is recomputed (re-prefilled) with the new weights before its next token.
// - Work is done inside step(): StepResult::wait_s is always 0.
// - Memory: one KvCache (context positions) per active sequence; caches of finished or exported
//   sequences are kept and reused, and decode scratch grows to the largest batch once, so the
//   decode path allocates nothing per token beyond what the model itself needs.
//
// Thread safety: a ModelEngine belongs to one thread (the rollout's event loop).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"
#include "model/gpt.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

struct ModelEngineConfig {
  model::GptConfig gpt;              // the model's shape; must match the layout of loaded weights
  std::uint32_t max_sequences = 32;  // decode batch bound, >= 1
  // KV budget (prompt + generated, summed over sequences); 0 means max_sequences x gpt.context.
  std::uint64_t max_kv_tokens = 0;
  double temperature = 1.0;  // sampling temperature, finite and >= 0 (0: greedy)
  // Where the model's matrix products run: "cpu" (OpenBLAS) or "cuda" (cuBLAS on device 0, see
  // model/device.hpp). Process-wide: the `sluice rollout` role applies it at start-up
  // (model::use_device); ModelEngine::create only checks the value.
  std::string device = "cpu";

  template <typename V>
  void describe(V& v) {
    v("gpt", gpt, "the reference model's shape (must match the published weights)");
    v("max_sequences", max_sequences, "decode batch bound (>= 1, default 32)");
    v("max_kv_tokens", max_kv_tokens,
      "KV-cache budget in tokens (default 0: max_sequences x gpt.context)");
    v("temperature", temperature, "sampling temperature (>= 0, 0 is greedy, default 1)");
    v("device", device,
      "where the model's matrix products run: cpu (OpenBLAS) or cuda (cuBLAS, operands copied "
      "per product: a correctness path, not a speed path) (default cpu)");
  }
  core::Status validate() const;
  // The effective capacity (max_kv_tokens resolved).
  Capacity capacity() const;
};

class ModelEngine final : public Engine {
 public:
  // Validates the config and builds the model with its initial weights (gpt.init_seed), as
  // version 0.
  static core::Result<std::unique_ptr<ModelEngine>> create(const ModelEngineConfig& config);
  ~ModelEngine() override;
  ModelEngine(const ModelEngine&) = delete;
  ModelEngine& operator=(const ModelEngine&) = delete;

  Capacity capacity() const override { return capacity_; }
  std::uint64_t kv_bytes_per_token() const override {
    return 2ull * static_cast<std::uint64_t>(config_.gpt.n_layer) *
           static_cast<std::uint64_t>(config_.gpt.d_model) * sizeof(float);
  }
  std::uint64_t version() const override { return version_; }
  // kFailedPrecondition while sequences are active and !allow_active; kInvalidArgument when
  // `bytes` is neither the model's fp32 parameter size nor half of it (bf16) (nothing changes in
  // either case).
  core::Status load_weights(std::uint64_t version, const std::uint8_t* data, std::uint64_t bytes,
                            bool allow_active) override;
  // A free decode slot and kv_tokens more KV tokens within max_kv_tokens.
  bool can_admit(std::uint64_t kv_tokens) const override;
  // kInvalidArgument: empty id, max_new_tokens 0, logprobs not one per generated token, an empty
  // prompt, a token outside [0, vocab), or prompt + generated longer than the context.
  // kAlreadyExists: the id is active here. kResourceExhausted: it does not fit (the message says
  // which bound). A sequence that is already complete is accepted and returned by the next step.
  core::Status admit(SequenceState seq) override;
  // Prefills what was admitted (or must be recomputed after a weight load) and samples its next
  // token, then decodes one token for every other active sequence in one batch; finished
  // sequences are removed and returned. `batch` and `tokens` count every sampled token.
  StepResult step() override;
  // kNotFound when the id is not active here.
  core::Result<SequenceState> export_sequence(const std::string& trajectory_id) override;
  // With its KV cache (SequenceState::kv) when the cache is current: the sequence sampled a token
  // since its last prefill. Otherwise (admitted but not stepped yet, or waiting for a recompute
  // after a weight load) exported without it: the destination re-prefills.
  core::Result<SequenceState> export_sequence_with_kv(const std::string& trajectory_id) override;
  std::vector<SequenceState> export_all() override;

  std::uint32_t active() const override { return static_cast<std::uint32_t>(seqs_.size()); }
  std::uint64_t kv_tokens_used() const override { return kv_used_; }
  std::vector<SequenceState> snapshot() const override;
  std::vector<ActiveSequence> active_sequences() const override;

  const ModelEngineConfig& config() const { return config_; }
  // The model's parameter size: what load_weights() expects.
  std::uint64_t weight_bytes() const { return model_->param_bytes(); }

 private:
  struct Active {
    SequenceState state;
    model::KvCache cache;
    bool needs_prefill = true;  // the cache does not hold prompt + generated[..-1] yet
  };
  ModelEngine(ModelEngineConfig config, std::unique_ptr<model::Gpt> model);

  bool done(const SequenceState& s) const;
  core::Status check_kv(const SequenceState& s) const;
  KvState export_kv(const Active& a) const;
  model::KvCache take_cache();
  // Samples from `logits` for `a` and appends the token; false (logged) when sampling failed.
  bool append_sample(Active& a, std::span<const float> logits);

  ModelEngineConfig config_;
  Capacity capacity_;
  std::unique_ptr<model::Gpt> model_;
  std::uint64_t version_ = 0;
  std::vector<Active> seqs_;  // in admission order
  std::uint64_t kv_used_ = 0;
  std::vector<model::KvCache> free_caches_;  // caches of departed sequences, for reuse
  // Step scratch, grown once to the largest batch.
  std::vector<float> logits_;
  std::vector<std::int32_t> prefill_input_;
  std::vector<model::KvCache*> batch_caches_;
  std::vector<std::int32_t> batch_tokens_;
  std::vector<std::size_t> batch_index_;
  std::vector<unsigned char> failed_;
  std::vector<float> widened_;  // a bf16 version widened to fp32, kept for the next load
};

}  // namespace sluice::rollout
