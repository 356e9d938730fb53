#include "relay/relay.hpp"

#include <list>
#include <optional>
#include <set>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "core/metrics.hpp"
#include "core/shard.hpp"
#include "core/transfer.hpp"
#include "relay/relay_delta.hpp"
#include "weightstore/client.hpp"
#include "weightstore/holder.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::relay {

namespace log = core::log;
using core::Clock;
using core::Millis;
using core::Result;
using core::Status;

Status RelayConfig::validate() const {
  if (keep_versions == 0) return core::invalid_argument("keep_versions must be at least 1");
  if (poll_ms == 0) return core::invalid_argument("poll_ms must be positive");
  if (follow_poll_ms == 0 || reask_ms == 0)
    return core::invalid_argument("follow_poll_ms and reask_ms must be positive");
  if (in_flight == 0) return core::invalid_argument("in_flight must be positive");
  if (store_lease_ttl_ms == 0) return core::invalid_argument("store_lease_ttl_ms must be positive");
  if (max_version_bytes == 0) return core::invalid_argument("max_version_bytes must be positive");
  if (abandon_after_ms == 0) return core::invalid_argument("abandon_after_ms must be positive");
  if (model.empty()) return core::invalid_argument("model must not be empty");
  if (share_tp_size > core::kMaxTensorParallel)
    return core::invalid_argument("share_tp_size must be at most " +
                                  std::to_string(core::kMaxTensorParallel));
  if (share_tp_size > 0 && share_rank >= share_tp_size)
    return core::invalid_argument("share_rank " + std::to_string(share_rank) +
                                  " is not below share_tp_size " + std::to_string(share_tp_size));
  if (share_tp_size > 0 && make_deltas)
    return core::invalid_argument("a host-share relay (share_tp_size) makes no deltas");
  return core::check_stream_encryption(stream_encryption, security.mode == "curve", "relay");
}

namespace {

// How often a relay waiting for an expected delta asks the store again.
constexpr Millis kDeltaReask{50};
// How often the relay tells the store it is alive (well within the store's holder_ttl).
constexpr Millis kHeartbeat{250};

struct Copy {
  core::Manifest manifest;  // the version's, or for a host share the share's (core/shard.hpp)
  // A host share: the version's manifest and the share's pieces in it (read from a holder of
  // the whole version), by offset in the share's stream.
  std::optional<core::Manifest> parent;
  core::ShardPlan share;
  std::unique_ptr<core::RegisteredBuffer> buffer;
  std::vector<bool> have;
  bool complete = false;
  Clock::time_point progressed{};  // the version's start, then its last verified chunk
  bool abandoned = false;          // given up for a newer version: no more reads, then retired
  std::set<std::string> failed_sources;  // predecessors that failed for this version

  // Receiving, chunk by chunk, while the predecessor is still receiving.
  std::string source;  // the predecessor read from now ("" : ask the store)
  core::RegionDescriptor source_desc;
  std::vector<bool> source_has;           // its verified chunks, as the store last said
  bool source_whole = false;              // a host share read from the whole version
  std::set<std::uint32_t> reading;        // chunks with a read in flight
  std::vector<std::uint32_t> unreported;  // verified here, not yet told to the store
  bool asking = false;                    // a chain_source request is out
  bool reporting = false;                 // an add_chunks request is out
  Clock::time_point asked{};
  int source_distance = 3;  // topology distance to the source, as the store said

  // Receiving by delta (use_deltas): wanted until the source is known to be remote (or not);
  // no chunk is read in full while a delta is asked for or read.
  enum class Delta { kNone, kWanted, kAsking, kReading } delta = Delta::kNone;
  Clock::time_point delta_since{};  // when the version was first seen
  Clock::time_point delta_asked{};
  int lent = 0;  // deltas being applied with this copy as their base
};

}  // namespace

