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
#include "wire/security.hpp"
#include "core/status.hpp"
#include "rl/task.hpp"
#include "rollout/repack.hpp"

namespace sluice::rollout {

// Where idle rollout slots went, the keys of the status's `free_slot_s` (slot-seconds): episodes
// waiting on their environment with nothing else to run in their place, a rollout loading
// weights, one draining an old version, the admission budget used up, the actor's backlog full
// (continuous admission), no work left in the job, anything else.
inline constexpr const char* kFreeSlotCauses[] = {"environment", "loading", "draining", "budget",
                                                  "backlog",     "end",     "other"};

struct ManagerConfig {
  std::string listen = "tcp://127.0.0.1:5560";  // control endpoint (rollouts and the actor)
  std::string mode = "sluice";            // sync, one-step-off, stream, partial-rollout, sluice
  std::uint64_t prompts = 0;              // prompts in the job; 0: unlimited
  std::uint32_t group_size = 4;           // samples per prompt (the GRPO group)
  std::uint32_t batch_trajectories = 64;  // the actor's global batch (a multiple of group_size)
  std::uint32_t ahead_batches = 2;        // admission budget: batches released ahead of the actor
  // How new work is admitted (rollout/mode_policy.hpp, Admission): "budget" (ahead_batches),
  // "continuous" (a free slot takes work at once; pauses only while the actor has
  // backlog_batches batches of complete groups not taken), or "" (the mode's: continuous in
  // sluice mode, budget in the others).
  std::string admission;
  std::uint32_t backlog_batches =
      2;  // continuous admission: the actor's queue that pauses it, >= 1
  // Sluice mode: what a rollout holding the newest version does with its old version's in-flight
  // trajectories: "drain", "continue" (the default) or "auto" (rollout/mode_policy.hpp,
  // TailPolicy).
  std::string tail = "continue";
  std::uint32_t prompt_tokens = 32;           // simulated prompts: tokens per prompt
  std::uint64_t max_new_tokens = 4096;        // cap on a response
  std::uint64_t seed = 1;                     // prompt pool seed
  std::uint64_t heartbeat_timeout_ms = 2000;  // a rollout silent this long is dead
  bool repack = true;                         // sluice mode: consolidate long tails
  std::uint64_t repack_interval_ms = 200;
  double ramp_down_occupancy = 0.75;  // measured: 2.54x sync against 2.46x with 0.5 (bench e2e)
  double kv_headroom = 0.1;
  // Repack's cost model (rollout/repack.hpp): a source is emptied only when the move pays.
  RepackCost repack_cost;
  std::uint32_t prefetch = 4;  // trajectories queued at a rollout beyond what it can run now
  // Sluice mode: a rollout still pulling the newest version takes new work on its own only while
  // it is at most this many versions behind.
  std::uint32_t max_assign_lag = 1;
  // Work that can no longer be trained on stops early: with abandon_stale, a trajectory first
  // generated by a version more than max_staleness behind the newest (the actor drops it under
  // its drop policy), and the rest of its group, end as abandoned. `sluice run` sets both from
  // the actor.
  bool abandon_stale = false;
  std::uint64_t max_staleness = 4;
  std::string prompt_source = "sim";  // sim (token ids) or task (the arithmetic task)
  rl::TaskConfig task;                // prompt_source task
  // Durable state (an SQLite file; `sluice run` puts it in the run folder). Empty: in memory
  // only, lost with the process. An existing file is restored: the job continues.
  std::string state_path;
  // After a restart, released trajectories that no rollout names within this long restart from
  // their prompts. 0: 2 x heartbeat_timeout_ms.
  std::uint64_t recovery_grace_ms = 0;
  // A trajectory sent to the actor and neither received (`have`) nor acknowledged is sent again
  // after this long (a lost reply).
  std::uint64_t resend_ms = 3000;
  // Who may talk to the manager (wire/security.hpp): curve by default, with this role's key file
  // and the job's members file; plain only when set, and loud.
  core::SecurityConfig security;

  template <typename V>
  void describe(V& v) {
    v("listen", listen, "control endpoint for rollouts and the actor");
    v("security", security, "control-plane authentication: mode, key_file, members_file");
    v("mode", mode, "sync, one-step-off, stream, partial-rollout or sluice");
    v("prompts", prompts, "prompts in the job (0: unlimited)");
    v("group_size", group_size, "samples per prompt (GRPO group)");
    v("batch_trajectories", batch_trajectories, "the actor's global batch, in trajectories");
    v("ahead_batches", ahead_batches,
      "budget admission: batches released ahead of what the actor consumed (default 2)");
    v("admission", admission,
      "budget or continuous (empty: the mode's, continuous in sluice mode and budget in the "
      "others)");
    v("backlog_batches", backlog_batches,
      "continuous admission pauses while the actor has this many batches of complete groups "
      "not taken (default 2)");
    v("tail", tail,
      "sluice mode, a rollout holding the newest version: drain its old trajectories, continue "
      "them on the newest version, or auto (continue once drained to ramp-down and repack has "
      "no destination) (default continue)");
    v("prompt_tokens", prompt_tokens, "simulated prompts: tokens per prompt");
    v("max_new_tokens", max_new_tokens, "cap on a response's length");
    v("seed", seed, "prompt pool seed");
    v("heartbeat_timeout_ms", heartbeat_timeout_ms, "a rollout silent this long is dead");
    v("repack", repack, "sluice mode: consolidate long-tail trajectories");
    v("repack_interval_ms", repack_interval_ms, "how often repack is planned (and after publish)");
    v("ramp_down_occupancy", ramp_down_occupancy,
      "occupancy at or below which a rollout with no "
      "queued work is in ramp-down");
    v("kv_headroom", kv_headroom, "KV room kept free on repack destinations (fraction)");
    v("repack_cost", repack_cost,
      "repack moves only what pays: decode and prefill timing, KV transfer, length model");
    v("prefetch", prefetch, "trajectories queued at a rollout beyond its free slots");
    v("abandon_stale", abandon_stale,
      "stop trajectories the actor would drop as too stale, and the rest of their groups");
    v("max_staleness", max_staleness, "abandon_stale: the actor's staleness bound");
    v("max_assign_lag", max_assign_lag,
      "sluice mode: a rollout pulling the newest version takes new work only while at most this "
      "many versions behind");
    v("prompt_source", prompt_source, "sim (token ids) or task (the arithmetic task)");
    v("task", task, "prompt_source task: the task's settings");
    v("state_path", state_path,
      "durable state file (SQLite; empty: in memory only); an existing one is restored");
    v("recovery_grace_ms", recovery_grace_ms,
      "after a restart, released work no rollout names within this long restarts (0: 2 x "
      "heartbeat_timeout_ms)");
    v("resend_ms", resend_ms, "re-send to the actor what it did not confirm within this long");
  }
  core::Status validate() const;
};

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
