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
//   sluice          continuous generation; each rollout switches on its own once it holds no
//                   trajectory of an older version (it takes no new work meanwhile), and repack
//                   consolidates the old versions' long tails onto few rollouts.
//
// Exactly once: a trajectory id is finished once; later copies (a resumed trajectory whose first
// rollout also finished it) are counted and dropped. A rollout that misses heartbeats for
// `heartbeat_timeout_ms` is dead: its queued work goes back to the pool, its in-flight
// trajectories resume from their last streamed state on a live rollout of the same version (or
// restart from the prompt when none has that version).
//
// Thread safety: loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rl/task.hpp"

namespace sluice::rollout {

struct ManagerConfig {
  std::string listen = "tcp://127.0.0.1:5560";  // control endpoint (rollouts and the actor)
  std::string mode = "sluice";            // sync, one-step-off, stream, partial-rollout, sluice
  std::uint64_t prompts = 0;              // prompts in the job; 0: unlimited
  std::uint32_t group_size = 4;           // samples per prompt (the GRPO group)
  std::uint32_t batch_trajectories = 64;  // the actor's global batch (a multiple of group_size)
  std::uint32_t ahead_batches = 2;      // stream/partial-rollout/sluice: batches ahead of the actor
  std::uint32_t prompt_tokens = 32;     // simulated prompts: tokens per prompt
  std::uint64_t max_new_tokens = 4096;  // cap on a response
  std::uint64_t seed = 1;               // prompt pool seed
  std::uint64_t heartbeat_timeout_ms = 2000;  // a rollout silent this long is dead
  bool repack = true;                         // sluice mode: consolidate long tails
  std::uint64_t repack_interval_ms = 200;
  double ramp_down_occupancy = 0.75;  // measured: 2.54x sync against 2.46x with 0.5 (bench e2e)
  double kv_headroom = 0.1;
  std::uint32_t prefetch = 4;  // trajectories queued at a rollout beyond what it can run now
  // Sluice mode: a rollout still pulling the newest version takes new work on its own only while
  // it is at most this many versions behind.
  std::uint32_t max_assign_lag = 1;
  std::string prompt_source = "sim";  // sim (token ids) or task (the arithmetic task)
  rl::TaskConfig task;                // prompt_source task

  template <typename V>
  void describe(V& v) {
    v("listen", listen, "control endpoint for rollouts and the actor");
    v("mode", mode, "sync, one-step-off, stream, partial-rollout or sluice");
    v("prompts", prompts, "prompts in the job (0: unlimited)");
    v("group_size", group_size, "samples per prompt (GRPO group)");
    v("batch_trajectories", batch_trajectories, "the actor's global batch, in trajectories");
    v("ahead_batches", ahead_batches, "asynchronous modes: batches generated ahead of the actor");
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
    v("prefetch", prefetch, "trajectories queued at a rollout beyond its free slots");
    v("max_assign_lag", max_assign_lag,
      "sluice mode: a rollout pulling the newest version takes new work only while at most this "
      "many versions behind");
    v("prompt_source", prompt_source, "sim (token ids) or task (the arithmetic task)");
    v("task", task, "prompt_source task: the task's settings");
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
  struct Impl;

 private:
  explicit Manager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::rollout
