#include "relay/relay.hpp"

#include <deque>
#include <set>

#include "core/log.hpp"
#include "core/transfer.hpp"
#include "weightstore/client.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::relay {

namespace log = core::log;
using core::Message;
using core::Millis;
using core::Result;
using core::Status;

Status RelayConfig::validate() const {
  if (keep_versions == 0) return core::invalid_argument("keep_versions must be at least 1");
  if (poll_ms == 0) return core::invalid_argument("poll_ms must be positive");
  if (in_flight == 0) return core::invalid_argument("in_flight must be positive");
  if (model.empty()) return core::invalid_argument("model must not be empty");
  return {};
}

namespace {

// Chunks read per pass before they are reported to the store: small enough that the next relay
// in the chain starts on them while this one is still receiving, large enough to keep GETs in
// flight.
constexpr std::size_t kChunksPerPass = 4;

struct Copy {
  core::Manifest manifest;
  std::unique_ptr<core::RegisteredBuffer> buffer;
  std::vector<bool> have;
  bool complete = false;
  std::set<std::string> failed_sources;  // predecessors that failed for this version
};

}  // namespace

struct Relay::Impl {
  core::EventLoop& loop;
  RelayConfig config;
  std::unique_ptr<core::TransferEngine> engine;
  std::unique_ptr<weightstore::StoreClient> store;
  std::deque<Copy> copies;  // oldest first
  bool stopping = false;
  bool joined = false;
  bool progressed_ = false;  // the last pass read something

  Impl(core::EventLoop& l, RelayConfig c) : loop(l), config(std::move(c)) {}

  weightstore::Topology topology() const { return {config.host, config.rack, config.datacenter}; }

  Status join() {
    Message req("store.join_relay");
    req.body["relay_id"] = config.relay_id;
    req.body["topology"] = weightstore::topology_to_json(topology());
    SLUICE_TRY(store->raw().call(req, Millis(5000)).status());
    // After a store restart: bring back what this relay holds.
    for (const auto& c : copies)
      SLUICE_TRY(register_copy(c));
    joined = true;
    return {};
  }

  weightstore::HolderRegistration registration(const Copy& c) const {
    weightstore::HolderRegistration r;
    r.holder_id = config.relay_id;
    r.endpoint = "relay:" + config.relay_id;
    r.descriptor = c.buffer->descriptor().encode();
    r.topology = topology();
    r.manifest = c.manifest;
    r.chunks = c.have;
    return r;
  }

  Status register_copy(const Copy& c) { return store->register_holder(registration(c)).status(); }

  // One pass over a version being received: read what the predecessor has that we lack.
  Status receive_pass(Copy& c) {
    Message req("store.chain_source");
    req.body = {{"model", c.manifest.model},
                {"version", c.manifest.version},
                {"relay_id", config.relay_id},
                {"exclude", c.failed_sources}};
    auto src = store->raw().call(req, Millis(5000));
    if (!src.is_ok()) return src.status();
    std::string holder = src->body.value("holder_id", "");
    auto desc = core::RegionDescriptor::decode(src->blobs.empty() ? "" : src->blobs[0]);
    if (!desc.is_ok()) return desc.status();
    auto layout = c.manifest.layout();
    std::vector<core::ChunkRead> chunks;
    const auto& has = src->body.value("chunks", nlohmann::json::array());
    for (std::uint64_t i = 0; i < layout.chunk_count(); ++i) {
      if (chunks.size() >= kChunksPerPass) break;
      if (c.have[i] || i >= has.size() || !has[i].get<bool>()) continue;
      core::ChunkRead r;
      r.src_offset = r.dst_offset = layout.chunk_offset(i);
      r.bytes = layout.chunk_size(i);
      r.checksum = layout.checksums[i];
      chunks.push_back(r);
    }
    progressed_ = false;
    if (chunks.empty()) return {};  // the predecessor has nothing new yet
    core::ReadOptions ro;
    ro.max_in_flight_per_source = config.in_flight;
    ro.op_timeout = Millis(5000);
    ro.total_timeout = Millis(120000);
    auto stats = engine->read_sync({{holder, *desc}}, chunks, *c.buffer, ro);
    if (!stats.is_ok()) {
      log::warn("relay {}: pulling {}@{} from {} failed: {}; trying another source",
                config.relay_id, c.manifest.model, c.manifest.version, holder,
                stats.status().to_string());
      c.failed_sources.insert(holder);
      return {};
    }
    std::vector<std::uint32_t> got;
    for (const auto& r : chunks) {
      auto i = static_cast<std::uint32_t>(r.src_offset / layout.chunk_bytes);
      c.have[i] = true;
      got.push_back(i);
    }
    Message add("store.add_chunks");
    add.body = {{"holder_id", config.relay_id},
                {"model", c.manifest.model},
                {"version", c.manifest.version},
                {"chunks", got}};
    SLUICE_TRY(store->raw().call(add, Millis(5000)).status());
    progressed_ = true;
    c.complete = std::all_of(c.have.begin(), c.have.end(), [](bool b) { return b; });
    if (c.complete) {
      log::info("relay {}: holds {}@{} ({} bytes)", config.relay_id, c.manifest.model,
                c.manifest.version, c.manifest.total_bytes);
    }
    return {};
  }

