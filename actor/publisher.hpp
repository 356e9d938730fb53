// The actor's publisher: puts a weight version into the weight store. publish() copies the
// tensors into registered staging memory, computes the manifest (a checksum per chunk), signs it
// with the actor's key (curve mode: the store client's security holds it; format/manifest.hpp),
// sends it to the store and registers this process as the version's first holder, which
// commits it.
// The publisher then serves the version to readers (relays, rollouts) until it drops it.
//
// Hand-off (options.handoff, on by default): the publisher serves a version only until relays
// hold all of it. Each heartbeat() asks the store who holds the versions it serves; once a relay
// has a complete, published copy of an older version, or two relays have one of its newest, the
// publisher withdraws its own. The newest version stays on one relay's word only: were that
// relay killed, readers still receiving it (the next relay in the chain, the rollouts) would have
// no source left for the chunks they lack, and the job would wait for a version nobody holds
// (seen in a recovery test: a relay killed mid-chain over tcp). With no relay, it keeps serving
// its newest keep_versions copies, so a job without relays still works.
//
// A withdrawn copy (handed off, or beyond the newest keep_versions) is unpublished first and freed
// only once the store says it has drained - no reader's lease and no relay still reading from it -
// or after a bounded wait, so that no reader ever reads freed memory. Its staging buffer goes back
// to the pool for the next publish.
//
// Thread safety: loop thread only. publish() runs the loop while it waits for the store (call it
// from the actor's main flow, not from a loop callback); heartbeats and the drain checks of
// retiring copies only send requests and handle the replies on the loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/device_copy.hpp"
#include "core/event_loop.hpp"
#include "core/hash_worker.hpp"
#include "format/manifest.hpp"
#include "format/shard.hpp"
#include "weightstore/client.hpp"
#include "weightstore/holder.hpp"
#include "wire/transfer.hpp"

namespace sluice::actor {

using Clock = std::chrono::steady_clock;

struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  // Host memory, or CUDA device memory (core::device_pointer says which): device tensors, all on
  // one device, are copied into the staging buffer on CUDA streams (core::DeviceCopier), which
  // is page-locked for it the first time.
  const std::uint8_t* data = nullptr;
  std::uint64_t bytes = 0;
};

struct PublisherOptions {
  std::string model;
  std::string holder_id;  // unique per process, e.g. "actor-0"
  std::uint64_t chunk_bytes = 8u << 20;
  weightstore::Topology topology;
  std::string endpoint;             // this process's control endpoint (for the store)
  std::uint32_t keep_versions = 2;  // versions this publisher keeps serving
  // Withdraw a version once a relay (a holder that joined the store as one) holds all of it.
  // Only relays take over: two publishers of one version must not hand it to each other and
  // leave nobody serving it. Off for the "direct" broadcast, where every relay is sent its copy
  // by the publisher itself. Default true.
  bool handoff = true;
  // The store's lease_ttl_ms. A retired copy is freed only once the store says its leases
  // drained, or once the store has not known this holder for this long (a restarted store
  // grants no leases on a copy it does not know, and the old store's leases have expired by
  // then). Never on a timer while the store may still hold a lease. Default 10000, >= 1.
  core::Millis lease_ttl{10000};
  // How long publish() waits for the commit (> 0). On a time-out the copy is handled as a
  // retired one: its staging memory is kept until the store says its leases drained (the
  // registration may have reached the store, which may already have named it to readers), or
  // until the hash thread is done with it when it was never offered. Default 60000.
  core::Millis publish_timeout{60000};
  // The inference layouts the job's rollouts declare (format/shard.hpp; only tp_size and splits
  // count here). For each, every version's manifest carries signed checksums of every rank's
  // shard, so that those rollouts read only their shard's bytes and still verify them all
  // (weightstore/shard_read.hpp). A layout that does not tile a version's tensors fails its
  // publish. Default none: rollouts with a layout then read whole chunks. Computing them reads
  // the version once per layout on the loop thread.
  std::vector<core::ShardLayout> shard_layouts;
};

