#!/bin/sh
# sluice simulate --scale --splits: every mode runs at each trainer share, the cluster is split
# as asked (the rollouts round down, the trainer takes the rest), sync-colocated uses every GPU
# on both sides, each mode is reported at the split with its highest throughput among the rows
# printed, and the headline ratios are sluice's best over the best sync variant and over
# partial-rollout's best.
# Usage: simulate_splits.sh SLUICE SOURCE_DIR
set -eu
sluice=$1
src=$2
cd "$src"
# Two batches of the 64-GPU setup (its file: ten) to keep the test short.
"$sluice" simulate --scale examples/scale/laminar_7b_64gpu.json --json --splits 0.25,0.5 \
  --modes sync,sync-colocated,partial-rollout,sluice --set manager.prompts=768 | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.startswith("{")]
rows = [r for r in lines if "mode" in r]
summary = [r for r in lines if r.get("summary")]
# Four simulated modes (sync-colocated once) and the two limit rows --scale always adds, at each
# of the two splits.
assert len(rows) == 11 and len(summary) == 1, lines
assert sorted(r["trainer_share"] for r in rows if r["mode"] == "limit") == [0.25, 0.5], rows
split = {(r["mode"], r["trainer_share"]): r for r in rows}
for m in ("sync", "partial-rollout", "sluice"):
    assert (split[(m, 0.25)]["trainer_gpus"], split[(m, 0.25)]["rollout_gpus"]) == (16, 48), rows
    assert (split[(m, 0.5)]["trainer_gpus"], split[(m, 0.5)]["rollout_gpus"]) == (32, 32), rows
colo = [r for r in rows if r["mode"] == "sync-colocated"]
assert len(colo) == 1 and colo[0]["trainer_gpus"] == 64 and colo[0]["rollout_gpus"] == 64, colo
best = {}
for m in ("sync", "sync-colocated", "partial-rollout", "sluice"):
    of_mode = [r for r in rows if r["mode"] == m]
    marked = [r for r in of_mode if r["best"]]
    assert len(marked) == 1, (m, of_mode)
    top = max(r["tokens_per_s"] for r in of_mode)
    assert marked[0]["tokens_per_s"] == top, (m, of_mode)
    best[m] = marked[0]
s = summary[0]
sync = max((best["sync"], best["sync-colocated"]), key=lambda r: r["tokens_per_s"])
assert s["sync_variant"] == sync["mode"], (s, sync)
assert s["sluice_share"] == best["sluice"]["trainer_share"], s
close = lambda a, b: abs(a - b) <= 1e-9 * max(1.0, abs(b))
assert close(s["sluice_over_sync"], best["sluice"]["tokens_per_s"] / sync["tokens_per_s"]), s
assert close(s["sluice_over_partial"],
             best["sluice"]["tokens_per_s"] / best["partial-rollout"]["tokens_per_s"]), s
for r in rows:
    assert close(r["sluice_ratio"], best["sluice"]["tokens_per_s"] / r["tokens_per_s"]), r
'
echo "ok: splits"
