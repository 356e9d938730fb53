// Client side of the weight store: typed requests over the control plane, and pull(), which
// reads a committed version from the holders a read plan names.
//
// Thread safety: loop thread only. The blocking calls run the loop until their reply: call them
// from tools and tests, never from a loop callback.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "format/manifest.hpp"
#include "weightstore/protocol.hpp"
#include "weightstore/pulled.hpp"
#include "weightstore/store.hpp"
#include "wire/messaging.hpp"
#include "wire/transfer.hpp"

namespace sluice::core {
struct ShardLayout;
}  // namespace sluice::core

namespace sluice::weightstore {

// One request to the store waits this long for its reply. The store answers from memory: a
// reply later than this means it is away (restarting or unreachable), and the caller retries.
inline constexpr Millis kStoreRequestTimeout{5000};
// How often a read renews its lease: well under the store's default lease_ttl (10 s).
inline constexpr Millis kLeaseRenewPeriod{3000};
// How often a holder that is not configured otherwise heartbeats: well under the store's default
// holder_ttl (3 s).
inline constexpr Millis kHolderHeartbeatPeriod{1000};

class StoreClient {
 public:
  template <class T>
  using Done = std::function<void(core::Result<T>)>;
  using StatusDone = std::function<void(core::Status)>;

  // `security`: this process's (wire/security.hpp); in curve mode the store's public key is
  // taken from the job's members (the member with role weightstore), so a store with another
  // key is never talked to (its requests time out). In curve mode every read plan's manifest is
  // checked against the members' actors' sign keys before plan()/plan_async() hand it out (see
  // there): what the store says is not enough to load a version.
  static core::Result<std::unique_ptr<StoreClient>> create(core::EventLoop& loop,
                                                           const std::string& endpoint,
                                                           const core::Security& security,
                                                           Millis timeout = kStoreRequestTimeout);
  core::EventLoop& loop() const { return *loop_; }
  // This process's security: a publisher signs with its key (an actor's).
  const core::Security& security() const { return security_; }

  // Blocking calls: they run the loop until the reply (see the thread-safety note). A `timeout`
  // of 0 means the client's own.
  core::Status put_manifest(const core::Manifest& m);
  // Returns whether the version is committed after this registration.
  core::Result<bool> register_holder(const HolderRegistration& r);
  core::Status heartbeat(const std::string& holder_id);
  core::Result<std::uint64_t> latest(const std::string& model);
  // A read plan (and a lease) for `model`@`version` (0: the latest). The plan's manifest must
  // be of that model and version, and in curve mode signed by an actor of the members file:
  // otherwise permission_denied (protocol_error for another model or version), the lease is
  // released, and nothing can be loaded from it, whatever the store said.
  core::Result<ReadPlan> plan(const std::string& model, std::uint64_t version,
                              const Topology& where);
  core::Status release(std::uint64_t lease_id);
  // Both return whether the unpublished copy has drained (may be freed); not_found when the
  // store does not know the copy (it restarted): unknown, not drained.
  core::Result<bool> unpublish(const std::string& holder_id, const std::string& model,
                               std::uint64_t version, Millis timeout = Millis(0));
  core::Result<bool> drained(const std::string& holder_id, const std::string& model,
                             std::uint64_t version, Millis timeout = Millis(0));
  // Who holds `model`@`version` and how much of it (takes no lease).
  core::Result<std::vector<HolderState>> holders(const std::string& model, std::uint64_t version);
  core::Status join_relay(const JoinRelay& j);
  // Every registered copy of a version: holder id -> verified chunks.
  core::Result<std::map<std::string, std::uint64_t>> copies(const std::string& model,
                                                            std::uint64_t version);

