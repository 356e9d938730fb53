// The weight store's state: the control plane of reference-oriented storage. It holds no weight
// bytes; it tracks which holders have which chunks of which immutable version, commits a version
// once one holder has all of it, answers `latest`, ranks sources for readers, and keeps leases,
// retention and holder liveness. This class is the pure state machine: no I/O, time passed in,
// so that every rule can be tested directly; the service around it speaks the protocol.
//
// Rules (the weight store semantics):
// - versions of a model are increasing integers; a version is committed once one holder has
//   every chunk verified; `latest` is the highest committed version and never goes backwards;
// - read plans rank the holders of each chunk: same host, same rack, same datacenter, remote;
//   among equals the least loaded (fewest active leases);
// - a plan holds a lease on the holders it names; a holder that unpublishes gets no new leases
//   and may free its copy once its leases have drained (been released or expired);
// - retention keeps the newest K committed versions and pinned ones; holders ask which to drop;
// - memory stays bounded in a long job: a version that retention no longer keeps is erased
//   (manifest, pins) once no copy, lease or relay read names it, and an unpublished copy once it
//   has drained for one lease time-to-live (its holder has long asked and freed it by then). A
//   late message about an erased version or copy gets not_found, like one the store never knew;
//   a version at or below the newest one erased is never created again by a registration (see
//   register_holder). A lease lives at most lease_max_life however often it is renewed, so one
//   reader cannot keep a retired copy from draining;
// - a relay that the store has pointed at a source (chain_source) keeps that source's copy from
//   draining until the relay asks again or holds every chunk: relays read without leases, and
//   this is what keeps a publisher that hands a version off from freeing it under a relay's GETs;
// - holders that stop sending heartbeats expire; a restarted store rebuilds from holders'
//   re-registrations (which carry the manifest), and the version counter resumes from them.
//
// Thread safety: none; the service owns it on its loop thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.hpp"
#include "format/manifest.hpp"

namespace sluice::weightstore {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

struct Topology {
  std::string host;
  std::string rack;
  std::string datacenter;
};

// Version numbers are below 2^53: exact as JSON numbers everywhere (Python, JavaScript), and far
// from wrapping when the actor counts on from the store's latest.
inline constexpr std::uint64_t kMaxVersion = (1ull << 53) - 1;

// 0 same host, 1 same rack, 2 same datacenter, 3 remote.
int distance(const Topology& a, const Topology& b);

struct StoreConfig {
  std::uint32_t keep_versions = 2;      // newest committed versions kept per model (>= 2)
  Millis holder_ttl{3000};              // a holder without a heartbeat for this long expires
  Millis lease_ttl{10000};              // a lease not renewed for this long expires
  std::uint32_t sources_per_chunk = 4;  // ranked sources returned per chunk
  // How relays are arranged to receive a new version: "chain" (each pulls from the relay that
  // joined before it), "tree" (from relay (i-1)/fanout, the publisher at the root), or "direct"
  // (every relay from a complete holder, as when the publisher sends every copy itself).
  std::string broadcast = "chain";
  std::uint32_t fanout = 2;
  // A new version more than this far above the model's newest known version is refused (a
  // version the store does not know yet may not jump ahead; with nothing known, as after a
  // restart, only kMaxVersion bounds it).
  std::uint64_t max_version_ahead = 1u << 20;
  // A lease expires this long after it was granted, renewed or not (> 0): longer than any one
  // read of a version takes, short enough that a retired copy is freed in bounded time.
  Millis lease_max_life{3600000};
  // Per authenticated identity (curve mode): at most this many active leases (version and delta
  // leases together) and pins, so that one member that plans or pins without end cannot grow
  // the store's tables; beyond them plan, delta_plan and pin are resource_exhausted. Plain mode
  // has no identities: its leases are bounded by lease_ttl alone.
  std::uint32_t max_leases_per_identity = 256;
  std::uint32_t max_pins_per_identity = 16;
};

struct HolderRegistration {
  std::string holder_id;   // unique per holder process ("relay-3")
  std::string endpoint;    // its control endpoint
  std::string descriptor;  // its RegionDescriptor for this version (encoded)
  Topology topology;
  core::Manifest manifest;   // the version it holds
  std::vector<bool> chunks;  // verified chunks; empty means all of them
  // Registered again because this store did not know the holder (it restarted): readers may
  // hold leases on the copy that this store never granted, so it does not count as drained
  // for one lease time-to-live.
  bool again = false;
};

// One holder's copy of a version, as holders() reports it (cheap, takes no lease): a publisher
// asks it to learn when another holder can take its place.
struct HolderState {
  std::string holder_id;
  std::size_t chunks = 0;    // verified chunks it holds
  bool complete = false;     // it holds every chunk
  bool unpublished = false;  // it is dropping this copy: no new readers are sent to it
  bool relay = false;        // it joined as a relay (an always-on holder)
};

struct ChunkSources {
  std::vector<std::uint32_t> holders;  // indices into ReadPlan::holders, best first
};

struct ReadPlan {
  core::Manifest manifest;
  struct Holder {
    std::string holder_id;
    std::string endpoint;
    std::string descriptor;
    int distance = 3;
  };
  std::vector<Holder> holders;
  std::vector<ChunkSources> chunks;
  std::uint64_t lease_id = 0;
};

// A delta: an immutable object that rebuilds version `target` of `model` from version `base`
// bit for bit (format/delta.hpp), with its own size and a checksum per chunk of its bytes, so that
// it is read and verified like a version. Holders offer it, and readers read it, under the same
// leases; it is offered only while both versions are retained.
struct DeltaObject {
  std::string model;
  std::uint64_t base = 0;
  std::uint64_t target = 0;
  std::uint64_t bytes = 0;               // the delta's size
  std::uint64_t chunk_bytes = 0;         // how it is cut for reads
  std::vector<std::uint64_t> checksums;  // one per chunk of its bytes (XXH3)

