#include "sim/weights.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

namespace sluice::sim {

namespace {

constexpr double kGB = 1e9;
constexpr double kDigestBytes = 32;  // a SHA-256 digest

// One relay's place in the broadcast: who feeds it and at what rate.
struct Node {
  int parent = -1;  // -1: the trainer
  double rate = 0;  // bytes/s of the hop into this relay, before the parent's split
  int children = 0;
};

bool host_share(const SimulateConfig& c) {
  return c.relay_holds == "host-share";
}

// A relay host's intake while it verifies what it receives (bytes/s; unbounded when not
// modelled).
double verify_rate(const SimulateConfig& c) {
  if (c.relay_digest_cores == 0) return std::numeric_limits<double>::infinity();
  return c.relay_digest_cores * c.digest_gbps_per_core * kGB;
}

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

std::uint32_t hosts_per_rollout(const SimulateConfig& c) {
  if (c.gpus_per_rollout <= c.gpus_per_host || c.gpus_per_rollout % c.gpus_per_host != 0) return 1;
  return c.gpus_per_rollout / c.gpus_per_host;
}

std::uint32_t trainer_hosts(const SimulateConfig& c) {
  return std::max<std::uint32_t>(1, (c.trainer_gpus + c.gpus_per_host - 1) / c.gpus_per_host);
}

double relay_bytes(const SimulateConfig& c, std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  return host_share(c) ? b / hosts_per_rollout(c) : b;
}

SignedFeed signed_feed(const SimulateConfig& c, std::uint64_t bytes, std::uint64_t chunk_bytes) {
  const double b = static_cast<double>(bytes);
  const double hosts = trainer_hosts(c);
  double rate = c.stage_gbps * kGB;
  if (c.trainer_digest_cores > 0) {
    rate = std::min(rate, hosts * c.trainer_digest_cores * c.digest_gbps_per_core * kGB);
  }
  const double stage_s = publish_stall_s(c, bytes);
  const double sign_s = c.sign_ms / 1000.0;
  SignedFeed f;
  f.rate = rate;
  f.done_s = b / rate + sign_s - stage_s;
  if (c.signing == "streamed") {
    const double batch =
        std::min(b / hosts, static_cast<double>(chunk_bytes) * c.sign_batch_chunks);
    f.start_s = std::min(f.done_s, batch / (rate / hosts) + sign_s - stage_s);
  } else {
    f.start_s = f.done_s;
  }
  return f;
}

std::vector<RelayTimes> relay_times(const SimulateConfig& c, std::uint32_t hosts,
                                    std::uint64_t bytes, std::uint64_t chunk_bytes) {
  const SignedFeed feed = signed_feed(c, bytes, chunk_bytes);
  std::vector<Node> nodes(hosts);
  const std::uint32_t per_dc = c.hosts_per_datacenter == 0 ? hosts : c.hosts_per_datacenter;
  const std::uint32_t groups = host_share(c) ? hosts_per_rollout(c) : 1;
  // Hosts of each (datacenter, group), in host order: a relay's place in its group's broadcast.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::uint32_t>> members;
  int masters = 0;
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const std::uint32_t dc = h / per_dc, group = h % groups;
    auto& mine = members[{dc, group}];
    const auto k = static_cast<std::uint32_t>(mine.size());  // index within its group here
    mine.push_back(h);
    Node& n = nodes[h];
    if (k == 0) {
      // A seed: a master fed by the trainer (first datacenter), or fed by the same group's seed
      // of the previous datacenter over the WAN.
      // (A group with no host in the previous datacenter, possible with host-share when a
      // datacenter has fewer hosts than a rollout spans, is fed by the trainer.)
      auto before = members.find({dc == 0 ? 0 : dc - 1, group});
      if (dc == 0 || before == members.end()) {
        ++masters;
      } else {
        n.parent = static_cast<int>(before->second.front());
        n.rate = c.wan_gbps * kGB;
      }
    } else {
      const std::uint32_t up = c.broadcast == "tree" ? (k - 1) / c.fanout : k - 1;
      n.parent = static_cast<int>(mine[up]);
      n.rate = c.link_gbps * kGB;
    }
    if (n.parent >= 0) ++nodes[static_cast<std::size_t>(n.parent)].children;
  }
  // Masters read striped from every trainer host, which share their egress among the masters.
  const double trainer_out = trainer_hosts(c) * c.trainer_gbps * kGB / std::max(1, masters);
  for (auto& n : nodes) {
    if (n.parent >= 0) continue;
    n.rate = std::min(c.link_gbps * kGB, trainer_out);
  }
  const double verify = verify_rate(c);
  const double held = relay_bytes(c, bytes);
  const double chunk = std::min(static_cast<double>(chunk_bytes), held);
  const double rest = held - chunk;
  // Parents come before their children in host order, so one pass accumulates each path.
  std::vector<RelayTimes> out(hosts);
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const Node& n = nodes[h];
    double rate = std::min(n.rate, verify);
    double before = feed.start_s, slow = rate;
    if (n.parent >= 0) {
      const auto p = static_cast<std::size_t>(n.parent);
      rate = std::min(n.rate / std::max(1, nodes[p].children), verify);
      before = out[p].first_s;
      slow = std::min(out[p].rate, rate);
    }
    RelayTimes& r = out[h];
    r.first_s = before + chunk / rate + c.hop_latency_ms / 1000.0;
    r.rate = slow;
    // No sooner than the last signed chunk's way down this path (streamed, a relay keeps up with
    // what the trainer signs, so this bounds it when the trainer is the slower).
    r.all_s = std::max(r.first_s + rest / slow, feed.done_s + (r.first_s - feed.start_s));
    r.bytes = held;
  }
  return out;
}

