// The weight store's relays (store.hpp, "Relays"): joining, and where each relay pulls a new
// version from along the broadcast chain, per datacenter and per host share.
#include <algorithm>

#include "format/shard.hpp"
#include "weightstore/store.hpp"
#include "weightstore/store_parts.hpp"

namespace sluice::weightstore {

using core::Status;
using store_parts::all_set;
using store_parts::vname;

Status WeightStore::join_relay(const std::string& relay_id, const Topology& topology,
                               Clock::time_point now, const std::string& owner,
                               const std::string& share) {
  if (relay_id.empty()) return core::invalid_argument("relay has no id");
  SLUICE_TRY(check_owner(relay_id, owner));
  auto& h = holders_[relay_id];
  if (h.owner.empty()) h.owner = owner;
  h.topology = topology;
  h.share = share;
  h.last_seen = now;
  if (!relay_order_.count(relay_id)) relay_order_[relay_id] = next_relay_++;
  return {};
}

bool WeightStore::started_on(const std::string& holder_id, const std::string& model,
                             std::uint64_t version) const {
  auto h = holders_.find(holder_id);
  if (h == holders_.end()) return false;
  for (const auto& [mv, c] : h->second.copies)
    if (mv.first == model && mv.second >= version) return true;
  return false;
}

bool WeightStore::labelled_datacenters() const {
  for (const auto& [id, seq] : relay_order_) {
    auto h = holders_.find(id);
    if (h != holders_.end() && !h->second.topology.datacenter.empty()) return true;
  }
  return false;
}

const std::string& WeightStore::holder_dc(const std::string& id) const {
  static const std::string none;
  auto h = holders_.find(id);
  return h == holders_.end() ? none : h->second.topology.datacenter;
}

std::vector<std::string> WeightStore::dc_ancestors(
    const std::string& model, std::uint64_t version, const std::string& relay_id,
    const std::vector<std::pair<std::uint64_t, std::string>>& order) const {
  const std::string& my_dc = holder_dc(relay_id);
  // Inside a datacenter the relays form a chain in join order; its first relay is the seed.
  std::vector<std::string> ancestors;
  for (const auto& [seq, id] : order) {
    if (id == relay_id) break;
    if (holder_dc(id) == my_dc) ancestors.insert(ancestors.begin(), id);
  }
  if (!ancestors.empty()) return ancestors;
  // A seed. The seeds form a chain over the datacenters: the publisher's datacenter first (its
  // seed reads from the publisher), then the others in the order their seeds joined, each seed
  // reading from the one before. So each datacenter's WAN link carries one copy in (none into
  // the publisher's) and at most one copy out, however many relays and readers it has.
  const std::vector<std::string> seeds = seed_chain(model, version, order);
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    if (seeds[i] != relay_id) continue;
    for (std::size_t j = i; j-- > 0;)
      ancestors.push_back(seeds[j]);
  }
  return ancestors;
}

std::vector<std::string> WeightStore::seed_chain(
    const std::string& model, std::uint64_t version,
    const std::vector<std::pair<std::uint64_t, std::string>>& order) const {
  std::string publisher_dc;
  bool has_publisher = false;
  for (const auto& [id, h] : holders_) {
    if (relay_order_.count(id)) continue;
    auto c = h.copies.find({model, version});
    if (c == h.copies.end() || c->second.unpublished || !all_set(c->second.chunks)) continue;
    publisher_dc = h.topology.datacenter;
    has_publisher = true;
    break;
  }
  std::vector<std::string> seeds;  // one per datacenter, in chain order
  std::set<std::string> seen;
  if (has_publisher) seen.insert(publisher_dc);  // its seed reads from the publisher
  for (const auto& [seq, id] : order) {
    const std::string& dc = holder_dc(id);
    if (has_publisher && dc == publisher_dc) {
      if (seeds.empty() || holder_dc(seeds.front()) != dc) seeds.insert(seeds.begin(), id);
      continue;
    }
    if (seen.insert(dc).second) seeds.push_back(id);
  }
  return seeds;
}

