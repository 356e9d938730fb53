// The modelled movement of a weight version, for `sluice simulate`. It is a model, not the
// relays' code: the relays, the transfer engine and the store's read plans do not run here. It
// follows docs/design.md ("Weight store semantics", "Transfer", "Python, PyTorch and GPUs").
//
// Placement: rollout i spans GPUs [i*g, (i+1)*g) of the fleet (g = gpus_per_rollout), packed onto
// hosts of gpus_per_host GPUs; a rollout lives on the host of its first GPU. Each host has one
// relay. Hosts are split into datacenters of hosts_per_datacenter (the trainer sits in the first).
//
// What a relay holds (relay_holds): "whole" (sluice's relays: every relay holds all of a
// version) or "host-share" (relays with relay.share_tp_size: a relay holds only the slices its
// host's GPUs need, 1/hosts-per-rollout of the version when a rollout spans several hosts, and
// the host's GPUs load from it while it receives).
// Relays holding the same bytes form one broadcast group: every relay with "whole"; with
// "host-share" the relays at the same position within their rollouts.
//
// Broadcast (the store's arrangement, weightstore/store.hpp), per group: with "chain", the first
// relay of the trainer's datacenter (a master) reads from the trainer, each further relay of a
// datacenter from the one before it, and each datacenter's first relay (its seed) from the seed
// of the datacenter before it, over the WAN. With "tree", relay k of a datacenter reads from
// relay (k-1)/fanout of it (the seed at the root, fed as in the chain).
//
// The trainer's GPUs are partial holders of the version (each stages its own shard): a master
// reads chunks striped across all of them, so it receives at its own NIC's rate (link_gbps),
// unless the trainer's hosts together send less: trainer_hosts x trainer_gbps, shared by the
// masters reading at the same time (trainer hosts: trainer_gpus / gpus_per_host, at least 1).
// The masters read once the publish has staged every shard (the trainer registers then).
//
// Digests and the signature (digest_gbps_per_core and the *_digest_cores, sign_ms, signing): a
// trainer host digests what it stages as it stages it, at the slower of its staging share and
// its digest cores; a relay verifies what it receives, so it takes in no faster than its digest
// cores. With "after-staging" (sluice's publish) relays start once every chunk is staged and
// digested and the manifest signed. With "streamed" each trainer host signs its digests in
// batches as it stages: relays start after the first batch and its signature, and end no sooner
// than the last batch's signature plus its chunk's way down the path.
//
// Time along a path of hops, chunk-pipelined: a hop forwards each chunk as soon as it has it, so
// the last byte reaches the end of the path after
//     sum over hops (chunk / rate + hop_latency) + (bytes - chunk) / (slowest rate on the path)
// A relay that feeds k others splits its outgoing rate k ways. Versions do not compete for links
// (one version in flight at a time is the normal case: a step takes longer than a broadcast).
//
// A rollout keeps no copy of its own: its host's relay copy is the host's one copy, and each of
// its GPUs loads its own share (bytes / gpus_per_rollout; with tensor parallelism a slice of
// every chunk) from it at h2d_gbps, every GPU and every host in parallel. A GPU overwrites the
// weights it generates with, so the rollout generates nothing while its GPUs load (the switch,
// a weight stall). A GPU reads only chunks its relay already holds: a load asked for before the
// relay holds all of the version starts as late as it can without ending later, and ends no
// earlier than the relay's last chunk plus that chunk's share, nor than the relay's first chunk
// plus the share at h2d_gbps.
//
// Verified on the device (device_sha256_gbps > 0): each GPU checks the share it loads against
// the signed digests as the bytes land, one chunk per GPU thread (core/device_digest.hpp), so
// relays may forward without hashing (relay_digest_cores 0). SHA-256 of a chunk is a chain of
// 64-byte blocks, so one thread hashes one chunk; a thread's rate is q = device_sha256_gbps /
// device_threads (the GPU's rate shared by the threads that reach it). A GPU hashes at most
// n = min(device_threads, its share / chunk) chunks at once, so it verifies at n q, and the chunk
// that lands last is verified chunk / q after it lands: the load ends no sooner than that (the
// tail), nor than its share at n q. With device_digest_leaf_bytes = L (a two-level digest: a
// design, not built) a thread hashes a leaf of L bytes, and the tail is L / q plus the chunk's
// root over its chunk / L leaf digests of 32 bytes, (32 chunk / L) / q.
//
// With local_gbps > 0 a rollout instead pulls a whole copy of its own from its relay once the
// relay holds all of it, in the background, and its GPUs load from that copy (sluice's rollouts
// with the CPU engine, which `simulate --validate` sets beside real runs).
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

