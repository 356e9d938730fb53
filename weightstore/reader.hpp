// The reader client of a rollout: it keeps one current weight version that the caller uses,
// pulls newer versions in the background into a staging buffer while the caller goes on working,
// and switches to the staged version only when the caller says it is at a safe point (swap()).
//
// A reader that serves (the default) is also a holder of its current version, as the design asks
// ("every receiver becomes a source for later receivers"): after a swap it registers the new
// current version with the store, so that peers can read it from here, and it retires the old
// one the way every holder does: unpublish (the store names it to no new reader), wait until the
// store says the leases on it have drained (bounded by drain_timeout), and only then free it.
//
// Lifetime: the event loop, the transfer engine and the store client must outlive the reader.
// Call close() before destroying a serving reader: it unpublishes what the reader holds and waits
// for readers of it to finish. A reader destroyed without close() unpublishes without waiting.
//
// Thread safety: loop thread only. pull_latest(), swap() and heartbeat() only send requests and
// handle the replies on the loop, so they may be called from loop callbacks (timers). pull() and
// close() run the loop until they are done: call them from the caller's main flow (tools, tests,
// a rollout's own driver), never from a loop callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "format/manifest.hpp"
#include "format/shard.hpp"
#include "weightstore/client.hpp"
#include "weightstore/holder.hpp"
#include "weightstore/store.hpp"
#include "wire/transfer.hpp"

namespace sluice::weightstore {

// Reader::pull()'s default bound on staging a version (the read's own time-outs apply within).
inline constexpr Millis kPullTimeout{60000};

struct ReaderOptions {
  std::string model;             // the model whose versions are read (required)
  std::string holder_id;         // unique per process, e.g. "rollout-3" (required when serve)
  Topology topology;             // where this reader runs: plans rank sources by it
  std::string endpoint;          // this process's control endpoint, recorded by the store
  bool serve = true;             // register the current version as a holder for peers
  core::ReadOptions read;        // how versions are read (GETs in flight, timeouts)
  Millis request_timeout{5000};  // each control request to the store (> 0)
  // Longest wait for an old copy's leases to drain before it is freed without the store's word;
  // 0: none, a copy waits for the store (close() still ends within 30 s).
  Millis drain_timeout{30000};
  Millis drain_check{200};  // how often a retiring copy asks whether it has drained (> 0)
  // The store's lease_ttl_ms: a copy the store does not know (it restarted) waits this long.
  Millis lease_ttl{10000};
  // With a host label: pull_latest() reads a new version only from holders on this host (its
  // relay) until one holds all of it, for up to this long after it first saw the version; then
  // from any holder. Many readers of one host that each read a new version from the trainer's
  // host would each take a copy across the same links (0: read from the nearest at once).
  // With a datacenter label as well (or only), the reader then waits for a holder in its own
  // datacenter, for up to another local_wait (one in all without a host label), before it
  // reads across the WAN: the datacenter's seed brings one copy over, and its readers share it.
  Millis local_wait{0};
  // While it waits for a nearby holder (local_wait), how often a pull asks the store for a read
  // plan again once a plan had no complete copy nearby; calls in between answer at once with
  // what is held. Every plan crosses to the store, across the WAN for a remote datacenter, and
  // many readers asking at once would move a fair part of a version's bytes in plans (> 0).
  Millis local_check{100};
  // > 0: pull_latest() asks the store with a long poll, which it answers once a version newer
  // than the reader's commits (or a declined nearby plan's local_check has passed), or after
  // this long; one question a version, not one a call. 0: the store answers at once.
  Millis latest_wait{0};
  // false: a reader that holds no version yet (a joiner: it has nothing to generate with) never
  // waits for its host's copy: it reads its first version from that copy when it is complete,
  // else from every holder at once, striped.
  bool local_wait_first = true;
  // Holder ids to read from, in order of preference: each chunk is read from the first of them
  // that holds it, and from no other holder (empty: every holder the plan names, striped). A
  // plan in which some chunk has none of them is declined (the pull fails with
  // failed_precondition; the next one asks again). Overrides local_wait.
  std::vector<std::string> only_from;
  // only_from applies to the first version only (a joiner's first pull); later ones as usual.
  bool only_from_first = false;
  // How often a pull renews its lease while it reads (well under the store's lease_ttl).
  Millis lease_renew{3000};
  // The rollout's inference layout (format/shard.hpp): when set, a pull reads only this rank's
  // shard, assembled into the rollout's tensors (names, shard shapes, cast dtypes), and the
  // current version is those tensors, not the published bytes. Such a reader holds no whole
  // version, so it cannot serve one: serve must be false. Unset: the whole version.
  std::optional<core::ShardLayout> layout;
};

// For ReaderOptions::only_from: narrows each chunk of `plan` to the first holder of `ids` (in
// the order given) that the plan names for it. False, with the plan unchanged, when `ids` is
// empty or some chunk has none of them.
bool keep_listed_source(ReadPlan& plan, const std::vector<std::string>& ids);

class Reader {
 public:
  using Done = std::function<void(core::Result<std::uint64_t>)>;

  // invalid_argument for a missing model name, a serving reader without a holder id, a
  // timeout that is not positive, or a layout that is invalid on its own (an unsupported cast,
  // a rank not below the size) or set on a reader that serves.
  static core::Result<std::unique_ptr<Reader>> create(core::EventLoop& loop,
                                                      core::TransferEngine& engine,
                                                      StoreClient& store, ReaderOptions options);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Asks the store for the latest committed version and, when it is newer than both the current
  // and the staged version, reads it into a new staging buffer in the background; returns at
  // once. `done` runs once on the loop thread with the newest version this reader then holds or
  // stages (the current or staged one when nothing newer is committed), or with the error: the
  // store's (not_found: nothing committed yet), or the read's. A pull that fails leaves the
  // current and the staged version as they were. Called while a pull is in flight, it joins that
  // pull: `done` gets that pull's result.
  void pull_latest(Done done);

