#include "rollout/model_engine.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "core/splitmix.hpp"
#include "format/bf16.hpp"
#include "model/device.hpp"
#include "model/sampling.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::rollout {

namespace {

constexpr std::int32_t kEos = rl::Tokenizer::kEos;

// The sampling state of a new sequence that came without one: a function of its id only, so the
// same trajectory samples alike on every engine.
std::uint64_t initial_rng_state(const std::string& id) {
  return core::mix64(core::chunk_checksum(id.data(), id.size()) ^ 0x6d6f64656c726e67ULL);
}

}  // namespace

core::Status ModelEngineConfig::validate() const {
  SLUICE_TRY(gpt.validate());
  if (gpt.vocab <= kEos) {
    return core::invalid_argument(
        "model engine: gpt.vocab must include the end-of-sequence token " + std::to_string(kEos));
  }
  if (max_sequences == 0) {
    return core::invalid_argument("model engine: max_sequences must be at least 1");
  }
  if (!std::isfinite(temperature) || temperature < 0.0) {
    return core::invalid_argument("model engine: temperature must be finite and >= 0");
  }
  SLUICE_TRY(model::parse_device(device).status().with_context("model engine"));
  return {};
}

Capacity ModelEngineConfig::capacity() const {
  const std::uint64_t kv = max_kv_tokens != 0 ? max_kv_tokens
                                              : static_cast<std::uint64_t>(max_sequences) *
                                                    static_cast<std::uint64_t>(gpt.context);
  return {max_sequences, kv};
}

core::Result<std::unique_ptr<ModelEngine>> ModelEngine::create(const ModelEngineConfig& config) {
  SLUICE_TRY(config.validate());
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<model::Gpt> gpt, model::Gpt::create(config.gpt));
  return std::unique_ptr<ModelEngine>(new ModelEngine(config, std::move(gpt)));
}

ModelEngine::ModelEngine(ModelEngineConfig config, std::unique_ptr<model::Gpt> model)
    : config_(std::move(config)), capacity_(config_.capacity()), model_(std::move(model)) {
  const std::size_t batch = config_.max_sequences;
  seqs_.reserve(batch);
  batch_caches_.reserve(batch);
  batch_tokens_.reserve(batch);
  batch_index_.reserve(batch);
  failed_.reserve(batch);
  prefill_input_.reserve(static_cast<std::size_t>(config_.gpt.context));
  logits_.reserve(batch * static_cast<std::size_t>(config_.gpt.vocab));
}

ModelEngine::~ModelEngine() = default;

core::Status ModelEngine::load_weights(std::uint64_t version, const std::uint8_t* data,
                                       std::uint64_t bytes, bool allow_active) {
  if (!seqs_.empty() && !allow_active) {
    return core::failed_precondition(
        "model engine: cannot load version " + std::to_string(version) + " with " +
        std::to_string(seqs_.size()) + " active sequences of version " + std::to_string(version_));
  }
  const std::uint64_t f32_bytes = model_->param_bytes();
  if (bytes == f32_bytes / 2 && bytes != f32_bytes) {
    // A bf16 version (the actor's publish_dtype bf16): widened exactly, then loaded as fp32.
    widened_.resize(f32_bytes / 4);
    SLUICE_TRY(core::widen_bf16({data, static_cast<std::size_t>(bytes)}, widened_)
                   .with_context("model engine: version " + std::to_string(version)));
    data = reinterpret_cast<const std::uint8_t*>(widened_.data());
    bytes = f32_bytes;
  } else if (bytes != f32_bytes) {
    return core::invalid_argument("model engine: version " + std::to_string(version) + " has " +
                                  std::to_string(bytes) + " bytes; this model takes " +
                                  std::to_string(f32_bytes) + " (f32) or " +
                                  std::to_string(f32_bytes / 2) + " (bf16)");
  }
  SLUICE_TRY(model_->load(data, static_cast<std::size_t>(bytes))
                 .with_context("model engine: version " + std::to_string(version)));
  // The active sequences' caches hold keys and values of the old weights: recompute them with the
  // new ones before their next token, as partial-rollout systems do after a weight update.
  for (auto& a : seqs_) {
    a.needs_prefill = true;
    a.cache.clear();
  }
  version_ = version;
  return {};
}

bool ModelEngine::can_admit(std::uint64_t kv_tokens) const {
  return fits(capacity_, seqs_.size(), kv_used_, kv_tokens);
}

