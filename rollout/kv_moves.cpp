#include "rollout/kv_moves.hpp"

#include "core/log.hpp"
#include "rollout/kv_transfer.hpp"
#include "rollout/weight_follower.hpp"
#include "rollout/worker_state.hpp"

namespace sluice::rollout {

namespace log = core::log;

KvMoves::KvMoves(const RolloutConfig& cfg, Engine& engine, const WeightFollower& weights,
                 WorkerStats& stats)
    : cfg_(cfg),
      engine_(&engine),
      weights_(&weights),
      stats_(&stats),
      outbox_(core::Millis(cfg.kv_hold_ms)) {}

core::Result<SequenceState> KvMoves::export_sequence(const std::string& id, bool with_kv) {
  SLUICE_ASSIGN_OR_RETURN(SequenceState s, with_kv ? engine_->export_sequence_with_kv(id)
                                                   : engine_->export_sequence(id));
  ++stats_->exported;
  if (s.kv) publish(s);
  return s;
}

// The state carries a reference to a buffer kept here for kv_hold_ms.
void KvMoves::publish(SequenceState& s) {
  core::TransferEngine* transfer = weights_->transfer();
  if (!cfg_.kv_ucx || !transfer) return;
  auto p = publish_kv(*transfer, *s.kv, KvOwner{cfg_.rollout_id, s.trajectory_id});
  if (!p.is_ok()) {
    log::warn("rollout {}: KV cache of {} goes inline: {}", cfg_.rollout_id, s.trajectory_id,
              p.status().to_string());
    return;
  }
  s.kv_ref = std::move(p->ref);
  s.kv.reset();
  outbox_.add(std::move(p->buffer));
  ++stats_->kv_published;
}

core::Result<std::optional<SequenceState>> KvMoves::import_sequence(SequenceState s,
                                                                    bool continues) {
  const std::uint64_t loaded = engine_->version();
  const std::uint64_t v = s.versions.empty() ? loaded : s.versions.back();
  if (!WorkerState::admits_import(v, loaded, continues, engine_->can_admit(s.kv_tokens()))) {
    if (v != loaded) ++stats_->refused_version;
    s.kv.reset();  // wherever it goes next, it is re-prefilled
    s.kv_ref.reset();
    return std::optional<SequenceState>(std::move(s));
  }
  if (s.kv_ref) fetch(s);
  const std::uint64_t kv = s.kv_tokens();
  // A sequence that brought its KV cache is not re-prefilled.
  bool migrated = !s.generated.empty() && !s.kv;
  core::Status st;
  if (s.kv) {
    // A cache the engine refuses (another shape: never expected) costs a re-prefill, not the
    // sequence.
    std::optional<KvState> cache = std::move(s.kv);
    s.kv.reset();
    SequenceState plain = s;
    s.kv = std::move(cache);
    st = engine_->admit(std::move(s));
    if (st.is_ok()) {
      ++stats_->kv_imported;
    } else {
      ++stats_->kv_reads.read_failed;
      log::warn("rollout {}: KV cache of {} refused, re-prefilling: {}", cfg_.rollout_id,
                plain.trajectory_id, st.to_string());
      migrated = !plain.generated.empty();
      st = engine_->admit(std::move(plain));
    }
  } else {
    st = engine_->admit(std::move(s));
  }
  if (!st.is_ok()) return st.with_context("import");
  if (migrated) {
    ++stats_->imported;
    stats_->reprefill_tokens += kv;
    stats_->reprefill_s +=
        static_cast<double>(kv) * cfg_.sim.prefill_ms_per_token * cfg_.sim.time_scale / 1000.0;
  }
  return std::optional<SequenceState>();
}

// On any failure the sequence goes on without its cache (re-prefilled): it is never lost.
void KvMoves::fetch(SequenceState& s) {
  const std::string id = s.trajectory_id;
  core::Status st = fetch_kv_of(weights_->transfer(), *engine_, s, cfg_.rollout_id,
                                core::Millis(cfg_.kv_read_timeout_ms), stats_->kv_reads);
  if (!st.is_ok()) {
    log::warn("rollout {}: KV cache of {} not read, re-prefilling: {}", cfg_.rollout_id, id,
              st.to_string());
  }
}

}  // namespace sluice::rollout
