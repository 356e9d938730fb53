#include "weightstore/store.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/checksum.hpp"
#include "format/shard.hpp"
#include "weightstore/store_parts.hpp"

namespace sluice::weightstore {

using core::Status;
using store_parts::all_set;
using store_parts::vname;

int distance(const Topology& a, const Topology& b) {
  if (!a.host.empty() && a.host == b.host) return 0;
  bool same_dc = a.datacenter == b.datacenter;  // unlabelled on both sides counts as one
  if (same_dc && !a.rack.empty() && a.rack == b.rack) return 1;
  return same_dc ? 2 : 3;
}

WeightStore::WeightStore(StoreConfig config) : config_(config) {
  config_.keep_versions = std::max<std::uint32_t>(2, config_.keep_versions);
}

namespace {
bool same_manifest(const core::Manifest& a, const core::Manifest& b) {
  return a.to_json() == b.to_json();
}
}  // namespace

const WeightStore::Copy* WeightStore::find_copy(const std::string& holder_id,
                                                const std::string& model,
                                                std::uint64_t version) const {
  auto h = holders_.find(holder_id);
  if (h == holders_.end()) return nullptr;
  auto c = h->second.copies.find({model, version});
  return c == h->second.copies.end() ? nullptr : &c->second;
}

WeightStore::Version* WeightStore::find_version(const std::string& model, std::uint64_t version) {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  auto v = m->second.versions.find(version);
  return v == m->second.versions.end() ? nullptr : &v->second;
}

Status WeightStore::check_new_version(const std::string& model, std::uint64_t version) const {
  if (version == 0) return core::invalid_argument("version numbers start at 1");
  if (version > kMaxVersion) {
    return core::invalid_argument(vname(model, version) + ": version numbers stay below 2^53 (" +
                                  std::to_string(kMaxVersion) + " at most)");
  }
  auto m = models_.find(model);
  if (m == models_.end()) return {};
  std::uint64_t newest = m->second.latest;
  if (!m->second.versions.empty()) newest = std::max(newest, m->second.versions.rbegin()->first);
  if (newest > 0 && version - std::min(version, newest) > config_.max_version_ahead) {
    return core::invalid_argument(vname(model, version) + " is more than max_version_ahead (" +
                                  std::to_string(config_.max_version_ahead) +
                                  ") above the newest known version " + std::to_string(newest));
  }
  return {};
}

Status WeightStore::put_manifest(const core::Manifest& m) {
  SLUICE_TRY(m.validate());
  if (m.version == 0) return core::invalid_argument("version numbers start at 1");
  if (auto it = models_.find(m.model); it != models_.end()) {
    if (auto v = it->second.versions.find(m.version); v != it->second.versions.end()) {
      if (same_manifest(v->second.manifest, m)) return {};
      return core::Status(core::Code::kAlreadyExists,
                          vname(m.model, m.version) + " exists with another manifest");
    }
  }
  SLUICE_TRY(check_new_version(m.model, m.version));
  auto& model = models_[m.model];
  if (!model.versions.empty() && m.version < model.versions.rbegin()->first) {
    return core::failed_precondition(vname(m.model, m.version) + " is older than " +
                                     vname(m.model, model.versions.rbegin()->first) +
                                     ": versions only increase");
  }
  model.versions[m.version].manifest = m;
  return {};
}

void WeightStore::maybe_commit(const std::string& model, std::uint64_t version, const Copy& c) {
  Version* v = find_version(model, version);
  if (!v || v->committed) return;
  if (!all_set(c.chunks)) return;
  v->committed = true;
  auto& m = models_[model];
  m.latest = std::max(m.latest, version);  // never backwards
}

Status WeightStore::check_owner(const std::string& holder_id, const std::string& identity) const {
  if (identity.empty()) return {};
  auto h = holders_.find(holder_id);
  if (h == holders_.end() || h->second.owner.empty() || h->second.owner == identity) return {};
  return core::permission_denied("holder '" + holder_id + "' was registered by " + h->second.owner +
                                 ", not by " + identity);
}

const core::Manifest* WeightStore::manifest(const std::string& model, std::uint64_t version) const {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  auto v = m->second.versions.find(version);
  return v == m->second.versions.end() ? nullptr : &v->second.manifest;
}

bool WeightStore::knows(const std::string& model, std::uint64_t version) const {
  auto m = models_.find(model);
  return m != models_.end() && m->second.versions.count(version) > 0;
}

Status WeightStore::register_holder(const HolderRegistration& r, Clock::time_point now,
                                    const std::string& owner) {
  if (r.holder_id.empty()) return core::invalid_argument("holder has no id");
  SLUICE_TRY(check_owner(r.holder_id, owner));
  const auto& man = r.manifest;
  // Everything is checked before anything is kept: a refused registration changes nothing.
  std::size_t n = man.chunk_count();
  if (!r.chunks.empty() && r.chunks.size() != n) {
    return core::invalid_argument("holder " + r.holder_id + ": chunk bitmap of " +
                                  std::to_string(r.chunks.size()) + " for " + std::to_string(n) +
                                  " chunks");
  }
  Version* v = find_version(man.model, man.version);
  if (!v) {
    // After a store restart the holders bring the versions back, in whatever order they
    // reconnect: an older version is accepted here (`latest` still never goes backwards). But
    // not one this store erased, nor one below it: that is a late message about a retired
    // version, and bringing it back would undo retention.
    if (auto m = models_.find(man.model); m != models_.end() && man.version <= m->second.erased) {
      return core::not_found("holder " + r.holder_id + ": " + vname(man.model, man.version) +
                             " was retired and erased (versions up to " +
                             std::to_string(m->second.erased) + " are gone)");
    }
    SLUICE_TRY(man.validate().with_context("holder " + r.holder_id));
    SLUICE_TRY(check_new_version(man.model, man.version).with_context("holder " + r.holder_id));
    models_[man.model].versions[man.version].manifest = man;
    v = find_version(man.model, man.version);
  } else if (!same_manifest(v->manifest, man)) {
    return core::invalid_argument("holder " + r.holder_id + " holds " +
                                  vname(man.model, man.version) +
                                  " with a manifest that differs from the store's");
  }
  auto& h = holders_[r.holder_id];
  if (h.owner.empty()) h.owner = owner;
  h.topology = r.topology;
  h.last_seen = now;
  Copy& c = h.copies[{man.model, man.version}];
  c.endpoint = r.endpoint;
  c.descriptor = r.descriptor;
  c.chunks = r.chunks.empty() ? std::vector<bool>(n, true) : r.chunks;
  c.unpublished = false;
  if (r.again) c.leases_unknown_until = now + config_.lease_ttl;
  // A complete relay reads from nobody: what it was last pointed at may drain.
  if (all_set(c.chunks)) chain_reads_.erase({r.holder_id, man.model, man.version});
  maybe_commit(man.model, man.version, c);
  return {};
}

Status WeightStore::add_chunks(const std::string& holder_id, const std::string& model,
                               std::uint64_t version, const std::vector<std::uint32_t>& chunks,
                               Clock::time_point now) {
  auto h = holders_.find(holder_id);
  if (h == holders_.end()) return core::not_found("no holder '" + holder_id + "'");
  auto c = h->second.copies.find({model, version});
  if (c == h->second.copies.end()) {
    return core::not_found("holder '" + holder_id + "' has not registered " +
                           vname(model, version));
  }
  for (auto i : chunks) {
    if (i >= c->second.chunks.size()) {
      return core::invalid_argument("chunk " + std::to_string(i) + " of " + vname(model, version) +
                                    " does not exist");
    }
  }
  for (auto i : chunks)
    c->second.chunks[i] = true;
  h->second.last_seen = now;
  if (all_set(c->second.chunks)) chain_reads_.erase({holder_id, model, version});
  maybe_commit(model, version, c->second);
  return {};
}

Status WeightStore::heartbeat(const std::string& holder_id, Clock::time_point now) {
  auto h = holders_.find(holder_id);
  if (h == holders_.end()) {
    // A store that restarted does not know it: the holder re-registers.
    return core::not_found("no holder '" + holder_id + "': register again");
  }
  h->second.last_seen = now;
  return {};
}

Status WeightStore::unpublish(const std::string& holder_id, const std::string& model,
                              std::uint64_t version) {
  auto h = holders_.find(holder_id);
  if (h == holders_.end()) return core::not_found("no holder '" + holder_id + "'");
  auto c = h->second.copies.find({model, version});
  if (c == h->second.copies.end()) {
    return core::not_found("holder '" + holder_id + "' does not hold " + vname(model, version));
  }
  c->second.unpublished = true;
  return {};
}

core::Result<bool> WeightStore::drained(const std::string& holder_id, const std::string& model,
                                        std::uint64_t version) const {
  if (!holders_.count(holder_id)) {
    return core::not_found("no holder '" + holder_id + "': whether its readers drained is unknown");
  }
  const Copy* copy = find_copy(holder_id, model, version);
  if (!copy) {
    return core::not_found("holder '" + holder_id + "' has not registered " +
                           vname(model, version) + ": whether its readers drained is unknown");
  }
  if (copy->leases_unknown_until) return false;  // leases a restarted store never saw
  if (leases_by_copy_.count({holder_id, model, version})) return false;
  return !relay_reading(holder_id, model, version);
}

bool WeightStore::relay_reading(const std::string& source, const std::string& model,
                                std::uint64_t version) const {
  // A relay still receiving the version may be mid-GET on this copy: it was pointed here and
  // has not asked for a source since. Once it asks again it is sent elsewhere (an unpublished
  // copy is never named), and once it holds every chunk it reads from nobody.
  for (const auto& [key, named] : chain_reads_) {
    const auto& [relay, m, v] = key;
    // A host-share relay reads its share's pieces from a holder of the parent version.
    const bool of_model = m == model || (core::is_share_model(m) && core::share_parent(m) == model);
    if (!of_model || v != version || named != source) continue;
    const Copy* c = find_copy(relay, m, version);
    if (c && !all_set(c->chunks)) return true;
  }
  return false;
}

std::string WeightStore::state_digest() const {
  // A canonical text of the state (maps iterate in order), hashed.
  std::string t;
  auto add = [&t](const auto&... parts) { ((t += fmt::format("{}|", parts)), ...); };
  for (const auto& [name, m] : models_) {
    add("model", name, m.latest, m.erased);
    for (const auto& [v, ver] : m.versions) {
      add(v, ver.committed, ver.manifest.total_bytes, ver.manifest.chunk_bytes);
      for (auto c : ver.manifest.checksums)
        add(c);
      for (const auto& p : ver.pins)
        add("pin", p);
    }
  }
  for (const auto& [id, h] : holders_) {
    add("holder", id, h.owner, h.topology.host, h.topology.rack, h.topology.datacenter);
    for (const auto& [key, c] : h.copies) {
      add(key.first, key.second, c.endpoint, c.descriptor, c.unpublished,
          c.leases_unknown_until.has_value(), c.drained_since.has_value());
      for (bool b : c.chunks)
        add(b);
    }
  }
  for (const auto& [id, l] : leases_) {
    add("lease", id, l.model, l.version, l.owner, l.expires.time_since_epoch().count());
    for (const auto& h : l.holders)
      add(h);
  }
  for (const auto& [id, n] : relay_order_)
    add("relay", id, n);
  for (const auto& [id, h] : holders_) {
    for (const auto& [key, c] : h.deltas) {
      add("dcopy", id, std::get<0>(key), std::get<1>(key), std::get<2>(key), c.endpoint,
          c.descriptor, c.unpublished, c.object.bytes, c.object.chunk_bytes);
      for (auto x : c.object.checksums)
        add(x);
    }
  }
  for (const auto& [id, l] : delta_leases_) {
    add("dlease", id, std::get<0>(l.key), std::get<1>(l.key), std::get<2>(l.key), l.owner,
        l.expires.time_since_epoch().count());
    for (const auto& h : l.holders)
      add(h);
  }
  for (const auto& id : delta_makers_)
    add("maker", id);
  for (const auto& [key, src] : chain_reads_)
    add("chain", std::get<0>(key), std::get<1>(key), std::get<2>(key), src);
  add(next_relay_, next_lease_);
  return fmt::format("{:016x}", core::chunk_checksum(t.data(), t.size()));
}

std::vector<std::string> WeightStore::models() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : models_)
    out.push_back(name);
  return out;
}

