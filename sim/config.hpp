// What `sluice simulate` needs beyond a job file: the `simulate` section of JOB.json (GPUs,
// hosts, datacenters, link rates, GPU types), and the simulator's input assembled from a job
// (the manager's and the engine's configurations, the actor's figures) by the command line.
//
// Units: times in ms unless a name says otherwise, rates in GB/s (1e9 bytes per second).
//
// Thread safety: plain structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "rl/env_latency.hpp"
#include "rollout/manager.hpp"
#include "rollout/sim_engine.hpp"

namespace sluice::sim {

// Decode timing of one kind of rollout, for fleets that mix GPU generations. Rollouts take the
// types in order (the first `rollouts` rollouts the first type, ...); the rest keep the job's
// rollout.sim timing.
struct GpuType {
  std::string name;
  std::uint32_t rollouts = 0;  // rollouts of this type, >= 1
  double t0_ms = 2.0;          // fixed time of a decode step
  double t1_ms = 0.05;         // added time per sequence in the batch
  double prefill_ms_per_token = 0.005;

  template <typename V>
  void describe(V& v) {
    v("name", name, "a label for the type (printed only)");
    v("rollouts", rollouts, "how many rollouts are of this type (>= 1)");
    v("t0_ms", t0_ms, "fixed time of a decode step in ms");
    v("t1_ms", t1_ms, "time per sequence in the decode batch in ms");
    v("prefill_ms_per_token", prefill_ms_per_token, "prefill time per token in ms");
  }
  core::Status validate() const;
};

// The host CPU that rollouts, transfers and reports share, as processor sharing: off unless
// `cores` > 0 (GPU fleets do not share a host's cores this way; a job emulated on one machine,
// as bench e2e runs it, does). Every decoding rollout demands step_cpu_ms of CPU per decode step,
// every rollout report_cpu_ms per report (it reports every report period), every weight pull
// cpu_s_per_gb x its rate; when the demand exceeds `cores`, decode steps, pulls and the report
// stalls are slowed by demand / cores. A report stops the rollout's generation for
// report_stall_ms (x the slowdown): the worker calls the manager synchronously.
struct CpuModel {
  double cores = 0;            // 0: no CPU model
  double step_cpu_ms = 0;      // CPU of one decode step (the rollout process)
  double report_cpu_ms = 0;    // CPU of one report (the rollout and the manager)
  double report_stall_ms = 0;  // a rollout's generation stops this long per report
  double cpu_s_per_gb = 0;     // CPU seconds per GB pulled (both ends of the TCP stream)