  Status start_version(std::uint64_t version) {
    // The manifest comes with a read plan; the lease is not needed and is released at once.
    SLUICE_ASSIGN_OR_RETURN(auto plan, store->plan(config.model, version, topology()));
    store->release(plan.lease_id).ignore();
    Copy c;
    c.manifest = plan.manifest;
    SLUICE_ASSIGN_OR_RETURN(c.buffer, engine->allocate(c.manifest.total_bytes, false));
    c.have.assign(c.manifest.chunk_count(), false);
    SLUICE_TRY(register_copy(c));  // a partial holder from the start: the next relay can follow
    copies.push_back(std::move(c));
    return {};
  }

  void retire_old() {
    // Unpublish beyond keep_versions and free once drained (checked on later ticks).
    while (copies.size() > config.keep_versions && copies.front().complete) {
      Copy& old = copies.front();
      Message un("store.unpublish");
      un.body = {{"holder_id", config.relay_id},
                 {"model", old.manifest.model},
                 {"version", old.manifest.version}};
      auto r = store->raw().call(un, Millis(5000));
      if (r.is_ok() && !r->body.value("drained", false)) return;  // leases still out
      copies.pop_front();
    }
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
    Status hb = store->heartbeat(config.relay_id);
    if (hb.code() == core::Code::kNotFound) {
      joined = false;  // the store restarted: join again next tick
      return;
    }
    auto latest = store->latest(config.model);
    if (latest.is_ok() && (copies.empty() || copies.back().manifest.version < *latest)) {
      Status s = start_version(*latest);
      if (!s.is_ok())
        log::warn("relay {}: version {}: {}", config.relay_id, *latest, s.to_string());
    }
    for (auto& c : copies) {
      if (c.complete) continue;
      Status s = receive_pass(c);
      // Keep going while there is something to read; the poll interval only paces waiting.
      for (int i = 0; s.is_ok() && !c.complete && i < 1024 && progressed_; ++i)
        s = receive_pass(c);
      if (!s.is_ok()) {
        log::warn("relay {}: {}@{}: {}", config.relay_id, c.manifest.model, c.manifest.version,
                  s.to_string());
      }
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
  SLUICE_ASSIGN_OR_RETURN(impl->engine, core::TransferEngine::create(loop, to));
  SLUICE_ASSIGN_OR_RETURN(impl->store, weightstore::StoreClient::create(loop, impl->config.store));
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

Status Relay::run() {
  while (!impl_->stopping) {
    impl_->tick();
    impl_->loop.run_until([this] { return impl_->stopping; }, Millis(impl_->config.poll_ms));
  }
  return {};
}

void Relay::stop() {
  impl_->stopping = true;
}

}  // namespace sluice::relay
