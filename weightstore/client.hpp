// Client side of the weight store: typed requests over the control plane, and pull(), which
// reads a committed version from the holders a read plan names.
//
// Thread safety: loop thread only. The blocking calls run the loop until their reply: call them
// from tools and tests, never from a loop callback.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/manifest.hpp"
#include "core/messaging.hpp"
#include "core/transfer.hpp"
#include "weightstore/store.hpp"

namespace sluice::weightstore {

class StoreClient {
 public:
  static core::Result<std::unique_ptr<StoreClient>> create(core::EventLoop& loop,
                                                           const std::string& endpoint,
                                                           Millis timeout = Millis(5000));
  core::Status put_manifest(const core::Manifest& m);
  // Returns whether the version is committed after this registration.
  core::Result<bool> register_holder(const HolderRegistration& r);
  core::Status heartbeat(const std::string& holder_id);
  core::Result<std::uint64_t> latest(const std::string& model);
  core::Result<ReadPlan> plan(const std::string& model, std::uint64_t version,
                              const Topology& where);
  core::Status release(std::uint64_t lease_id);
  // Both return whether the unpublished copy has drained (may be freed). `timeout` 0: the
  // client's own.
  core::Result<bool> unpublish(const std::string& holder_id, const std::string& model,
                               std::uint64_t version, Millis timeout = Millis(0));
  core::Result<bool> drained(const std::string& holder_id, const std::string& model,
                             std::uint64_t version, Millis timeout = Millis(0));
  // Who holds `model`@`version` and how much of it (takes no lease).
  core::Result<std::vector<HolderState>> holders(const std::string& model, std::uint64_t version);
  core::Client& raw() { return *client_; }

 private:
  std::unique_ptr<core::Client> client_;
  Millis timeout_{5000};
};

struct Pulled {
  core::Manifest manifest;
  std::unique_ptr<core::RegisteredBuffer> buffer;  // the version's bytes, verified chunk by chunk
  core::ReadStats stats;
  std::uint64_t same_host_bytes = 0;  // of stats.bytes, read from holders on the reader's host
};

// Reads `model`@`version` (0: latest committed) from the holders the store names, nearest and
// least loaded first, each chunk's checksum verified, and releases the lease afterwards.
core::Result<Pulled> pull(core::TransferEngine& engine, StoreClient& store,
                          const std::string& model, std::uint64_t version, const Topology& where,
                          core::ReadOptions options = {});

// pull() without blocking: the plan request and the read run on the loop while the caller goes
// on (a rollout keeps generating on its old version meanwhile); `done` runs once on the loop
// thread with the version or the error. The store client and the engine must outlive the pull.
// `accept`, when given, sees the read plan first and may narrow each chunk's sources; when it
// returns false nothing is read, the lease is released and `done` gets failed_precondition.
void pull_async(core::TransferEngine& engine, StoreClient& store, const std::string& model,
                std::uint64_t version, const Topology& where, core::ReadOptions options,
                std::function<void(core::Result<Pulled>)> done,
                std::function<bool(ReadPlan&)> accept = {});

// For `accept`: keeps only the holders on the reader's own host as each chunk's sources; false
// when some chunk has none there.
bool keep_same_host_sources(ReadPlan& plan);

}  // namespace sluice::weightstore
