#include "relay/relay.hpp"

#include <algorithm>
#include <map>
#include <variant>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "core/metrics.hpp"
#include "format/shard.hpp"
#include "relay/relay_delta.hpp"
#include "relay/relay_state.hpp"
#include "weightstore/client.hpp"
#include "weightstore/holder.hpp"
#include "weightstore/protocol.hpp"
#include "wire/transfer.hpp"

namespace sluice::relay {

namespace log = core::log;
using core::Clock;
using core::Millis;
using core::Result;
using core::Status;

// The service: executes what the state decides (relay/relay_state.hpp) and feeds the outcomes
// back. It owns what the state does not: each copy's registered memory, the store requests, the
// reads, the holder and the metrics.
struct Relay::Impl {
  core::EventLoop& loop;
  RelayConfig config;
  RelayState state;
  std::unique_ptr<core::TransferEngine> engine;
  std::unique_ptr<weightstore::StoreClient> store;
  // Each copy's memory, by version (the state's copies).
  std::map<std::uint64_t, std::unique_ptr<core::RegisteredBuffer>> buffers;
  // The chunks of a copy while fetch_delta rebuilds it (written by fetch_delta).
  std::map<std::uint64_t, std::vector<bool>> delta_have;
  // Registration of each copy (partial from the start), re-registration after a store restart,
  // and the drain of retired copies before their memory goes.
  std::unique_ptr<weightstore::Holder> holder;
  bool stopping = false;
  bool latest_asking = false;      // a question for the newest version is out
  std::uint64_t latest_known = 0;  // the newest version the store named last
  // Exported on the role's /metrics (core::process_metrics()).
  core::Counter& m_bytes = core::process_metrics().counter("sluice_relay_bytes_received_total",
                                                           "weight bytes received and verified");
  core::Gauge& m_version =
      core::process_metrics().gauge("sluice_relay_version", "the newest version held whole");
  std::unique_ptr<DeltaOffers> offers;  // make_deltas or deltas_for_other_datacenters
  core::Counter& m_delta_bytes = core::process_metrics().counter(
      "sluice_relay_delta_bytes_received_total", "delta bytes read in place of full versions");
  core::Counter& m_delta_chunks = core::process_metrics().counter(
      "sluice_relay_delta_chunks_total", "chunks rebuilt from deltas and verified");
  core::Counter& m_delta_mismatch = core::process_metrics().counter(
      "sluice_relay_delta_mismatched_chunks_total",
      "chunks a delta did not rebuild right (read in full instead)");

  Impl(core::EventLoop& l, RelayConfig c) : loop(l), config(c), state(std::move(c)) {}
  ~Impl() {
    // Reads in flight write into the copies' buffers: end them (their callbacks are dropped)
    // before the buffers go. The holder goes first: it speaks through the store client, and
    // keeps retired copies' memory.
    offers.reset();
    holder.reset();
    store.reset();
    engine->shutdown();
    // Registered memory is freed while the UCX context still exists.
    buffers.clear();
    engine.reset();
  }

  weightstore::Topology topology() const { return config.topology(); }

  weightstore::JoinRelay joining() const {
    weightstore::JoinRelay j{config.relay_id, topology(), config.make_deltas, {}};
    if (config.share_tp_size > 0)
      j.share =
          "tp" + std::to_string(config.share_tp_size) + "." + std::to_string(config.share_rank);
    return j;
  }

  core::ReadOptions read_options() const {
    core::ReadOptions ro;
    ro.max_in_flight_per_source = 1;  // one chunk per read; config.in_flight reads at once
    ro.op_timeout = kRelayGetTimeout;
    ro.total_timeout = kRelayReadTimeout;
    return ro;
  }

  // The copy's name in the log: the model it holds (a host share's own) and the version.
  std::string name(std::uint64_t version) const {
    const CopyState* c = state.find(version);
    return (c ? c->manifest.model : config.model) + "@" + std::to_string(version);
  }

  void execute(Actions actions) {
    for (auto& a : actions)
      std::visit([this](auto& x) { run(x); }, a);
  }

