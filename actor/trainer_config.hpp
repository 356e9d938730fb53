// The actor trainer's configuration (`sluice actor`, actor/trainer.hpp): apart from the trainer so
// that its decisions (actor/trainer_state.hpp) read it without including the trainer.
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <string>

#include "actor/learner.hpp"
#include "core/status.hpp"
#include "weightstore/holder_config.hpp"

namespace sluice::actor {

// store, security, stream_encryption and store_lease_ttl_ms: weightstore::HolderRoleConfig.
struct TrainerConfig : weightstore::HolderRoleConfig {
  std::string manager = "tcp://127.0.0.1:5560";
  std::string model = "policy";
  std::string actor_id = "actor-0";
  std::uint32_t batch_trajectories = 64;  // the global batch
  std::uint32_t group_size = 4;           // trajectories per prompt (taken as whole groups)
  // Bound on actor version - behaviour version: 16, what the staleness study licenses (lag 16
  // within 2 points of sync on the reference job, docs/benchmarks.md).
  std::uint64_t max_staleness = 16;
  std::string staleness_policy = "drop";  // drop or downweight
  double stale_weight = 0.0;
  double train_ms_fixed = 0.0;             // simulated trainer: time per step
  double train_ms_per_token = 0.01;        // simulated trainer: time per trained token
  std::uint64_t weight_bytes = 16u << 20;  // simulated trainer: bytes of a version
  std::uint64_t chunk_bytes = 4u << 20;
  // The dtype of published versions (actor/publish_dtype.hpp): f32 as the policy holds its
  // weights, or bf16 (rounded to nearest even; the master weights stay fp32). Default f32.
  std::string publish_dtype = "f32";
  std::uint64_t steps = 0;        // stop after this many steps (0: when the manager is done)
  std::uint64_t collect_ms = 10;  // poll period when waiting for trajectories
  std::uint64_t manager_timeout_ms = 20000;
  std::uint64_t manager_call_ms = 5000;    // one request to the manager waits this long, >= 1
  std::uint64_t store_timeout_ms = 60000;  // a publish retries this long while the store is away
  std::string summary_path;                // where the JSON summary goes (empty: stdout only)
  std::string metrics_path;  // metrics.jsonl: one line per training step (empty: none)
  std::string weights_path;  // final weights as safetensors (empty: none)
  // The batch record (actor/batch_record.hpp), for `sluice replay`: policy gpt only, written to
  // batches_path when record_batches is on. Default on, as it is cheap: 8.0 MB for the default
  // job's 250 steps (1.4 MB of starting weights, about 210 bytes a sample); per step a SHA-256 of
  // the weights (about 1 ms for 1.4 MB) and a 26 KB write, against about 1.2 s of training.
  bool record_batches = true;
  std::string batches_path;      // sluice run sets RUN_DIR/actor-batches.bin (empty: no record)
  double start_offset_s = 0;     // added to metric times (the job's clock started earlier)
  std::uint64_t eval_every = 0;  // held-out evaluation every N steps (0: never)
  std::string policy = "sim";    // sim (simulated trainer) or gpt (the reference model)
  LearnerConfig learner;         // policy gpt: model, task, warm start, GRPO/PPO
  std::string checkpoint_dir;    // checkpoints go here, resumed from at start (empty: none)
  std::uint64_t checkpoint_every_steps = 10;  // a checkpoint every N steps (0: not by steps)
  double checkpoint_every_s = 0;              // and every S seconds (0: not by time), >= 0
  double checkpoint_idle_s = 1.0;     // idle this long with unacknowledged work: checkpoint (0: no)
  std::uint64_t heartbeat_ms = 1000;  // store heartbeats at least this often, >= 1
  std::string datacenter;  // topology: the actor's datacenter label (its copies carry it)

  template <typename V>
  void describe(V& v) {
    v("manager", manager, "rollout manager endpoint");
    HolderRoleConfig::describe(v);
    v("model", model, "model name in the weight store");
    v("actor_id", actor_id, "holder id of this actor");
    v("batch_trajectories", batch_trajectories, "global batch in trajectories");
    v("group_size", group_size, "trajectories per prompt, taken as whole groups");
    v("max_staleness", max_staleness, "bound on actor version - behaviour version");
    v("staleness_policy", staleness_policy, "drop or downweight beyond the bound");
    v("stale_weight", stale_weight, "downweight: the weight of a stale trajectory");
    v("train_ms_fixed", train_ms_fixed, "simulated trainer: ms per step");
    v("train_ms_per_token", train_ms_per_token, "simulated trainer: ms per trained token");
    v("weight_bytes", weight_bytes, "simulated trainer: bytes of a weight version");
    v("chunk_bytes", chunk_bytes, "chunk size of published versions");
    v("publish_dtype", publish_dtype,
      "dtype of published versions: f32 (as the policy holds its weights) or bf16 (F32 tensors "
      "rounded to nearest even; the master weights stay fp32; rollouts generate from the bf16 "
      "values) (default f32)");
    v("steps", steps, "stop after this many steps (0: when the manager says done)");
    v("collect_ms", collect_ms, "poll period while waiting for trajectories");
    v("manager_timeout_ms", manager_timeout_ms, "fail when the manager is silent this long");
    v("manager_call_ms", manager_call_ms,
      "one request to the manager waits this long for its reply, >= 1 (default 5000)");
    v("store_timeout_ms", store_timeout_ms,
      "a publish retries this long while the weight store does not answer (it may be restarting)");
    v("summary_path", summary_path, "file for the JSON summary at exit");
    v("metrics_path", metrics_path, "file for metrics, one JSON line per step");
    v("weights_path", weights_path, "file for the final weights (safetensors)");
    v("record_batches", record_batches,
      "policy gpt: record every batch trained on, the starting weights and a digest of the "
      "weights after each step to batches_path, so sluice replay can reproduce the updates "
      "(default true)");
    v("batches_path", batches_path,
      "file of the batch record (sluice run: RUN_DIR/actor-batches.bin; empty: none)");
    v("start_offset_s", start_offset_s, "added to metric times");
    v("eval_every", eval_every, "held-out evaluation every N steps (0: never)");
    v("policy", policy, "sim (simulated trainer) or gpt (the reference model)");
    v("learner", learner, "policy gpt: model, task, warm start, GRPO/PPO settings");
    v("checkpoint_dir", checkpoint_dir,
      "folder of the actor's checkpoint (actor.ckpt), resumed from at start if there; empty for "
      "no checkpoints (default empty)");
    v("checkpoint_every_steps", checkpoint_every_steps,
      "a checkpoint every N training steps, 0 for none by steps; one is always written at the "
      "end (default 10)");
    v("checkpoint_every_s", checkpoint_every_s,
      "a checkpoint every S seconds, whichever of steps and seconds comes first; 0 for none by "
      "time (default 0)");
    v("checkpoint_idle_s", checkpoint_idle_s,
      "a checkpoint once idle this long (no arrival, no step) with consumed trajectories not yet "
      "acknowledged, so the manager gets their acknowledgements; 0 for none (default 1)");
    v("datacenter", datacenter, "topology: datacenter label");
    v("heartbeat_ms", heartbeat_ms,
      "store heartbeats at least this often, also during a training step; well under the "
      "store's holder_ttl_ms (default 1000)");
  }
  core::Status validate() const;
};

}  // namespace sluice::actor