  template <typename V>
  void describe(V& v) {
    v("cores", cores, "cores the job's processes share (0: no CPU model)");
    v("step_cpu_ms", step_cpu_ms, "CPU time of one decode step, ms");
    v("report_cpu_ms", report_cpu_ms, "CPU time of one report (rollout and manager), ms");
    v("report_stall_ms", report_stall_ms,
      "a rollout's generation stops this long per report (the call is synchronous), ms");
    v("cpu_s_per_gb", cpu_s_per_gb, "CPU seconds per GB a rollout pulls");
  }
  core::Status validate() const;
};

struct SimulateConfig {
  std::uint32_t gpus_per_rollout = 1;  // GPUs one rollout (one engine) spans, >= 1
  std::uint32_t gpus_per_host = 8;     // GPUs per host; one relay per host, >= 1
  // GPUs of the trainer: only counted in the cluster size printed (its speed is the actor's
  // train_ms_per_token).
  std::uint32_t trainer_gpus = 0;
  std::uint32_t hosts_per_datacenter = 0;  // 0: every host in one datacenter
  std::vector<GpuType> gpu_types;          // empty: every rollout as rollout.sim
  std::string broadcast = "chain";         // how relays receive a version: chain or tree
  std::uint32_t fanout = 2;                // tree: children per relay, >= 1
  // What a relay holds: "whole" (every relay the whole version, as sluice's relays do) or
  // "host-share" (relays with relay.share_tp_size: only their host's GPUs' share; sim/weights.hpp).
  std::string relay_holds = "whole";
  double stage_gbps = 10.0;      // the actor's publish: copy into staging memory (the actor waits)
  double trainer_gbps = 25.0;    // a trainer host's NICs; masters read striped from all of them
  double link_gbps = 25.0;       // relay -> relay inside a datacenter (a host's NIC)
  double wan_gbps = 1.25;        // relay -> relay between datacenters
  double hop_latency_ms = 0.05;  // added once per hop (first chunk)
  // 0: a rollout keeps no copy of its own, its GPUs load from the host's relay copy (the design).
  // > 0: a rollout first pulls a whole copy from its relay at this rate, in the background, as
  // sluice's rollouts with the CPU engine do today (bench e2e; `simulate --validate`).
  double local_gbps = 0.0;
  double h2d_gbps = 25.0;  // per GPU: its share from the host copy (a weight stall)
  // partial-broadcast only: a version goes from the trainer to every rollout at once, no relays,
  // at this rate (GB/s of the version's bytes); the trainer and every rollout wait for it.
  double broadcast_gbps = 48.0;
  // What the version's digests and signature cost on its way (format/manifest.hpp: a SHA-256 per
  // chunk, signed by the actor; every reader verifies each chunk it receives). 0 cores: not
  // modelled, the bytes move as fast as staging and the links allow.
  double digest_gbps_per_core = 0.0;       // one core's SHA-256 rate, GB/s
  std::uint32_t trainer_digest_cores = 0;  // a trainer host's cores that digest what it stages
  std::uint32_t relay_digest_cores = 0;    // a relay host's cores that verify what it receives
  double sign_ms = 0.0;  // the actor signs the manifest (streamed: one batch of digests)
  // When relays may start: "after-staging" (sluice's publish: every chunk staged and digested,
  // then the manifest signed) or "streamed" (the digests signed in batches of sign_batch_chunks
  // chunks per trainer host as they are staged; a design, not built).
  std::string signing = "after-staging";
  std::uint32_t sign_batch_chunks = 16;
  // GPUs that verify the share they load, on the device, as it lands (core/device_digest.hpp:
  // one chunk per GPU thread; sim/weights.hpp). 0 GB/s: GPUs do not verify.
  double device_sha256_gbps = 0.0;        // a GPU's SHA-256 rate with all its threads busy, GB/s
  std::uint32_t device_threads = 270336;  // threads a GPU runs at once (SMs x threads per SM)
  // 0: the signed digest is SHA-256 of a whole chunk (sluice's manifest), one thread a chunk.
  // > 0: a two-level digest (SHA-256 of the SHA-256s of the chunk's leaves of this many bytes),
  // one thread a leaf, then one the chunk's root: a design, not built.
  std::uint64_t device_digest_leaf_bytes = 0;
  // With repack on, a busy rollout reports at least this often so the planner sees its KV use
  // (otherwise a rollout reports when something about it changed; see simulator.hpp).
  std::uint64_t refresh_ms = 1000;
  double max_sim_s = 30.0 * 24 * 3600;  // simulated time bound: beyond it the run is an error
  // No trajectory finished, loaded or trained for this long (simulated): the run is an error.
  double stall_s = 6.0 * 3600;
  double steady_trim = 0.1;  // steady throughput leaves out this share of batches at each end
  double progress_s = 5.0;   // wall seconds between progress lines on stderr (0: quiet)
  CpuModel cpu;              // shared host CPU (off by default)
  // Assumptions behind the figures above and the job's, with their sources: printed with the
  // results, never used in the model.
  std::vector<std::string> notes;