  // A model, base < target, positive sizes, one checksum per chunk.
  core::Status validate() const;
  core::RegionLayout layout() const;
  bool operator==(const DeltaObject&) const = default;
};

struct DeltaRegistration {
  std::string holder_id;
  std::string endpoint;
  std::string descriptor;  // its RegionDescriptor of the delta's bytes (encoded)
  Topology topology;
  DeltaObject delta;  // held whole: a delta is offered once it is complete
};

// What a reader that holds `base` learns about reading `target` as a delta.
struct DeltaPlan {
  // Some live holder offers the delta: `delta`, `holders` (best first) and the lease are set.
  bool available = false;
  // None yet, but a live relay that makes deltas holds some of base or target: it is likely to
  // come (a reader may wait a little for it).
  bool expected = false;
  DeltaObject delta;
  std::uint64_t target_bytes = 0;  // the full version's size, to compare with delta.bytes
  std::vector<ReadPlan::Holder> holders;
  std::uint64_t lease_id = 0;
};

// One holder's copy of a delta, as deltas() lists them.
struct DeltaState {
  std::string holder_id;
  std::uint64_t base = 0;
  std::uint64_t target = 0;
  std::uint64_t bytes = 0;
  bool unpublished = false;
};

class WeightStore {
 public:
  explicit WeightStore(StoreConfig config = {});

  // A manifest for a new version (the publisher's first step). A version lower than or equal
  // to the model's newest known version is refused unless it repeats an identical manifest; so
  // is one beyond the bounds of a new version (check_new_version). Whether the manifest is the
  // actor's (its signature) is the service's check, made before this is called.
  core::Status put_manifest(const core::Manifest& m);
  // Whether `version` of `model` may be created now: 1 to kMaxVersion, and at most
  // max_version_ahead above the model's newest known version. invalid_argument naming the bound.
  core::Status check_new_version(const std::string& model, std::uint64_t version) const;