  // The same requests without blocking: `done` runs once on the loop thread with the reply or
  // the error (a time-out included). A `timeout` of 0 means the client's own.
  void put_manifest_async(const core::Manifest& m, Millis timeout, StatusDone done);
  void register_async(const HolderRegistration& r, Millis timeout, Done<Committed> done);
  void add_chunks_async(const AddChunks& a, Millis timeout, Done<Committed> done);
  void heartbeat_async(const std::string& holder_id, Millis timeout, StatusDone done);
  void latest_async(const std::string& model, Millis timeout, Done<Latest> done);
  // A long poll (l.wait_ms > 0): answered once a version above l.after commits, or when the wait
  // ends; `timeout` is counted from then (the wait is added to it). chain_source_async likewise.
  void latest_async(const LatestRequest& l, Millis timeout, Done<Latest> done);
  void plan_async(const PlanRequest& p, Millis timeout, Done<ReadPlan> done);  // as plan()
  // A host share's plan (p.model a share of `parent`'s model, p.version parent's version): no
  // actor signs a share, so its manifest is checked against the one `parent` gives
  // (core::check_share_follows) instead of a signature. `parent` must itself have been checked,
  // as a plan's manifest is; its lease is released when refused.
  void share_plan_async(const PlanRequest& p, std::shared_ptr<const core::Manifest> parent,
                        Millis timeout, Done<ReadPlan> done);
  void renew_async(std::uint64_t lease_id, Millis timeout, StatusDone done);
  // Renews `lease_id` every `period` (each renewal within `timeout`) while a read runs. A
  // renewal that fails (the store refused it: it restarted, or the lease expired; or it did not
  // answer) cancels the read through `stop`: without the lease a holder may reuse the memory
  // under the reader, and reading on could only tear. Drop the timer to stop renewing.
  std::shared_ptr<core::EventLoop::Timer> keep_lease(std::uint64_t lease_id, Millis period,
                                                     Millis timeout,
                                                     std::shared_ptr<core::ReadCancel> stop,
                                                     std::string what);
  // `done` may be empty: fire and forget (a lease that is not released expires on the store).
  void release_async(std::uint64_t lease_id, Millis timeout, StatusDone done = {});
  void unpublish_async(const CopyRef& c, Millis timeout, Done<Drained> done = {});
  void drained_async(const CopyRef& c, Millis timeout, Done<Drained> done);
  void holders_async(const HoldersRequest& h, Millis timeout, Done<Holders> done);
  void chain_source_async(const ChainSourceRequest& c, Millis timeout, Done<ChainSource> done);
  void join_relay_async(const JoinRelay& j, Millis timeout, StatusDone done);

  // Deltas (store.hpp): offering one, finding one to read, dropping one, listing them.
  core::Status register_delta(const DeltaRegistration& r);
  core::Result<DeltaPlan> delta_plan(const DeltaPlanRequest& r);
  core::Result<std::vector<DeltaState>> deltas(const std::string& model);
  void register_delta_async(const DeltaRegistration& r, Millis timeout, StatusDone done);
  void delta_plan_async(const DeltaPlanRequest& r, Millis timeout, Done<DeltaPlan> done);
  void unpublish_delta_async(const UnpublishDelta& r, Millis timeout, Done<Drained> done);
  void delta_drained_async(const DeltaDrainedQuery& r, Millis timeout, Done<Drained> done);

 private:
  Millis or_default(Millis t) const { return t > Millis(0) ? t : timeout_; }
  template <class T, class Decode>
  void ask(core::Message req, Millis timeout, Decode decode, Done<T> done);
  void ask_status(core::Message req, Millis timeout, StatusDone done);
  template <class T, class Decode>
  core::Result<T> call(core::Message req, Millis timeout, Decode decode);
  // A decoded plan, checked as plan() says; releases its lease when refused.
  // A share's plan is checked against `parent` instead.
  core::Result<ReadPlan> checked_plan(core::Result<ReadPlan> plan, const PlanRequest& asked,
                                      const core::Manifest* parent = nullptr);

  core::EventLoop* loop_ = nullptr;
  std::unique_ptr<core::Client> client_;
  core::Security security_;
  Millis timeout_ = kStoreRequestTimeout;
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
// The lease is renewed every `lease_renew` while the read runs (keep it well under the store's
// lease_ttl): a holder frees a copy only once the store says its leases drained, so a long read
// that let its lease lapse could have the memory under it freed. A renewal that fails ends the
// read (unavailable, naming the lease).
// With `shard`, only that rank's shard is read and assembled (weightstore/shard_read.hpp); a
// layout that does not fit the version (core::plan_shard's errors) fails the pull before
// anything is read.
void pull_async(core::TransferEngine& engine, StoreClient& store, const std::string& model,
                std::uint64_t version, const Topology& where, core::ReadOptions options,
                std::function<void(core::Result<Pulled>)> done,
                std::function<bool(ReadPlan&)> accept = {}, Millis lease_renew = kLeaseRenewPeriod,
                std::shared_ptr<const core::ShardLayout> shard = nullptr);

// For `accept`: keeps only the holders on the reader's own host as each chunk's sources; false
// when some chunk has none there.
bool keep_same_host_sources(ReadPlan& plan);

}  // namespace sluice::weightstore