core::Result<std::uint64_t> WeightStore::latest(const std::string& model) const {
  auto m = models_.find(model);
  if (m == models_.end() || m->second.latest == 0) {
    return core::not_found("model '" + model + "' has no committed version");
  }
  return m->second.latest;
}

bool WeightStore::committed(const std::string& model, std::uint64_t version) const {
  auto m = models_.find(model);
  if (m == models_.end()) return false;
  auto v = m->second.versions.find(version);
  return v != m->second.versions.end() && v->second.committed;
}

std::size_t WeightStore::active_leases(const std::string& holder_id) const {
  auto it = leases_by_holder_.find(holder_id);
  return it == leases_by_holder_.end() ? 0 : it->second;
}

namespace {
// Adds `by` (+1 or -1) to table[key], dropping the entry at zero.
template <typename Table, typename Key>
void bump(Table& table, const Key& key, int by) {
  auto& n = table[key];
  n = static_cast<std::uint32_t>(static_cast<std::int64_t>(n) + by);
  if (n == 0) table.erase(key);
}
}  // namespace

void WeightStore::count_lease(const Lease& l, int by) {
  if (!l.owner.empty()) bump(leases_by_owner_, l.owner, by);
  for (const auto& h : l.holders) {
    bump(leases_by_holder_, h, by);
    bump(leases_by_copy_, std::make_tuple(h, l.model, l.version), by);
  }
}

