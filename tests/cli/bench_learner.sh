#!/usr/bin/env bash
# `sluice bench learner`: variants of the learner from one shared warm start, on-policy. A tiny
# run (a 20-step warm start, 4 updates, 50 held-out prompts) checks what a user relies on:
# - every variant starts from the same warm start;
# - a variant that repeats the job's settings gives the very same curve (one seed, one result);
# - a learning rate too small to move a float32 weight leaves held-out accuracy where the warm
#   start left it, at every evaluation;
# - a second round uses other samples and is listed, and the row is the median round.
set -euo pipefail
sluice=$1
job=$2
"$sluice" bench learner "$job" --updates 4 --eval-every 2 --rounds 2 --json \
  --set actor.learner.warmstart_steps=20 --set actor.learner.eval_prompts=50 \
  --variant "again: actor.learner.adamw.lr=0.00005" \
  --variant "frozen: actor.learner.adamw.lr=1e-30" \
  --variant "hot: actor.learner.adamw.lr=0.003" >"${TMPDIR:-/tmp}/bench_learner.$$.jsonl"
python3 - "${TMPDIR:-/tmp}/bench_learner.$$.jsonl" <<'PY'
import json, sys
rows = {r["variant"]: r for r in map(json.loads, open(sys.argv[1]))}
assert list(rows) == ["base", "again", "frozen", "hot"], list(rows)
warm = {r["warm_start"] for r in rows.values()}
assert len(warm) == 1, warm
for r in rows.values():
    assert len(r["rounds"]) == 2, r
    for rd in r["rounds"]:
        assert rd["at"] == [0, 2, 4], rd
        assert rd["accuracy"][0] == r["warm_start"], rd
    ends = sorted(rd["end"] for rd in r["rounds"])
    assert r["median_end"] == ends[0], r
base, again = rows["base"], rows["again"]
assert [rd["accuracy"] for rd in base["rounds"]] == [rd["accuracy"] for rd in again["rounds"]]
for rd in rows["frozen"]["rounds"]:
    assert rd["accuracy"] == [rows["frozen"]["warm_start"]] * 3, rd
# The rounds sample different prompts: their training rewards differ.
assert base["rounds"][0]["first_reward"] != base["rounds"][1]["first_reward"], base
# A learning rate 60x the job's moves the weights: its curve is not the base's.
assert [rd["accuracy"] for rd in rows["hot"]["rounds"]] != [rd["accuracy"] for rd in base["rounds"]]
print("ok: 4 variants x 2 rounds from one warm start")
PY
rm -f "${TMPDIR:-/tmp}/bench_learner.$$.jsonl"
