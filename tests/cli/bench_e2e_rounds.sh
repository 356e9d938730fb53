#!/usr/bin/env bash
# `sluice bench e2e --rounds 2` runs every mode twice, in turn, and reports each mode's median
# round: every round's tokens/s is listed, and the mode's row is one of its rounds (the lower of
# two). A small workload (4 rollouts, 32 prompts) keeps it short; figures are not checked.
set -euo pipefail
sluice=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$sluice" --log-level warn bench e2e --modes sync,sluice --rounds 2 --prompts 32 --rollouts 4 \
  --json >out.jsonl
python3 - out.jsonl <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in lines if "mode" in r]
assert [r["mode"] for r in rows] == ["sync", "sluice"], rows
# The last line: every run (2 modes x 2 rounds) trained each trajectory exactly once.
assert lines[-1] == {"runs": 4, "exactly_once_failed": 0}, lines[-1]
for r in rows:
    each = r["tokens_per_s_rounds"]
    assert len(each) == 2 and all(x > 0 for x in each), r
    assert r["tokens_per_s"] == min(each), r
    assert r["trained_tokens"] > 0, r
    assert 0 <= r["generating_share"] <= 1.0 + 1e-9, r
    assert r["staleness_p50"] <= r["staleness_p99"] <= r["staleness_max"], r
    assert 0 <= r["dropped_token_frac"] <= 1, r
    # Steady throughput from the actor's steps: present, finite, its window within the job.
    lo, hi = r["steady_window_s"]
    assert math.isfinite(r["steady_tokens_per_s"]) and r["steady_tokens_per_s"] > 0, r
    assert 0 <= lo < hi <= r["wall_s"] + 1.0, r
sync, sl = rows
assert abs(sl["ratio_to_sync"] - sl["tokens_per_s"] / sync["tokens_per_s"]) < 1e-9, rows
print("ok: 2 modes x 2 rounds, each row its median round")
PY
# Both rounds of both modes left their run folders.
for round in 1 2; do
  for mode in sync sluice; do
    ls -d runs/bench-e2e-*/round-$round/$mode >/dev/null
  done
done
