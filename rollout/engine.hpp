// The engine a rollout drives: continuous batching over sequences under a capacity, one decode
// step at a time, weights loaded by version, and one sequence's state exported and imported for
// migration (repack, or resuming a dead rollout's work).
//
// Two implementations sit behind this interface: SimEngine (rollout/sim_engine.hpp), which draws
// response lengths from a distribution and times steps as t0 + t1 x batch without computing, and
// the reference-model engine, which really generates with a KV cache.
//
// Thread safety: an engine belongs to one thread (the rollout's event loop).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "rl/trajectory.hpp"

namespace sluice::rollout {

struct Capacity {
  std::uint32_t max_sequences = 32;     // decode batch bound
  std::uint64_t max_kv_tokens = 65536;  // KV-cache budget: sum over sequences of prompt + generated
};

// A sequence's KV cache as it moves with the sequence (Engine::export_sequence_with_kv), so the
// destination continues without re-prefilling: the keys and values of its first `positions`
// tokens (prompt + generated but the last, which the next decode step feeds), computed by weights
// `version`. Only an engine of the same model shape holding that same version may import it.
struct KvState {
  std::uint64_t version = 0;
  std::uint32_t layers = 0, width = 0, positions = 0;
  std::vector<float> keys, values;  // [layers][positions][width] each
  std::uint64_t bytes() const { return (keys.size() + values.size()) * sizeof(float); }
};

// The longest rollout or trajectory id a KV reference's header carries.
inline constexpr std::size_t kMaxKvIdBytes = 128;

// Where a sequence's KV cache waits to be read instead of travelling inline
// (rollout/kv_transfer.hpp): the source's registered buffer holding the keys then the values
// (float32, [layers][positions] [width] each), read by the destination with a one-sided GET. The
// shape is KvState's. Untrusted on arrival: from_json checks the shape, that `bytes` matches it and
// that `region` decodes; the reader bounds `bytes` by what its engine could hold before it
// allocates anything.
//
// Who may use it: the buffer starts with a header naming the rollout that
// published it and the sequence it holds (rollout/kv_transfer.hpp), so a reference that names
// another rollout's buffer, or another sequence's, is refused by the reader. `destination`, when
// set, is the one rollout the manager issued the reference to; any other refuses it.
struct KvRef {
  std::uint64_t version = 0;
  std::uint32_t layers = 0, width = 0, positions = 0;
  std::uint64_t bytes = 0;     // layers x width x positions x 2 x sizeof(float)
  std::uint64_t checksum = 0;  // core::chunk_checksum (XXH3) of the `bytes` bytes
  std::string region;          // core::RegionDescriptor::encode() of the source's buffer
  std::string source;          // the rollout that published it (at most kMaxKvIdBytes)
  std::string destination;     // the rollout it is for; empty: not bound by the manager
  // The byte count the shape calls for.
  std::uint64_t shape_bytes() const {
    return std::uint64_t{layers} * width * positions * 2 * sizeof(float);
  }
};

// An episode's turn's stop sequences (an agent's `stop`): the turn ends once the tokens it
// generated end with one of them, and the matched tokens then leave the episode (cut_stop), as
// OpenAI's API leaves the stop text out of the answer.
// OpenAI's bound on `stop`: at most four sequences; here each of at most kMaxStopTokens tokens.
inline constexpr std::size_t kMaxStopSequences = 4;
inline constexpr std::size_t kMaxStopTokens = 64;
struct TurnStop {
  std::vector<std::vector<std::int32_t>> sequences;  // none empty
  std::uint64_t from = 0;  // generated tokens when the turn began: only later ones match
  bool hit = false;        // the turn ended at one (cut_stop took it out)
};

// Everything needed to continue one sequence elsewhere: the destination rebuilds its KV cache by
// re-prefilling prompt + generated, or imports `kv` when it came with one. Travels as JSON.
struct SequenceState {
  std::string trajectory_id;
  std::string prompt_id;
  std::vector<std::int32_t> prompt_tokens;
  std::vector<std::int32_t> generated;
  std::vector<float> logprobs;          // one per generated token
  std::vector<std::uint64_t> versions;  // versions that generated tokens so far, in order
  std::uint64_t max_new_tokens = 0;     // the sequence stops at this many generated tokens
  std::uint64_t rng_state = 0;          // sampling state, so a migrated sequence continues alike
  std::optional<KvState> kv;            // its KV cache, when moved with it (absent: re-prefill)
  // Or where to read it (never both): the destination reads it before admitting, and re-prefills
  // when the read fails.
  std::optional<KvRef> kv_ref;
  // An episode (rl::Trajectory's): a model turn ends when it samples `call_token`, and the
  // rollout's environment answers by appending its tokens before the next turn. -1: one turn.
  std::int32_t call_token = -1;
  // Per generated token in an episode (else empty): 1 for the model's, 0 for the environment's;
  // the version that sampled it (0 for the environment's). Engines append both per token sampled.
  std::vector<std::uint8_t> loss_mask;
  std::vector<std::uint64_t> token_versions;
  std::uint32_t turns = 1;  // model turns begun
  // An episode's turn also ends once `generated` holds this many tokens (0: no such bound): an
  // agent's request for at most N tokens.
  std::uint64_t turn_limit = 0;
  TurnStop stop;  // this turn's stop sequences (none: the turn ends at the call or turn_limit)
  bool is_episode() const { return call_token >= 0; }
  // Whether the model's turn is over and the environment is next: its last token is the model's
  // call, the turn reached its limit, or its tokens end with a stop sequence.
  bool awaits_environment() const {
    return is_episode() && !generated.empty() && !loss_mask.empty() && loss_mask.back() == 1 &&
           (generated.back() == call_token || (turn_limit > 0 && generated.size() >= turn_limit) ||
            stop_length() > 0);
  }
  // The length of the longest stop sequence the turn's tokens end with (0: none).
  std::size_t stop_length() const;
  std::uint64_t kv_tokens() const { return prompt_tokens.size() + generated.size(); }

