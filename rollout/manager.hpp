// The rollout manager (`sluice rollout-manager`): the prompt pool, assignment of trajectories to
// rollouts, heartbeats, the partial-response pool, repack of long-tail trajectories, and the
// hand-off of finished trajectories to the actor. How rollouts switch weight versions depends on
// the mode, so the baselines run on the same processes:
//
//   sync            one global batch at a time: a batch is released only once the actor has
//                   trained on the previous one and published; every rollout then loads it.
//   one-step-off    like sync with one more batch in flight (generated one version behind);
//                   weight updates are global (everyone drains, then everyone loads).
//   stream          continuous generation, up to `ahead_batches` batches ahead of the actor;
//                   weight updates are global.
//   partial-rollout continuous generation; on each publish every rollout loads the new version at
//                   once and continues its in-flight trajectories on it (they mix versions).
//   sluice          continuous generation; each rollout pulls the newest version in the
//                   background and switches on its own: its old version's long tail drains,
//                   moves by repack onto few rollouts, or continues on the newest version
//                   (`tail`). A free slot takes new work at once (`admission` continuous).
//
// Exactly once: a trajectory id is finished once; later copies (a resumed trajectory whose first
// rollout also finished it) are counted and dropped. A rollout that misses heartbeats for
// `heartbeat_timeout_ms` is dead: its queued work goes back to the pool, its in-flight
// trajectories resume from their last streamed state on a live rollout of the same version (or
// restart from the prompt when none has that version).
//
// Durability (state_path set): what cannot be rebuilt from the others (prompt cursor, versions,
// finished ids, finished trajectories the actor has not acknowledged, doomed prompts) is in an
// SQLite file (rollout/manager_db.hpp); every request's changes are committed before its reply.
// A manager restarted on the file continues the job: unacknowledged trajectories go to the actor
// again, a re-reported finished id is a duplicate, prompts continue from the cursor, and in-flight
// work is rebuilt from the rollouts' next reports (a released trajectory a rollout names is
// accepted as running there); released trajectories nobody names within recovery_grace_ms
// restart from their prompts. A rollout id reporting a new incarnation is a restarted process:
// the old one's work is reclaimed as for a dead rollout. Every request is decoded and checked in
// full (rollout/protocol.hpp) before anything changes.
//
// Thread safety: loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rl/task.hpp"
#include "rollout/manager_config.hpp"
#include "wire/security.hpp"

namespace sluice::rollout {

class Manager {
 public:
  static core::Result<std::unique_ptr<Manager>> create(core::EventLoop& loop, ManagerConfig config);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;
  const std::string& endpoint() const;
  // True once every prompt's trajectories were finished and acknowledged by the actor.
  bool done() const;
  // A hash over the state the manager acts on (trajectories, rollouts, queues, counters; not its
  // clocks or metrics), as hex: unchanged by a request that was refused.
  std::string state_digest() const;
  struct Impl;

 private:
  explicit Manager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::rollout