bool WeightStore::feeds_other_datacenter(const std::string& model, std::uint64_t version,
                                         const std::string& relay_id) const {
  if (config_.broadcast != "chain" || !labelled_datacenters() || !relay_order_.count(relay_id))
    return false;
  const std::vector<std::string> seeds = seed_chain(model, version, chain_order(relay_id));
  auto at = std::find(seeds.begin(), seeds.end(), relay_id);
  return at != seeds.end() && std::next(at) != seeds.end();
}

std::optional<WeightStore::CopyInfo> WeightStore::share_head_source(
    const std::string& model, std::uint64_t version, const std::string& relay_id,
    const std::set<std::string>& exclude) {
  if (!core::is_share_model(model)) return std::nullopt;
  const std::string parent = core::share_parent(model);
  const Holder& mine = holders_.at(relay_id);
  const std::string* best = nullptr;
  const Copy* best_copy = nullptr;
  int best_rank = 0;
  for (const auto& [id, h] : holders_) {
    if (id == relay_id || exclude.count(id)) continue;
    auto c = h.copies.find({parent, version});
    if (c == h.copies.end() || c->second.unpublished || !all_set(c->second.chunks)) continue;
    const int rank = distance(mine.topology, h.topology) * 2 + (relay_order_.count(id) ? 1 : 0);
    if (!best || rank < best_rank) best = &id, best_copy = &c->second, best_rank = rank;
  }
  if (!best) return std::nullopt;
  chain_reads_[{relay_id, model, version}] = *best;
  return CopyInfo{*best, parent, best_copy->endpoint, best_copy->descriptor, best_copy->chunks};
}

std::vector<std::pair<std::uint64_t, std::string>> WeightStore::chain_order(
    const std::string& relay_id) const {
  const std::string& my_share = holders_.at(relay_id).share;
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (const auto& [id, seq] : relay_order_) {
    auto h = holders_.find(id);
    if (h != holders_.end() && h->second.share == my_share) order.emplace_back(seq, id);
  }
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<std::string> WeightStore::ancestors_of(
    const std::string& relay_id,
    const std::vector<std::pair<std::uint64_t, std::string>>& order) const {
  // This relay is number `me` (1-based: 0 is the publisher). In a chain every relay before it,
  // in a tree its parent, the parent's parent, ...; "direct" has none.
  std::size_t me = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i].second == relay_id) me = i + 1;
  std::vector<std::string> ancestors;
  if (config_.broadcast == "chain") {
    for (std::size_t i = me - 1; i >= 1; --i)
      ancestors.push_back(order[i - 1].second);
  } else if (config_.broadcast == "tree") {
    std::size_t k = std::max<std::uint32_t>(1, config_.fanout);
    for (std::size_t i = (me - 1) / k; i >= 1; i = (i - 1) / k)
      ancestors.push_back(order[i - 1].second);
  }
  return ancestors;
}