struct Relay::Impl {
  core::EventLoop& loop;
  RelayConfig config;
  std::unique_ptr<core::TransferEngine> engine;
  std::unique_ptr<weightstore::StoreClient> store;
  // Oldest first. A list: replies hold pointers to their copies, and a copy given up is erased
  // from the middle.
  std::list<Copy> copies;
  // Registration of each copy (partial from the start), re-registration after a store restart,
  // and the drain of retired copies before their memory goes.
  std::unique_ptr<weightstore::Holder> holder;
  bool stopping = false;
  bool joined = false;
  Clock::time_point last_heartbeat{};
  // Exported on the role's /metrics (core::process_metrics()).
  core::Counter& m_bytes = core::process_metrics().counter("sluice_relay_bytes_received_total",
                                                           "weight bytes received and verified");
  core::Gauge& m_version =
      core::process_metrics().gauge("sluice_relay_version", "the newest version held whole");
  std::unique_ptr<DeltaOffers> offers;          // make_deltas only
  std::optional<Clock::time_point> reoffer_at;  // after a store restart, once copies are back
  core::Counter& m_delta_bytes = core::process_metrics().counter(
      "sluice_relay_delta_bytes_received_total", "delta bytes read in place of full versions");
  core::Counter& m_delta_chunks = core::process_metrics().counter(
      "sluice_relay_delta_chunks_total", "chunks rebuilt from deltas and verified");
  core::Counter& m_delta_mismatch = core::process_metrics().counter(
      "sluice_relay_delta_mismatched_chunks_total",
      "chunks a delta did not rebuild right (read in full instead)");

  Impl(core::EventLoop& l, RelayConfig c) : loop(l), config(std::move(c)) {}
  ~Impl() {
    // Reads in flight write into the copies' buffers, and replies refer to the copies: end them
    // (their callbacks are dropped) before the copies go. The holder goes first: it speaks
    // through the store client, and keeps retired copies' memory.
    offers.reset();
    holder.reset();
    store.reset();
    engine->shutdown();
    // Registered memory is freed while the UCX context still exists.
    copies.clear();
    engine.reset();
  }

  weightstore::Topology topology() const { return {config.host, config.rack, config.datacenter}; }

  weightstore::JoinRelay joining() const {
    weightstore::JoinRelay j{config.relay_id, topology(), config.make_deltas, {}};
    if (config.share_tp_size > 0)
      j.share = "tp" + std::to_string(config.share_tp_size) + "." + std::to_string(config.share_rank);
    return j;
  }

  Status join() {
    SLUICE_TRY(store->join_relay(joining()));
    joined = true;
    return {};
  }

  core::ReadOptions read_options() const {
    core::ReadOptions ro;
    ro.max_in_flight_per_source = 1;  // one chunk per read; config.in_flight reads at once
    ro.op_timeout = kRelayGetTimeout;
    ro.total_timeout = kRelayReadTimeout;
    return ro;
  }

  // Keeps up to config.in_flight chunk reads going from the predecessor, each chunk reported to
  // the store as soon as it is verified, so that the next relay can start on it at once. Runs
  // on every tick and after every reply or finished read; never blocks.
  void pump(Copy& c) {
    if (c.complete || c.abandoned || stopping) return;
    if (c.delta != Copy::Delta::kNone) want_delta(c);
    auto layout = c.manifest.layout();
    bool waiting = false;  // everything the source has is here or on its way
    if (!c.source.empty() && c.delta == Copy::Delta::kNone) {
      for (std::uint32_t i = 0; i < layout.chunk_count(); ++i) {
        if (c.reading.size() >= config.in_flight) break;
        if (c.have[i] || c.reading.count(i)) continue;
        if (c.source_whole) {
          read_share_chunk(c, i);  // from a complete holder
          continue;
        }
        if (i >= c.source_has.size() || !c.source_has[i]) continue;
        read_chunk(c, i);
      }
      waiting = c.reading.size() < config.in_flight;
    }
    // Asked again now and then even with work at hand: early in a version the store may name a
    // complete holder further up (the predecessor had nothing yet), and the chain only forms
    // once each relay moves on to its predecessor.
    auto since = Clock::now() - c.asked;
    if (!c.asking && (c.source.empty() || (waiting && since >= Millis(config.follow_poll_ms)) ||
                      since >= Millis(config.reask_ms)))
      ask_source(c);
  }