  // A holder says what it holds (first time, or again after a store restart: then the manifest
  // it carries re-creates the version, within check_new_version's bounds; the service checks
  // first that the actor signed it). Commits the version if this holder has every chunk.
  // not_found for a version this store erased (or one below it that it does not know): a late
  // registration never brings a retired version back.
  // `owner`: the authenticated identity that sent the registration (empty in plain mode). The
  // first registration binds the holder id to its owner for as long as the holder lives; a
  // registration of that id by another identity is permission_denied and changes nothing.
  core::Status register_holder(const HolderRegistration& r, Clock::time_point now,
                               const std::string& owner = {});
  // Whether `identity` may act for holder `holder_id` (report chunks, heartbeat, unpublish, ask
  // whether it drained): ok when the identity is the one that registered it, when the request
  // is unauthenticated (empty identity: plain mode) or when the store does not know the holder
  // (the request itself then answers not_found); permission_denied otherwise.
  core::Status check_owner(const std::string& holder_id, const std::string& identity) const;
  // The store's manifest of `model`@`version` (committed or not); null when it has none.
  const core::Manifest* manifest(const std::string& model, std::uint64_t version) const;
  // Whether the store has a manifest for `model`@`version` (committed or not).
  bool knows(const std::string& model, std::uint64_t version) const;
  // A partial holder's newly verified chunks.
  core::Status add_chunks(const std::string& holder_id, const std::string& model,
                          std::uint64_t version, const std::vector<std::uint32_t>& chunks,
                          Clock::time_point now);
  core::Status heartbeat(const std::string& holder_id, Clock::time_point now);

  // The holder will drop or overwrite this version: no new leases on it from now on.
  core::Status unpublish(const std::string& holder_id, const std::string& model,
                         std::uint64_t version);
  // Whether an unpublished copy may be freed: no lease on it is still active, no relay that is
  // still receiving the version was last pointed at it by chain_source, and it was not
  // registered again (after a restart) less than one lease time-to-live ago. not_found when the
  // store does not know the holder or the copy (it restarted, or the holder expired): "unknown",
  // never "drained", so that nobody frees memory a reader may still be reading on its word.
  core::Result<bool> drained(const std::string& holder_id, const std::string& model,
                             std::uint64_t version) const;

  // A hash of everything the store acts on (versions, holders and their chunks, leases, the
  // relay chain): equal before and after a request means the request changed nothing.
  std::string state_digest() const;

  // The highest committed version; not_found before the first commit.
  core::Result<std::uint64_t> latest(const std::string& model) const;
  bool committed(const std::string& model, std::uint64_t version) const;

  // A read plan for a committed version (0 means latest), ranked for a reader at `where`.
  // Takes a lease on the holders it names, bound to `owner` (the authenticated identity that
  // asked; empty in plain mode). failed_precondition for an uncommitted version, unavailable
  // when some chunk has no live holder. A host share's (core::share_model) plan is given while
  // the share arrives, committed or not: a chunk no copy holds yet has no holders.
  core::Result<ReadPlan> plan(const std::string& model, std::uint64_t version,
                              const Topology& where, Clock::time_point now,
                              const std::string& owner = {});
  // Only the identity a lease is bound to renews or releases it (permission_denied otherwise,
  // and nothing changes); an empty `identity` (plain mode) may act on any lease. A lease or a
  // delta lease, by id; not_found when it is not active. Renewing extends a lease by lease_ttl,
  // never past lease_max_life from when it was granted (one that reached it is dropped).
  core::Status renew(std::uint64_t lease_id, Clock::time_point now,
                     const std::string& identity = {});
  core::Status release(std::uint64_t lease_id, const std::string& identity = {});

  // Pins keep a version from retention while generation still uses it. `owner` names the
  // pinning member: the service passes the authenticated identity (curve), never another's.
  core::Status pin(const std::string& model, std::uint64_t version, const std::string& owner);
  void unpin(const std::string& model, std::uint64_t version, const std::string& owner);
  // Versions of `model` that retention keeps (newest K committed, and pinned ones).
  std::set<std::uint64_t> retained(const std::string& model) const;

  // Drops holders without a heartbeat and leases past their ttl, then erases what retention and
  // drained copies allow (see the rules above). Returns the expired holder ids.
  std::vector<std::string> expire(Clock::time_point now);

  // How many entries the store's tables hold: bounded by the versions retained and the copies
  // live holders hold, however many versions went before (a long job's memory stays flat).
  struct Sizes {
    std::size_t versions = 0;       // manifests kept, all models
    std::size_t copies = 0;         // holders' copies of versions
    std::size_t chunk_entries = 0;  // per-chunk entries: manifests' checksums and copies' bitmaps
    std::size_t leases = 0;         // version and delta leases
    std::size_t chain_reads = 0;    // relays' current sources
    std::size_t deltas = 0;         // holders' copies of deltas
    std::size_t pins = 0;           // pins, all versions
  };
  Sizes sizes() const;

