#include "relay/relay_state.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

namespace sluice::relay {

namespace {

// How often a relay waiting for an expected delta asks the store again.
constexpr Millis kDeltaReask{50};
// How often the relay tells the store it is alive (well within the store's holder_ttl).
constexpr Millis kHeartbeat{250};

}  // namespace

bool CopyState::busy() const {
  return !reading.empty() || asking || reporting || lent > 0 || delta == Delta::kAsking;
}

RelayState::RelayState(RelayConfig config) : config_(std::move(config)) {}

CopyState* RelayState::find_mut(std::uint64_t version) {
  for (auto& c : copies_)
    if (c.manifest.version == version) return &c;
  return nullptr;
}

const CopyState* RelayState::find(std::uint64_t version) const {
  for (const auto& c : copies_)
    if (c.manifest.version == version) return &c;
  return nullptr;
}

Actions RelayState::housekeeping(Clock::time_point now) {
  Actions out;
  if (!joined_) {
    out.push_back(action::Join{});
    return out;
  }
  if (reoffer_at_ && now >= *reoffer_at_) {
    reoffer_at_.reset();
    out.push_back(action::ReofferDeltas{});
  }
  if (now - last_heartbeat_ >= kHeartbeat) {
    last_heartbeat_ = now;
    out.push_back(action::Heartbeat{});  // a store that restarted: join again, then register again
  }
  return out;
}

Actions RelayState::store_forgot(Clock::time_point now) {
  // Deltas are offered again once the copies they refer to are back.
  if (config_.make_deltas || fed_other_datacenter_) reoffer_at_ = now + kHeartbeat;
  return {action::Join{true}};
}

// Not while a version is being received and progressing (one version at a time bounds the
// memory); one that made no progress for abandon_after_ms is given up.
Actions RelayState::latest_seen(std::uint64_t version, Clock::time_point now) {
  Actions out;
  if (!copies_.empty() && copies_.back().manifest.version >= version) return out;
  bool may = true;
  for (auto& c : copies_) {
    if (c.complete || c.abandoned) continue;
    auto idle = now - c.progressed;
    if (idle < Millis(config_.abandon_after_ms)) {
      may = false;
      continue;
    }
    out.push_back(
        action::GiveUp{c.manifest.version,
                       static_cast<std::size_t>(std::count(c.have.begin(), c.have.end(), true)),
                       c.have.size(), std::chrono::duration_cast<Millis>(idle)});
    c.abandoned = true;
  }
  if (may) out.push_back(action::StartVersion{version});
  return out;
}

// A host share: the one layout of share_tp_size that the actor declared, rank share_rank.
core::Result<NewCopy> RelayState::prepare(const core::Manifest& m) const {
  NewCopy c;
  c.manifest = m;
  if (config_.share_tp_size > 0) {
    const core::ShardChecksums* declared = nullptr;
    for (const auto& sc : m.shards) {
      if (sc.tp_size != config_.share_tp_size) continue;
      if (declared) {
        return core::failed_precondition("the version declares more than one layout of tp_size " +
                                         std::to_string(config_.share_tp_size) +
                                         ": a host share needs exactly one");
      }
      declared = &sc;
    }
    if (!declared) {
      return core::failed_precondition(
          "the version declares no layout of tp_size " + std::to_string(config_.share_tp_size) +
          " (the actor's shard layouts): a host share is verified against declared checksums");
    }
    core::ShardLayout l;
    l.tp_size = config_.share_tp_size;
    l.tp_rank = config_.share_rank;
    l.splits = core::splits_by_name(m, declared->splits);
    SLUICE_ASSIGN_OR_RETURN(c.share, core::plan_shard(m, l));
    SLUICE_ASSIGN_OR_RETURN(core::Manifest share,
                            core::share_manifest(m, core::share_model(m.model, l.tp_size, l.tp_rank,
                                                                      declared->splits)));
    c.parent = m;
    c.manifest = std::move(share);
  }
  if (c.manifest.total_bytes > config_.max_version_bytes) {
    return core::invalid_argument(std::to_string(c.manifest.total_bytes) +
                                  " bytes exceed max_version_bytes " +
                                  std::to_string(config_.max_version_bytes));
  }
  return c;
}

void RelayState::add(NewCopy n, Clock::time_point now) {
  CopyState c;
  c.manifest = std::move(n.manifest);
  c.parent = std::move(n.parent);
  c.share = std::move(n.share);
  c.have.assign(c.manifest.chunk_count(), false);
  c.delta_since = c.progressed = now;
  if (config_.use_deltas && !copies_.empty() && !c.parent) c.delta = CopyState::Delta::kWanted;
  copies_.push_back(std::move(c));
}

Actions RelayState::tick(Clock::time_point now) {
  Actions out;
  for (auto& c : copies_) {
    pump(c, now, out);
    report(c, out);
  }
  retire_old(out);
  return out;
}

// Keeps up to config.in_flight chunk reads going from the source, each chunk reported to the
// store as soon as it is verified, so that the next relay can start on it at once.
void RelayState::pump(CopyState& c, Clock::time_point now, Actions& out) {
  if (c.complete || c.abandoned || stopping_) return;
  if (c.delta != CopyState::Delta::kNone) want_delta(c, now, out);
  const std::uint64_t chunks = c.manifest.chunk_count();
  bool waiting = false;  // everything the source has is here or on its way
  if (!c.source.empty() && c.delta == CopyState::Delta::kNone) {
    for (std::uint32_t i = 0; i < chunks; ++i) {
      if (c.reading.size() >= config_.in_flight) break;
      if (c.have[i] || c.reading.count(i)) continue;
      if (c.source_whole) {
        read_share_chunk(c, i, out);  // from a complete holder
        continue;
      }
      if (i >= c.source_has.size() || !c.source_has[i]) continue;
      read_chunk(c, i, out);
    }
    waiting = c.reading.size() < config_.in_flight;
  }
  // Asked again now and then even with work at hand: early in a version the store may name a
  // complete holder further up (the source had nothing yet), and the chain only forms once
  // each relay moves on to its predecessor.
  auto since = now - c.asked;
  if (!c.asking && (c.source.empty() || (waiting && since >= Millis(config_.follow_poll_ms)) ||
                    since >= Millis(config_.reask_ms)))
    ask_source(c, now, out);
}

void RelayState::ask_source(CopyState& c, Clock::time_point now, Actions& out) {
  c.asking = true;
  c.asked = now;
  weightstore::ChainSourceRequest req;
  req.model = c.manifest.model;
  req.version = c.manifest.version;
  req.relay_id = config_.relay_id;
  req.exclude = c.failed_sources;
  if (config_.follow_wait_ms > 0) {
    // Parked at the store until there is something new to say (another source, or more of
    // this one), so the relay asks again as soon as an answer comes.
    req.following = c.source;
    req.after_chunks =
        static_cast<std::uint64_t>(std::count(c.source_has.begin(), c.source_has.end(), true));
    req.wait_ms = config_.follow_wait_ms;
  }
  out.push_back(action::AskSource{std::move(req)});
}

namespace {
// Chunk i's place in a version, from the manifest's sizes alone: Manifest::layout() would copy
// every chunk's checksum and digest, once for each chunk read.
std::pair<std::uint64_t, std::uint64_t> chunk_span(const core::Manifest& m, std::uint32_t i) {
  const std::uint64_t off = std::uint64_t{i} * m.chunk_bytes;
  return {off, off >= m.total_bytes ? 0 : std::min(m.chunk_bytes, m.total_bytes - off)};
}

// The read of chunk i from the copy's source, without its pieces.
action::ReadChunk chunk_read(const CopyState& c, std::uint32_t i) {
  action::ReadChunk a;
  a.version = c.manifest.version;
  a.chunk = i;
  a.source = c.source;
  a.desc = c.source_desc;
  std::tie(a.offset, a.bytes) = chunk_span(c.manifest, i);
  a.checksum = c.manifest.checksums[i];
  if (!c.manifest.digests.empty()) a.digest = c.manifest.digests[i];
  return a;
}
}  // namespace

void RelayState::read_chunk(CopyState& c, std::uint32_t i, Actions& out) {
  action::ReadChunk a = chunk_read(c, i);
  core::ChunkRead r;
  r.src_offset = r.dst_offset = a.offset;
  r.bytes = a.bytes;
  r.checksum = a.checksum;
  r.digest = a.digest;
  a.reads.push_back(r);
  c.reading.insert(i);
  out.push_back(std::move(a));
}

// A host share's chunk i from a complete holder of the whole version: the share's pieces that
// fall in it.
void RelayState::read_share_chunk(CopyState& c, std::uint32_t i, Actions& out) {
  action::ReadChunk a = chunk_read(c, i);
  a.pieces = true;
  const std::uint64_t from_off = a.offset, to_off = from_off + a.bytes;
  const auto& ps = c.share.pieces;
  auto it = std::upper_bound(
      ps.begin(), ps.end(), from_off,
      [](std::uint64_t off, const core::ShardPiece& p) { return off < p.dst_offset; });
  if (it != ps.begin()) --it;
  for (; it != ps.end() && it->dst_offset < to_off; ++it) {
    const std::uint64_t lo = std::max(from_off, it->dst_offset);
    const std::uint64_t hi = std::min(to_off, it->dst_offset + it->bytes);
    if (lo >= hi) continue;
    core::ChunkRead r;
    r.src_offset = it->src_offset + (lo - it->dst_offset);
    r.dst_offset = lo;
    r.bytes = hi - lo;
    a.reads.push_back(r);
  }
  c.reading.insert(i);
  out.push_back(std::move(a));
}

Actions RelayState::source_named(std::uint64_t version, NamedSource s, Clock::time_point now) {
  Actions out;
  CopyState* c = find_mut(version);
  if (!c) return out;
  c->asking = false;
  if (!s.model.empty() && (!c->parent || s.model != c->parent->model)) {
    // The store named a copy of another model: as no answer.
    return out;
  }
  c->source = std::move(s.holder_id);
  c->source_whole = !s.model.empty();
  c->source_distance = s.distance;
  c->source_desc = std::move(s.desc);
  c->source_has = std::move(s.chunks);
  c->feeds_other_datacenter = s.feeds_other_datacenter;
  fed_other_datacenter_ = fed_other_datacenter_ || s.feeds_other_datacenter;
  pump(*c, now, out);
  return out;
}

void RelayState::source_unknown(std::uint64_t version) {
  if (CopyState* c = find_mut(version)) c->asking = false;
}

Actions RelayState::chunk_done(std::uint64_t version, std::uint32_t i, const std::string& from,
                               bool ok, Clock::time_point now) {
  Actions out;
  CopyState* c = find_mut(version);
  if (!c) return out;
  c->reading.erase(i);
  if (!ok) {
    c->failed_sources.insert(from);
    if (c->source == from) c->source.clear();
  } else {
    c->have[i] = true;
    c->progressed = now;
    c->unreported.push_back(i);
    check_complete(*c, out);
    report(*c, out);
  }
  pump(*c, now, out);
  return out;
}

void RelayState::check_complete(CopyState& c, Actions& out) {
  c.complete = std::all_of(c.have.begin(), c.have.end(), [](bool b) { return b; });
  if (!c.complete) return;
  action::Completed done{c.manifest.version, std::nullopt};
  const bool auto_delta = config_.deltas_for_other_datacenters && config_.share_tp_size == 0 &&
                          c.feeds_other_datacenter;
  if (config_.make_deltas || auto_delta) {
    if (CopyState* base = base_for(c)) done.delta_base = base->manifest.version;
  }
  out.push_back(done);
}

// The newest complete copy older than `c`: the base of a delta to or from it.
CopyState* RelayState::base_for(const CopyState& c) {
  CopyState* best = nullptr;
  for (auto& o : copies_) {
    if (&o == &c || !o.complete || o.manifest.version >= c.manifest.version) continue;
    if (!best || o.manifest.version > best->manifest.version) best = &o;
  }
  return best;
}

// use_deltas: once the source is known, a remote one is replaced by a delta against the newest
// complete copy when the store offers one (or expects one, for up to delta_wait_ms).
void RelayState::want_delta(CopyState& c, Clock::time_point now, Actions& out) {
  if (c.delta != CopyState::Delta::kWanted || c.source.empty()) return;
  CopyState* base = base_for(c);
  if (c.source_distance < 3 || !base) {
    c.delta = CopyState::Delta::kNone;
    return;
  }
  if (now - c.delta_asked < kDeltaReask) return;
  c.delta = CopyState::Delta::kAsking;
  c.delta_asked = now;
  ++base->lent;
  out.push_back(action::AskDelta{c.manifest.version, base->manifest.version});
}

Actions RelayState::delta_done(std::uint64_t version, std::uint64_t base, DeltaOutcome outcome,
                               std::vector<bool> have, Clock::time_point now) {
  Actions out;
  if (CopyState* b = find_mut(base)) --b->lent;
  CopyState* c = find_mut(version);
  if (!c) return out;
  c->delta = CopyState::Delta::kNone;
  if (outcome == DeltaOutcome::kRead && have.size() == c->have.size()) {
    for (std::uint32_t i = 0; i < have.size(); ++i)
      if (have[i] && !c->have[i]) c->unreported.push_back(i);
    c->have = std::move(have);
    c->progressed = now;
    check_complete(*c, out);
    report(*c, out);
  } else if (outcome == DeltaOutcome::kExpected &&
             now - c->delta_since < Millis(config_.delta_wait_ms)) {
    c->delta = CopyState::Delta::kWanted;  // asked again on a later tick
  }
  pump(*c, now, out);
  return out;
}

// Tells the store which chunks this relay now holds verified (batched while one is out).
void RelayState::report(CopyState& c, Actions& out) {
  if (c.reporting || c.unreported.empty()) return;
  c.reporting = true;
  weightstore::AddChunks add{config_.relay_id, c.manifest.model, c.manifest.version,
                             std::move(c.unreported)};
  c.unreported.clear();
  out.push_back(action::ReportChunks{std::move(add)});
}

Actions RelayState::report_done(std::uint64_t version, std::vector<std::uint32_t> sent, bool ok,
                                Clock::time_point) {
  Actions out;
  CopyState* c = find_mut(version);
  if (!c) return out;
  c->reporting = false;
  if (!ok) c->unreported.insert(c->unreported.end(), sent.begin(), sent.end());
  report(*c, out);
  return out;
}

void RelayState::retire_old(Actions& out) {
  // Beyond keep_versions (copies given up do not count): retired once whole and nothing is in
  // flight for them.
  std::size_t kept = 0;
  for (const auto& c : copies_)
    kept += !c.abandoned;
  while (kept > config_.keep_versions) {
    auto old = std::find_if(copies_.begin(), copies_.end(),
                            [](const CopyState& c) { return !c.abandoned; });
    if (!old->complete || old->busy() || !old->unreported.empty()) break;
    out.push_back(action::Retire{old->manifest.version, true});
    copies_.erase(old);
    --kept;
  }
  // Copies given up, once nothing is in flight for them.
  for (auto it = copies_.begin(); it != copies_.end();) {
    if (it->abandoned && it->complete) it->abandoned = false;  // a late read finished it
    if (!it->abandoned || it->busy()) {
      ++it;
      continue;
    }
    out.push_back(action::Retire{it->manifest.version, false});
    it = copies_.erase(it);
  }
}

std::vector<std::uint64_t> RelayState::withdraw() {
  std::vector<std::uint64_t> versions;
  for (const auto& c : copies_)
    versions.push_back(c.manifest.version);
  copies_.clear();
  return versions;
}

bool RelayState::receiving() const {
  for (const auto& c : copies_)
    if (!c.complete || !c.unreported.empty() || c.reporting) return true;
  return false;
}

}  // namespace sluice::relay