  void run(const action::Join& a) {
    if (a.again) {
      // Before the copies are registered again (the same socket keeps the order).
      store->join_relay_async(joining(), weightstore::kStoreRequestTimeout, [this](Status st) {
        if (!st.is_ok()) log::warn("relay {}: joining again: {}", config.relay_id, st.to_string());
      });
      return;
    }
    Status s = store->join_relay(joining());
    if (!s.is_ok()) {
      log::warn("relay {}: cannot join the store: {}", config.relay_id, s.to_string());
      return;
    }
    state.joined();
    log::info("relay {}: joined {}", config.relay_id, config.store);
  }

  void run(const action::Heartbeat&) { holder->heartbeat(); }

  void run(const action::ReofferDeltas&) {
    if (offers) offers->register_again();
  }

  void run(const action::StartVersion& a) {
    Status s = start_version(a.version);
    if (!s.is_ok())
      log::warn("relay {}: version {}: {}", config.relay_id, a.version, s.to_string());
  }

  Status start_version(std::uint64_t version) {
    // The manifest comes with a read plan; the lease is not needed and is released at once.
    SLUICE_ASSIGN_OR_RETURN(auto plan, store->plan(config.model, version, topology()));
    store->release(plan.lease_id).ignore();
    SLUICE_ASSIGN_OR_RETURN(NewCopy c, state.prepare(plan.manifest));
    SLUICE_ASSIGN_OR_RETURN(auto buffer, engine->allocate(c.manifest.total_bytes, false));
    // A partial holder from the start: the next relay can follow. Sent before any chain_source
    // question about the version (one socket, in order); one that fails is sent again by the
    // holder's next heartbeat.
    holder->serve(c.manifest, buffer->descriptor().encode(), {},
                  std::vector<bool>(c.manifest.chunk_count(), false));
    buffers[c.manifest.version] = std::move(buffer);
    state.add(std::move(c), Clock::now());
    return {};
  }

  void run(const action::GiveUp& a) {
    log::warn("relay {}: gives up on {} ({} of {} chunks, none for {} ms) for a newer version",
              config.relay_id, name(a.version), a.have, a.chunks, a.idle.count());
  }

  void run(const action::AskSource& a) {
    const std::uint64_t v = a.request.version;
    store->chain_source_async(
        a.request, weightstore::kStoreRequestTimeout,
        [this, v](Result<weightstore::ChainSource> r) {
          if (!r.is_ok()) {
            // No usable predecessor yet (or a slow store): asked again on a later tick.
            log::debug("relay {}: no source for {} yet: {}", config.relay_id, name(v),
                       r.status().to_string());
            return state.source_unknown(v);
          }
          auto desc = core::RegionDescriptor::decode(r->descriptor);
          if (!desc.is_ok()) {
            log::warn("relay {}: bad descriptor from the store: {}", config.relay_id,
                      desc.status().to_string());
            return state.source_unknown(v);
          }
          const CopyState* c = state.find(v);
          if (c && !r->model.empty() && (!c->parent || r->model != c->parent->model)) {
            log::warn("relay {}: the store named a copy of {} for {}", config.relay_id, r->model,
                      name(v));
            return state.source_unknown(v);
          }
          NamedSource s{r->holder_id,         r->model,
                        r->distance,          std::move(desc).value(),
                        std::move(r->chunks), r->feeds_other_datacenter};
          execute(state.source_named(v, std::move(s), Clock::now()));
        });
  }

  void run(const action::ReadChunk& a) {
    auto it = buffers.find(a.version);
    if (it == buffers.end()) return;
    core::ReadOptions ro = read_options();
    if (a.pieces) {
      ro.verify = false;  // a piece has no checksum of its own: the assembled chunk has
      ro.max_in_flight_per_source = 4;
    }
    engine->read(
        {{a.source, a.desc, a.source}}, a.reads, *it->second, ro,
        [this, v = a.version, i = a.chunk, from = a.source, pieces = a.pieces, off = a.offset,
         bytes = a.bytes, sum = a.checksum, digest = a.digest](Result<core::ReadStats> st) {
          Status s = st.status();
          auto b = buffers.find(v);
          if (s.is_ok() && pieces && b != buffers.end()) {
            const std::uint8_t* at = b->second->data() + off;
            const bool match = digest ? core::chunk_digest(at, bytes) == *digest
                                      : core::chunk_checksum(at, bytes) == sum;
            if (!match) {
              s = core::data_loss("chunk " + std::to_string(i) +
                                  " assembled from its pieces does not match its "
                                  "signed digest or declared checksum");
            }
          }
          chunk_done(v, i, from, bytes, s);
        });
  }