  // Relays: a relay joins once (and again after a store restart); the order of joining is the
  // order of the broadcast chain.
  // `owner`: the authenticated identity that joins (empty in plain mode); the relay's holder id
  // is bound to it as register_holder binds one, and another identity's join of it is
  // permission_denied and changes nothing.
  // `share`: empty for a relay that holds whole versions; for a host-share relay a name of the
  // share it holds ("tp4.1"): relays of one share form a chain of their own, apart from every
  // other share's and from the whole versions' (see chain_source).
  core::Status join_relay(const std::string& relay_id, const Topology& topology,
                          Clock::time_point now, const std::string& owner = {},
                          const std::string& share = {});
  // With "chain" and datacenter labels on the relays, the chain runs per datacenter: each
  // datacenter's first relay (its seed) pulls from the seed of the datacenter before it (the
  // publisher's datacenter first, then the others in the order their seeds joined; the
  // publisher's own seed from the publisher), and every other relay from the relays before it
  // in its own datacenter; a relay waits for a live ancestor that has not started on the
  // version rather than read across the WAN, and without a live ancestor reads from the nearest
  // complete holder. So each datacenter's WAN link carries about one copy of a version in and
  // at most one out. Without datacenter labels, the chain is the plain join order:
  // Where relay `relay_id` pulls `model`@`version` from: the nearest live relay before it in the
  // chain that holds any of it (a partial holder serves the chunks it has verified), else a
  // holder with all of it that is not a relay behind it (the publisher), and failing those a
  // complete relay behind it (after the publisher handed the version off, a relay that fell
  // behind must still complete). Holders in `exclude` are skipped (ones that just failed).
  // The source named stays undrained for this relay until it asks again or completes (see
  // drained()). unavailable when there is none.
  // A share's model (core::share_model): the chain is the relays that joined with the same
  // share; its head, and any relay with no live ancestor holding the share, is named a complete
  // holder of the parent version (`model` then says so) and reads its share's pieces from it.
  struct CopyInfo {
    std::string holder_id;
    std::string model;  // the model the source holds: empty for the one asked about
    std::string endpoint;
    std::string descriptor;
    std::vector<bool> chunks;
    int distance = 3;                     // from the relay to this holder (the service fills it in)
    bool feeds_other_datacenter = false;  // the asking relay's (the service fills it in)
  };
  core::Result<CopyInfo> chain_source(const std::string& model, std::uint64_t version,
                                      const std::string& relay_id,
                                      const std::set<std::string>& exclude);
  // Whether a relay of another datacenter reads `model`@`version` from relay `relay_id` in the
  // chain: it is its datacenter's seed, and a seed of another datacenter comes after it. The
  // service tells the relay so with its source (CopyInfo::feeds_other_datacenter), and the relay
  // then makes deltas for that link with no setting (relay.deltas_for_other_datacenters).
  bool feeds_other_datacenter(const std::string& model, std::uint64_t version,
                              const std::string& relay_id) const;
  // Every registered copy of a version: holder id and how many chunks it has.
  std::vector<std::pair<std::string, std::size_t>> copies(const std::string& model,
                                                          std::uint64_t version) const;
  // Every registered copy of a version with its state, in holder id order; empty when nobody
  // holds it.
  std::vector<HolderState> holders(const std::string& model, std::uint64_t version) const;

  // Deltas (store_delta.cpp). A holder offers a delta it holds whole; both versions must be
  // known and retained, of one size and chunk size. Each offer is bound to its holder: holders
  // may describe the same pair differently (a delta's bytes are checked against its holder's
  // description, and what it rebuilds against the target's signed digests), so that an early
  // bogus offer blocks nobody's honest one. Binds the holder to `owner` as register_holder does.
  core::Status register_delta(const DeltaRegistration& r, Clock::time_point now,
                              const std::string& owner = {});
  // A relay that makes deltas (its configuration says so): readers waiting for a delta are told
  // one is expected while it holds the versions.
  void set_delta_maker(const std::string& relay_id, bool makes);
  // For a reader at `where` that holds `base`: whether and where `target` can be read as a
  // delta. Where holders describe it differently, the description a delta-making relay offers
  // is chosen, else the one most holders offer; only its holders are named. Takes a lease on
  // them when available. failed_precondition when target
  // is not committed; not_found when base or target is not retained (no delta is kept then).
  // The lease is bound to `owner` as plan()'s is.
  core::Result<DeltaPlan> delta_plan(const std::string& model, std::uint64_t base,
                                     std::uint64_t target, const Topology& where,
                                     Clock::time_point now, const std::string& owner = {});
  // The holder drops its delta: no new leases on it. Returns whether it drained (no lease on it
  // is active); once drained the store forgets the copy, and the holder may free it. not_found
  // when the store does not know the copy: unknown, never drained.
  core::Result<bool> unpublish_delta(const std::string& holder_id, const std::string& model,
                                     std::uint64_t base, std::uint64_t target);
  core::Result<bool> delta_drained(const std::string& holder_id, const std::string& model,
                                   std::uint64_t base, std::uint64_t target);
  // The copies of deltas of `model` that are offered now (both versions retained), by pair.
  std::vector<DeltaState> deltas(const std::string& model) const;
  // Topology distance between two live holders (3 when either is unknown).
  int holder_distance(const std::string& a, const std::string& b) const;