double publish_stall_s(const SimulateConfig& c, std::uint64_t bytes) {
  return static_cast<double>(bytes) / (c.stage_gbps * kGB);
}

DeviceVerify device_verify(const SimulateConfig& c, std::uint64_t bytes,
                           std::uint64_t chunk_bytes) {
  DeviceVerify v;
  if (!(c.device_sha256_gbps > 0)) return v;
  const double share = static_cast<double>(bytes) / c.gpus_per_rollout;
  const double chunk = std::min(static_cast<double>(chunk_bytes), share);
  const double leaf = static_cast<double>(c.device_digest_leaf_bytes);
  v.unit_bytes = leaf > 0 ? std::min(leaf, chunk) : chunk;
  const double per_thread = c.device_sha256_gbps * kGB / c.device_threads;
  v.in_flight = std::min<double>(c.device_threads, std::ceil(share / v.unit_bytes));
  v.rate = v.in_flight * per_thread;
  v.tail_s = v.unit_bytes / per_thread;
  if (leaf > 0) v.tail_s += kDigestBytes * std::ceil(chunk / v.unit_bytes) / per_thread;
  return v;
}

namespace {

// When a GPU that loads `share` bytes in [start_s, end_s] holds them verified.
double verified_end(const DeviceVerify& v, double share, double start_s, double end_s) {
  if (v.rate == 0) return end_s;
  return std::max(end_s + v.tail_s, start_s + share / v.rate);
}

}  // namespace

double switch_s(const SimulateConfig& c, std::uint64_t bytes, std::uint64_t chunk_bytes) {
  const double share = static_cast<double>(bytes) / c.gpus_per_rollout;
  return verified_end(device_verify(c, bytes, chunk_bytes), share, 0, share / (c.h2d_gbps * kGB));
}

double pull_s(const SimulateConfig& c, std::uint64_t bytes) {
  return c.local_gbps > 0 ? static_cast<double>(bytes) / (c.local_gbps * kGB) : 0.0;
}

LoadWindow load_window(const SimulateConfig& c, const RelayTimes& r, std::uint64_t bytes,
                       std::uint64_t chunk_bytes, double asked_s) {
  const double share = static_cast<double>(bytes) / c.gpus_per_rollout;
  const double h2d = c.h2d_gbps * kGB;
  const DeviceVerify verify = device_verify(c, bytes, chunk_bytes);
  if (c.local_gbps > 0) {
    LoadWindow w;
    w.start_s = std::max(asked_s, r.all_s + pull_s(c, bytes));
    w.end_s = verified_end(verify, share, w.start_s, w.start_s + share / h2d);
    return w;
  }
  // The GPU's part of the relay's last chunk: its share is spread evenly over what the relay
  // holds.
  const double last_part = std::min(static_cast<double>(chunk_bytes), r.bytes) * share / r.bytes;
  const double earliest_end = std::max(r.all_s + last_part / h2d, r.first_s + share / h2d);
  LoadWindow w;
  w.start_s = std::max(asked_s, earliest_end - share / h2d);
  w.end_s = verified_end(verify, share, w.start_s, w.start_s + share / h2d);
  return w;
}

double line_rate_floor_s(const SimulateConfig& c, std::uint64_t bytes) {
  const double share = std::min(1.0, static_cast<double>(c.gpus_per_host) / c.gpus_per_rollout);
  return static_cast<double>(bytes) * share / (c.link_gbps * kGB);
}

UpdateTimes update_times(const SimulateConfig& c, std::uint32_t rollouts, std::uint64_t bytes,
                         std::uint64_t chunk_bytes) {
  UpdateTimes u;
  const Placement p = place(c, rollouts);
  u.hosts = p.hosts;
  u.stage_s = publish_stall_s(c, bytes);
  const SignedFeed feed = signed_feed(c, bytes, chunk_bytes);
  u.digest_s = static_cast<double>(bytes) / feed.rate;
  u.relays_start_s = u.stage_s + feed.start_s;
  u.floor_s = line_rate_floor_s(c, bytes);
  u.verify_tail_s = device_verify(c, bytes, chunk_bytes).tail_s;
  const std::vector<RelayTimes> relays = relay_times(c, p.hosts, bytes, chunk_bytes);
  if (relays.empty()) return u;
  u.first_relay_s = u.last_relay_s = u.stage_s + relays[0].all_s;
  u.relay_bytes = relays[0].bytes;
  for (const RelayTimes& r : relays) {
    u.first_relay_s = std::min(u.first_relay_s, u.stage_s + r.all_s);
    u.last_relay_s = std::max(u.last_relay_s, u.stage_s + r.all_s);
    // Rollouts ask for the version once it is announced: at the staged publish, or streamed,
    // when its first batch is signed.
    const LoadWindow w = load_window(c, r, bytes, chunk_bytes, std::min(0.0, feed.start_s));
    if (u.stage_s + w.end_s >= u.switch_end_s) {
      u.switch_start_s = u.stage_s + w.start_s;
      u.switch_end_s = u.stage_s + w.end_s;
    }
  }
  u.stall_s = u.switch_end_s - u.switch_start_s;
  return u;
}

}  // namespace sluice::sim
