// The relay's decisions as a state machine (the rules are in relay/relay.hpp): which version to
// start, which chunks to read next and from which source, when to ask the store for a source or
// report chunks, when a version that makes no progress is given up, which copies to retire, and
// what a host share reads. No sockets, no memory, no clock: each event takes the time as `now`
// and returns the actions to take, in order. The service around it (Relay, relay/relay.cpp)
// executes them (store requests, reads into registered memory, the holder) and feeds their
// outcomes back as events.
//
// Copies are named by version (a relay holds at most one copy of a version). An event about a
// version the state no longer holds (retired or withdrawn) is ignored and returns no actions.
//
// Thread safety: none; the service owns it on its loop thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "format/manifest.hpp"
#include "format/shard.hpp"
#include "relay/relay_config.hpp"
#include "weightstore/protocol.hpp"
#include "wire/transfer.hpp"

namespace sluice::relay {

using core::Clock;
using core::Millis;

// What the service does. Each names its copy by version.
namespace action {
// Join the store's chain. Blocking on a tick (the tick goes on once joined, see joined()); after
// a store restart (again) sent without waiting, before the holder registers the copies again.
struct Join {
  bool again = false;
};
struct Heartbeat {};      // the holder's heartbeat (a forgotten holder registers again)
struct ReofferDeltas {};  // make_deltas: offer every delta again after a store restart
struct StartVersion {     // plan, prepare(), allocate, add(), serve as a partial holder
  std::uint64_t version = 0;
};
struct GiveUp {  // a version that made no progress for abandon_after_ms (for the log)
  std::uint64_t version = 0;
  std::size_t have = 0, chunks = 0;
  Millis idle{0};
};
struct AskSource {  // chain_source; the answer goes to source_named() or source_unknown()
  weightstore::ChainSourceRequest request;
};
// Read chunk `chunk` from `source` into [offset, offset + bytes) of the copy. `pieces` false:
// one read, its digest (or checksum) verified. True (a host share from a holder of the whole
// version): the reads are the share's pieces in that chunk, unchecked; the assembled chunk is
// checked against `digest` (or `checksum`). The outcome goes to chunk_done().
struct ReadChunk {
  std::uint64_t version = 0;
  std::uint32_t chunk = 0;
  std::string source;
  core::RegionDescriptor desc;
  std::vector<core::ChunkRead> reads;
  bool pieces = false;
  std::uint64_t offset = 0, bytes = 0, checksum = 0;
  std::optional<core::Digest> digest;  // the signed version's, when it has digests
};
struct ReportChunks {  // add_chunks; the outcome goes to report_done()
  weightstore::AddChunks add;
};
struct AskDelta {  // fetch_delta base -> version; the outcome goes to delta_done()
  std::uint64_t version = 0, base = 0;
};
struct Completed {  // the copy is whole; with make_deltas and a base, offer base -> version
  std::uint64_t version = 0;
  std::optional<std::uint64_t> delta_base;
};
struct Retire {  // unpublish; the holder frees the memory once the readers drained
  std::uint64_t version = 0;
  bool drop_deltas = false;  // drop the deltas made with this version
};
}  // namespace action

using Action =
    std::variant<action::Join, action::Heartbeat, action::ReofferDeltas, action::StartVersion,
                 action::GiveUp, action::AskSource, action::ReadChunk, action::ReportChunks,
                 action::AskDelta, action::Completed, action::Retire>;
using Actions = std::vector<Action>;

// One version being received or held.
struct CopyState {
  core::Manifest manifest;  // the version's, or for a host share the share's (format/shard.hpp)
  // A host share: the version's manifest and the share's pieces in it (read from a holder of
  // the whole version), by offset in the share's stream.
  std::optional<core::Manifest> parent;
  core::ShardPlan share;
  std::vector<bool> have;
  bool complete = false;
  Clock::time_point progressed{};  // the version's start, then its last verified chunk
  bool abandoned = false;          // given up for a newer version: no more reads, then retired
  std::set<std::string> failed_sources;  // sources that failed for this version

  // Receiving, chunk by chunk, while the source is still receiving.
  std::string source;  // the source read from now ("": ask the store)
  core::RegionDescriptor source_desc;
  std::vector<bool> source_has;           // its verified chunks, as the store last said
  bool source_whole = false;              // a host share read from the whole version
  std::set<std::uint32_t> reading;        // chunks with a read in flight
  std::vector<std::uint32_t> unreported;  // verified here, not yet told to the store
  bool asking = false;                    // a chain_source request is out
  bool reporting = false;                 // an add_chunks request is out
  Clock::time_point asked{};
  int source_distance = 3;  // topology distance to the source, as the store said
  // The store said, naming a source, that a relay of another datacenter reads from this one:
  // the delta to this version is made (RelayConfig::deltas_for_other_datacenters).
  bool feeds_other_datacenter = false;

