#include "rollout/weight_follower.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "core/log.hpp"
#include "weightstore/client.hpp"
#include "weightstore/reader.hpp"
#include "wire/transfer.hpp"

namespace sluice::rollout {

namespace log = core::log;
using core::Clock;
using core::Millis;

namespace {

// The longest a reader's question for the latest version waits at the store for news.
constexpr Millis kRolloutLatestWait{1000};

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

WeightFollower::WeightFollower(core::EventLoop& loop, const RolloutConfig& cfg,
                               const core::Security& security, std::vector<std::string> environment,
                               Engine& engine, WorkerStats& stats, WorkerMetrics& metrics)
    : loop_(&loop),
      cfg_(cfg),
      security_(security),
      environment_(std::move(environment)),
      engine_(&engine),
      stats_(&stats),
      metrics_(&metrics) {}

WeightFollower::~WeightFollower() = default;

std::uint64_t WeightFollower::held() const {
  return reader_ ? std::max(reader_->staged_version(), reader_->current_version()) : 0;
}

std::uint64_t WeightFollower::staged() const {
  return std::max(reader_ ? reader_->staged_version() : 0, engine_->version());
}

void WeightFollower::count_served() {
  if (reader_ && reader_->serving() && reader_->current_version() != last_served_) {
    last_served_ = reader_->current_version();
    ++stats_->served_versions;
  }
}

bool WeightFollower::serve_peers() const {
  if (cfg_.serve == "on") return true;
  if (cfg_.serve == "off") return false;
  // The UCX version check that covers the 1.13 faults (see RolloutConfig::serve).
  auto v = core::ucx_version();
  return v.major > 1 || (v.major == 1 && v.minor > 13);
}

core::Status WeightFollower::ensure_reader() {
  if (reader_) return {};
  core::TransferOptions to;
  to.environment = environment_;
  to.stream_reach = cfg_.store;  // the chunk server binds where the job's hosts reach it
  SLUICE_TRY(core::set_stream_security(to, cfg_.stream_encryption, cfg_.datacenter, security_,
                                       "rollout " + cfg_.rollout_id));
  SLUICE_ASSIGN_OR_RETURN(transfer_, core::TransferEngine::create(*loop_, to));
  SLUICE_ASSIGN_OR_RETURN(store_, weightstore::StoreClient::create(*loop_, cfg_.store, security_));
  weightstore::ReaderOptions ro;
  ro.model = cfg_.model;
  ro.holder_id = cfg_.rollout_id;
  ro.topology = cfg_.topology();
  ro.serve = serve_peers();
  ro.read.max_in_flight_per_source = cfg_.pull_in_flight;
  ro.read.max_total_bytes = cfg_.max_version_bytes;
  ro.local_wait = Millis(cfg_.local_wait_ms);
  ro.only_from = cfg_.join_read_from;
  ro.only_from_first = true;
  ro.local_wait_first = cfg_.local_wait_first;
  // A served copy is freed when the store says its leases drained, or one lease ttl after a
  // restarted store first said it does not know it: never on a timer of its own while a lease
  // may be live (close() at the end of the job waits a bounded time, then the process goes).
  ro.drain_timeout = Millis(0);
  ro.lease_ttl = Millis(cfg_.store_lease_ttl_ms);
  ro.request_timeout = kRolloutStoreRequestTimeout;
  // A question for the latest version that has no news yet (the store has not committed what
  // the manager named, or a nearby copy was just declined) waits at the store for it: across
  // datacenters each question crosses the WAN.
  ro.latest_wait = kRolloutLatestWait;
  SLUICE_ASSIGN_OR_RETURN(reader_, weightstore::Reader::create(*loop_, *transfer_, *store_, ro));
  log::info("rollout {}: {} its loaded version to peers", cfg_.rollout_id,
            ro.serve ? "serves" : "does not serve");
  if (ro.serve) {
    holder_beat_ =
        loop_->every(weightstore::kHolderHeartbeatPeriod, [this] { reader_->heartbeat(); });
  }
  return {};
}

core::Status WeightFollower::prefetch(const WorkerState& ws) {
  if (!ws.should_pull(engine_->version(), held(), reader_ && reader_->pulling())) return {};
  SLUICE_TRY(ensure_reader());
  log::debug("rollout {}: pulling version {} in the background", cfg_.rollout_id, ws.latest());
  std::weak_ptr<bool> guard = alive_;
  std::uint64_t before = reader_->staged_version();
  if (!stats_->first_pull) stats_->first_pull = Clock::now();
  reader_->pull_latest([this, guard, before](core::Result<std::uint64_t> v) {
    if (guard.expired()) return;
    if (!v.is_ok()) {
      // Not fatal: the version may have been retired meanwhile; a newer one follows.
      log::warn("rollout {}: background pull failed: {}", cfg_.rollout_id, v.status().to_string());
      return;
    }
    if (reader_->staged_version() > before) {
      stats_->pulled_bytes += reader_->last_stats().bytes;
      stats_->checksum_failures += reader_->last_stats().checksum_failures;
      stats_->pulled_checksum_only_bytes += reader_->last_stats().checksum_only_bytes;
      stats_->owner_unconfirmed += reader_->last_stats().owner_unconfirmed;
      stats_->pulled_same_host_bytes += reader_->last_same_host_bytes();
    }
  });
  return {};
}

core::Status WeightFollower::load_version(WorkerState& ws, std::uint64_t version, bool allow_active,
                                          const std::atomic<bool>& stopping) {
  auto t0 = Clock::now();
  ws.latest_named(version);
  while (held() < version && ws.load_waits(t0, Clock::now()) && !stopping.load()) {
    SLUICE_TRY(prefetch(ws));
    loop_->run_until([&] { return !reader_ || !reader_->pulling(); }, kLoadVersionPoll);
  }
  if (held() < version) {
    stats_->load_s += seconds(Clock::now() - t0);
    log::warn("rollout {}: version {} could not be pulled yet", cfg_.rollout_id, version);
    return {};
  }
  // The engine copies the weights, so the reader may swap first: from here it holds (and
  // serves) the new version and retires the old one.
  if (reader_->staged_version() > reader_->current_version()) {
    auto sw = reader_->swap();
    if (!sw.is_ok()) {
      stats_->load_s += seconds(Clock::now() - t0);
      log::warn("rollout {}: swap to version {} failed: {}", cfg_.rollout_id, version,
                sw.status().to_string());
      return {};
    }
  }
  std::uint64_t v = reader_->current_version();
  std::span<const std::uint8_t> bytes = reader_->current_bytes();
  auto st = engine_->load_weights(v, bytes.data(), bytes.size(), allow_active);
  if (!st.is_ok()) {
    log::warn("rollout {}: load of version {} refused: {}", cfg_.rollout_id, v, st.to_string());
  } else {
    if (engine_->version() == v && stats_->loads == 0) {
      // The first weights: the accounting starts here.
      stats_->first_weights(Clock::now());
      t0 = stats_->started;
    }
    ++stats_->loads;
    metrics_->version.set(static_cast<double>(engine_->version()));
    metrics_->loaded_bytes.inc(static_cast<double>(bytes.size()));
    log::debug("rollout {}: loaded version {}", cfg_.rollout_id, v);
  }
  stats_->load_s += seconds(Clock::now() - t0);
  return {};
}

void WeightFollower::finish(bool drain) {
  if (!reader_) return;
  holder_beat_.reset();
  if (drain) {
    core::Status closed = reader_->close();
    if (!closed.is_ok()) log::warn("rollout {}: {}", cfg_.rollout_id, closed.to_string());
  }
}

}  // namespace sluice::rollout
