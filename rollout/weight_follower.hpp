// A rollout's weights: follows the versions the manager names. It holds the loaded version (and
// serves it to peers) through a weightstore::Reader, pulls the newest one in the background while
// the old one's trajectories finish, so that the switch at the safe point is a swap, not a wait,
// and loads a version into the engine when the manager says so. The reader, its transfer engine
// and its store client are made with the first pull.
//
// What it counts (pulled bytes, loads, load time, versions served) goes to the worker's
// WorkerStats and WorkerMetrics.
//
// Thread safety: one thread, the worker's; its pulls complete on the worker's event loop. Not
// copyable or movable (a pull's callback holds `this`).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rollout/engine.hpp"
#include "rollout/worker_config.hpp"
#include "rollout/worker_state.hpp"
#include "rollout/worker_stats.hpp"
#include "wire/security.hpp"

namespace sluice::core {
class TransferEngine;
}
namespace sluice::weightstore {
class Reader;
class StoreClient;
}  // namespace sluice::weightstore

namespace sluice::rollout {

class WeightFollower {
 public:
  // `loop`, `cfg`, `security`, `engine`, `stats` and `metrics` must outlive it. `environment`:
  // the process environment as the user gave it (see core::TransferOptions).
  WeightFollower(core::EventLoop& loop, const RolloutConfig& cfg, const core::Security& security,
                 std::vector<std::string> environment, Engine& engine, WorkerStats& stats,
                 WorkerMetrics& metrics);
  ~WeightFollower();
  WeightFollower(const WeightFollower&) = delete;
  WeightFollower& operator=(const WeightFollower&) = delete;

  // The transfer engine the weights come over (null before the first pull): exported KV caches
  // move over it too.
  core::TransferEngine* transfer() const { return transfer_.get(); }
  // The newest version held or staged (0: none).
  std::uint64_t held() const;
  // The newest version staged or loaded, for a report.
  std::uint64_t staged() const;
  // Before a report: counts a version newly served to peers (WorkerStats::served_versions).
  void count_served();

  // Starts pulling the latest version in the background when `ws` says so (the manager named one
  // newer than what is loaded or staged). A failed pull is logged, not returned: the version may
  // have been retired meanwhile, and a newer one follows. Errors: making the reader failed.
  core::Status prefetch(const WorkerState& ws);
  // Switches the engine to `version` (or a newer staged one): a swap when the background pull
  // has it, else a wait for the pull (while `ws` allows and `stopping` is not set), counted as
  // load time. A version not pulled in time, a failed swap or a load the engine refuses is
  // logged and skipped (the manager asks again). Errors: as prefetch().
  core::Status load_version(WorkerState& ws, std::uint64_t version, bool allow_active,
                            const std::atomic<bool>& stopping);

  // At the end of run(): stops the heartbeats as a holder; `drain` (the job ended) waits a
  // bounded time for peers still reading the served copy, else the reader's destructor
  // unpublishes without waiting and its readers fail over to another source.
  void finish(bool drain);

 private:
  core::Status ensure_reader();
  bool serve_peers() const;

  core::EventLoop* loop_;
  const RolloutConfig& cfg_;
  const core::Security& security_;
  std::vector<std::string> environment_;
  Engine* engine_;
  WorkerStats* stats_;
  WorkerMetrics* metrics_;
  std::uint64_t last_served_ = 0;  // the last version counted in served_versions
  // Destroyed in reverse: the reader goes before its transfer engine and store client.
  std::unique_ptr<core::TransferEngine> transfer_;
  std::unique_ptr<weightstore::StoreClient> store_;
  std::unique_ptr<weightstore::Reader> reader_;
  std::unique_ptr<core::EventLoop::Timer> holder_beat_;  // the reader's heartbeats to the store
  // Expires first, so a pull that completes while the reader goes finds it gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sluice::rollout