  // pull_latest() for one given version (0: the latest), without blocking: `done` runs once on
  // the loop thread with the version once it is current or staged, or with the error (as pull()
  // names them; there is no overall timeout here, the read's own ones apply). Called while a
  // pull is in flight, it starts once that one ended.
  void pull_version(std::uint64_t version, Done done);

  // Blocking: stages `version` (0: the latest committed one) and returns it once staged; returns
  // at once when it is already current or staged. Waits first for a pull in flight. Errors:
  // not_found for a version the store does not know, failed_precondition for one not committed,
  // unavailable when no live holder has it, the read's error, or timeout after `timeout`.
  core::Result<std::uint64_t> pull(std::uint64_t version = 0, Millis timeout = kPullTimeout);

  // At the caller's safe point: the staged version becomes the current one, all at once (the
  // manifest and the bytes below switch together; the caller must not use spans of the old
  // version afterwards). A serving reader then registers the new version as a holder and retires
  // the old one (unpublish, drain, free); a reader that does not serve frees the old one at once.
  // Returns the new current version; failed_precondition when nothing is staged.
  core::Result<std::uint64_t> swap();

  // 0 when none.
  std::uint64_t current_version() const;
  std::uint64_t staged_version() const;
  // The current (staged) version's manifest; nullptr when there is none.
  const core::Manifest* current_manifest() const;
  const core::Manifest* staged_manifest() const;
  // The current version's bytes (empty when there is none). Valid until the next swap() or
  // close(); never torn: a version is staged only once every chunk has been verified.
  std::span<const std::uint8_t> current_bytes() const;
  // One tensor of the current version by name; not_found when there is no such tensor or no
  // current version.
  core::Result<std::span<const std::uint8_t>> current_tensor(const std::string& name) const;

  // Whether a pull (or its question for the latest version) is in flight.
  bool pulling() const { return busy_; }
  // Whether the store has acknowledged this reader as a holder of its current version.
  bool serving() const;
  // Old copies unpublished and waiting for their leases to drain before they are freed.
  std::size_t retiring() const;
  // The statistics of the last pull that staged a version (per source as the plan ordered them).
  const core::ReadStats& last_stats() const { return last_stats_; }
  // Of the last staged version's bytes, those read from holders on this reader's host.
  std::uint64_t last_same_host_bytes() const { return last_same_host_bytes_; }
  // The whole size of the last staged version as published (for a shard reader, against
  // last_stats().bytes: what its shard cost on the wire), and whether that shard was read as
  // whole chunks because the actor declared no checksums for its layout.
  std::uint64_t last_version_bytes() const { return last_version_bytes_; }
  bool last_read_whole_chunks() const { return last_whole_chunks_; }

  // Keeps the holder registration alive (the store expires holders that stop sending them);
  // registers the current version again when the store has forgotten this holder (after a store
  // restart) or a registration failed. Sends and returns: call it from a loop timer, well within
  // the store's holder_ttl. Does nothing for a reader that does not serve.
  void heartbeat();

  // Blocking: drops the staged version, unpublishes the current one and waits (at most
  // drain_timeout) until every retiring copy has drained, then frees them. The reader holds
  // nothing afterwards and may pull again. timeout when some copy had to be freed without the
  // store confirming that its leases drained (the store may be gone; its leases expire anyway).
  core::Status close();

 private:
  struct Held {
    core::Manifest manifest;
    std::unique_ptr<core::RegisteredBuffer> buffer;
  };
  Reader() = default;
  std::string name() const;
  std::uint64_t newest_held() const;
  // Reads `version` into staging (the reader is busy); finish() ends it.
  // How near the holders of a read must be (local_wait).
  enum class Scope { kAny, kHost, kDatacenter };
  // `scope` other than kAny: only when holders that near have every chunk; else finish() with
  // what is held (the next pull_latest() asks again).
  void fetch(std::uint64_t version, Scope scope = Scope::kAny);
  // The scope of a pull_latest() of `latest` now, under local_wait.
  Scope wait_scope(std::uint64_t latest);
  void finish(core::Result<std::uint64_t> result);
  // The read plan's filter for a pull: only_from, else the scope's (host, datacenter), else a
  // joiner's preference for its host's complete copy, else none.
  std::function<bool(ReadPlan&)> accept_for(Scope scope) const;
  bool restricted() const;  // only_from applies to this pull

  core::EventLoop* loop_ = nullptr;
  core::TransferEngine* engine_ = nullptr;
  StoreClient* store_ = nullptr;
  ReaderOptions options_;
  std::unique_ptr<Held> current_;
  std::unique_ptr<Held> staged_;
  core::ReadStats last_stats_;
  std::uint64_t last_same_host_bytes_ = 0;
  std::uint64_t last_version_bytes_ = 0;
  bool last_whole_chunks_ = false;
  std::shared_ptr<const core::ShardLayout> shard_;  // options_.layout, shared with each pull
  bool busy_ = false;
  std::uint64_t pull_generation_ = 0;  // a pull given up on (timeout) is ignored when it ends
  std::vector<Done> waiters_;
  std::uint64_t local_wait_version_ = 0;  // the version waited for nearby, since when
  Clock::time_point local_wait_since_{};
  std::uint64_t local_declined_version_ = 0;  // its last plan had no complete copy nearby, when
  Clock::time_point local_declined_at_{};
  // Registration, heartbeats and the drain of retired copies (a reader that serves).
  std::unique_ptr<Holder> holder_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for replies after destruction
};

}  // namespace sluice::weightstore