  template <typename V>
  void describe(V& v) {
    v("gpus_per_rollout", gpus_per_rollout, "GPUs one rollout spans (>= 1)");
    v("gpus_per_host", gpus_per_host, "GPUs per host; one relay per host (>= 1)");
    v("trainer_gpus", trainer_gpus,
      "GPUs of the trainer, for the cluster size printed (its speed: actor.train_ms_per_token)");
    v("hosts_per_datacenter", hosts_per_datacenter,
      "hosts per datacenter (0: one datacenter); the trainer is in the first");
    v("gpu_types", gpu_types,
      "decode timing per GPU type: [{name, rollouts, t0_ms, t1_ms, prefill_ms_per_token}], "
      "taken by rollouts in order (the rest as rollout.sim)");
    v("broadcast", broadcast, "how relays receive a version: chain or tree");
    v("fanout", fanout, "tree: children per relay");
    v("relay_holds", relay_holds,
      "what a relay holds: whole, or host-share (relay.share_tp_size: its host's GPUs' share)");
    v("stage_gbps", stage_gbps, "actor publish: copy into staging memory, GB/s (the actor waits)");
    v("trainer_gbps", trainer_gbps,
      "a trainer host's NICs, GB/s (a master relay reads striped from every trainer host)");
    v("link_gbps", link_gbps, "relay -> relay within a datacenter, GB/s");
    v("wan_gbps", wan_gbps, "relay -> relay between datacenters, GB/s");
    v("hop_latency_ms", hop_latency_ms, "latency added per hop, ms");
    v("local_gbps", local_gbps,
      "0: GPUs load from the host's relay copy; > 0: a rollout first pulls its own whole copy "
      "from its relay at this rate (GB/s), as sluice's CPU-engine rollouts do");
    v("h2d_gbps", h2d_gbps,
      "per GPU: its share from the host's relay copy into GPU memory (the switch), GB/s");
    v("broadcast_gbps", broadcast_gbps,
      "partial-broadcast: GB/s of a version broadcast from the trainer to every rollout at once "
      "(no relays); the trainer and every rollout pause for it");
    v("digest_gbps_per_core", digest_gbps_per_core,
      "one core's SHA-256 rate, GB/s (with *_digest_cores: what digests cost)");
    v("trainer_digest_cores", trainer_digest_cores,
      "a trainer host's cores that digest what it stages (0: digests not modelled there)");
    v("relay_digest_cores", relay_digest_cores,
      "a relay host's cores that verify what it receives (0: not modelled there)");
    v("sign_ms", sign_ms, "the actor's signature of the manifest (streamed: of one batch), ms");
    v("signing", signing,
      "when relays may start: after-staging (every chunk staged, digested, then signed) or "
      "streamed (digests signed in batches as they are staged: a design, not built)");
    v("sign_batch_chunks", sign_batch_chunks, "streamed: chunks per signed batch (>= 1)");
    v("device_sha256_gbps", device_sha256_gbps,
      "a GPU's SHA-256 rate with all its threads busy, GB/s (0: GPUs do not verify what they "
      "load; > 0: they verify it on the device as it lands, one chunk per thread)");
    v("device_threads", device_threads,
      "threads a GPU runs at once (SMs x resident threads per SM, >= 1): a thread's rate is "
      "device_sha256_gbps / device_threads");
    v("device_digest_leaf_bytes", device_digest_leaf_bytes,
      "0: the digest is SHA-256 of a whole chunk, one GPU thread a chunk; > 0: a two-level "
      "digest over leaves of this many bytes, one thread a leaf (a design, not built)");
    v("refresh_ms", refresh_ms, "repack on: a busy rollout reports at least this often (ms)");
    v("max_sim_s", max_sim_s, "simulated time bound in seconds (beyond it: an error)");
    v("stall_s", stall_s,
      "error when nothing finished, loaded or trained for this long (simulated seconds)");
    v("steady_trim", steady_trim,
      "steady throughput leaves out this share of trained batches at each end (0 .. 0.45)");
    v("progress_s", progress_s, "wall seconds between progress lines on stderr (0: quiet)");
    v("cpu", cpu,
      "shared host CPU: {cores (0: off), step_cpu_ms, report_cpu_ms, report_stall_ms, "
      "cpu_s_per_gb}; demand beyond the cores slows decode, pulls and report stalls");
    v("notes", notes, "assumptions and their sources, printed with the results (not used)");
  }
  core::Status validate() const;
};

// The actor's side of a job, as the simulator needs it (from the job's `actor` section).
struct ActorParams {
  std::uint32_t batch_trajectories = 64;
  std::uint32_t group_size = 4;
  std::uint64_t max_staleness = 4;
  std::string staleness_policy = "drop";  // drop or downweight
  double stale_weight = 0.0;
  std::uint64_t collect_ms = 10;
  double train_ms_fixed = 0.0;
  double train_ms_per_token = 0.01;
  std::uint64_t weight_bytes = 16u << 20;
  std::uint64_t chunk_bytes = 4u << 20;
};

struct SimInput {
  rollout::ManagerConfig manager;    // mode and repack are set per run
  rollout::SimEngineConfig engine;   // capacity, default timing, lengths, seed, episode turns
  rl::EnvLatencyConfig env_latency;  // episodes: the environment's answer time
  std::uint32_t rollouts = 4;
  std::uint64_t report_ms = 25;  // the rollouts' report period
  ActorParams actor;
  SimulateConfig sim;
};

// Each rollout's decode timing, by rollout index: the first rollouts take gpu_types in order
// (`rollouts` of each), the rest the engine's own (rollout.sim).
std::vector<GpuType> rollout_timings(const SimInput& in);

}  // namespace sluice::sim
