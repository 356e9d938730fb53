// The simulated engine: continuous batching without computing, so scheduling (asynchrony,
// repack, the baselines) can be measured without a GPU (docs/architecture.md).
//
// - A trajectory's response length is a deterministic function of (seed, trajectory_id) only,
//   drawn from a configured distribution: every benchmark mode and every migration sees the same
//   length. A sequence stops at min(that length, max_new_tokens).
// - A decode step is timed t0 + t1 x batch, plus prefill_ms_per_token for each token prefilled in
//   that step (a newly admitted sequence prefills its prompt; a migrated one re-prefills prompt +
//   generated). All times are multiplied by time_scale. step() never sleeps: it reports the time
//   in StepResult::wait_s and the caller waits it out on a loop timer.
// - An episode's length is split into `turns` model turns; each but the last ends with its call
//   token, and the rollout's environment answers. A call's sequence leaves with a KvState that
//   holds only its shape (no keys or values): admitted again on the same version, the sequence
//   prefills only the tokens since (the environment's answer), else all of them.
// - Tokens are pseudo-random ids in [0, kSimVocab) with negative log-probs, drawn from the
//   sequence's own rng_state, so a migrated sequence continues exactly as if it had never moved.
//
// Thread safety: a SimEngine belongs to one thread; LengthSampler is immutable after create()
// and safe to share for reading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/lognormal.hpp"
#include "core/status.hpp"
#include "rl/length_stats.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

inline constexpr std::int32_t kSimVocab = 32;  // simulated token ids lie in [0, kSimVocab)

// The response-length distribution.
struct LengthConfig {
  std::string kind = "lognormal";  // "lognormal" (median, p99) or "file" (lengths from `file`)
  double median = 64.0;            // lognormal median, >= 1
  double p99 = 640.0;              // lognormal 99th percentile, >= median
  std::uint64_t max_len = 1024;    // lengths are truncated to [1, max_len]; >= 1
  std::string file;  // kind "file": one length per line (blank lines and '#' comments skipped)

  template <typename V>
  void describe(V& v) {
    v("kind", kind, "response-length distribution: lognormal or file");
    v("median", median, "lognormal: median response length (>= 1)");
    v("p99", p99, "lognormal: 99th-percentile response length (>= median)");
    v("max_len", max_len, "lengths are truncated to at most this (>= 1)");
    v("file", file, "kind file: a file of lengths, one per line, one chosen per trajectory");
  }
  core::Status validate() const;
};

struct SimEngineConfig {
  std::uint32_t max_sequences = 32;     // decode batch bound, >= 1
  std::uint64_t max_kv_tokens = 65536;  // KV budget (prompt + generated, summed), >= 1
  double t0_ms = 2.0;                   // fixed cost of a decode step, >= 0
  double t1_ms = 0.05;                  // added cost per sequence in the batch, >= 0
  double prefill_ms_per_token = 0.005;  // cost per prefilled token, >= 0
  LengthConfig lengths;                 // response-length distribution
  std::uint64_t seed = 1;               // lengths and tokens derive from it
  double time_scale = 1.0;              // multiplies every time, >= 0 (0: instant)
  // Agentic workloads: an episode (SequenceState::call_token set by the rollout) has this many
  // model turns, its length split evenly, each but the last ending in a call; the environment
  // answers each call with env_tokens tokens. 1: one turn.
  std::uint32_t turns = 1;
  std::uint32_t env_tokens = 8;

  template <typename V>
  void describe(V& v) {
    v("max_sequences", max_sequences, "decode batch bound (>= 1)");
    v("max_kv_tokens", max_kv_tokens, "KV-cache budget in tokens (>= 1)");
    v("t0_ms", t0_ms, "fixed time of a decode step in ms");
    v("t1_ms", t1_ms, "time per sequence in the batch in ms");
    v("prefill_ms_per_token", prefill_ms_per_token, "prefill time per token in ms");
    v("lengths", lengths, "response-length distribution");
    v("seed", seed, "seed of response lengths and sampled tokens");
    v("time_scale", time_scale, "multiplies every modelled time (>= 0)");
    v("turns", turns,
      "model turns of an episode, each but the last ending in a tool call (default 1: one turn)");
    v("env_tokens", env_tokens, "tokens the simulated environment answers a call with (default 8)");
  }
  core::Status validate() const;
  Capacity capacity() const { return {max_sequences, max_kv_tokens}; }
};