core::Result<WeightStore::CopyInfo> WeightStore::chain_source(
    const std::string& model, std::uint64_t version, const std::string& relay_id,
    const std::set<std::string>& exclude) {
  auto me = relay_order_.find(relay_id);
  if (me == relay_order_.end()) return core::not_found("relay '" + relay_id + "' has not joined");
  const std::tuple<std::string, std::string, std::uint64_t> key{relay_id, model, version};
  auto usable = [&](const std::string& id, bool need_all) -> const Copy* {
    if (exclude.count(id)) return nullptr;
    auto h = holders_.find(id);
    if (h == holders_.end()) return nullptr;
    auto c = h->second.copies.find({model, version});
    if (c == h->second.copies.end() || c->second.unpublished) return nullptr;
    bool any =
        std::any_of(c->second.chunks.begin(), c->second.chunks.end(), [](bool b) { return b; });
    return (need_all ? all_set(c->second.chunks) : any) ? &c->second : nullptr;
  };
  // The relay is about to read from the source named: remember it, so the source's copy does
  // not count as drained under the relay's GETs (relays take no lease).
  auto info = [this, &key](const std::string& id, const Copy& c) {
    chain_reads_[key] = id;
    return CopyInfo{id, {}, c.endpoint, c.descriptor, c.chunks};
  };
  auto parent_source = [&] { return share_head_source(model, version, relay_id, exclude); };
  // Relays in join order, of its own share (or, with none, of whole versions).
  const auto order = chain_order(relay_id);
  const bool by_datacenter = config_.broadcast == "chain" && labelled_datacenters();
  const std::vector<std::string> ancestors =
      by_datacenter ? dc_ancestors(model, version, relay_id, order) : ancestors_of(relay_id, order);
  const std::string* my_dc = by_datacenter ? &holders_.at(relay_id).topology.datacenter : nullptr;
  for (const auto& id : ancestors) {
    if (const Copy* c = usable(id, false)) return info(id, *c);
    // A live ancestor that has started on the version but verified nothing yet: the relay waits
    // for it (it is named with no chunks) rather than read from a complete holder further up,
    // which would put every relay on the publisher's link at the start of each version.
    auto h = holders_.find(id);
    if (h != holders_.end() && !exclude.count(id)) {
      auto c = h->second.copies.find({model, version});
      if (c != h->second.copies.end() && !c->second.unpublished) return info(id, c->second);
      // A seed reads from the seed of the datacenter before it, never past it to one further
      // up while that one is live: the WAN links of the datacenters in between would carry
      // the version twice.
      if (my_dc && h->second.topology.datacenter != *my_dc && !started_on(id, model, version)) {
        chain_reads_.erase(key);
        return core::unavailable("relay '" + relay_id + "' waits for '" + id + "' to start on " +
                                 vname(model, version));
      }
    }
  }
  if (by_datacenter) {
    // Across datacenters a stray chunk costs WAN bytes: a live ancestor that has not started on
    // the version yet (it sees it within a poll) is waited for too. One that dies expires with
    // its heartbeats, and one that has moved on to a newer version never starts on this one:
    // the relay then goes on to the next.
    for (const auto& id : ancestors) {
      if (!holders_.count(id) || exclude.count(id)) continue;
      if (!started_on(id, model, version)) {
        chain_reads_.erase(key);
        return core::unavailable("relay '" + relay_id + "' waits for '" + id + "' to start on " +
                                 vname(model, version));
      }
    }
    // Else the nearest complete holder, a relay behind it included (a complete copy needs
    // nothing from this relay, so reading from it forms no cycle): inside its own datacenter
    // when there is one, across the WAN only when there is none.
    const Holder& mine = holders_.at(relay_id);
    const std::string* best = nullptr;
    const Copy* best_copy = nullptr;
    int best_rank = 0;
    for (const auto& [id, h] : holders_) {
      if (id == relay_id) continue;
      const Copy* c = usable(id, true);
      if (!c) continue;
      auto r = relay_order_.find(id);
      bool behind = r != relay_order_.end() && r->second > me->second;
      int rank = distance(mine.topology, h.topology) * 2 + (behind ? 1 : 0);
      if (!best || rank < best_rank) best = &id, best_copy = c, best_rank = rank;
    }
    if (best) return info(*best, *best_copy);
    if (auto p = parent_source()) return *p;
    chain_reads_.erase(key);
    return core::unavailable("no source for relay '" + relay_id + "' to pull " +
                             vname(model, version) + " from");
  }
  // The head of the chain reads from a complete holder that is not a relay behind it.
  for (const auto& [id, h] : holders_) {
    if (id == relay_id) continue;
    auto r = relay_order_.find(id);
    if (r != relay_order_.end() && r->second > me->second) continue;
    if (const Copy* c = usable(id, true)) return info(id, *c);
  }
  // Last, a complete relay behind it: once the publisher has handed the version off, it may be
  // the only complete copy left (in a tree, a later child of the root can finish first). A
  // complete copy needs nothing from this relay, so reading from it forms no cycle.
  for (const auto& [seq, id] : order) {
    if (seq <= me->second || id == relay_id) continue;
    if (const Copy* c = usable(id, true)) return info(id, *c);
  }
  if (auto p = parent_source()) return *p;
  chain_reads_.erase(key);
  return core::unavailable("no source for relay '" + relay_id + "' to pull " +
                           vname(model, version) + " from");
}

}  // namespace sluice::weightstore