class Publisher {
 public:
  // permission_denied in curve mode when the store client's security has no signing key (the
  // process is not the actor): its versions would be refused.
  static core::Result<std::unique_ptr<Publisher>> create(core::EventLoop& loop,
                                                         core::TransferEngine& engine,
                                                         weightstore::StoreClient& store,
                                                         PublisherOptions options);
  ~Publisher();
  // Copies the tensors into registered staging memory and returns: the copy is all the caller
  // waits for. The chunk checksums (on the publisher's hash thread), the manifest and the
  // registration that commits the version follow on the loop; `committed` runs once the store
  // has committed it, or with the error. `version` must be new (greater than any earlier one).
  core::Status publish_async(std::uint64_t version, const std::vector<TensorView>& tensors,
                             std::function<void(core::Result<core::Manifest>)> committed);
  // publish_async, then runs the loop until the version is committed (for tools and tests; not
  // from a loop callback). timeout_error after options.publish_timeout; the same version may
  // then be published again.
  core::Result<core::Manifest> publish(std::uint64_t version,
                                       const std::vector<TensorView>& tensors);
  // Allocates and touches `count` staging buffers of `bytes` ahead of time, so that publishing
  // does not pay for page faults; copies that have drained give their buffers back for reuse.
  core::Status reserve(std::uint64_t bytes, std::size_t count);
  // Keeps this holder known to the store; registers everything again after a store restart.
  // With handoff, also asks the store who holds each version it serves and withdraws those a
  // relay holds completely. Sends and returns: the replies are handled on the loop (call it from
  // a loop timer).
  void heartbeat();
  // Withdraws every version this publisher serves, for a process about to exit: unpublishes them
  // and runs the loop until the store says their readers have drained (no lease, no relay still
  // reading from it) or `timeout` passes. Until a holder unpublishes, or its heartbeats stop, the
  // store keeps naming it, and UCX 1.13 crashes a reader that unpacks the key of a process that
  // has exited. timeout_error if some copy had not drained (it is unpublished all the same).
  // Not from a loop callback.
  core::Status close(core::Millis timeout);

  struct Held {
    core::Manifest manifest;
    std::unique_ptr<core::RegisteredBuffer> buffer;
  };
  const std::vector<Held>& held() const { return held_; }
  // Copies unpublished and waiting for their readers' leases to drain before they are freed.
  std::size_t retiring() const { return holder_->retiring(); }
  // Versions withdrawn because a relay held them (for logs and tests).
  std::uint64_t handed_off() const { return handed_off_; }

 private:
  Publisher() = default;
  // Unpublishes the oldest copies beyond keep_versions; frees each once drained.
  void retire_old();
  // Unpublishes a copy; its buffer comes back for reuse once drained (see weightstore::Holder).
  void retire(Held old);
  // Asks the store whether a relay holds `version` completely; withdraws it if one does.
  void check_handoff(std::uint64_t version);

  struct Pending {
    std::uint64_t gen = 0;    // which publish of the version (one may be retried after a time-out)
    core::Manifest manifest;  // checksums filled in as they arrive
    std::unique_ptr<core::RegisteredBuffer> buffer;
    std::size_t remaining = 0;
    std::function<void(core::Result<core::Manifest>)> committed;
    core::Status failed;  // the copy from the device failed: ends once the submitted hashes have
  };
  std::unique_ptr<core::RegisteredBuffer> take_buffer(std::uint64_t bytes);
  void give_back(std::unique_ptr<core::RegisteredBuffer> buffer);
  void checksummed(std::uint64_t version);
  // Copies the device tensors among `tensors` into `buffer` (its offsets from `manifest`),
  // calling landed(k) for each chunk of the staging buffer as soon as it is complete.
  core::Status copy_from_device(const std::vector<TensorView>& tensors,
                                const core::Manifest& manifest, core::RegisteredBuffer& buffer,
                                const std::function<void(std::uint64_t)>& landed);
  void finish(std::uint64_t version, core::Result<core::Manifest> result);
  // The pending publish of `version` started as `gen`, or null (it ended, or was given up and
  // the version is being published again).
  Pending* find_pending(std::uint64_t version, std::uint64_t gen);

  core::EventLoop* loop_ = nullptr;
  core::TransferEngine* engine_ = nullptr;
  weightstore::StoreClient* store_ = nullptr;
  PublisherOptions options_;
  std::vector<Held> held_;
  std::map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  // Publishes given up (timed out) while the hash thread still read their staging buffers, by
  // gen: their buffers come back for reuse once the last hash lands.
  std::map<std::uint64_t, std::unique_ptr<Pending>> abandoned_;
  std::uint64_t next_gen_ = 0;
  std::vector<std::unique_ptr<core::RegisteredBuffer>> free_;  // staging buffers to reuse
  core::RetiredBuffers retired_;  // drained buffers beyond free_, freed after a grace period
  std::unique_ptr<core::HashWorker> hasher_;
  std::unique_ptr<core::DeviceCopier> copier_;  // made for the first tensors in device memory
  bool pin_warned_ = false;
  std::set<std::uint64_t> asking_holders_;  // versions with a store.holders request out
  std::uint64_t handed_off_ = 0;
  // Registration, heartbeats, re-registration and the drain of retired copies.
  std::unique_ptr<weightstore::Holder> holder_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for replies after destruction
};

}  // namespace sluice::actor
