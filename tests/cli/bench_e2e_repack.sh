#!/usr/bin/env bash
# `sluice bench e2e --repack-bench`: sluice against sluice-norepack, as real processes, on each
# length distribution it is given. A tiny job (2 rollouts, 8 prompts, responses capped at 256
# tokens) on the job's own lengths (lognormal p99/median 10, which --spreads 10 names again: it
# runs once) and one length file. The table has a row for each, every run took every trajectory
# exactly once, and a length file that cannot be read is refused before anything runs. Figures
# are not checked.
set -euo pipefail
sluice=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# A missing length file: refused, with the file named, and no job started.
set +e
out=$("$sluice" --log-level warn bench e2e --repack-bench --lengths "$work/no-such-lengths.txt" \
  --prompts 8 --rollouts 2 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a missing length file: exit $rc, not 2: $out"
echo "$out" | grep -q "cannot read '$work/no-such-lengths.txt'" ||
  fail "a missing length file: no clear error: $out"
[ ! -d runs ] || fail "a missing length file: jobs ran anyway: $(ls -R runs | head)"

# Bimodal: short answers and long ones.
for i in $(seq 1 30); do echo 12; done >lengths.txt
for i in $(seq 1 10); do echo 200; done >>lengths.txt
"$sluice" --log-level warn bench e2e --repack-bench --spreads 10 --lengths lengths.txt \
  --prompts 8 --rollouts 2 --set rollout.sim.lengths.max_len=256 >out.txt 2>err.txt ||
  fail "the bench failed: $(cat out.txt err.txt)"
cat out.txt
grep -q '^lengths  *repack on  *repack off  *on/off' out.txt || fail "no table header"
rows=$(grep -cE '^(job: |file |lognormal )' out.txt || true)
[ "$rows" -eq 2 ] || fail "$rows rows, not 2 (the job's lengths once, the file)"
grep -qE '^job: lognormal p50 64 p99 640 \(x10\) +[0-9]+ +[0-9]+ +[0-9.]+x ' out.txt ||
  fail "no row for the job's lengths"
grep -qE '^file lengths\.txt +[0-9]+ +[0-9]+ +[0-9.]+x ' out.txt || fail "no row for the file"
grep -q 'exactly once .*: 4 of 4 runs' out.txt || fail "not exactly once in every run"
# Both sides of both distributions left their run folders; nothing moved with repack off; the
# manager priced moves with the rollouts' engine timing (the workload's t0 4 ms, t1 0.25 ms,
# prefill 0.01 ms per token), not repack_cost's own defaults.
python3 - runs/bench-e2e-*/round-1 <<'PY' || fail "run folders"
import json, os, sys
def find(o, key):
    if isinstance(o, dict):
        if key in o:
            return o[key]
        for v in o.values():
            r = find(v, key)
            if r is not None:
                return r
    return None
for d in (1, 2):
    for mode in ("sluice", "sluice-norepack"):
        run = os.path.join(sys.argv[1], f"lengths-{d}", mode)
        s = json.load(open(os.path.join(run, "summary.json")))
        assert s["outcome"] == "ok", (run, s["outcome"])
        if mode == "sluice-norepack":
            assert s["manager"]["repack_moves"] == 0, (run, s["manager"]["repack_moves"])
        cost = find(json.load(open(os.path.join(run, "rollout-manager.json"))), "repack_cost")
        got = (cost["t0_ms"], cost["t1_ms"], cost["prefill_ms_per_token"])
        assert got == (4.0, 0.25, 0.01), (run, cost)
print("ok: run folders")
PY
echo "ok: 2 distributions x repack on/off, every trajectory once in each run"
