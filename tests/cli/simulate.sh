#!/bin/sh
# sluice simulate JOB --json: one JSON object per mode, every mode present, every trajectory
# trained once. Usage: simulate.sh SLUICE JOB.json
set -eu
sluice=$1
job=$2
out=$("$sluice" simulate "$job" --json)
for m in sync one-step-off stream partial-rollout sluice sluice-norepack; do
  line=$(printf '%s\n' "$out" | grep "\"mode\":\"$m\"") || { echo "no row for mode $m"; exit 1; }
  printf '%s\n' "$line" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
for k in ("tokens_per_s", "rollout_util", "weight_stall_frac", "actor_idle_frac",
          "steady_tokens_per_s", "gpu_time", "free_slots", "ratio_to_sync", "sluice_ratio"):
    assert k in r, "missing key " + k
assert r["trained_twice"] == 0, r
# Steady throughput: present, finite, over a window inside the job and shorter than it.
import math
lo, hi = r["steady_window_s"]
assert math.isfinite(r["steady_tokens_per_s"]) and r["steady_tokens_per_s"] > 0, r
assert 0 <= lo < hi <= r["wall_s"] and hi - lo < r["wall_s"], r
assert r["trained_trajectories"] + r["dropped_stale"] == r["trajectories"], r
'
done
echo "ok: every mode"