// One host's relay and a version, in seconds after the publish has staged it.
struct RelayTimes {
  double first_s = 0;  // holds its first chunk
  double all_s = 0;    // holds all it will hold
  double bytes = 0;    // what it holds (the version, or its host's share)
  double rate = 0;     // bytes/s of the slowest hop on its path
};

// When relays may read a version, in seconds after the publish has staged it (negative: before,
// with streamed signatures), and how fast the trainer makes its bytes readable.
struct SignedFeed {
  double start_s = 0;  // the first bytes are staged, digested and signed
  double done_s = 0;   // the last are
  double rate = 0;     // bytes/s staged and digested, every trainer host together
};
SignedFeed signed_feed(const SimulateConfig& c, std::uint64_t bytes, std::uint64_t chunk_bytes);

// Every host's relay, by host index.
std::vector<RelayTimes> relay_times(const SimulateConfig& c, std::uint32_t hosts,
                                    std::uint64_t bytes, std::uint64_t chunk_bytes);

// The bytes a host's relay holds: the version, or with "host-share" its host's GPUs' part.
double relay_bytes(const SimulateConfig& c, std::uint64_t bytes);
// Hosts a rollout spans (1 when several rollouts share a host).
std::uint32_t hosts_per_rollout(const SimulateConfig& c);
// Hosts of the trainer (at least 1).
std::uint32_t trainer_hosts(const SimulateConfig& c);

// Seconds the actor waits in publish (the copy into staging memory).
double publish_stall_s(const SimulateConfig& c, std::uint64_t bytes);
// Seconds of a rollout's pull of its own copy from its relay (0 with local_gbps 0: none).
double pull_s(const SimulateConfig& c, std::uint64_t bytes);
// A GPU's verification of the share it loads (all zero when device_sha256_gbps is 0).
struct DeviceVerify {
  double unit_bytes = 0;  // what one thread hashes: a chunk, or a leaf
  double in_flight = 0;   // units a GPU hashes at once: min(device_threads, its share / unit)
  double rate = 0;        // bytes/s a GPU verifies with that many in flight
  double tail_s = 0;      // the last unit's verification after it lands (and its chunk's root)
};
DeviceVerify device_verify(const SimulateConfig& c, std::uint64_t bytes, std::uint64_t chunk_bytes);

// Seconds one GPU takes to load its share of a version at h2d_gbps and, where GPUs verify, to
// verify it (the switch once its relay holds the version).
double switch_s(const SimulateConfig& c, std::uint64_t bytes, std::uint64_t chunk_bytes);

// A rollout's switch: when its GPUs start loading and hold the version, verified where GPUs
// verify (the stall), in the relay's clock.
struct LoadWindow {
  double start_s = 0;
  double end_s = 0;
};
// The load of a version asked for at `asked_s`, from a relay with times `r` (with a pull of the
// rollout's own copy, from the end of that pull).
LoadWindow load_window(const SimulateConfig& c, const RelayTimes& r, std::uint64_t bytes,
                       std::uint64_t chunk_bytes, double asked_s);

// Seconds for each host to receive only its GPUs' share at link_gbps: no schedule of a
// version's bytes over the hosts' links ends sooner.
double line_rate_floor_s(const SimulateConfig& c, std::uint64_t bytes);

// One version from the publish to the last GPU switched, every rollout asking for it at once
// (`sluice simulate --update-only`). Seconds from the publish call.
struct UpdateTimes {
  std::uint32_t hosts = 0;
  double stage_s = 0;         // the actor's publish stall (the trainer stages its shards)
  double digest_s = 0;        // every chunk is staged and digested
  double relays_start_s = 0;  // relays may start reading (the first signed bytes)
  double first_relay_s = 0;   // the first relay holds what it will hold
  double last_relay_s = 0;    // the last relay does
  double relay_bytes = 0;     // what each relay holds
  double switch_start_s = 0;  // the last rollout's GPUs start loading (they stop generating)
  double switch_end_s = 0;    // ... and hold the version: the last GPU switched
  double stall_s = 0;         // switch_end_s - switch_start_s: the GPU stall
  double verify_tail_s = 0;   // GPUs verify: the last chunk's verification after it lands
  double floor_s = 0;         // line_rate_floor_s
};
UpdateTimes update_times(const SimulateConfig& c, std::uint32_t rollouts, std::uint64_t bytes,
                         std::uint64_t chunk_bytes);

}  // namespace sluice::sim