  void ask_source(Copy& c) {
    c.asking = true;
    c.asked = Clock::now();
    weightstore::ChainSourceRequest req;
    req.model = c.manifest.model;
    req.version = c.manifest.version;
    req.relay_id = config.relay_id;
    req.exclude = c.failed_sources;
    Copy* cp = &c;
    store->chain_source_async(req, weightstore::kStoreRequestTimeout, [this, cp](Result<weightstore::ChainSource> r) {
      cp->asking = false;
      if (!r.is_ok()) {
        // No usable predecessor yet (or a slow store): asked again on a later tick.
        log::debug("relay {}: no source for {}@{} yet: {}", config.relay_id, cp->manifest.model,
                   cp->manifest.version, r.status().to_string());
        return;
      }
      auto desc = core::RegionDescriptor::decode(r->descriptor);
      if (!desc.is_ok()) {
        log::warn("relay {}: bad descriptor from the store: {}", config.relay_id,
                  desc.status().to_string());
        return;
      }
      if (!r->model.empty() && (!cp->parent || r->model != cp->parent->model)) {
        log::warn("relay {}: the store named a copy of {} for {}@{}", config.relay_id, r->model,
                  cp->manifest.model, cp->manifest.version);
        return;
      }
      cp->source = r->holder_id;
      cp->source_whole = !r->model.empty();
      cp->source_distance = r->distance;
      cp->source_desc = std::move(desc).value();
      cp->source_has = std::move(r->chunks);
      pump(*cp);
    });
  }

  void read_chunk(Copy& c, std::uint32_t i) {
    auto layout = c.manifest.layout();
    core::ChunkRead r;
    r.src_offset = r.dst_offset = layout.chunk_offset(i);
    r.bytes = layout.chunk_size(i);
    r.checksum = layout.checksums[i];
    c.reading.insert(i);
    Copy* cp = &c;
    std::string from = c.source;
    engine->read({{from, c.source_desc}}, {r}, *c.buffer, read_options(),
                 [this, cp, i, from, bytes = r.bytes](Result<core::ReadStats> st) {
                   cp->reading.erase(i);
                   chunk_read(*cp, i, from, bytes, st.status());
                 });
  }

  // A host share's chunk i from a complete holder of the whole version: the share's pieces that
  // fall in it, read into place unchecked, then the assembled chunk checked against the
  // checksum that the actor declared for it.
  void read_share_chunk(Copy& c, std::uint32_t i) {
    const auto layout = c.manifest.layout();
    const std::uint64_t from_off = layout.chunk_offset(i), to_off = from_off + layout.chunk_size(i);
    std::vector<core::ChunkRead> reads;
    const auto& ps = c.share.pieces;
    auto it = std::upper_bound(ps.begin(), ps.end(), from_off,
                               [](std::uint64_t off, const core::ShardPiece& p) {
                                 return off < p.dst_offset;
                               });
    if (it != ps.begin()) --it;
    for (; it != ps.end() && it->dst_offset < to_off; ++it) {
      const std::uint64_t a = std::max(from_off, it->dst_offset);
      const std::uint64_t b = std::min(to_off, it->dst_offset + it->bytes);
      if (a >= b) continue;
      core::ChunkRead r;
      r.src_offset = it->src_offset + (a - it->dst_offset);
      r.dst_offset = a;
      r.bytes = b - a;
      reads.push_back(r);
    }
    core::ReadOptions ro = read_options();
    ro.verify = false;  // a piece has no checksum of its own: the assembled chunk has
    ro.max_in_flight_per_source = 4;
    c.reading.insert(i);
    Copy* cp = &c;
    std::string from = c.source;
    engine->read(
        {{from, c.source_desc}}, std::move(reads), *c.buffer, ro,
        [this, cp, i, from, from_off, bytes = to_off - from_off](Result<core::ReadStats> st) {
          cp->reading.erase(i);
          Status s = st.status();
          if (s.is_ok() && core::chunk_checksum(cp->buffer->data() + from_off, bytes) !=
                               cp->manifest.checksums[i]) {
            s = core::data_loss("chunk " + std::to_string(i) +
                                " assembled from its pieces does not match its declared checksum");
          }
          chunk_read(*cp, i, from, bytes, s);
        });
  }