core::Status ModelEngine::admit(SequenceState seq) {
  SLUICE_TRY(check_sequence("model engine", seq));
  const std::string& id = seq.trajectory_id;
  if (seq.prompt_tokens.empty()) {
    return core::invalid_argument("model engine: sequence " + id + " has an empty prompt");
  }
  const auto context = static_cast<std::uint64_t>(config_.gpt.context);
  const std::uint64_t kv = seq.kv_tokens();
  if (kv > context) {
    return core::invalid_argument("model engine: sequence " + id + " holds " + std::to_string(kv) +
                                  " tokens, more than the context of " + std::to_string(context));
  }
  auto out_of_range = [&](std::int32_t t) { return t < 0 || t >= config_.gpt.vocab; };
  if (std::any_of(seq.prompt_tokens.begin(), seq.prompt_tokens.end(), out_of_range) ||
      std::any_of(seq.generated.begin(), seq.generated.end(), out_of_range)) {
    return core::invalid_argument("model engine: sequence " + id + " has a token outside [0, " +
                                  std::to_string(config_.gpt.vocab) + ")");
  }
  for (const auto& a : seqs_) {
    if (a.state.trajectory_id == id) {
      return core::Status(core::Code::kAlreadyExists,
                          "model engine: sequence " + id + " is already active");
    }
  }
  SLUICE_TRY(check_room("model engine", capacity_, id, seqs_.size(), kv_used_, kv));
  if (seq.kv) SLUICE_TRY(check_kv(seq));
  if (seq.generated.empty() && seq.rng_state == 0) seq.rng_state = initial_rng_state(id);
  // An episode lists a version when it samples with it (record_sample).
  if (!seq.is_episode() && (seq.versions.empty() || seq.versions.back() != version_)) {
    seq.versions.push_back(version_);
  }
  // Room for every token the sequence may still generate, so appending never reallocates.
  const std::uint64_t room =
      std::min<std::uint64_t>(context - seq.prompt_tokens.size(), seq.max_new_tokens);
  seq.generated.reserve(static_cast<std::size_t>(room));
  seq.logprobs.reserve(static_cast<std::size_t>(room));
  Active a;
  a.cache = take_cache();
  a.needs_prefill = true;
  if (seq.kv) {
    const KvState& c = *seq.kv;
    SLUICE_TRY(a.cache.import_rows(static_cast<std::int32_t>(c.layers),
                                   static_cast<std::int32_t>(c.width),
                                   static_cast<std::int32_t>(c.positions), c.keys, c.values));
    // An episode back from its environment brings the cache of its turns so far: the
    // environment's tokens (and the call) are prefilled on top of it.
    a.needs_prefill = c.positions + 1 < seq.kv_tokens();
    seq.kv.reset();  // the cache holds it now
  }
  a.state = std::move(seq);
  kv_used_ += kv;
  seqs_.push_back(std::move(a));
  return {};
}

// A KV cache that came with a migrated sequence: computed by the weights loaded here, of this
// model's shape, holding prompt + generated but the last token (which the next decode feeds).
core::Status ModelEngine::check_kv(const SequenceState& s) const {
  const KvState& kv = *s.kv;
  const std::string& id = s.trajectory_id;
  if (kv.version != version_) {
    return core::failed_precondition("model engine: sequence " + id +
                                     " comes with a KV cache of "
                                     "version " +
                                     std::to_string(kv.version) + ", but version " +
                                     std::to_string(version_) +
                                     " is loaded here: keys and values of other weights");
  }
  if (kv.layers != static_cast<std::uint32_t>(config_.gpt.n_layer) ||
      kv.width != static_cast<std::uint32_t>(config_.gpt.d_model)) {
    return core::invalid_argument("model engine: sequence " + id + " comes with a KV cache of " +
                                  std::to_string(kv.layers) + " layers x " +
                                  std::to_string(kv.width) + ", not this model's shape");
  }
  // All the tokens but the last, or, for an episode back from its environment, fewer: the
  // tokens since are prefilled.
  const bool fits = s.is_episode()
                        ? kv.positions >= s.prompt_tokens.size() && kv.positions < s.kv_tokens()
                        : kv.positions + 1 == s.kv_tokens();
  if (s.generated.empty() || !fits) {
    return core::invalid_argument("model engine: sequence " + id + " comes with a KV cache of " +
                                  std::to_string(kv.positions) + " positions for " +
                                  std::to_string(s.kv_tokens()) + " tokens");
  }
  return {};
}

bool ModelEngine::done(const SequenceState& s) const {
  if (!s.generated.empty() && s.generated.back() == kEos) return true;
  if (s.awaits_environment()) return true;
  if (s.generated.size() >= s.max_new_tokens) return true;
  return s.kv_tokens() >= static_cast<std::uint64_t>(config_.gpt.context);
}

model::KvCache ModelEngine::take_cache() {
  if (free_caches_.empty()) return model_->make_cache();
  model::KvCache c = std::move(free_caches_.back());
  free_caches_.pop_back();
  c.clear();
  return c;
}

bool ModelEngine::append_sample(Active& a, std::span<const float> logits) {
  SequenceState& s = a.state;
  auto sampled = model::sample(logits, static_cast<float>(config_.temperature), s.rng_state);
  if (!sampled.is_ok()) {
    core::log::error("model engine: sequence {}: sampling failed: {}", s.trajectory_id,
                     sampled.status().to_string());
    return false;
  }
  record_sample(s, sampled->token, sampled->logprob, version_);
  ++kv_used_;
  return true;
}