  nlohmann::json to_json() const;
  static core::Result<SequenceState> from_json(const nlohmann::json& j);
};

// Appends a token the engine sampled with weights `version`: its log-prob, the version among
// `versions`, and in an episode its mask and version.
void record_sample(SequenceState& s, std::int32_t token, float logprob, std::uint64_t version);
// A turn that ended at a stop sequence: its tokens leave the episode (with their log-probs, masks
// and versions, and the KV cache, which held them) and stop.hit is set. False when it did not.
bool cut_stop(SequenceState& s);
// Appends the environment's answer to an episode's call: tokens with log-prob 0, mask 0 and
// version 0, and the next turn begins (after a model turn: an agent may give tokens before the
// first).
void record_environment(SequenceState& s, const std::vector<std::int32_t>& tokens);

// A finished (or abandoned) sequence as a trajectory for the experience buffer; its behaviour
// version is the first that generated it.
rl::Trajectory to_trajectory(const SequenceState& s, double reward, const std::string& rollout);

// What the rollout reports of each running sequence, read without copying its tokens.
struct ActiveSequence {
  std::string trajectory_id;
  std::uint64_t kv_tokens = 0;
  std::uint64_t first_version = 0;  // the version that generated its first token; 0 before any
};

struct StepResult {
  std::uint32_t batch = 0;   // sequences that decoded a token in this step
  std::uint64_t tokens = 0;  // tokens produced (decode) in this step
  std::uint64_t prefill_tokens = 0;
  // Time the step still occupies the engine after step() returned: the simulated engine computes
  // nothing and reports its modelled time here (the caller waits it out on a loop timer, so the
  // process stays responsive); a real engine computes inside step() and reports 0.
  double wait_s = 0.0;
  // Sequences that finished in this step (hit end-of-sequence or max_new_tokens), removed from
  // the engine. Their reward is not set: the rollout scores them.
  std::vector<SequenceState> finished;
};

// The admission rules every engine shares, its name (`engine`, "model engine") in each error.
// A sequence on its own: an id, max_new_tokens > 0, one log-prob per generated token.
core::Status check_sequence(std::string_view engine, const SequenceState& seq);
// An episode's fields: one mask and version per generated token, a model token's version not
// below the one before and one of `versions`, an environment token at log-prob 0 and version 0.
core::Status check_episode_fields(std::string_view engine, const SequenceState& seq);
// Whether a sequence needing `kv_tokens` fits beside `active` sequences holding `kv_used`.
bool fits(const Capacity& c, std::size_t active, std::uint64_t kv_used, std::uint64_t kv_tokens);
// The same, as the error a full batch or a full KV budget gives (resource_exhausted).
core::Status check_room(std::string_view engine, const Capacity& c, const std::string& id,
                        std::size_t active, std::uint64_t kv_used, std::uint64_t kv_tokens);

class Engine {
 public:
  virtual ~Engine() = default;

