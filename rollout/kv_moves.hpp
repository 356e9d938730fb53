// Sequences that move between rollouts with their KV caches, on the rollout's side: one exported
// from the engine, its cache published over UCX (the state carries a KvRef, the buffer stays here
// for kv_hold_ms in an outbox swept before each report), and a migrated one imported into the
// engine with its cache read from its source, or refused back to the manager. The low-level publish
// and fetch are rollout/kv_transfer.hpp's; this adds the rollout's policy: when a cache travels by
// reference, what a failed read or a refused cache costs (a re-prefill, never the sequence), and
// the counting.
//
// The transfer engine is the WeightFollower's (none before the first pull: caches then travel
// inline, and references are dropped unread). The outbox's buffers are freed when this goes:
// destroy it before the WeightFollower.
//
// Thread safety: one thread, the worker's. import_sequence runs the loop while a cache is read:
// never call it from a loop callback.
#pragma once

#include <optional>
#include <string>

#include "core/status.hpp"
#include "rollout/engine.hpp"
#include "rollout/worker_config.hpp"
#include "rollout/worker_stats.hpp"
#include "wire/transfer.hpp"

namespace sluice::rollout {

class WeightFollower;

class KvMoves {
 public:
  // `cfg`, `engine`, `weights` and `stats` must outlive it.
  KvMoves(const RolloutConfig& cfg, Engine& engine, const WeightFollower& weights,
          WorkerStats& stats);
  KvMoves(const KvMoves&) = delete;
  KvMoves& operator=(const KvMoves&) = delete;

  // Frees the published buffers whose kv_hold_ms has passed (the destination does not say when
  // it has read one).
  void sweep() { outbox_.sweep(); }

  // Takes `id` out of the engine to move elsewhere (`with_kv`: with its KV cache, when the
  // engine has one), counted. The cache goes by reference, its buffer held here; with kv_ucx off,
  // without a transfer engine, or when allocating fails, it stays inline. Errors: the engine's
  // (not running here: it finished meanwhile).
  core::Result<SequenceState> export_sequence(const std::string& id, bool with_kv);

  // A migrated sequence sent here (`continues`: the manager says it continues on this version):
  // admitted, with its cache read first when it comes by reference; a cache that cannot be read
  // or that the engine refuses costs a re-prefill. Refused (another version, or it does not fit):
  // returned without its cache, for the manager. Errors: the engine refused the sequence itself.
  core::Result<std::optional<SequenceState>> import_sequence(SequenceState s, bool continues);

 private:
  void publish(SequenceState& s);
  void fetch(SequenceState& s);

  const RolloutConfig& cfg_;
  Engine* engine_;
  const WeightFollower* weights_;
  WorkerStats* stats_;
  core::RetiredBuffers outbox_;
};

}  // namespace sluice::rollout