void WeightStore::count_lease(const DeltaLease& l, int by) {
  if (!l.owner.empty()) bump(leases_by_owner_, l.owner, by);
}

Status WeightStore::check_lease_cap(const std::string& owner) const {
  if (owner.empty()) return {};
  auto it = leases_by_owner_.find(owner);
  if (it == leases_by_owner_.end() || it->second < config_.max_leases_per_identity) return {};
  return core::Status(core::Code::kResourceExhausted,
                      fmt::format("{} holds {} leases, the most one member may: release or let "
                                  "some expire before planning again",
                                  owner, it->second));
}

core::Result<ReadPlan> WeightStore::plan(const std::string& model, std::uint64_t version,
                                         const Topology& where, Clock::time_point now,
                                         const std::string& owner) {
  if (version == 0) {
    SLUICE_ASSIGN_OR_RETURN(version, latest(model));
  }
  Version* v = find_version(model, version);
  if (!v) return core::not_found("no " + vname(model, version));
  // A host share is read while it arrives: its plan names the chunks held so far.
  const bool share = core::is_share_model(model);
  if (!v->committed && !share) {
    return core::failed_precondition(vname(model, version) + " is not committed yet");
  }
  SLUICE_TRY(check_lease_cap(owner));
  ReadPlan p;
  p.manifest = v->manifest;
  std::vector<Candidate<Copy>> cands;
  for (const auto& [id, h] : holders_) {
    auto c = h.copies.find({model, version});
    if (c == h.copies.end() || c->second.unpublished) continue;
    cands.push_back({id, &c->second, distance(where, h.topology), active_leases(id)});
  }
  std::sort(cands.begin(), cands.end());
  std::map<std::string, std::uint32_t> index;
  std::size_t n = v->manifest.chunk_count();
  p.chunks.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& c : cands) {
      if (p.chunks[i].holders.size() >= config_.sources_per_chunk) break;
      if (!c.copy->chunks[i]) continue;
      auto [it, added] = index.try_emplace(c.id, static_cast<std::uint32_t>(p.holders.size()));
      if (added) p.holders.push_back({c.id, c.copy->endpoint, c.copy->descriptor, c.dist});
      p.chunks[i].holders.push_back(it->second);
    }
    if (p.chunks[i].holders.empty() && !share) {
      return core::unavailable("chunk " + std::to_string(i) + " of " + vname(model, version) +
                               " has no live holder");
    }
  }
  // A share's copies that hold nothing yet are named too: a reader on their host waits for them.
  if (share) {
    for (const auto& c : cands) {
      if (index.try_emplace(c.id, static_cast<std::uint32_t>(p.holders.size())).second)
        p.holders.push_back({c.id, c.copy->endpoint, c.copy->descriptor, c.dist});
    }
  }
  Lease l;
  l.model = model;
  l.version = version;
  for (const auto& h : p.holders)
    l.holders.push_back(h.holder_id);
  p.lease_id = grant(leases_, std::move(l), now, owner);
  return p;
}

