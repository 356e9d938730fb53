// The weight store service: a WeightStore behind a messaging Server on the process loop
// (`sluice weightstore --config FILE`). See protocol.hpp for the messages.
//
// Before the store is touched (docs/architecture.md, "Threat model"): in curve mode a manifest
// that would make a version (put_manifest; a registration of a version the store does not know,
// as after a restart) must carry an actor's signature; any id in a body that names the caller
// (a relay id, a pin owner) must be the authenticated identity; and a lease is renewed or
// released only by the identity that took it. In plain mode the transport names nobody
// (Peer::identity is empty): ids are taken from the body and nothing is signed or checked.
//
// Thread safety: loop thread only; not copyable or movable (handlers hold `this`).
#pragma once

#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "weightstore/store.hpp"
#include "weightstore/waiters.hpp"
#include "wire/messaging.hpp"
#include "wire/security.hpp"

namespace sluice::weightstore {

struct StoreDecodeLimits;  // weightstore/protocol.hpp

struct ServiceConfig {
  std::string listen = "tcp://127.0.0.1:5550";  // control endpoint; a local job binds loopback
  std::uint32_t keep_versions = 2;              // newest committed versions retained (>= 2)
  std::uint64_t holder_ttl_ms = 3000;           // holder expiry without heartbeats
  std::uint64_t lease_ttl_ms = 10000;           // lease expiry without renewal
  std::uint64_t expire_interval_ms = 500;       // how often expiry runs
  std::uint32_t sources_per_chunk = 4;          // ranked sources per chunk in a read plan
  std::string broadcast = "chain";              // chain, tree or direct (see StoreConfig)
  std::uint32_t fanout = 2;                     // children per relay in a tree
  // A lease's longest life, renewed or not (>= lease_ttl_ms): bounds how long one reader can
  // keep a retired copy (a whole version in a relay) from being freed. Default one hour.
  std::uint64_t lease_max_life_ms = 3600000;
  // Refused before anything is kept: a version larger than this, or with more tensors or
  // chunks (a manifest that claims 2^64 bytes would otherwise reach every relay and reader).
  std::uint64_t max_version_bytes = 256ull << 30;
  std::uint64_t max_tensors = 1 << 16;
  std::uint64_t max_chunks = 1 << 20;
  // A version the store does not know may be at most this far above the newest it knows (and
  // every version is below 2^53): a version number cannot jump so far ahead that the actor's
  // next publish is blocked, nor wrap.
  std::uint64_t max_version_ahead = 1u << 20;
  // Who may talk to the store (wire/security.hpp): curve by default, with this role's key file
  // and the job's members file; plain only when set, and loud.
  core::SecurityConfig security;

  template <typename V>
  void describe(V& v) {
    v("listen", listen, "control endpoint (default tcp://127.0.0.1:5550)");
    v("security", security, "control-plane authentication: mode, key_file, members_file");
    v("keep_versions", keep_versions, "newest committed versions kept per model, at least 2");
    v("holder_ttl_ms", holder_ttl_ms, "a holder without a heartbeat this long expires");
    v("lease_ttl_ms", lease_ttl_ms, "a lease not renewed this long expires");
    v("lease_max_life_ms", lease_max_life_ms,
      "a lease expires this long after it was granted, however often renewed (>= lease_ttl_ms)");
    v("expire_interval_ms", expire_interval_ms, "how often expiry runs");
    v("sources_per_chunk", sources_per_chunk, "ranked sources per chunk in a read plan");
    v("broadcast", broadcast, "how relays receive a version: chain, tree or direct");
    v("fanout", fanout, "children per relay when broadcast is tree");
    v("max_version_bytes", max_version_bytes, "largest version accepted, in bytes");
    v("max_tensors", max_tensors, "most tensors in a version");
    v("max_chunks", max_chunks, "most chunks in a version");
    v("max_version_ahead", max_version_ahead,
      "a new version may be at most this far above the newest known one (default 1048576)");
  }
  core::Status validate() const;
};

class StoreService {
 public:
  static core::Result<std::unique_ptr<StoreService>> create(core::EventLoop& loop,
                                                            const ServiceConfig& config);
  ~StoreService();
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;

  const std::string& endpoint() const;
  const WeightStore& store() const { return store_; }
  // Long polls parked now (latest, chain_source).
  std::size_t parked() const { return waiters_.parked(); }

 private:
  StoreService(core::EventLoop& loop, const ServiceConfig& config);
  // The request handlers, a group a function: holders, readers, relays, deltas.
  void install_handlers();
  void install_holder_handlers(const StoreDecodeLimits& lim);
  void install_reader_handlers();
  void install_relay_handlers();
  void install_delta_handlers(const StoreDecodeLimits& lim);
  // Requests, holders and each model's latest version into the process metrics (/metrics).
  void export_metrics();

  core::EventLoop& loop_;
  ServiceConfig config_;
  WeightStore store_;
  // Whose signatures make versions (the members' actors); plain mode checks none.
  core::Security security_;
  // Long polls (latest, chain_source) parked until a commit or new chunks; woken after each
  // message that can bring either. Declared after server_: destroyed first.
  std::unique_ptr<core::Server> server_;
  Waiters waiters_;
  std::unique_ptr<core::EventLoop::Timer> expiry_;
  std::uint64_t requests_exported_ = 0;
};

}  // namespace sluice::weightstore