  // After a chunk read: the chunk counts, or its source is set aside for this version.
  void chunk_done(std::uint64_t v, std::uint32_t i, const std::string& from, std::uint64_t bytes,
                  const Status& s) {
    if (!s.is_ok()) {
      log::warn("relay {}: chunk {} of {} from {} failed: {}; trying another source",
                config.relay_id, i, name(v), from, s.to_string());
    }
    Actions out = state.chunk_done(v, i, from, s.is_ok(), Clock::now());
    const CopyState* c = state.find(v);
    if (s.is_ok() && c) {
      m_bytes.inc(bytes);
      holder->update_chunks(v, c->have);
    }
    execute(std::move(out));
  }

  void run(const action::ReportChunks& a) {
    const std::uint64_t v = a.add.version;
    std::vector<std::uint32_t> sent = a.add.chunks;
    store->add_chunks_async(
        a.add, weightstore::kStoreRequestTimeout,
        [this, v, sent](Result<weightstore::Committed> r) mutable {
          if (!r.is_ok()) {
            log::warn("relay {}: reporting chunks of {}: {}", config.relay_id, name(v),
                      r.status().to_string());
          }
          execute(state.report_done(v, std::move(sent), r.is_ok(), Clock::now()));
        });
  }

  void run(const action::AskDelta& a) {
    const CopyState* c = state.find(a.version);
    auto target = buffers.find(a.version), base = buffers.find(a.base);
    if (!c || target == buffers.end() || base == buffers.end()) return;
    std::vector<bool>& have = delta_have[a.version] = c->have;
    fetch_delta(*engine, *store, config.model, a.base, c->manifest, topology(),
                base->second->data(), *target->second, have,
                [this, v = a.version, b = a.base](Result<DeltaFetched> r) { delta_done(v, b, r); });
  }

  void delta_done(std::uint64_t v, std::uint64_t b, const Result<DeltaFetched>& r) {
    std::vector<bool> have = std::move(delta_have[v]);
    delta_have.erase(v);
    DeltaOutcome outcome = DeltaOutcome::kNone;
    if (!r.is_ok() && r.status().code() == core::Code::kNotFound) {
      // The base left the store's retention: there is no delta to ask for.
      log::debug("relay {}: no delta {}->{}: {}", config.relay_id, b, v, r.status().to_string());
    } else if (!r.is_ok()) {
      log::warn("relay {}: delta {}->{}: {}; reading it in full", config.relay_id, b, v,
                r.status().to_string());
      outcome = DeltaOutcome::kFailed;
    } else if (r->available) {
      outcome = DeltaOutcome::kRead;
      m_delta_bytes.inc(r->delta_bytes);
      m_delta_chunks.inc(r->rebuilt);
      m_delta_mismatch.inc(r->mismatched);
      log::info(
          "relay {}: {} by delta from {}: {} bytes for {}, {} chunks rebuilt, {} mismatched "
          "(read in full)",
          config.relay_id, name(v), b, r->delta_bytes, r->target_bytes, r->rebuilt, r->mismatched);
    } else if (r->expected) {
      outcome = DeltaOutcome::kExpected;
    }
    Actions out = state.delta_done(v, b, outcome, std::move(have), Clock::now());
    const CopyState* c = state.find(v);
    if (c && outcome == DeltaOutcome::kRead) holder->update_chunks(v, c->have);
    if (c && r.is_ok() && !r->available && c->delta == CopyState::Delta::kNone) {
      log::info("relay {}: no delta {}->{}{}; reading it in full", config.relay_id, b, v,
                r->expected ? " in time" : "");
    }
    execute(std::move(out));
  }