Status WeightStore::check_lease_owner(std::uint64_t lease_id, const std::string& owner,
                                      const std::string& identity) {
  if (identity.empty() || owner.empty() || owner == identity) return {};
  return core::permission_denied("lease " + std::to_string(lease_id) + " was taken by " + owner +
                                 ", not by " + identity);
}

Status WeightStore::renew(std::uint64_t lease_id, Clock::time_point now,
                          const std::string& identity) {
  // A lease never outlives lease_max_life, however often it is renewed: a reader that keeps
  // renewing would otherwise keep a retired copy (a whole version in a relay) forever.
  auto extend = [&](auto& table, auto it) -> Status {
    SLUICE_TRY(check_lease_owner(lease_id, it->second.owner, identity));
    if (now >= it->second.deadline) {
      drop_lease(table, it);
      return core::not_found(fmt::format("lease {} reached its longest life ({} ms): plan again",
                                         lease_id, config_.lease_max_life.count()));
    }
    it->second.expires = std::min(now + config_.lease_ttl, it->second.deadline);
    return {};
  };
  if (auto d = delta_leases_.find(lease_id); d != delta_leases_.end()) {
    return extend(delta_leases_, d);
  }
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return core::not_found("lease " + std::to_string(lease_id) + " expired");
  return extend(leases_, it);
}