  // After a chunk read: the chunk counts, or its source is set aside for this version.
  void chunk_read(Copy& c, std::uint32_t i, const std::string& from, std::uint64_t bytes,
                  const Status& s) {
    if (!s.is_ok()) {
      log::warn("relay {}: chunk {} of {}@{} from {} failed: {}; trying another source",
                config.relay_id, i, c.manifest.model, c.manifest.version, from, s.to_string());
      c.failed_sources.insert(from);
      if (c.source == from) c.source.clear();
    } else {
      c.have[i] = true;
      c.progressed = Clock::now();
      m_bytes.inc(bytes);
      holder->update_chunks(c.manifest.version, c.have);
      c.unreported.push_back(i);
      check_complete(c);
      report(c);
    }
    pump(c);
  }

  void check_complete(Copy& c) {
    c.complete = std::all_of(c.have.begin(), c.have.end(), [](bool b) { return b; });
    if (!c.complete) return;
    log::info("relay {}: holds {}@{} ({} bytes)", config.relay_id, c.manifest.model,
              c.manifest.version, c.manifest.total_bytes);
    if (static_cast<double>(c.manifest.version) > m_version.value())
      m_version.set(static_cast<double>(c.manifest.version));
    if (offers) {
      if (Copy* base = base_for(c)) {
        offers->make(base->manifest, base->buffer->data(), c.manifest, c.buffer->data());
      }
    }
  }

  // The newest complete copy older than `c`: the base of a delta to or from it.
  Copy* base_for(const Copy& c) {
    Copy* best = nullptr;
    for (auto& o : copies) {
      if (&o == &c || !o.complete || !o.buffer || o.manifest.version >= c.manifest.version)
        continue;
      if (!best || o.manifest.version > best->manifest.version) best = &o;
    }
    return best;
  }

  // use_deltas: once the source is known, a remote one is replaced by a delta against the newest
  // complete copy when the store offers one (or expects one, for up to delta_wait_ms).
  void want_delta(Copy& c) {
    if (c.delta != Copy::Delta::kWanted || c.source.empty()) return;
    Copy* base = base_for(c);
    if (c.source_distance < 3 || !base) {
      c.delta = Copy::Delta::kNone;
      return;
    }
    if (Clock::now() - c.delta_asked < kDeltaReask) return;
    c.delta = Copy::Delta::kAsking;
    c.delta_asked = Clock::now();
    ++base->lent;
    auto before = std::make_shared<std::vector<bool>>(c.have);
    Copy* cp = &c;
    fetch_delta(
        *engine, *store, config.model, base->manifest.version, c.manifest, topology(),
        base->buffer->data(), *c.buffer, c.have, [this, cp, base, before](Result<DeltaFetched> r) {
          --base->lent;
          cp->delta = Copy::Delta::kNone;
          const auto waited = Clock::now() - cp->delta_since;
          if (!r.is_ok() && r.status().code() == core::Code::kNotFound) {
            // The base left the store's retention: there is no delta to ask for.
            log::debug("relay {}: no delta {}->{}: {}", config.relay_id, base->manifest.version,
                       cp->manifest.version, r.status().to_string());
          } else if (!r.is_ok()) {
            log::warn("relay {}: delta {}->{}: {}; reading it in full", config.relay_id,
                      base->manifest.version, cp->manifest.version, r.status().to_string());
          } else if (r->available) {
            for (std::uint32_t i = 0; i < cp->have.size(); ++i)
              if (cp->have[i] && !(*before)[i]) cp->unreported.push_back(i);
            cp->progressed = Clock::now();
            m_delta_bytes.inc(r->delta_bytes);
            m_delta_chunks.inc(r->rebuilt);
            m_delta_mismatch.inc(r->mismatched);
            log::info(
                "relay {}: {}@{} by delta from {}: {} bytes for {}, {} chunks "
                "rebuilt, {} mismatched (read in full)",
                config.relay_id, cp->manifest.model, cp->manifest.version, base->manifest.version,
                r->delta_bytes, r->target_bytes, r->rebuilt, r->mismatched);
            holder->update_chunks(cp->manifest.version, cp->have);
            check_complete(*cp);
            report(*cp);
          } else if (r->expected && waited < Millis(config.delta_wait_ms)) {
            cp->delta = Copy::Delta::kWanted;  // asked again on a later tick
          } else {
            log::info("relay {}: no delta {}->{}{}; reading it in full", config.relay_id,
                      base->manifest.version, cp->manifest.version, r->expected ? " in time" : "");
          }
          pump(*cp);
        });
  }

