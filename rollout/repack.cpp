#include "rollout/repack.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace sluice::rollout {

namespace {

bool in_ramp_down(const RolloutView& r, const RepackPolicy& policy) {
  if (!r.alive || r.queued > 0 || r.capacity.max_sequences == 0) return false;
  const auto active = static_cast<std::uint32_t>(r.sequences.size());
  const double occupancy = static_cast<double>(active) / r.capacity.max_sequences;
  return occupancy <= policy.ramp_down_occupancy && active <= r.previous_active;
}

// The planner's view of one ramp-down rollout while a plan is built.
struct Node {
  const RolloutView* view = nullptr;
  std::uint64_t kv_used = 0;    // including sequences planned to arrive
  std::uint32_t count = 0;      // active sequences, including planned arrivals
  std::uint64_t kv_budget = 0;  // max_kv_tokens less the headroom
  bool source = false;          // emptied by this plan
  bool destination = false;     // receives sequences in this plan
};

std::uint64_t kv_budget(const Capacity& c, double headroom) {
  const double keep = std::clamp(headroom, 0.0, 1.0);
  return static_cast<std::uint64_t>(
      std::floor(static_cast<double>(c.max_kv_tokens) * (1.0 - keep)));
}

// Tries to place every sequence of nodes[src] on the other non-source nodes, best fit. On
// success commits the moves (updating the destinations) and returns true; otherwise changes
// nothing.
bool empty_onto_others(std::vector<Node>& nodes, std::size_t src, std::vector<Move>& moves) {
  std::vector<const SequenceView*> seqs;
  for (const auto& s : nodes[src].view->sequences)
    seqs.push_back(&s);
  // Largest first (best-fit decreasing packs tighter); ties by id for a deterministic plan.
  std::sort(seqs.begin(), seqs.end(), [](const SequenceView* a, const SequenceView* b) {
    return std::tie(b->kv_tokens, a->trajectory_id) < std::tie(a->kv_tokens, b->trajectory_id);
  });
  std::vector<std::uint64_t> kv(nodes.size());
  std::vector<std::uint32_t> count(nodes.size());
  for (std::size_t j = 0; j < nodes.size(); ++j) {
    kv[j] = nodes[j].kv_used;
    count[j] = nodes[j].count;
  }
  std::vector<std::size_t> to;
  to.reserve(seqs.size());
  for (const SequenceView* s : seqs) {
    std::size_t best = nodes.size();
    std::uint64_t best_room = 0;
    std::uint32_t best_slots = 0;
    for (std::size_t j = 0; j < nodes.size(); ++j) {
      if (j == src || nodes[j].source) continue;
      const Node& d = nodes[j];
      if (count[j] >= d.view->capacity.max_sequences || kv[j] > d.kv_budget) continue;
      const std::uint64_t room = d.kv_budget - kv[j];
      if (s->kv_tokens > room) continue;
      const std::uint32_t slots = d.view->capacity.max_sequences - count[j];
      // Least room left wins; then fewest free slots; then the smaller id.
      if (best == nodes.size() || room < best_room ||
          (room == best_room &&
           (slots < best_slots || (slots == best_slots && d.view->id < nodes[best].view->id)))) {
        best = j;
        best_room = room;
        best_slots = slots;
      }
    }
    if (best == nodes.size()) return false;  // all or nothing: this source stays as it is
    kv[best] += s->kv_tokens;
    ++count[best];
    to.push_back(best);
  }
  nodes[src].source = true;
  for (std::size_t k = 0; k < seqs.size(); ++k) {
    Node& d = nodes[to[k]];
    d.destination = true;
    d.kv_used += seqs[k]->kv_tokens;
    ++d.count;
    moves.push_back({seqs[k]->trajectory_id, nodes[src].view->id, d.view->id});
  }
  nodes[src].kv_used = 0;
  nodes[src].count = 0;
  return true;
}

}  // namespace

RepackPlan plan_repack(const std::vector<RolloutView>& fleet, const RepackPolicy& policy) {
  // Ramp-down rollouts holding work, by version. An empty rollout is neither source nor
  // destination: it has nothing to give, and it should pull the newest version rather than take
  // old-version work.
  std::map<std::uint64_t, std::vector<Node>> groups;
  for (const auto& r : fleet) {
    if (r.sequences.empty() || !in_ramp_down(r, policy)) continue;
    Node n;
    n.view = &r;
    n.count = static_cast<std::uint32_t>(r.sequences.size());
    for (const auto& s : r.sequences)
      n.kv_used += s.kv_tokens;
    n.kv_budget = kv_budget(r.capacity, policy.kv_headroom);
    groups[r.version].push_back(n);
  }
  RepackPlan plan;
  for (auto& [version, nodes] : groups) {
    if (nodes.size() < 2) continue;
    // Least loaded first: they are the cheapest to empty.
    std::sort(nodes.begin(), nodes.end(), [](const Node& a, const Node& b) {
      return std::tie(a.count, a.kv_used, a.view->id) < std::tie(b.count, b.kv_used, b.view->id);
    });
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].destination) continue;  // never both source and destination
      if (empty_onto_others(nodes, i, plan.moves)) plan.freed.push_back(nodes[i].view->id);
    }
  }
  return plan;
}

}  // namespace sluice::rollout