  std::size_t holder_count() const { return holders_.size(); }
  // The models the store has a version of.
  std::vector<std::string> models() const;
  std::size_t active_leases(const std::string& holder_id) const;

 private:
  struct Copy {  // one holder's copy of one version
    std::string endpoint;
    std::string descriptor;
    std::vector<bool> chunks;
    bool unpublished = false;
    // Registered again after a restart: leases from before may be out until then (see again).
    std::optional<Clock::time_point> leases_unknown_until;
    // Unpublished and drained since then (expire() sees it): erased one lease ttl later.
    std::optional<Clock::time_point> drained_since;
  };
  using DeltaKey = std::tuple<std::string, std::uint64_t, std::uint64_t>;  // model, base, target
  struct DeltaCopy {
    std::string endpoint;
    std::string descriptor;
    DeltaObject object;  // as this holder described it
    bool unpublished = false;
  };
  // A copy or a delta that a plan may name: ranked once, nearest first, then least loaded
  // (leases on its holder), then by holder id for a stable order.
  template <typename C>
  struct Candidate {
    std::string id;
    const C* copy;
    int dist;
    std::size_t load;
    bool operator<(const Candidate& o) const {
      return std::tie(dist, load, id) < std::tie(o.dist, o.load, o.id);
    }
  };
  struct Holder {
    std::string owner;  // the authenticated identity that registered it (empty: plain mode)
    std::string share;  // a relay's share as it joined (empty: whole versions)
    Topology topology;
    Clock::time_point last_seen;
    std::map<std::pair<std::string, std::uint64_t>, Copy> copies;  // (model, version)
    std::map<DeltaKey, DeltaCopy> deltas;
  };
  struct Version {
    core::Manifest manifest;
    bool committed = false;
    std::set<std::string> pins;
  };
  struct Model {
    std::map<std::uint64_t, Version> versions;
    std::uint64_t latest = 0;  // 0: nothing committed yet
    std::uint64_t erased = 0;  // the newest version erased (0: none)
  };
  struct Lease {
    std::string model;
    std::uint64_t version;
    std::vector<std::string> holders;
    Clock::time_point expires;
    std::string owner;           // the identity that took it (empty: plain mode)
    Clock::time_point deadline;  // lease_max_life after it was granted
  };
  // Files lease `l` (a Lease or a DeltaLease) in `table` under the next lease id, bound to `owner`,
  // living lease_ttl from `now` and never past lease_max_life; returns the id.
  template <typename L>
  std::uint64_t grant(std::map<std::uint64_t, L>& table, L l, Clock::time_point now,
                      const std::string& owner) {
    l.deadline = now + config_.lease_max_life;
    l.expires = std::min(now + config_.lease_ttl, l.deadline);
    l.owner = owner;
    const std::uint64_t id = next_lease_++;
    count_lease(l, +1);
    table[id] = std::move(l);
    return id;
  }
  // Drops lease `it` from `table`, and from the counts.
  template <typename L>
  typename std::map<std::uint64_t, L>::iterator drop_lease(
      std::map<std::uint64_t, L>& table, typename std::map<std::uint64_t, L>::iterator it) {
    count_lease(it->second, -1);
    return table.erase(it);
  }
  // What a lease adds to (or, with -1, takes from) the counts below.
  struct DeltaLease;
  void count_lease(const Lease& l, int by);
  void count_lease(const DeltaLease& l, int by);
  // resource_exhausted when `owner` already holds max_leases_per_identity leases.
  core::Status check_lease_cap(const std::string& owner) const;
  // Clears the pins of an expired holder: those under its id, and those of its identity when no
  // live holder of that identity is left.
  void unpin_holder(const std::string& holder_id, const std::string& owner);
  // Whether `identity` may renew or release a lease bound to `owner`.
  static core::Status check_lease_owner(std::uint64_t lease_id, const std::string& owner,
                                        const std::string& identity);

