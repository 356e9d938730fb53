#!/bin/sh
# sluice simulate --scale / --validate / --update-only: the scale configurations parse and run to
# the end (1024 GPUs included), no mode passes the limit row (the bound on a finite job), the
# table always carries the two limit rows and sluice's ratios to them and to its closest peer,
# --validate with measured files prints every mode of both configurations, and the update model
# keeps to its bounds. Throughput figures are not asserted.
# Usage: simulate_scale.sh SLUICE SOURCE_DIR
set -eu
sluice=$1
src=$2
cd "$src"
# Fewer prompts than the files' (two batches at 1024 GPUs, four below) to keep the test short.
modes=sync,partial-broadcast,sluice
out=$("$sluice" simulate --scale --json --modes $modes --set manager.prompts=1536)
printf '%s\n' "$out" | python3 -c '
import json, math, sys
lines = [json.loads(l) for l in sys.stdin if l.startswith("{")]
rows = [r for r in lines if "mode" in r]
summaries = [r for r in lines if r.get("summary")]
setups = {r["setup"]: r["cluster_gpus"] for r in rows}
assert sorted(setups.values()) == [64, 256, 1024], setups
for r in rows:
    assert r["mode"] in ("sync", "partial-broadcast", "limit", "steady-limit", "sluice"), r
    assert r["tokens_per_s"] > 0 and math.isfinite(r["steady_tokens_per_s"]), r
    assert r["steady_tokens_per_s"] > 0, r
    assert "sluice_ratio" in r, r
assert len(rows) == 15, len(rows)
# The limit row bounds the wall time of the job: no simulated mode of a setup finishes sooner.
for s in setups:
    limit = [r["wall_s"] for r in rows if r["setup"] == s and r["mode"] == "limit"][0]
    for r in rows:
        # steady-limit has no start and no end: it is no bound on the wall time of a finite job.
        if r["setup"] == s and r["mode"] != "steady-limit":
            assert r["wall_s"] >= limit * (1 - 1e-9), (r, limit)
assert len(summaries) == 3, summaries
for m in summaries:
    assert 0 < m["sluice_over_limit"] <= 1, m
    assert m["sluice_steady_over_steady_limit"] > 0, m
    assert m["closest_peer"] in ("sync", "partial-broadcast"), m
    assert m["sluice_ahead_of_peers"] == (m["sluice_over_closest_peer"] > 1), m
    assert m["sluice_over_partial_broadcast"] > 0, m
'
fixture=tests/cli/data/bench_e2e_measured.jsonl
table=$("$sluice" simulate --validate --measured "$fixture" --measured-hosts "$fixture")
for scenario in "one host" "four emulated hosts"; do
  printf '%s\n' "$table" | grep -q "== $scenario: simulated against measured" ||
    { echo "no table for $scenario"; printf '%s\n' "$table"; exit 1; }
done
for m in sync one-step-off stream partial-rollout sluice sluice-norepack; do
  n=$(printf '%s\n' "$table" | grep -c "^$m ") || true
  [ "$n" -eq 2 ] || { echo "mode $m: $n rows, not 2"; printf '%s\n' "$table"; exit 1; }
done
printf '%s\n' "$table" | grep -q "largest throughput difference" || { echo "no summary"; exit 1; }
"$sluice" simulate --update-only --json examples/scale/1t_update.json | python3 -c '
import json, math, sys
r = json.loads(sys.stdin.read())
assert r["bytes"] == 2000000000000 and r["inference_gpus"] == 128 and r["trainer_gpus"] == 256, r
assert math.isfinite(r["update_s"]) and r["update_s"] > 0, r
# The update never ends below the line-rate floor; a host-share relay holds a quarter (a rollout
# spans 4 hosts); the GPU stall is a 1/32 share at h2d and sits inside the update.
share = r["host_share"]
for u in (r, share):
    assert u["update_s"] >= r["floor_s"] > 0, (u, r["floor_s"])
    assert u["switch_start_s"] < u["switch_end_s"] == u["update_s"], u
    # The GPU stall: a 1/32 share at h2d, then the GPUs verify the last chunk that landed.
    assert abs(u["stall_s"] - (u["switch_end_s"] - u["switch_start_s"])) < 1e-9, u
    assert u["stall_s"] >= 2e12 / 32 / 54.3e9 + u["verify_tail_s"] - 1e-6, u
    assert u["verify_tail_s"] > 0, u
    # Streamed signatures, as the file says: relays start before the staging ends.
    assert 0 < u["relays_start_s"] < u["stage_s"] <= u["digest_s"], u
assert abs(share["relay_bytes"] * 4 - r["relay_bytes"]) < 1, (share, r)
assert share["update_s"] <= r["update_s"], (share, r)
# Every way of signing and verifying, side by side; none below the floor, and what nobody
# verifies is the fastest of each signing.
v = {x["variant"]: x["update_s"] for x in r["variants"]}
assert len(v) == 8, v
for label, s in v.items():
    assert s >= r["floor_s"], (label, s)
for signing in ("after-staging", "streamed"):
    assert v[signing + ", nobody verifies (not allowed)"] == min(
        s for label, s in v.items() if label.startswith(signing + ",")), v
assert abs(v["streamed, GPUs verify, a chunk a thread"] - share["update_s"]) < 1e-9, (v, share)
'
echo "ok: scale, validate, update-only"