  virtual Capacity capacity() const = 0;
  // Bytes of KV cache (keys and values) one token holds in an imported KvState; 0 for an engine
  // that imports none. Bounds what a reader fetches for it (rollout/kv_transfer.hpp).
  virtual std::uint64_t kv_bytes_per_token() const { return 0; }
  // The loaded weight version (0 before any load).
  virtual std::uint64_t version() const = 0;
  // Loads weights of `version`. `data` holds the version's bytes (the manifest's layout); the
  // simulated engine only records the version. Fails while sequences are active unless
  // `allow_active` (the partial-rollout baseline continues in-flight sequences on new weights).
  virtual core::Status load_weights(std::uint64_t version, const std::uint8_t* data,
                                    std::uint64_t bytes, bool allow_active) = 0;

  // Whether a sequence needing `kv_tokens` now (and growing up to `max_kv_tokens`) fits.
  virtual bool can_admit(std::uint64_t kv_tokens) const = 0;
  // Admits a new sequence (generated empty) or a migrated one (generated non-empty: the engine
  // re-prefills it). The version the engine has loaded is appended to `versions` when it differs
  // from the last. Fails when it does not fit.
  virtual core::Status admit(SequenceState seq) = 0;
  // One scheduling step: prefill what was admitted, decode one token for every active sequence.
  virtual StepResult step() = 0;
  // Removes a sequence and returns its state, for migration.
  virtual core::Result<SequenceState> export_sequence(const std::string& trajectory_id) = 0;
  // Like export_sequence, with the sequence's KV cache attached (SequenceState::kv) when the
  // engine keeps one and it is current; engines without a KV cache export without it.
  virtual core::Result<SequenceState> export_sequence_with_kv(const std::string& trajectory_id) {
    return export_sequence(trajectory_id);
  }
  // Removes every active sequence and returns their states (a rollout that gives its work back).
  virtual std::vector<SequenceState> export_all() = 0;

  virtual std::uint32_t active() const = 0;
  virtual std::uint64_t kv_tokens_used() const = 0;
  // Copies of every active sequence's state, left in place: what the rollout streams to the
  // manager's partial-response pool so a dead rollout's work can resume elsewhere.
  virtual std::vector<SequenceState> snapshot() const = 0;
  // Id, current KV tokens and first version of every active sequence: for the manager's repack
  // planner, and for stopping work the actor will drop.
  virtual std::vector<ActiveSequence> active_sequences() const = 0;
};

// snapshot() and active_sequences() for an engine that keeps its sequences as a range of entries
// with a `state` member (a SequenceState).
template <typename Entries>
std::vector<SequenceState> snapshot_of(const Entries& entries) {
  std::vector<SequenceState> out;
  out.reserve(entries.size());
  for (const auto& e : entries)
    out.push_back(e.state);
  return out;
}

// export_sequence() and export_all() for such an engine: each entry taken out has its KV tokens
// subtracted from `kv_used` and is handed to `release` (which returns what else it held, such as
// a KV cache) before it is removed.
template <typename Entries, typename Release>
core::Result<SequenceState> take_sequence(Entries& entries, const std::string& trajectory_id,
                                          std::uint64_t& kv_used, const char* engine,
                                          Release&& release) {
  auto it = entries.begin();
  while (it != entries.end() && it->state.trajectory_id != trajectory_id)
    ++it;
  if (it == entries.end()) {
    return core::not_found(std::string(engine) + ": sequence " + trajectory_id +
                           " is not active here");
  }
  SequenceState s = std::move(it->state);
  release(*it);
  kv_used -= s.kv_tokens();
  entries.erase(it);
  return s;
}

template <typename Entries, typename Release>
std::vector<SequenceState> take_all(Entries& entries, std::uint64_t& kv_used, Release&& release) {
  std::vector<SequenceState> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    out.push_back(std::move(e.state));
    release(e);
  }
  entries.clear();
  kv_used = 0;
  return out;
}

template <typename Entries>
std::vector<ActiveSequence> active_sequences_of(const Entries& entries) {
  std::vector<ActiveSequence> out;
  out.reserve(entries.size());
  for (const auto& e : entries)
    out.push_back({e.state.trajectory_id, e.state.kv_tokens(),
                   e.state.versions.empty() ? 0 : e.state.versions.front()});
  return out;
}

}  // namespace sluice::rollout
