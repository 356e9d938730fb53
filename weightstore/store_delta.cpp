// The weight store's deltas (store.hpp, "Deltas"): objects that rebuild one version from an
// older one, offered by holders, read under leases, kept only while both versions are retained.
#include <fmt/format.h>

#include <algorithm>

#include "weightstore/store.hpp"

namespace sluice::weightstore {

using core::Status;

namespace {
std::string dname(const std::string& model, std::uint64_t base, std::uint64_t target) {
  return fmt::format("delta {}@{}->{}", model, base, target);
}
}  // namespace

Status DeltaObject::validate() const {
  if (model.empty()) return core::invalid_argument("a delta names no model");
  if (base == 0 || target <= base) {
    return core::invalid_argument(fmt::format(
        "a delta from version {} to {}: versions start at 1 and increase", base, target));
  }
  if (bytes == 0 || chunk_bytes == 0) {
    return core::invalid_argument("a delta's bytes and chunk_bytes must be positive");
  }
  const std::uint64_t chunks = bytes / chunk_bytes + (bytes % chunk_bytes != 0);
  if (checksums.size() != chunks) {
    return core::invalid_argument(fmt::format(
        "{}: {} checksums for {} chunks", dname(model, base, target), checksums.size(), chunks));
  }
  return {};
}

core::RegionLayout DeltaObject::layout() const {
  core::RegionLayout l;
  l.name = dname(model, base, target);
  l.bytes = bytes;
  l.chunk_bytes = chunk_bytes;
  l.checksums = checksums;
  return l;
}

Status WeightStore::register_delta(const DeltaRegistration& r, Clock::time_point now,
                                   const std::string& owner) {
  if (r.holder_id.empty()) return core::invalid_argument("holder has no id");
  SLUICE_TRY(check_owner(r.holder_id, owner));
  const DeltaObject& d = r.delta;
  SLUICE_TRY(d.validate());
  if (auto n = holders_.find(r.holder_id); n != holders_.end()) {
    auto mine = n->second.deltas.find({d.model, d.base, d.target});
    if (mine != n->second.deltas.end() && !(mine->second.object == d)) {
      return core::Status(core::Code::kAlreadyExists,
                          dname(d.model, d.base, d.target) + ": holder '" + r.holder_id +
                              "' offers it already, described otherwise");
    }
  }
  const std::string name = dname(d.model, d.base, d.target);
  Version* base = find_version(d.model, d.base);
  Version* target = find_version(d.model, d.target);
  if (!base || !target) return core::not_found(name + ": the store does not know both versions");
  if (base->manifest.total_bytes != target->manifest.total_bytes ||
      base->manifest.chunk_bytes != target->manifest.chunk_bytes) {
    return core::invalid_argument(name + ": the versions are of different layouts");
  }
  auto kept = retained(d.model);
  if (!kept.count(d.base) || !kept.count(d.target)) {
    return core::failed_precondition(name + ": a version is no longer retained");
  }
  auto& h = holders_[r.holder_id];
  if (h.owner.empty()) h.owner = owner;
  h.topology = r.topology;
  h.last_seen = now;
  h.deltas[{d.model, d.base, d.target}] = DeltaCopy{r.endpoint, r.descriptor, d, false};
  return {};
}

void WeightStore::set_delta_maker(const std::string& relay_id, bool makes) {
  if (makes)
    delta_makers_.insert(relay_id);
  else
    delta_makers_.erase(relay_id);
}

core::Result<DeltaPlan> WeightStore::delta_plan(const std::string& model, std::uint64_t base,
                                                std::uint64_t target, const Topology& where,
                                                Clock::time_point now, const std::string& owner) {
  const std::string name = dname(model, base, target);
  if (!committed(model, target)) {
    return core::failed_precondition(fmt::format("{}@{} is not committed", model, target));
  }
  auto kept = retained(model);
  if (!kept.count(base) || !kept.count(target)) {
    return core::not_found(name + ": a version is no longer retained");
  }
  SLUICE_TRY(check_lease_cap(owner));
  DeltaPlan p;
  p.target_bytes = find_version(model, target)->manifest.total_bytes;
  const DeltaKey key{model, base, target};
  std::map<std::string, std::size_t> load;  // delta leases per holder
  for (const auto& [lid, l] : delta_leases_)
    for (const auto& id : l.holders)
      ++load[id];
  std::vector<Candidate<DeltaCopy>> cands;
  for (const auto& [id, h] : holders_) {
    auto c = h.deltas.find(key);
    if (c == h.deltas.end() || c->second.unpublished) continue;
    cands.push_back({id, &c->second, distance(where, h.topology), load[id]});
  }
  if (cands.empty()) {
    // Expected when a live maker holds either version (it makes the delta once it has both).
    for (const auto& id : delta_makers_) {
      auto h = holders_.find(id);
      if (h == holders_.end()) continue;
      if (h->second.copies.count({model, base}) || h->second.copies.count({model, target})) {
        p.expected = true;
      }
    }
    return p;
  }
  std::sort(cands.begin(), cands.end());
  // Holders may describe the pair differently (an early bogus offer among them): the
  // description a delta maker offers wins, then the one most holders offer, then the nearest's.
  const DeltaObject* chosen = nullptr;
  std::pair<bool, std::size_t> best{false, 0};
  for (const auto& c : cands) {
    std::pair<bool, std::size_t> score{false, 0};
    for (const auto& o : cands) {
      if (!(o.copy->object == c.copy->object)) continue;
      score.first = score.first || delta_makers_.count(o.id) > 0;
      ++score.second;
    }
    if (!chosen || score > best) chosen = &c.copy->object, best = score;
  }
  p.available = true;
  p.delta = *chosen;
  DeltaLease l;
  l.key = key;
  for (const auto& c : cands) {
    if (p.holders.size() >= config_.sources_per_chunk) break;
    if (!(c.copy->object == *chosen)) continue;
    p.holders.push_back({c.id, c.copy->endpoint, c.copy->descriptor, c.dist});
    l.holders.push_back(c.id);
  }
  p.lease_id = grant(delta_leases_, std::move(l), now, owner);
  return p;
}

core::Result<bool> WeightStore::delta_drain(const std::string& holder_id, const DeltaKey& key,
                                            bool unpublish) {
  const auto& [model, base, target] = key;
  auto h = holders_.find(holder_id);
  if (h == holders_.end() || !h->second.deltas.count(key)) {
    return core::not_found("holder '" + holder_id + "' does not hold " +
                           dname(model, base, target) + ": whether its readers drained is unknown");
  }
  auto c = h->second.deltas.find(key);
  if (unpublish) c->second.unpublished = true;
  if (!c->second.unpublished) return false;
  for (const auto& [id, l] : delta_leases_) {
    if (l.key == key && std::count(l.holders.begin(), l.holders.end(), holder_id)) return false;
  }
  // Drained: the holder frees it now, and the store forgets it.
  h->second.deltas.erase(c);
  return true;
}

core::Result<bool> WeightStore::unpublish_delta(const std::string& holder_id,
                                                const std::string& model, std::uint64_t base,
                                                std::uint64_t target) {
  return delta_drain(holder_id, {model, base, target}, true);
}

core::Result<bool> WeightStore::delta_drained(const std::string& holder_id,
                                              const std::string& model, std::uint64_t base,
                                              std::uint64_t target) {
  return delta_drain(holder_id, {model, base, target}, false);
}

std::vector<DeltaState> WeightStore::deltas(const std::string& model) const {
  std::vector<DeltaState> out;
  auto m = models_.find(model);
  if (m == models_.end()) return out;
  auto kept = retained(model);
  for (const auto& [id, h] : holders_) {
    for (const auto& [key, c] : h.deltas) {
      const auto& [name, base, target] = key;
      if (name != model || !kept.count(base) || !kept.count(target)) continue;
      out.push_back({id, base, target, c.object.bytes, c.unpublished});
    }
  }
  // By pair, then holder id (holders_ is in id order and the sort is stable).
  std::stable_sort(out.begin(), out.end(), [](const DeltaState& a, const DeltaState& b) {
    return std::tie(a.base, a.target) < std::tie(b.base, b.target);
  });
  return out;
}

int WeightStore::holder_distance(const std::string& a, const std::string& b) const {
  auto ha = holders_.find(a);
  auto hb = holders_.find(b);
  if (ha == holders_.end() || hb == holders_.end()) return 3;
  return distance(ha->second.topology, hb->second.topology);
}

}  // namespace sluice::weightstore