  Version* find_version(const std::string& model, std::uint64_t version);
  const Copy* find_copy(const std::string& holder_id, const std::string& model,
                        std::uint64_t version) const;
  void maybe_commit(const std::string& model, std::uint64_t version, const Copy& c);
  // What expire() erases: drained unpublished copies, then retired versions nothing names.
  void erase_retired(Clock::time_point now);
  // Whether a relay still receiving `model`@`version` was last pointed at `source` (it may be
  // mid-GET there: relays take no lease).
  bool relay_reading(const std::string& source, const std::string& model,
                     std::uint64_t version) const;
  // Whether the holder has registered `version` of `model` or a newer one (it started on it, or
  // moved past it and never will).
  bool started_on(const std::string& holder_id, const std::string& model,
                  std::uint64_t version) const;
  // A host share's head source: the nearest complete holder of the parent version, the
  // publisher before a whole relay (its pieces are read and checked against declared checksums).
  std::optional<CopyInfo> share_head_source(const std::string& model, std::uint64_t version,
                                            const std::string& relay_id,
                                            const std::set<std::string>& exclude);
  // The relays of `relay_id`'s share (or, with none, of whole versions) in join order.
  std::vector<std::pair<std::uint64_t, std::string>> chain_order(const std::string& relay_id) const;
  // Its ancestors in `order`, nearest first, without datacenter labels (see chain_source).
  std::vector<std::string> ancestors_of(
      const std::string& relay_id,
      const std::vector<std::pair<std::uint64_t, std::string>>& order) const;
  // Whether some relay has a datacenter label: the chain then runs per datacenter.
  bool labelled_datacenters() const;
  // A live holder's datacenter label (empty when it has none or is unknown).
  const std::string& holder_dc(const std::string& id) const;
  // The seeds (each datacenter's first relay by join) in chain order: the publisher's
  // datacenter's first, then the others in the order their seeds joined.
  std::vector<std::string> seed_chain(
      const std::string& model, std::uint64_t version,
      const std::vector<std::pair<std::uint64_t, std::string>>& order) const;
  // A chain over datacenters: `relay_id`'s ancestors, nearest first (`order`: relays by join).
  std::vector<std::string> dc_ancestors(
      const std::string& model, std::uint64_t version, const std::string& relay_id,
      const std::vector<std::pair<std::uint64_t, std::string>>& order) const;

  StoreConfig config_;
  std::map<std::string, Model> models_;
  std::map<std::string, Holder> holders_;
  std::map<std::uint64_t, Lease> leases_;
  struct DeltaLease {
    DeltaKey key;
    std::vector<std::string> holders;
    Clock::time_point expires;
    std::string owner;           // as Lease::owner
    Clock::time_point deadline;  // lease_max_life after it was granted
  };
  std::map<std::uint64_t, DeltaLease> delta_leases_;  // share next_lease_ with leases_
  // Counts kept beside the lease tables, so that no question costs a pass over every lease:
  // active leases (both kinds) per identity; version leases per holder, and per holder's copy.
  std::map<std::string, std::uint32_t> leases_by_owner_;
  std::map<std::string, std::uint32_t> leases_by_holder_;
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::uint32_t> leases_by_copy_;
  std::map<std::string, std::uint32_t> pins_by_owner_;  // pins per identity (curve mode)
  std::set<std::string> delta_makers_;                  // relays that make deltas
  core::Result<bool> delta_drain(const std::string& holder_id, const DeltaKey& key, bool unpublish);
  std::map<std::string, std::uint64_t> relay_order_;  // relay id -> join sequence
  // (relay id, model, version) -> the holder chain_source last named for that relay to read from.
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::string> chain_reads_;
  std::uint64_t next_relay_ = 1;
  std::uint64_t next_lease_ = 1;
};

}  // namespace sluice::weightstore