// Draws response lengths: length(id) depends on (seed, id) only.
class LengthSampler {
 public:
  // Validates the config; kind "file" reads the file (an unreadable file, a bad line or an empty
  // file is an error naming the file and line).
  static core::Result<LengthSampler> create(const LengthConfig& config, std::uint64_t seed);

  // The response length of `trajectory_id`, in [1, max_len].
  std::uint64_t length(const std::string& trajectory_id) const;

 private:
  LengthSampler() = default;
  LengthConfig config_;
  std::uint64_t seed_ = 0;
  core::Lognormal lognormal_;         // kind "lognormal"
  std::vector<std::uint64_t> table_;  // kind "file"
};

// The one summary of lengths (rl/length_stats.hpp), under the name benches use.
using rl::LengthStats;

// Draws `n` lengths (ids "length-stats/0" ...) and summarizes them, for benchmarks to print.
core::Result<LengthStats> length_stats(const LengthConfig& config, std::uint64_t seed,
                                       std::size_t n);

class SimEngine final : public Engine {
 public:
  // Validates the config (and reads a length file).
  static core::Result<std::unique_ptr<SimEngine>> create(const SimEngineConfig& config);

  Capacity capacity() const override { return config_.capacity(); }
  std::uint64_t version() const override { return version_; }
  // Records the version (data is not read). kFailedPrecondition while sequences are active and
  // !allow_active.
  core::Status load_weights(std::uint64_t version, const std::uint8_t* data, std::uint64_t bytes,
                            bool allow_active) override;
  // A free decode slot and kv_tokens more KV tokens within max_kv_tokens.
  bool can_admit(std::uint64_t kv_tokens) const override;
  // kInvalidArgument: empty id, max_new_tokens 0, or logprobs not one per generated token.
  // kAlreadyExists: the id is active here. kResourceExhausted: it does not fit (the message says
  // which bound). A new sequence with rng_state 0 gets one derived from (seed, id).
  core::Status admit(SequenceState seq) override;
  // Prefills what was admitted since the last step, then decodes one token for every active
  // sequence; sequences that reach their length are removed and returned. An engine with no
  // active sequence does nothing and reports wait_s 0.
  StepResult step() override;
  // kNotFound when the id is not active here.
  core::Result<SequenceState> export_sequence(const std::string& trajectory_id) override;
  std::vector<SequenceState> export_all() override;

  std::uint32_t active() const override { return static_cast<std::uint32_t>(seqs_.size()); }
  std::uint64_t kv_tokens_used() const override { return kv_used_; }
  std::vector<SequenceState> snapshot() const override;
  std::vector<ActiveSequence> active_sequences() const override;

  // The length `trajectory_id` will stop at, before max_new_tokens (for tests and benches).
  std::uint64_t response_length(const std::string& trajectory_id) const {
    return lengths_.length(trajectory_id);
  }
  const SimEngineConfig& config() const { return config_; }

 private:
  struct Active {
    SequenceState state;
    std::uint64_t target = 0;  // min(response length, max_new_tokens): model tokens
    bool prefilled = false;
    std::uint64_t cached = 0;  // tokens its (modelled) KV cache holds when admitted
  };
  // Model tokens generated (all of them outside an episode).
  static std::uint64_t model_tokens(const SequenceState& s);
  // Whether an episode's model turn ends (with a call) at this many model tokens.
  bool ends_turn(std::uint64_t target, std::uint64_t model_tokens) const;
  SimEngine(SimEngineConfig config, LengthSampler lengths)
      : config_(std::move(config)), lengths_(std::move(lengths)) {}

  SimEngineConfig config_;
  LengthSampler lengths_;
  std::uint64_t version_ = 0;
  std::vector<Active> seqs_;  // in admission order
  std::uint64_t kv_used_ = 0;
};

}  // namespace sluice::rollout