  // Tells the store which chunks this relay now holds verified (batched while one is out).
  void report(Copy& c) {
    if (c.reporting || c.unreported.empty()) return;
    c.reporting = true;
    weightstore::AddChunks add{config.relay_id, c.manifest.model, c.manifest.version,
                               std::move(c.unreported)};
    std::vector<std::uint32_t> sent = add.chunks;
    c.unreported.clear();
    Copy* cp = &c;
    store->add_chunks_async(add, weightstore::kStoreRequestTimeout, [this, cp, sent](Result<weightstore::Committed> r) {
      cp->reporting = false;
      if (!r.is_ok()) {
        log::warn("relay {}: reporting chunks of {}@{}: {}", config.relay_id, cp->manifest.model,
                  cp->manifest.version, r.status().to_string());
        cp->unreported.insert(cp->unreported.end(), sent.begin(), sent.end());
      }
      report(*cp);
    });
  }

  bool busy(const Copy& c) const {
    return !c.reading.empty() || c.asking || c.reporting || c.lent > 0 ||
           c.delta == Copy::Delta::kAsking;
  }

  bool receiving() const {
    for (const auto& c : copies)
      if (!c.complete || !c.unreported.empty() || c.reporting) return true;
    return false;
  }

  Status start_version(std::uint64_t version) {
    // The manifest comes with a read plan; the lease is not needed and is released at once.
    SLUICE_ASSIGN_OR_RETURN(auto plan, store->plan(config.model, version, topology()));
    store->release(plan.lease_id).ignore();
    Copy c;
    c.manifest = plan.manifest;
    if (config.share_tp_size > 0) SLUICE_TRY(take_share(c));
    if (c.manifest.total_bytes > config.max_version_bytes) {
      return core::invalid_argument(std::to_string(c.manifest.total_bytes) +
                                    " bytes exceed max_version_bytes " +
                                    std::to_string(config.max_version_bytes));
    }
    SLUICE_ASSIGN_OR_RETURN(c.buffer, engine->allocate(c.manifest.total_bytes, false));
    c.have.assign(c.manifest.chunk_count(), false);
    c.delta_since = c.progressed = Clock::now();
    if (config.use_deltas && !copies.empty() && !c.parent) c.delta = Copy::Delta::kWanted;
    // A partial holder from the start: the next relay can follow. Sent before any chain_source
    // question about the version (one socket, in order); one that fails is sent again by the
    // holder's next heartbeat.
    holder->serve(c.manifest, c.buffer->descriptor().encode(), {}, c.have);
    copies.push_back(std::move(c));
    return {};
  }