StepResult ModelEngine::step() {
  StepResult r;
  if (seqs_.empty()) return r;
  const auto vocab = static_cast<std::size_t>(config_.gpt.vocab);
  failed_.assign(seqs_.size(), 0);
  batch_caches_.clear();
  batch_tokens_.clear();
  batch_index_.clear();

  // Newly admitted (or re-weighted) sequences: prefill prompt + generated, sample from its logits.
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    Active& a = seqs_[i];
    SequenceState& s = a.state;
    // A migrated sequence may arrive complete; it finishes without work.
    if (done(s)) continue;
    if (!a.needs_prefill) {
      batch_caches_.push_back(&a.cache);
      batch_tokens_.push_back(s.generated.back());
      batch_index_.push_back(i);
      continue;
    }
    // What the cache does not hold yet: everything, or an episode's tokens since its call.
    if (a.cache.length() < 1 || static_cast<std::uint64_t>(a.cache.length()) >= s.kv_tokens()) {
      a.cache.clear();
    }
    const auto cached = static_cast<std::size_t>(a.cache.length());
    prefill_input_.assign(s.prompt_tokens.begin(), s.prompt_tokens.end());
    prefill_input_.insert(prefill_input_.end(), s.generated.begin(), s.generated.end());
    prefill_input_.erase(prefill_input_.begin(),
                         prefill_input_.begin() + static_cast<std::ptrdiff_t>(cached));
    core::Status st = model_->prefill(a.cache, prefill_input_, logits_);
    if (!st.is_ok()) {
      // admit() checked what prefill checks; this is a bug, and the sequence cannot go on.
      core::log::error("model engine: sequence {}: {}", s.trajectory_id, st.to_string());
      failed_[i] = 1;
      continue;
    }
    a.needs_prefill = false;
    r.prefill_tokens += prefill_input_.size();
    if (!append_sample(a, logits_)) {
      failed_[i] = 1;
      continue;
    }
    ++r.batch;
    ++r.tokens;
  }

  // Everyone else: one batched decode of their last token.
  if (!batch_caches_.empty()) {
    core::Status st = model_->decode(batch_caches_, batch_tokens_, logits_);
    for (std::size_t b = 0; b < batch_index_.size(); ++b) {
      const std::size_t i = batch_index_[b];
      if (!st.is_ok()) {
        core::log::error("model engine: sequence {}: {}", seqs_[i].state.trajectory_id,
                         st.to_string());
        failed_[i] = 1;
        continue;
      }
      if (!append_sample(seqs_[i], std::span<const float>(logits_.data() + b * vocab, vocab))) {
        failed_[i] = 1;
        continue;
      }
      ++r.batch;
      ++r.tokens;
    }
  }

  // Remove what finished, keeping admission order; their caches go back to the pool.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    Active& a = seqs_[i];
    if (failed_[i] != 0 || done(a.state)) {
      // An episode's call: its cache leaves with it, to come back after the environment answers
      // when the weights are still these (the rollout decides).
      if (failed_[i] == 0 && a.state.awaits_environment() && !a.needs_prefill) {
        a.state.kv = export_kv(a);
      }
      kv_used_ -= a.state.kv_tokens();
      r.finished.push_back(std::move(a.state));
      free_caches_.push_back(std::move(a.cache));
      continue;
    }
    if (keep != i) seqs_[keep] = std::move(a);
    ++keep;
  }
  seqs_.erase(seqs_.begin() + static_cast<std::ptrdiff_t>(keep), seqs_.end());
  return r;
}

core::Result<SequenceState> ModelEngine::export_sequence(const std::string& trajectory_id) {
  return take_sequence(seqs_, trajectory_id, kv_used_, "model engine",
                       [&](Active& a) { free_caches_.push_back(std::move(a.cache)); });
}

core::Result<SequenceState> ModelEngine::export_sequence_with_kv(const std::string& trajectory_id) {
  std::optional<KvState> kv;
  for (const auto& a : seqs_) {
    if (a.state.trajectory_id != trajectory_id) continue;
    // Current only once it sampled from its own prefill or decode: the cache then holds prompt +
    // generated but the last token.
    if (a.needs_prefill || a.state.generated.empty()) break;
    kv = export_kv(a);
    break;
  }
  SLUICE_ASSIGN_OR_RETURN(SequenceState s, export_sequence(trajectory_id));
  s.kv = std::move(kv);
  return s;
}

KvState ModelEngine::export_kv(const Active& a) const {
  KvState kv;
  kv.version = version_;
  kv.layers = static_cast<std::uint32_t>(a.cache.layers());
  kv.width = static_cast<std::uint32_t>(a.cache.width());
  kv.positions = static_cast<std::uint32_t>(a.cache.length());
  a.cache.export_rows(kv.keys, kv.values);
  return kv;
}

std::vector<SequenceState> ModelEngine::export_all() {
  return take_all(seqs_, kv_used_, [&](Active& a) { free_caches_.push_back(std::move(a.cache)); });
}

std::vector<SequenceState> ModelEngine::snapshot() const {
  return snapshot_of(seqs_);
}

std::vector<ActiveSequence> ModelEngine::active_sequences() const {
  return active_sequences_of(seqs_);
}

}  // namespace sluice::rollout
