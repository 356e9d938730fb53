#include "rollout/repack.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace sluice::rollout {

core::Status RepackCost::validate() const {
  for (double x : {t0_ms, t1_ms, prefill_ms_per_token, kv_bytes_per_token, kv_link_gbps,
                   remaining_prior, remaining_per_generated, min_gain}) {
    if (!std::isfinite(x) || x < 0) {
      return core::invalid_argument(
          "repack_cost: every figure must be finite and >= 0 (t0_ms, t1_ms, "
          "prefill_ms_per_token, kv_bytes_per_token, kv_link_gbps, remaining_prior, "
          "remaining_per_generated, min_gain)");
    }
  }
  return {};
}

double expected_remaining(const RepackCost& c, std::uint64_t generated) {
  return c.remaining_prior + c.remaining_per_generated * static_cast<double>(generated);
}

double step_ms(const RepackCost& c, std::uint32_t batch) {
  return c.t0_ms + c.t1_ms * static_cast<double>(batch);
}

double move_ms(const RepackCost& c, std::uint64_t kv_tokens, bool* with_kv) {
  const double tokens = static_cast<double>(kv_tokens);
  const double prefill = tokens * c.prefill_ms_per_token;
  bool kv = false;
  double best = prefill;
  if (c.kv_bytes_per_token > 0 && c.kv_link_gbps > 0) {
    // GB/s is 1e6 bytes per ms.
    const double transfer = tokens * c.kv_bytes_per_token / (c.kv_link_gbps * 1e6);
    if (transfer < prefill) {
      best = transfer;
      kv = true;
    }
  }
  if (with_kv != nullptr) *with_kv = kv;
  return best;
}

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
  double r_max = 0;             // expected steps left of its longest sequence, arrivals too
  bool source = false;          // emptied by this plan
  bool destination = false;     // receives sequences in this plan
};

std::uint64_t kv_budget(const Capacity& c, double headroom) {
  const double keep = std::clamp(headroom, 0.0, 1.0);
  return static_cast<std::uint64_t>(
      std::floor(static_cast<double>(c.max_kv_tokens) * (1.0 - keep)));
}

// Tries to place every sequence of nodes[src] on the other non-source nodes, best fit. When all
// fit and the move pays (or cost is not weighed), commits the moves (updating the destinations)
// and returns true; otherwise changes nothing.
bool empty_onto_others(std::vector<Node>& nodes, std::size_t src, const RepackCost& cost,
                       RepackPlan& plan) {
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

  // What it gains and what it costs (repack.hpp), in GPU milliseconds.
  const Node& from = nodes[src];
  const double gain = from.view->freed_has_work ? from.r_max * step_ms(cost, from.count) : 0.0;
  double spend = 0;
  std::vector<bool> with_kv(seqs.size(), false);
  std::vector<double> r_after(nodes.size());
  for (std::size_t j = 0; j < nodes.size(); ++j)
    r_after[j] = nodes[j].r_max;
  for (std::size_t k = 0; k < seqs.size(); ++k) {
    bool kv_move = false;
    spend += move_ms(cost, seqs[k]->kv_tokens, &kv_move);
    with_kv[k] = kv_move;
    const double r = expected_remaining(cost, seqs[k]->generated);
    spend += cost.t1_ms * r;
    r_after[to[k]] = std::max(r_after[to[k]], r);
  }
  for (std::size_t j = 0; j < nodes.size(); ++j) {
    if (r_after[j] > nodes[j].r_max)
      spend += (r_after[j] - nodes[j].r_max) * step_ms(cost, count[j]);
  }
  if (cost.weigh_cost && !(gain > cost.min_gain * spend)) {
    ++plan.declined;
    return false;
  }
  plan.gain_ms += gain;
  plan.cost_ms += spend;

  nodes[src].source = true;
  for (std::size_t j = 0; j < nodes.size(); ++j)
    nodes[j].r_max = r_after[j];
  for (std::size_t k = 0; k < seqs.size(); ++k) {
    Node& d = nodes[to[k]];
    d.destination = true;
    d.kv_used += seqs[k]->kv_tokens;
    ++d.count;
    plan.moves.push_back({seqs[k]->trajectory_id, nodes[src].view->id, d.view->id, with_kv[k]});
  }
  nodes[src].kv_used = 0;
  nodes[src].count = 0;
  nodes[src].r_max = 0;
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
    for (const auto& s : r.sequences) {
      n.kv_used += s.kv_tokens;
      n.r_max = std::max(n.r_max, expected_remaining(policy.cost, s.generated));
    }
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
      if (empty_onto_others(nodes, i, policy.cost, plan)) plan.freed.push_back(nodes[i].view->id);
    }
  }
  return plan;
}

}  // namespace sluice::rollout
