#!/bin/sh
# examples/torch_grpo, as a smoke test: its selftest (warm start, GRPO steps, evaluation in plain
# PyTorch) runs; and where the sluice Python package is built (BUILD/python), a short job whose
# actor and rollouts are the example's Python programs runs to its end and leaves a run folder
# like the C++ job's (metrics with rewards and held-out accuracy, the summary, final weights, the
# report), started from another working folder than the repository's. Learning itself is
# measured by running the example (docs/benchmarks.md), not here.
# Skipped (77) without Debian's PyTorch.
# usage: torch_grpo.sh SLUICE SOURCE_DIR BUILD_DIR
set -eu
sluice=$1 src=$2 build=$3
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "skipped: $py has no torch (Debian's python3-torch)"; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$src"
"$py" examples/torch_grpo/selftest.py --steps 2 --warmstart-steps 5 --eval-prompts 20 \
  >"$work/selftest.out" 2>&1 || fail "selftest: $(cat "$work/selftest.out")"
grep -q "2 GRPO steps" "$work/selftest.out" || fail "selftest: $(cat "$work/selftest.out")"
echo "ok: selftest ran"

if ! PYTHONPATH="$build/python" "$py" -c "import sluice" 2>/dev/null; then
  echo "ok (job part skipped: the sluice package is not built in $build/python)"; exit 0
fi
cd "$work"
out=$("$sluice" run "$src/examples/torch_grpo/job.json" --out "$work/run" --set timeout_s=300 \
  --set manager.prompts=48 --set actor.learner.warmstart_steps=10 \
  --set actor.learner.eval_prompts=20 --set actor.eval_every=2 --set progress_s=0 \
  --set "actor_command.env=[\"PYTHONPATH=$build/python\"]" \
  --set "rollout_command.env=[\"PYTHONPATH=$build/python\"]" 2>&1) || fail "the job failed: $out"
run="$work/run"
echo "$out" | grep -q "held-out accuracy (prompts never trained on)" || fail "no accuracy: $out"
grep -q '"reward_mean"' "$run/metrics.jsonl" || fail "no training steps in metrics.jsonl"
grep -q '"accuracy"' "$run/metrics.jsonl" || fail "no evaluation in metrics.jsonl"
grep -q '"outcome": "ok"' "$run/summary.json" || fail "summary.json: $(cat "$run/summary.json")"
[ -s "$run/final_weights.safetensors" ] || fail "no final weights"
[ -s "$run/report.html" ] || fail "no report"
# Every trajectory of the job (48 prompts x 8) reached the actor once.
"$py" - "$run/actor-summary.json" <<'PY' || fail "exactly-once"
import json, sys
s = json.load(open(sys.argv[1]))
ids = s["accepted_ids"]
assert len(ids) == len(set(ids)) == 48 * 8, (len(ids), len(set(ids)))
print(f"ok: {len(ids)} trajectories consumed once each, {s['steps']} steps, version {s['version']}")
PY
echo "ok: the job ran with Python roles: $(echo "$out" | grep "^job ")"