  // Turns a copy of the version into one of this relay's host share: the one layout of
  // share_tp_size that the actor declared, rank share_rank.
  Status take_share(Copy& c) {
    const core::Manifest& m = c.manifest;
    const core::ShardChecksums* declared = nullptr;
    for (const auto& sc : m.shards) {
      if (sc.tp_size != config.share_tp_size) continue;
      if (declared) {
        return core::failed_precondition(
            "the version declares more than one layout of tp_size " +
            std::to_string(config.share_tp_size) + ": a host share needs exactly one");
      }
      declared = &sc;
    }
    if (!declared) {
      return core::failed_precondition(
          "the version declares no layout of tp_size " + std::to_string(config.share_tp_size) +
          " (the actor's shard layouts): a host share is verified against declared checksums");
    }
    core::ShardLayout l;
    l.tp_size = config.share_tp_size;
    l.tp_rank = config.share_rank;
    l.splits = core::splits_by_name(m, declared->splits);
    SLUICE_ASSIGN_OR_RETURN(c.share, core::plan_shard(m, l));
    SLUICE_ASSIGN_OR_RETURN(
        core::Manifest share,
        core::share_manifest(m, core::share_model(m.model, l.tp_size, l.tp_rank, declared->splits)));
    c.parent = m;
    c.manifest = std::move(share);
    return {};
  }

  void retire_old() {
    // Beyond keep_versions (copies given up do not count): unpublished, and the holder frees the
    // memory once the store says its readers drained.
    std::size_t kept = 0;
    for (const auto& c : copies)
      kept += !c.abandoned;
    while (kept > config.keep_versions) {
      auto old =
          std::find_if(copies.begin(), copies.end(), [](const Copy& c) { return !c.abandoned; });
      if (!old->complete || busy(*old) || !old->unreported.empty()) break;
      if (offers) offers->drop_with(old->manifest.version);
      holder->retire(old->manifest.version, std::move(old->buffer));
      copies.erase(old);
      --kept;
    }
    // Copies given up, once nothing is in flight for them.
    for (auto it = copies.begin(); it != copies.end();) {
      if (it->abandoned && it->complete) it->abandoned = false;  // a late read finished it
      if (!it->abandoned || busy(*it) || it->reporting) {
        ++it;
        continue;
      }
      holder->retire(it->manifest.version, std::move(it->buffer));
      it = copies.erase(it);
    }
  }

  // Whether a version newer than every copy may start now: not while one is being received and
  // progressing (one version at a time bounds the memory); one that made no progress for
  // abandon_after_ms is given up.
  bool may_start_newer() {
    bool may = true;
    for (auto& c : copies) {
      if (c.complete || c.abandoned) continue;
      auto idle = Clock::now() - c.progressed;
      if (idle < Millis(config.abandon_after_ms)) {
        may = false;
        continue;
      }
      log::warn("relay {}: gives up on {}@{} ({} of {} chunks, none for {} ms) for a newer version",
                config.relay_id, c.manifest.model, c.manifest.version,
                std::count(c.have.begin(), c.have.end(), true), c.have.size(),
                std::chrono::duration_cast<Millis>(idle).count());
      c.abandoned = true;
    }
    return may;
  }

  // A relay that leaves withdraws its copies first: the store stops naming it to readers, and
  // those still reading from it finish (the store says when they have drained) before its
  // memory goes. UCX 1.13 crashes a reader that unpacks the key of a process that exited.
  // Bounded: a launcher waits a few seconds only after it asks a relay to stop.
  void withdraw(Millis bound) {
    if (offers) offers->close(bound);
    for (auto& c : copies)
      holder->retire(c.manifest.version, std::move(c.buffer));
    copies.clear();
    Status s = holder->close(bound);
    if (!s.is_ok()) log::warn("relay {}: leaving: {}", config.relay_id, s.to_string());
  }

  void tick() {
    if (!joined) {
      Status s = join();
      if (!s.is_ok()) {
        log::warn("relay {}: cannot join the store: {}", config.relay_id, s.to_string());
        return;
      }
      log::info("relay {}: joined {}", config.relay_id, config.store);
    }
    if (reoffer_at && Clock::now() >= *reoffer_at && offers) {
      reoffer_at.reset();
      offers->register_again();
    }
    if (Clock::now() - last_heartbeat >= kHeartbeat) {
      last_heartbeat = Clock::now();
      holder->heartbeat();  // a store that restarted: join again, then register again
    }
    auto latest = store->latest(config.model);
    if (latest.is_ok() && (copies.empty() || copies.back().manifest.version < *latest) &&
        may_start_newer()) {
      Status s = start_version(*latest);
      if (!s.is_ok())
        log::warn("relay {}: version {}: {}", config.relay_id, *latest, s.to_string());
    }
    for (auto& c : copies) {
      pump(c);
      report(c);
    }
    retire_old();
  }
};

