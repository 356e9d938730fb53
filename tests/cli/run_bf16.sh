#!/usr/bin/env bash
# A short run of the default job with actor.publish_dtype bf16: the actor publishes bf16 versions
# (half the fp32 bytes), the rollouts load them and generate, and the job completes with every
# trajectory consumed once. Checked from the run folder as a user would: the manifest-sized pulls
# (each rollout's pulled bytes are whole bf16 versions), the actor's summary, the metrics.
set -euo pipefail
sluice=$1
job=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/run_bf16.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$sluice" run "$job" --out "$dir/run" --set actor.publish_dtype=bf16 \
  --set actor.learner.warmstart_steps=20 --set actor.learner.eval_prompts=20 \
  --set actor.eval_every=2 --set manager.prompts=64 --set manager.batch_trajectories=64 \
  >"$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
python3 - "$dir/run" <<'PY'
import json, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
params = 348000  # the default job's reference GPT
actor = s["actor"]
assert actor["accepted"] == 64 * 8, actor["accepted"]
rollouts = s["manager"]["rollouts"]
assert rollouts, "no rollout stats"
for r in rollouts:
    st = r["stats"]
    assert st["loads"] >= 2, st
    # Every pull is a whole bf16 version, 2 bytes a parameter: at least as many versions as were
    # loaded, and no more than the actor published. A staged version may be replaced by a newer
    # pull before it is loaded (the rollout pulls the newest in the background), so pulls may
    # exceed loads by more than one; fp32 versions would count as at least twice the loads.
    pulled = st["pulled_bytes"] // (2 * params)
    assert st["pulled_bytes"] % (2 * params) == 0, st["pulled_bytes"]
    assert st["loads"] <= pulled <= min(actor["version"], 2 * st["loads"] - 1), (st, actor["version"])
evals = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"accuracy"' in l]
assert evals, "no evaluation in metrics.jsonl"
print("ok: bf16 versions pulled and loaded;", len(evals), "evaluations")
PY
