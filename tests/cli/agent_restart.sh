#!/bin/bash
# The agent example with a rollout killed mid-run (chaos, half a second after the first version):
# the rollout comes back on a new port and rewrites its agent-<id>.url, the agent finds it there,
# and the job ends on its own (well before its time-out) with each trajectory once. Episodes that
# were part-way there resume elsewhere with no agent to drive them: they end as abandoned after
# rollout.env_timeout_ms (10 s here), once each.
#
#   agent_restart.sh SLUICE PYTHON REPO
set -u
sluice=${1:?usage: agent_restart.sh SLUICE PYTHON REPO}
python=${2:?}
repo=${3:?}
prompts=400
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" "$repo/examples/agent/agent.py" --sluice "$sluice" --out "$tmp/run" --threads 4 \
  --set manager.prompts=$prompts --set actor.learner.warmstart_steps=2 \
  --set actor.learner.eval_prompts=4 --set actor.eval_every=0 --set timeout_s=150 \
  --set 'chaos={"kills": 1, "every_s": 1, "first_s": 0.5, "roles": "rollout"}' \
  --set rollout.env_timeout_ms=10000 \
  >"$tmp/agent.out" 2>&1
code=$?
if [ $code -ne 0 ]; then
  echo "FAIL: the job did not end well (exit $code):"
  tail -40 "$tmp/agent.out"
  exit 1
fi
"$python" - "$tmp/run/summary.json" $((prompts * 8)) <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
ids = s["actor"]["accepted_ids"]
events = " ".join(str(e) for e in s.get("events", []))
print("events:", events[:400])
print("manager: rollout_restarts", s["manager"].get("rollout_restarts"),
      "dead_rollouts", s["manager"].get("dead_rollouts"))
if "chaos killed rollout" not in events:
    sys.exit("FAIL: no rollout was killed (the job ended first?)")
if len(ids) != want or len(set(ids)) != want:
    sys.exit(f"FAIL: {len(ids)} trajectories ({len(set(ids))} distinct), want {want} once each")
print(f"ok: a rollout killed and restarted; {want} trajectories, each once")
EOF
