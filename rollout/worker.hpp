// A rollout worker (`sluice rollout`): drives one engine. It reports to the rollout manager every
// `report_ms` (its version, active and queued trajectories, finished trajectories with their
// behaviour versions and log-probs, exported sequences, and every `partial_every` reports the
// state of its in-flight sequences for the partial-response pool), and does what the reply says:
// queue new trajectories, import migrated ones, export ones being repacked away, or pull a newer
// version through the weight store (from the nearest relay) and load it.
//
// While the manager cannot be reached (it restarts: its state is durable) the rollout keeps
// generating, holds its finished trajectories (up to max_held_finished) and reports them when the
// manager answers again; every report names the process's incarnation (random, chosen at start),
// so the manager tells a restarted process under the same id from the old one.
//
// Leaving: stopped by a signal (SIGTERM, `sluice run --remove`), the rollout sends one last report
// that hands back its queued and in-flight trajectories (the manager resumes them elsewhere) and
// says it leaves; then it withdraws the copy it serves, if any.
//
// Time is accounted as generating (at least one active sequence), loading weights, waiting at a
// weight barrier, or idle; the totals go to the manager with every report.
//
// Episodes: a sequence whose model turn ends with a call leaves the engine and waits on the
// rollout's Environment (rollout/environment.hpp), holding no slot; the answer's tokens are
// appended and it goes to the front of the queue for its next turn, with its KV cache when the
// weights are unchanged (env_keep_kv), else re-prefilled. Reports name the waiting episodes, and
// their partial states include them, so a rollout killed mid-episode loses none.
//
// Its configuration is RolloutConfig (rollout/worker_config.hpp); its parts are WorkerState
// (decisions), WeightFollower (weights), KvMoves (KV caches that move), EpisodeWaits (episodes),
// HeldWork (the queue and what goes to the manager) and WorkerStats (accounting).
//
// Thread safety: one thread. run() is a plain driver loop (the engine's modelled step time is
// slept through, since a rollout serves no requests), so the blocking control-plane calls are
// made from it, never from a loop callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rollout/engine.hpp"
#include "rollout/environment.hpp"
#include "rollout/worker_config.hpp"

namespace sluice::rollout {

// Scores a finished sequence (the task's verifiable reward).
using Scorer = std::function<double(const SequenceState&)>;

class RolloutWorker {
 public:
  // `environment`: the process environment as the user gave it (see core::TransferOptions).
  static core::Result<std::unique_ptr<RolloutWorker>> create(core::EventLoop& loop,
                                                             RolloutConfig config,
                                                             std::unique_ptr<Engine> engine,
                                                             Scorer scorer,
                                                             std::vector<std::string> environment);
  ~RolloutWorker();
  RolloutWorker(const RolloutWorker&) = delete;
  RolloutWorker& operator=(const RolloutWorker&) = delete;
  // Runs until the manager says the job is done, stop() is called, or the manager stays silent
  // past manager_timeout_ms (an error).
  core::Status run();
  void stop();
  struct Impl;

 private:
  explicit RolloutWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A deterministic pseudo-reward for the simulated workload (1 or 0 from the trajectory id).
double sim_reward(const SequenceState& s);

}  // namespace sluice::rollout