  // Receiving by delta (use_deltas): wanted until the source is known to be remote (or not);
  // no chunk is read in full while a delta is asked for or read.
  enum class Delta { kNone, kWanted, kAsking } delta = Delta::kNone;
  Clock::time_point delta_since{};  // when the version was started
  Clock::time_point delta_asked{};
  int lent = 0;  // deltas being fetched with this copy as their base

  // Something in flight refers to this copy.
  bool busy() const;
};

// A version prepared to start: what prepare() makes of the store's manifest.
struct NewCopy {
  core::Manifest manifest;  // what the relay holds (a host share's own manifest)
  std::optional<core::Manifest> parent;
  core::ShardPlan share;
};

// A source the store named for a version.
struct NamedSource {
  std::string holder_id;
  std::string model;  // the model it holds: empty for the version asked about
  int distance = 3;
  core::RegionDescriptor desc;  // decoded by the service
  std::vector<bool> chunks;
  bool feeds_other_datacenter = false;  // the store says a relay of another datacenter reads here
};

// What fetch_delta came back with.
enum class DeltaOutcome {
  kRead,      // a delta was read: `have` holds the chunks it rebuilt
  kExpected,  // none yet, but the store expects one
  kNone,      // none, and none expected: read in full
  kFailed,    // an error: read in full
};

class RelayState {
 public:
  // `config` must have passed validate().
  explicit RelayState(RelayConfig config);

  // Join, heartbeat and re-offer, due at `now`. Not joined: only a Join, and the service calls
  // joined() once it succeeds.
  Actions housekeeping(Clock::time_point now);
  void joined() { joined_ = true; }
  bool is_joined() const { return joined_; }
  // The store forgot this relay (it restarted): join again (and, with make_deltas, offer the
  // deltas again one heartbeat later). The holder registers the copies again after the Join.
  Actions store_forgot(Clock::time_point now);

  // The newest committed version. A StartVersion when it is newer than every copy and none is
  // being received with progress in the last abandon_after_ms; those without are given up.
  Actions latest_seen(std::uint64_t version, Clock::time_point now);
  // A version to start, from the store's manifest: a host share's pieces and manifest, the
  // size limit. Changes nothing.
  core::Result<NewCopy> prepare(const core::Manifest& manifest) const;
  // The prepared copy, now with its memory: received from `now` on.
  void add(NewCopy copy, Clock::time_point now);

  // On every tick: each copy's reads, questions and reports, then retirement.
  Actions tick(Clock::time_point now);

  // Outcomes.
  Actions source_named(std::uint64_t version, NamedSource source, Clock::time_point now);
  // No source (an error or a bad answer): asked again on a later tick.
  void source_unknown(std::uint64_t version);
  // `from` failed for chunk i: set aside for this version, another source is asked for.
  Actions chunk_done(std::uint64_t version, std::uint32_t chunk, const std::string& from, bool ok,
                     Clock::time_point now);
  // An add_chunks reply; chunks not reported are reported again.
  Actions report_done(std::uint64_t version, std::vector<std::uint32_t> sent, bool ok,
                      Clock::time_point now);
  // `have` (kRead): the copy's chunks after the delta.
  Actions delta_done(std::uint64_t version, std::uint64_t base, DeltaOutcome outcome,
                     std::vector<bool> have, Clock::time_point now);

  // Stopping: no more reads or questions.
  void stop() { stopping_ = true; }
  // Every copy's version, oldest first; the state then holds none.
  std::vector<std::uint64_t> withdraw();

  // Whether a version is arriving (the service ticks faster then).
  bool receiving() const;
  const CopyState* find(std::uint64_t version) const;
  const std::list<CopyState>& copies() const { return copies_; }

 private:
  CopyState* find_mut(std::uint64_t version);
  void pump(CopyState& c, Clock::time_point now, Actions& out);
  void want_delta(CopyState& c, Clock::time_point now, Actions& out);
  void read_chunk(CopyState& c, std::uint32_t i, Actions& out);
  void read_share_chunk(CopyState& c, std::uint32_t i, Actions& out);
  void ask_source(CopyState& c, Clock::time_point now, Actions& out);
  void report(CopyState& c, Actions& out);
  void check_complete(CopyState& c, Actions& out);
  CopyState* base_for(const CopyState& c);
  void retire_old(Actions& out);

  RelayConfig config_;
  // Oldest first.
  std::list<CopyState> copies_;
  bool joined_ = false;
  bool stopping_ = false;
  Clock::time_point last_heartbeat_{};
  std::optional<Clock::time_point> reoffer_at_;  // after a store restart, once copies are back
  bool fed_other_datacenter_ = false;            // some copy was made to feed another datacenter
};

}  // namespace sluice::relay
