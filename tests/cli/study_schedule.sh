#!/usr/bin/env bash
# `sluice study schedule RUN_DIR`: a tiny sluice-mode job records its batches, then the study
# samples every response again along that schedule. Checks what a reader relies on:
# - both settings ran for every seed and were evaluated at the same steps;
# - "recorded" keeps the run's staleness exactly (its mean equals the actor's own), "current"
#   has none;
# - the same seed gives the same accuracies twice (the comparison is paired);
# - a folder without a record, and a damaged record, are refused with a clear error.
set -euo pipefail
sluice=$1
job=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/study_schedule.XXXXXX")
trap 'rm -rf "$dir"' EXIT
tiny=(--set manager.prompts=48 --set manager.batch_trajectories=32
  --set actor.learner.warmstart_steps=80 --set actor.learner.warmstart_lr=0.003
  --set actor.learner.eval_prompts=40 --set actor.eval_every=0 --set timeout_s=240)
"$sluice" run "$job" --set mode=sluice "${tiny[@]}" --out "$dir/run" >"$dir/run.log" 2>&1 ||
  { cat "$dir/run.log"; exit 1; }
[ -s "$dir/run/actor-batches.bin" ] || { echo "no batch record"; exit 1; }

"$sluice" study schedule "$dir/run" --seeds 2 --every 2 --json >"$dir/a.json" 2>"$dir/a.err"
"$sluice" study schedule "$dir/run" --seeds 1 --every 2 --json >"$dir/b.json" 2>"$dir/b.err"
python3 - "$dir/a.json" "$dir/b.json" "$dir/run/actor-summary.json" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
actor = json.load(open(sys.argv[3]))
assert [(r["seed"], r["generate"]) for r in a] == [
    (0, "recorded"), (0, "current"), (1, "recorded"), (1, "current")], a
steps = actor["steps"]
for r in a:
    assert r["at"][0] == 0 and r["at"][-1] == steps, r["at"]
    assert r["at"] == a[0]["at"], (r["at"], a[0]["at"])
    assert all(0.0 <= x <= 1.0 for x in r["accuracy"]), r["accuracy"]
rec = [r for r in a if r["generate"] == "recorded"]
cur = [r for r in a if r["generate"] == "current"]
for r in rec:
    assert r["clamped"] == 0, r
    assert abs(r["staleness_mean"] - actor["staleness_mean"]) < 1e-9, (r, actor["staleness_mean"])
for r in cur:
    assert r["staleness_mean"] == 0, r
assert b[0]["accuracy"] == a[0]["accuracy"] and b[1]["accuracy"] == a[1]["accuracy"], (a, b)
print("ok:", steps, "steps, staleness", actor["staleness_mean"])
PY

# Refused: no record, and a damaged one.
mkdir "$dir/empty"
if "$sluice" study schedule "$dir/empty" >"$dir/c.out" 2>"$dir/c.err"; then exit 1; fi
grep -q "actor-batches.bin" "$dir/c.err" || { cat "$dir/c.err"; exit 1; }
cp -r "$dir/run" "$dir/bad"
python3 - "$dir/bad/actor-batches.bin" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xFF
open(p, "wb").write(bytes(b))
PY
if "$sluice" study schedule "$dir/bad" --seeds 1 >"$dir/d.out" 2>"$dir/d.err"; then exit 1; fi
grep -qi "checksum\|damage\|data" "$dir/d.err" || { cat "$dir/d.err"; exit 1; }
echo "study schedule: ok"
