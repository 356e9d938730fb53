// The holder lifecycle, in one place: a process that serves copies of versions to readers (the
// actor's publisher, a rollout's reader) registers each copy with the store, keeps it registered
// (heartbeats; again, marked `again`, when a restarted store no longer knows the holder), and
// when it stops serving one, unpublishes it and frees its memory only once the store says the
// readers' leases on it have drained.
//
// The owner keeps a copy's memory while the copy is served and hands it over to retire(); the
// holder then keeps it until it may go and passes it to `freed` (a publisher reuses it for a
// later version) or frees it after a grace period.
//
// When memory may go:
// - the store says "drained": no lease on the copy, no relay still reading from it;
// - the store says "unknown" (it restarted and this copy was not registered again): after one
//   lease time-to-live of hearing so, by which time every lease the old store granted expired;
// - with a drain_timeout, once it has passed whatever the store says (a reader that must move
//   on); counted as unconfirmed and logged.
// Nothing else frees it, and a store that cannot be reached keeps it.
//
// Thread safety: loop thread only. Everything but close() only sends requests and handles their
// replies on the loop, so it may be called from loop callbacks. close() runs the loop: call it
// from the owner's main flow.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "format/manifest.hpp"
#include "weightstore/client.hpp"
#include "wire/transfer.hpp"

namespace sluice::weightstore {

struct HolderOptions {
  std::string holder_id;  // unique per process (required)
  std::string endpoint;   // this process's control endpoint, recorded by the store
  Topology topology;
  Millis request_timeout{5000};  // each store request (> 0)
  Millis drain_check{200};       // how often a retiring copy asks whether it drained (> 0)
  // The store's lease_ttl_ms: how long a copy the store does not know waits before it goes.
  Millis lease_ttl{10000};
  // 0: a copy waits for the store however long it takes. Otherwise the longest wait.
  Millis drain_timeout{0};
  // A copy kept this long is said in the log (and again each time as long again).
  Millis drain_warn{60000};
  std::string log_name;  // "publisher actor", "reader rollout-3"
};

class Holder {
 public:
  using Freed = std::function<void(std::unique_ptr<core::RegisteredBuffer>)>;
  using Registered = std::function<void(core::Result<Committed>)>;

  // invalid_argument for a missing holder id or a time that is not positive. `freed` (may be
  // empty) receives the memory of each copy that may go; without it the memory is freed a few
  // seconds later (a peer handed a plan just before the unpublish may still unpack its key).
  static core::Result<std::unique_ptr<Holder>> create(core::EventLoop& loop, StoreClient& store,
                                                      HolderOptions options, Freed freed = {});
  ~Holder();
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;

  // Registers this holder's copy of `manifest`'s version, described by `descriptor` (its
  // RegionDescriptor, encoded), and keeps it registered until retire(). `done` gets the store's
  // answer to this first registration (whether the version is committed).
  // `chunks`: the verified chunks of a partial copy (a relay's while it receives; empty: all).
  void serve(const core::Manifest& manifest, std::string descriptor, Registered done = {},
             std::vector<bool> chunks = {});
  // A partial copy's verified chunks now, sent with any later registration (the owner reports
  // new chunks to the store itself, as they arrive).
  void update_chunks(std::uint64_t version, std::vector<bool> chunks);
  // Registers every served copy again, marked `again` (the owner learnt that the store
  // restarted).
  void register_again();
  // Runs when a heartbeat hears that the store does not know this holder, before the copies
  // are registered again (a relay joins the chain again there).
  void on_forgotten(std::function<void()> fn) { on_forgotten_ = std::move(fn); }
  // Stops serving `version` and takes its memory: unpublished now, handed to `freed` once the
  // store allows (see the header). `memory` may be null (nothing to free, e.g. a copy that
  // never left staging).
  void retire(std::uint64_t version, std::unique_ptr<core::RegisteredBuffer> memory);
  // Keeps the holder known to the store; registers every served copy again (marked `again`)
  // when the store has forgotten it, and any copy whose registration failed. Call it from a
  // loop timer well within the store's holder_ttl.
  void heartbeat();

  // Whether the store has acknowledged the registration of `version`.
  bool registered(std::uint64_t version) const;
  // The versions served, oldest first.
  std::vector<std::uint64_t> served() const;
  // Copies unpublished and not yet allowed to go.
  std::size_t retiring() const { return retiring_.size(); }
  // Copies freed after drain_timeout without the store's word.
  std::size_t unconfirmed_frees() const { return unconfirmed_frees_; }

  // Blocking: retires everything still served (owners retire their copies with their memory
  // first), then runs the loop until every retiring copy may go, for at most `bound` (0: the
  // drain_timeout plus a margin, or 30 s without one). timeout_error when some copy had not
  // drained by then: with a drain_timeout it is freed anyway, without one it stays.
  core::Status close(Millis bound = Millis(0));

 private:
  struct Served {
    core::Manifest manifest;
    std::string descriptor;
    std::vector<bool> chunks;
    bool registered = false;
    bool registering = false;
  };
  struct Retiring {
    std::string model;
    std::uint64_t version = 0;
    std::unique_ptr<core::RegisteredBuffer> memory;
    Clock::time_point since;
    bool asking = false;
    std::optional<Clock::time_point> unknown_since;  // the store first said it does not know it
    int warned = 0;
  };

  Holder() = default;
  void register_copy(std::uint64_t version, bool again, Registered done);
  void check_retiring();
  void drain_reply(std::uint64_t version, const core::Result<Drained>& reply);
  void let_go(std::vector<Retiring>::iterator it, bool confirmed, const std::string& why);

  core::EventLoop* loop_ = nullptr;
  StoreClient* store_ = nullptr;
  HolderOptions options_;
  Freed freed_;
  std::function<void()> on_forgotten_;
  std::map<std::uint64_t, Served> served_;
  std::vector<Retiring> retiring_;
  core::RetiredBuffers retired_;
  std::size_t unconfirmed_frees_ = 0;
  std::unique_ptr<core::EventLoop::Timer> drain_timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for replies after destruction
};

}  // namespace sluice::weightstore