Status WeightStore::release(std::uint64_t lease_id, const std::string& identity) {
  if (auto d = delta_leases_.find(lease_id); d != delta_leases_.end()) {
    SLUICE_TRY(check_lease_owner(lease_id, d->second.owner, identity));
    drop_lease(delta_leases_, d);
    return {};
  }
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return core::not_found("lease " + std::to_string(lease_id) + " is not active");
  }
  SLUICE_TRY(check_lease_owner(lease_id, it->second.owner, identity));
  drop_lease(leases_, it);
  return {};
}

Status WeightStore::pin(const std::string& model, std::uint64_t version, const std::string& owner) {
  Version* v = find_version(model, version);
  if (!v) return core::not_found("no " + vname(model, version));
  if (v->pins.count(owner)) return {};
  if (!owner.empty()) {
    auto n = pins_by_owner_.find(owner);
    if (n != pins_by_owner_.end() && n->second >= config_.max_pins_per_identity) {
      return core::Status(core::Code::kResourceExhausted,
                          fmt::format("{} pins {} versions, the most one member may: unpin one "
                                      "before pinning {}",
                                      owner, n->second, vname(model, version)));
    }
    bump(pins_by_owner_, owner, +1);
  }
  v->pins.insert(owner);
  return {};
}

void WeightStore::unpin(const std::string& model, std::uint64_t version, const std::string& owner) {
  Version* v = find_version(model, version);
  if (v && v->pins.erase(owner) && !owner.empty()) bump(pins_by_owner_, owner, -1);
}

void WeightStore::unpin_holder(const std::string& holder_id, const std::string& owner) {
  const bool identity_left =
      owner.empty() || std::any_of(holders_.begin(), holders_.end(),
                                   [&](const auto& h) { return h.second.owner == owner; });
  for (auto& [name, m] : models_) {
    for (auto& [v, ver] : m.versions) {
      for (const std::string& who : {holder_id, identity_left ? std::string() : owner}) {
        if (!who.empty() && ver.pins.erase(who) && pins_by_owner_.count(who)) {
          bump(pins_by_owner_, who, -1);
        }
      }
    }
  }
}

std::set<std::uint64_t> WeightStore::retained(const std::string& model) const {
  std::set<std::uint64_t> keep;
  auto m = models_.find(model);
  if (m == models_.end()) return keep;
  std::uint32_t committed_seen = 0;
  for (auto it = m->second.versions.rbegin(); it != m->second.versions.rend(); ++it) {
    const Version& v = it->second;
    if (!v.committed) {
      keep.insert(it->first);  // in flight: a publish is still under way
    } else if (committed_seen < config_.keep_versions) {
      keep.insert(it->first);
      ++committed_seen;
    }
    if (!v.pins.empty()) keep.insert(it->first);
  }
  return keep;
}

std::vector<std::pair<std::string, std::size_t>> WeightStore::copies(const std::string& model,
                                                                     std::uint64_t version) const {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& [id, h] : holders_) {
    auto c = h.copies.find({model, version});
    if (c == h.copies.end()) continue;
    out.emplace_back(id, static_cast<std::size_t>(
                             std::count(c->second.chunks.begin(), c->second.chunks.end(), true)));
  }
  return out;
}

