// The rollout worker's accounting: its counters in one struct (WorkerStats), counted where the
// work happens (the worker, its WeightFollower and its EpisodeWaits) and sent to the manager with
// every report as one JSON object; and the same work on the process's /metrics (WorkerMetrics).
//
// Time is accounted as generating (at least one active sequence), loading weights, waiting at a
// weight barrier, or idle, from the first version loaded (waiting for the job's first weights is
// start-up).
//
// Thread safety: WorkerStats is plain data, owned by the worker on its thread. WorkerMetrics
// holds references to core::process_metrics(), whose counters may be updated from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/event_loop.hpp"
#include "core/metrics.hpp"
#include "rollout/engine.hpp"
#include "rollout/kv_transfer.hpp"

namespace sluice::rollout {

struct WorkerStats {
  // The process's start (a joiner's join), and the same on the wall clock (Unix seconds): a bench
  // lines a joiner's times up with its own.
  const core::Clock::time_point created = core::Clock::now();
  const double created_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double first_weights_s = -1, first_trajectory_s = -1;  // since `created` (-1: not yet)
  // The first request for weights (the reader's first pull): a joiner's first weights take
  // first_read_s from here, whatever its process start-up cost (-1: not yet).
  std::optional<core::Clock::time_point> first_pull;
  double first_read_s = -1;
  // Where the accounting starts: the first weights loaded (see first_weights).
  core::Clock::time_point started = core::Clock::now();

  // Seconds.
  double gen_s = 0, load_s = 0, barrier_s = 0, idle_s = 0, occupancy_s = 0, reprefill_s = 0;
  std::uint64_t tokens = 0, steps = 0, loads = 0, imported = 0, exported = 0;
  std::uint64_t reprefill_tokens = 0, kv_imported = 0, pulled_bytes = 0, pulled_same_host_bytes = 0;
  std::uint64_t checksum_failures = 0;  // chunks that failed verification (each read again)
  // Of pulled_bytes, those checked by checksum alone (a verified copy of this user on this host),
  // and sources that claimed to be such a copy but the kernel did not confirm (checked by digest).
  std::uint64_t pulled_checksum_only_bytes = 0, owner_unconfirmed = 0;
  // KV caches sent over UCX; those read over UCX, and whose read (or import) failed
  // (re-prefilled).
  std::uint64_t kv_published = 0;
  KvReadStats kv_reads;
  // Versions the store acknowledged this rollout as a holder of (it served them to peers).
  std::uint64_t served_versions = 0;
  std::uint64_t refused_version = 0;  // imports of another version (never expected)
  std::uint64_t abandoned = 0;        // trajectories stopped because they could not be trained
  // Episodes: seconds spent waiting on the environment (summed over episodes), calls answered,
  // episodes the environment failed (an error or past env_timeout_ms), calls whose KV cache was
  // used again, and those re-prefilled (and their tokens).
  double env_wait_s = 0;
  std::uint64_t env_calls = 0, env_failed = 0, env_kv_kept = 0, env_reprefills = 0;
  std::uint64_t env_reprefill_tokens = 0;
  // An environment program's faults: lines over env_max_line_bytes, programs killed because they
  // took nothing written to them, answers dropped as malformed (rollout/command_env.hpp).
  std::uint64_t env_overlong_lines = 0, env_stalled = 0, env_garbage = 0;
  // Work handed back to the manager because no agent took it in agent_claim_timeout_ms.
  std::uint64_t agent_unclaimed = 0;

  // The first weights were loaded at `now`: the accounting starts here (what went before was
  // start-up). Sets first_weights_s and first_read_s.
  void first_weights(core::Clock::time_point now);
  // An engine step `res` took `took` seconds, ending at `now`: generating time, occupancy (of
  // `max_sequences`), tokens, and the first trajectory's time.
  void stepped(const StepResult& res, double took, std::uint32_t max_sequences,
               core::Clock::time_point now);
  // `s` seconds with nothing running: at a weight barrier (`at_barrier`), else idle.
  void waited(double s, bool at_barrier) { (at_barrier ? barrier_s : idle_s) += s; }
  // The report's stats at `now`. `loaded`: a version is loaded (else wall_s is 0);
  // `max_sequences`: the engine's decode batch bound.
  nlohmann::json to_json(core::Clock::time_point now, bool loaded,
                         std::uint32_t max_sequences) const;
};

// The worker's figures on the role's /metrics (core::process_metrics()).
struct WorkerMetrics {
  core::Counter& tokens =
      core::process_metrics().counter("sluice_rollout_tokens_generated_total", "tokens generated");
  core::Counter& finished = core::process_metrics().counter(
      "sluice_rollout_trajectories_finished_total", "trajectories finished here");
  core::Counter& loaded_bytes = core::process_metrics().counter(
      "sluice_rollout_weight_bytes_loaded_total", "weight bytes loaded into the engine");
  core::Gauge& version =
      core::process_metrics().gauge("sluice_rollout_version", "the version the engine runs");
  core::Counter& env_wait = core::process_metrics().counter(
      "sluice_rollout_env_wait_seconds_total", "seconds episodes waited on their environment");
  core::Counter& env_calls = core::process_metrics().counter("sluice_rollout_env_calls_total",
                                                             "environment calls answered");
  core::Counter& env_failed = core::process_metrics().counter(
      "sluice_rollout_env_failed_total", "episodes ended by an environment error or time-out");
  core::Gauge& env_waiting = core::process_metrics().gauge(
      "sluice_rollout_env_waiting", "episodes waiting on their environment now");
  core::Counter& env_overlong_lines = core::process_metrics().counter(
      "sluice_rollout_env_overlong_lines_total",
      "lines from an environment program over env_max_line_bytes (each ended its episodes)");
  core::Counter& env_stalled = core::process_metrics().counter(
      "sluice_rollout_env_stalled_total",
      "environment programs killed because they took nothing written to them");
  core::Counter& env_garbage =
      core::process_metrics().counter("sluice_rollout_env_garbage_total",
                                      "answers from an environment program dropped as malformed");
  core::Counter& agent_unclaimed = core::process_metrics().counter(
      "sluice_rollout_agent_unclaimed_total",
      "work handed back to the manager because no agent took it in agent_claim_timeout_ms");
};

}  // namespace sluice::rollout
