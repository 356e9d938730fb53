#!/bin/bash
# `sluice attack --only agent` against the agent example mid-run (examples/agent/agent.py driving
# episodes on both rollouts' endpoints): requests without the token or with a wrong one,
# malformed bodies ({"session": 7}, nulls, wrong types, huge numbers), a body past the bound whose
# 413 the client must read, a body that never ends, and more idle connections than an endpoint
# holds. Each is refused, a real request is answered after each, no rollout restarts, and the job
# still ends with every trajectory consumed exactly once.
# Usage: attack_agent.sh SLUICE
set -u
sluice=${1:?usage: attack_agent.sh SLUICE}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
agent_pid=
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "attack_agent.sh: $*"
  for f in "$tmp/attack.out" "$tmp/agent.out"; do
    [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }
  done
  echo "attack_agent.sh: $*"  # again, where a shortened log keeps it
  exit 1
}
wait_for() {  # SECONDS COMMAND...: until the command succeeds
  local t=$(( $1 * 10 )); shift
  while [ $t -gt 0 ]; do "$@" && return 0; sleep 0.1; t=$((t - 1)); done
  return 1
}

# Bad input starts nothing.
out=$("$sluice" attack "$tmp" --only agent,nonsense 2>&1)
[ $? -eq 2 ] || fail "an unknown phase did not exit 2: $out"
echo "$out" | grep -q "no phase 'nonsense'" || fail "no clear message for an unknown phase: $out"

# The agent slows down (a second between episodes) while $tmp/slow exists, so that the job is still
# running when the attack (about 30 s a rollout) ends, however fast the machine.
python3 "$root/examples/agent/agent.py" --sluice "$sluice" --out "$tmp/run" --threads 4 \
  --slow-file "$tmp/slow" --set manager.prompts=2400 --set actor.learner.warmstart_steps=2 \
  --set actor.learner.eval_prompts=4 --set actor.eval_every=0 >"$tmp/agent.out" 2>&1 &
agent_pid=$!
have_endpoints() { [ -s "$tmp/run/agent_token" ] && [ "$(ls "$tmp/run"/agent-*.url 2>/dev/null | wc -l)" -ge 2 ]; }
wait_for 120 have_endpoints || fail "the job's agent endpoints did not appear"
wait_for 120 grep -qs reward_mean "$tmp/run/metrics.jsonl" || fail "the job did not train a step"
touch "$tmp/slow"
timeout 300 "$sluice" attack "$tmp/run" --only agent >"$tmp/attack.out" 2>"$tmp/attack.err"
status=$?
rm -f "$tmp/slow"
cat "$tmp/attack.out"
[ $status -eq 0 ] || fail "sluice attack exited $status"
grep -q "job ended" "$tmp/attack.out" && fail "the job ended before the attack was over"
for what in no-token wrong-token malformed oversized slow-body idle-crowd; do
  n=$(grep -c "^refused *agent $what rollout-" "$tmp/attack.out")
  [ "$n" -ge 2 ] || fail "agent $what: $n refused lines, not one an endpoint"
done
wait "$agent_pid"; agent_status=$?; agent_pid=
[ $agent_status -eq 0 ] || fail "the agent example exited $agent_status"
# No rollout was restarted, and every trajectory was consumed exactly once.
python3 - "$tmp/run" <<'PY' || fail "the job's accounting"
import collections, json, sys
run = sys.argv[1]
summary = json.load(open(f"{run}/summary.json"))
assert summary.get("outcome") == "ok", summary.get("outcome")
for name, r in (summary.get("restarts") or {}).items():
    assert not r.get("restarts"), f"{name} restarted {r.get('restarts')} times"
ids = (summary.get("actor") or {}).get("accepted_ids") or []
twice = [i for i, n in collections.Counter(ids).items() if n > 1]
assert not twice, f"{len(twice)} trajectories consumed twice"
expected = 2400 * 8
assert len(set(ids)) == expected, f"{len(set(ids))} of {expected} consumed"
print(f"attack_agent.sh: {expected} trajectories, each once; no restarts")
PY
echo "attack_agent.sh: pass"