  void run(const action::Completed& a) {
    const CopyState* c = state.find(a.version);
    if (!c) return;
    log::info("relay {}: holds {} ({} bytes)", config.relay_id, name(a.version),
              c->manifest.total_bytes);
    // Every chunk was verified as it came (by digest, or from a verified copy of this user on
    // this host): from now on the copy says so, and same-user readers here check it by checksum.
    if (auto b = buffers.find(a.version); b != buffers.end())
      holder->serve(c->manifest, b->second->verified_descriptor().encode(), {}, c->have);
    if (static_cast<double>(a.version) > m_version.value())
      m_version.set(static_cast<double>(a.version));
    if (offers && a.delta_base) {
      const CopyState* base = state.find(*a.delta_base);
      auto bb = buffers.find(*a.delta_base), tb = buffers.find(a.version);
      if (base && bb != buffers.end() && tb != buffers.end())
        offers->make(base->manifest, bb->second->data(), c->manifest, tb->second->data());
    }
  }

  // Unpublished, and the holder frees the memory once the store says its readers drained.
  void run(const action::Retire& a) {
    if (a.drop_deltas && offers) offers->drop_with(a.version);
    auto it = buffers.find(a.version);
    if (it == buffers.end()) return;
    holder->retire(a.version, std::move(it->second));
    buffers.erase(it);
  }

  // A relay that leaves withdraws its copies first: the store stops naming it to readers, and
  // those still reading from it finish (the store says when they have drained) before its
  // memory goes. UCX 1.13 crashes a reader that unpacks the key of a process that exited.
  // Bounded: a launcher waits a few seconds only after it asks a relay to stop.
  void withdraw(Millis bound) {
    if (offers) offers->close(bound);
    for (std::uint64_t v : state.withdraw()) {
      auto it = buffers.find(v);
      if (it != buffers.end()) holder->retire(v, std::move(it->second));
    }
    buffers.clear();
    Status s = holder->close(bound);
    if (!s.is_ok()) log::warn("relay {}: leaving: {}", config.relay_id, s.to_string());
  }

  void tick() {
    if (!state.is_joined()) {
      execute(state.housekeeping(Clock::now()));  // the join
      if (!state.is_joined()) return;
    }
    execute(state.housekeeping(Clock::now()));
    ask_latest();
    // Every tick, as when it asked every tick: a newer version waits while one is received.
    if (latest_known > 0) execute(state.latest_seen(latest_known, Clock::now()));
    execute(state.tick(Clock::now()));
  }

  // One question for the newest version at a time: a long poll (latest_wait_ms) parked at the
  // store until a version above the newest seen commits, or a plain one a tick.
  void ask_latest() {
    if (latest_asking) return;
    latest_asking = true;
    weightstore::LatestRequest ask{config.model, latest_known, config.latest_wait_ms};
    store->latest_async(ask, weightstore::kStoreRequestTimeout,
                        [this](Result<weightstore::Latest> r) {
                          latest_asking = false;
                          if (!r.is_ok()) return;
                          // Seen by the next tick: a new version's start asks the store for
                          // its plan, a blocking call, which cannot run inside this reply's
                          // delivery (the client reads no replies meanwhile).
                          latest_known = r->version;  // lower after a store restart
                        });
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
  if (impl->config.make_deltas ||
      (impl->config.deltas_for_other_datacenters && impl->config.share_tp_size == 0)) {
    DeltaOptions d;
    d.holder_id = impl->config.relay_id;
    d.endpoint = "relay:" + impl->config.relay_id;
    d.topology = impl->topology();
    d.lease_ttl = Millis(impl->config.store_lease_ttl_ms);
    d.log_name = "relay " + impl->config.relay_id;
    impl->offers = std::make_unique<DeltaOffers>(loop, *impl->engine, *impl->store, std::move(d));
  }
  Relay::Impl* raw = impl.get();
  impl->holder->on_forgotten([raw] { raw->execute(raw->state.store_forgot(Clock::now())); });
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

Status Relay::run() {
  while (!impl_->stopping) {
    impl_->tick();
    // While a version is arriving, chunk reads and store replies drive the work (pump); the
    // ticks then only need to be frequent enough to follow the predecessor.
    Millis wait = impl_->state.receiving() ? std::min(Millis(impl_->config.follow_poll_ms),
                                                      Millis(impl_->config.poll_ms))
                                           : Millis(impl_->config.poll_ms);
    impl_->loop.run_until([this] { return impl_->stopping; }, wait);
  }
  if (impl_->state.is_joined()) impl_->withdraw(kRelayWithdrawWait);
  return {};
}

void Relay::stop() {
  impl_->stopping = true;
  impl_->state.stop();
}

}  // namespace sluice::relay
