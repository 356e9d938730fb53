#include "sim/weights.hpp"

#include <algorithm>

namespace sluice::sim {

namespace {

constexpr double kGB = 1e9;

// One relay's place in the broadcast: who feeds it and at what rate.
struct Node {
  int parent = -1;  // -1: the trainer
  double rate = 0;  // bytes/s of the hop into this relay, before the parent's split
  int children = 0;
};

}  // namespace

Placement place(const SimulateConfig& c, std::uint32_t rollouts) {
  Placement p;
  p.rollout_host.resize(rollouts);
  for (std::uint32_t i = 0; i < rollouts; ++i) {
    const std::uint64_t first_gpu = static_cast<std::uint64_t>(i) * c.gpus_per_rollout;
    p.rollout_host[i] = static_cast<std::uint32_t>(first_gpu / c.gpus_per_host);
  }
  const std::uint64_t gpus = static_cast<std::uint64_t>(rollouts) * c.gpus_per_rollout;
  p.hosts = static_cast<std::uint32_t>((gpus + c.gpus_per_host - 1) / c.gpus_per_host);
  return p;
}

std::vector<double> relay_complete_s(const SimulateConfig& c, std::uint32_t hosts,
                                     std::uint64_t bytes, std::uint64_t chunk_bytes) {
  std::vector<Node> nodes(hosts);
  const std::uint32_t per_dc = c.hosts_per_datacenter == 0 ? hosts : c.hosts_per_datacenter;
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const std::uint32_t dc_first = h / per_dc * per_dc;
    const std::uint32_t k = h - dc_first;  // index within its datacenter
    Node& n = nodes[h];
    if (k == 0) {
      // A seed: fed by the trainer (first datacenter) or the previous datacenter's seed.
      n.parent = dc_first == 0 ? -1 : static_cast<int>(dc_first - per_dc);
      n.rate = (dc_first == 0 ? c.trainer_gbps : c.wan_gbps) * kGB;
    } else {
      const std::uint32_t up = c.broadcast == "tree" ? (k - 1) / c.fanout : k - 1;
      n.parent = static_cast<int>(dc_first + up);
      n.rate = c.link_gbps * kGB;
    }
    if (n.parent >= 0) ++nodes[static_cast<std::size_t>(n.parent)].children;
  }
  const double chunk = static_cast<double>(std::min(chunk_bytes, bytes));
  const double rest = static_cast<double>(bytes) - chunk;
  // Parents come before their children in host order, so one pass accumulates each path.
  std::vector<double> first(hosts), slowest(hosts), out(hosts);
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const Node& n = nodes[h];
    double rate = n.rate;
    double before = 0, slow = rate;
    if (n.parent >= 0) {
      const auto p = static_cast<std::size_t>(n.parent);
      rate /= std::max(1, nodes[p].children);
      before = first[p];
      slow = std::min(slowest[p], rate);
    }
    first[h] = before + chunk / rate + c.hop_latency_ms / 1000.0;
    slowest[h] = slow;
    out[h] = first[h] + rest / slowest[h];
  }
  return out;
}

double publish_stall_s(const SimulateConfig& c, std::uint64_t bytes) {
  return static_cast<double>(bytes) / (c.stage_gbps * kGB);
}

double pull_s(const SimulateConfig& c, std::uint64_t bytes) {
  return static_cast<double>(bytes) / (c.local_gbps * kGB);
}

double switch_s(const SimulateConfig& c, std::uint64_t bytes) {
  return static_cast<double>(bytes) / c.gpus_per_rollout / (c.h2d_gbps * kGB);
}

}  // namespace sluice::sim