std::vector<HolderState> WeightStore::holders(const std::string& model,
                                              std::uint64_t version) const {
  std::vector<HolderState> out;
  for (const auto& [id, h] : holders_) {
    auto c = h.copies.find({model, version});
    if (c == h.copies.end()) continue;
    HolderState s;
    s.holder_id = id;
    s.chunks = static_cast<std::size_t>(
        std::count(c->second.chunks.begin(), c->second.chunks.end(), true));
    s.complete = all_set(c->second.chunks);
    s.unpublished = c->second.unpublished;
    s.relay = relay_order_.count(id) > 0;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> WeightStore::expire(Clock::time_point now) {
  std::vector<std::string> gone;
  std::vector<std::pair<std::string, std::string>> unpins;  // (holder id, its owner)
  for (auto it = holders_.begin(); it != holders_.end();) {
    if (now - it->second.last_seen > config_.holder_ttl) {
      gone.push_back(it->first);
      unpins.emplace_back(it->first, it->second.owner);
      relay_order_.erase(it->first);
      for (auto g = chain_reads_.begin(); g != chain_reads_.end();) {
        g = std::get<0>(g->first) == it->first ? chain_reads_.erase(g) : std::next(g);
      }
      it = holders_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, h] : holders_) {
    for (auto& [key, c] : h.copies) {
      if (c.leases_unknown_until && now >= *c.leases_unknown_until) c.leases_unknown_until.reset();
    }
  }
  for (const auto& [id, owner] : unpins)
    unpin_holder(id, owner);
  for (auto it = leases_.begin(); it != leases_.end();)
    it = now > it->second.expires ? drop_lease(leases_, it) : std::next(it);
  for (auto it = delta_leases_.begin(); it != delta_leases_.end();)
    it = now > it->second.expires ? drop_lease(delta_leases_, it) : std::next(it);
  for (const auto& id : gone)
    delta_makers_.erase(id);
  erase_retired(now);
  return gone;
}

void WeightStore::erase_retired(Clock::time_point now) {
  // Copies their holders unpublished: once drained (no lease, no relay reading; that never
  // changes for an unpublished copy until it is registered again), the holder frees the memory
  // on its next question. One lease time-to-live later the store forgets the copy: a holder
  // asking after that hears not_found, which it treats as unknown and answers by waiting one
  // lease time-to-live before it frees (slower, never unsafe).
  for (auto& [id, h] : holders_) {
    for (auto it = h.copies.begin(); it != h.copies.end();) {
      Copy& c = it->second;
      const auto& [model, version] = it->first;
      if (!c.unpublished || !drained(id, model, version).value_or(false)) {
        c.drained_since.reset();
        ++it;
        continue;
      }
      if (!c.drained_since) c.drained_since = now;
      if (now - *c.drained_since >= config_.lease_ttl) {
        chain_reads_.erase({id, model, version});
        it = h.copies.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Versions retention no longer keeps, once no copy holds them and no lease or relay read
  // names them: a holder that still serves a retired version (a rollout generating with it)
  // keeps it readable, so the store's tables stay proportional to what holders really hold.
  std::set<std::pair<std::string, std::uint64_t>> named;
  for (const auto& [id, h] : holders_)
    for (const auto& [key, c] : h.copies)
      named.insert(key);
  for (const auto& [id, l] : leases_)
    named.emplace(l.model, l.version);
  for (auto& [name, m] : models_) {
    const std::set<std::uint64_t> keep = retained(name);
    // Uncommitted versions count as in flight (retained), except those older than every
    // committed version retention keeps: what a publisher killed mid-publish left behind (a
    // publish that is merely slow is not overtaken by keep_versions newer commits).
    std::uint64_t oldest_kept = 0;
    std::uint32_t newer = 0;
    for (auto r = m.versions.rbegin(); r != m.versions.rend() && newer < config_.keep_versions;
         ++r) {
      if (r->second.committed) oldest_kept = r->first, ++newer;
    }
    if (newer < config_.keep_versions) oldest_kept = 0;
    for (auto it = m.versions.begin(); it != m.versions.end();) {
      const std::uint64_t v = it->first;
      const bool abandoned = !it->second.committed && v < oldest_kept && it->second.pins.empty();
      if ((keep.count(v) && !abandoned) || named.count({name, v})) {
        ++it;
        continue;
      }
      m.erased = std::max(m.erased, v);
      for (auto g = chain_reads_.begin(); g != chain_reads_.end();) {
        g = std::get<1>(g->first) == name && std::get<2>(g->first) == v ? chain_reads_.erase(g)
                                                                        : std::next(g);
      }
      it = m.versions.erase(it);
    }
  }
}

WeightStore::Sizes WeightStore::sizes() const {
  Sizes n;
  for (const auto& [name, m] : models_) {
    n.versions += m.versions.size();
    for (const auto& [v, ver] : m.versions) {
      n.chunk_entries += ver.manifest.checksums.size();
      n.pins += ver.pins.size();
    }
  }
  for (const auto& [id, h] : holders_) {
    n.copies += h.copies.size();
    n.deltas += h.deltas.size();
    for (const auto& [key, c] : h.copies)
      n.chunk_entries += c.chunks.size();
  }
  n.leases = leases_.size() + delta_leases_.size();
  n.chain_reads = chain_reads_.size();
  return n;
}

}  // namespace sluice::weightstore