Relay::Relay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Relay::~Relay() = default;

Result<std::unique_ptr<Relay>> Relay::create(core::EventLoop& loop, RelayConfig config,
                                             std::vector<std::string> environment) {
  SLUICE_TRY(config.validate());
  auto impl = std::make_unique<Impl>(loop, std::move(config));
  core::TransferOptions to;
  to.environment = std::move(environment);
  to.stream_reach = impl->config.store;  // the chunk server binds where the job's hosts reach it
  SLUICE_ASSIGN_OR_RETURN(
      core::Security security,
      core::load_security(impl->config.security, "relay " + impl->config.relay_id));
  SLUICE_TRY(core::set_stream_security(to, impl->config.stream_encryption, impl->config.datacenter,
                                       security, "relay " + impl->config.relay_id));
  SLUICE_ASSIGN_OR_RETURN(impl->engine, core::TransferEngine::create(loop, to));
  // The store takes a relay's id from its key (docs/architecture.md, "Threat model"): a relay
  // id other than the key's identity would be refused at every join.
  if (security.curve() && impl->config.relay_id != security.identity) {
    return core::invalid_argument("relay_id '" + impl->config.relay_id +
                                  "' is not this relay's identity '" + security.identity +
                                  "' (its key file): set relay.relay_id=" + security.identity);
  }
  SLUICE_ASSIGN_OR_RETURN(impl->store,
                          weightstore::StoreClient::create(loop, impl->config.store, security));
  weightstore::HolderOptions ho;
  ho.holder_id = impl->config.relay_id;
  ho.endpoint = "relay:" + impl->config.relay_id;
  ho.topology = impl->topology();
  ho.lease_ttl = Millis(impl->config.store_lease_ttl_ms);
  ho.log_name = "relay " + impl->config.relay_id;
  SLUICE_ASSIGN_OR_RETURN(impl->holder,
                          weightstore::Holder::create(loop, *impl->store, std::move(ho)));
  if (impl->config.make_deltas) {
    DeltaOptions d;
    d.holder_id = impl->config.relay_id;
    d.endpoint = "relay:" + impl->config.relay_id;
    d.topology = impl->topology();
    d.lease_ttl = Millis(impl->config.store_lease_ttl_ms);
    d.log_name = "relay " + impl->config.relay_id;
    impl->offers = std::make_unique<DeltaOffers>(loop, *impl->engine, *impl->store, std::move(d));
  }
  Relay::Impl* raw = impl.get();
  impl->holder->on_forgotten([raw] {
    // Deltas are offered again once the copies they refer to are back.
    if (raw->offers) raw->reoffer_at = Clock::now() + kHeartbeat;
    // Before the copies are registered again (the same socket keeps the order).
    raw->store->join_relay_async(raw->joining(), weightstore::kStoreRequestTimeout, [raw](Status st) {
                                   if (!st.is_ok())
                                     log::warn("relay {}: joining again: {}", raw->config.relay_id,
                                               st.to_string());
                                 });
  });
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

Status Relay::run() {
  while (!impl_->stopping) {
    impl_->tick();
    // While a version is arriving, chunk reads and store replies drive the work (pump); the
    // ticks then only need to be frequent enough to follow the predecessor.
    Millis wait = impl_->receiving() ? std::min(Millis(impl_->config.follow_poll_ms),
                                                Millis(impl_->config.poll_ms))
                                     : Millis(impl_->config.poll_ms);
    impl_->loop.run_until([this] { return impl_->stopping; }, wait);
  }
  if (impl_->joined) impl_->withdraw(kRelayWithdrawWait);
  return {};
}

void Relay::stop() {
  impl_->stopping = true;
}

}  // namespace sluice::relay
