// The modelled movement of a weight version, for `sluice simulate`. It is a model, not the
// relays' code: the relays, the transfer engine and the store's read plans do not run here.
//
// Placement: rollout i spans GPUs [i*g, (i+1)*g) of the fleet (g = gpus_per_rollout), packed onto
// hosts of gpus_per_host GPUs; a rollout lives on the host of its first GPU. Each host has one
// relay. Hosts are split into datacenters of hosts_per_datacenter (the trainer sits in the first).
//
// Broadcast (the store's arrangement, weightstore/store.hpp): with "chain", the first relay of
// the trainer's datacenter pulls from the trainer, each further relay of a datacenter from the
// one before it, and each datacenter's first relay (its seed) from the seed of the datacenter
// before it, over the WAN. With "tree", relay k of a datacenter pulls from relay (k-1)/fanout of
// it (the seed at the root, fed as in the chain).
//
// Time along a path of hops, chunk-pipelined: a hop forwards each chunk as soon as it has it, so
// the last byte reaches the end of the path after
//     sum over hops (chunk / rate + hop_latency) + (bytes - chunk) / (slowest rate on the path)
// A relay that feeds k others splits its outgoing rate k ways. Versions do not compete for links
// (one version in flight at a time is the normal case: a step takes longer than a broadcast).
//
// A rollout reads a version from its host's relay once that relay holds all of it (as a rollout
// with a host label does, local_wait_ms), at local_gbps, in the background; switching to it costs
// its GPU share (bytes / gpus_per_rollout) at h2d_gbps, during which it generates nothing.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.hpp"

namespace sluice::sim {

struct Placement {
  std::uint32_t hosts = 0;
  std::vector<std::uint32_t> rollout_host;  // by rollout index
};

Placement place(const SimulateConfig& c, std::uint32_t rollouts);

// Seconds after the publish at which each host's relay holds all of a version.
std::vector<double> relay_complete_s(const SimulateConfig& c, std::uint32_t hosts,
                                     std::uint64_t bytes, std::uint64_t chunk_bytes);

// Seconds the actor waits in publish (the copy into staging memory).
double publish_stall_s(const SimulateConfig& c, std::uint64_t bytes);
// Seconds of a rollout's background pull from its relay, and of its switch to a pulled version.
double pull_s(const SimulateConfig& c, std::uint64_t bytes);
double switch_s(const SimulateConfig& c, std::uint64_t bytes);

}  // namespace sluice::sim
