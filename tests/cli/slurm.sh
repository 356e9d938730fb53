#!/bin/bash
# `sluice slurm JOB.json --submit --wait` on a real one-host Slurm (scripts/slurm_local.sh brings
# up munged, slurmctld and slurmd in a private folder, and takes them down at the end, also on
# failure): a small job on the simulated engine runs to completion through sbatch and srun, and its
# run folder holds what `sluice run` leaves: every prompt's trajectories trained on exactly once,
# nothing lost, no version mixed, the actor's summary, metrics, report, the role files and logs,
# the keys 0600; no role is left running after the job. Bad input is refused before anything is
# written. Skipped (77) when not root or when Slurm cannot start here.
# usage: slurm.sh SLUICE REPO_ROOT
set -u
sluice=$1
root=$2
fail() {
  echo "FAIL: $*"
  exit 1
}
[ "$(id -u)" -eq 0 ] || { echo "skipped: slurmd needs root"; exit 77; }
for c in slurmctld slurmd munged sbatch; do
  command -v $c >/dev/null || { echo "skipped: no $c (scripts/setup.sh installs slurm-wlm)"; exit 77; }
done

work=$(mktemp -d /tmp/sluice-slurm-test.XXXXXX)
export SLUICE_SLURM_DIR="$work/slurm"
# Ports nobody listens on: slurmctld's and slurmd's (a pair), the store's and the manager's.
read -r ctl_port store_port manager_port < <(python3 - <<'PY'
import random, socket
def free(p):
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", p))
            return True
        except OSError:
            return False
while True:
    ps = random.sample(range(20000, 40000, 4), 3)
    if all(free(p) and free(p + 1) for p in ps):
        print(*ps)
        break
PY
)
export SLUICE_SLURM_PORT=$ctl_port
cleanup() {
  "$root/scripts/slurm_local.sh" down >/dev/null 2>&1
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
if ! "$root/scripts/slurm_local.sh" up; then
  tail -n 20 "$SLUICE_SLURM_DIR"/*.log 2>/dev/null
  echo "skipped: Slurm cannot start here"
  exit 77
fi
eval "$("$root/scripts/slurm_local.sh" env)"

prompts=40
group=4
cat >"$work/job.json" <<JSON
{
  "name": "slurm-small",
  "mode": "sluice",
  "rollouts": 2,
  "relays": 1,
  "progress_s": 0,
  "timeout_s": 120,
  "manager": {"prompts": $prompts, "group_size": $group, "batch_trajectories": 8,
              "heartbeat_timeout_ms": 1000, "repack_interval_ms": 50},
  "rollout": {"report_ms": 20,
              "sim": {"max_sequences": 6, "t0_ms": 1.0, "t1_ms": 0.1,
                      "lengths": {"median": 16, "p99": 160, "max_len": 256}}},
  "actor": {"weight_bytes": 262144, "chunk_bytes": 65536, "train_ms_per_token": 2.0,
            "max_staleness": 2}
}
JSON

# Bad input first: refused by name, nothing written.
if out=$("$sluice" slurm "$work/job.json" --nodes 4 --out "$work/bad" 2>&1); then
  fail "4 nodes for 2 rollouts were accepted"
fi
echo "$out" | grep -q "2 rollouts cannot fill 3 rollout nodes" || fail "unclear: $out"
[ ! -e "$work/bad" ] || fail "a run folder was written for a refused job"
echo "ok: refused: $out"

run="$work/run"
timeout 400 "$sluice" slurm "$work/job.json" --out "$run" --submit --wait --wait-timeout 300 \
  --store-port "$store_port" --manager-port "$manager_port" >"$work/slurm.out" 2>&1 &
slurm_pid=$!
# Mid-run, once the first version is out, rollout-0 is killed: role.sh restarts it in its step.
victim=""
for _ in $(seq 1 600); do
  if [ -s "$run/metrics.jsonl" ]; then
    victim=$(pgrep -f -- "--config $run/rollout-0.json" | head -n 1)
    [ -n "$victim" ] && break
  fi
  kill -0 $slurm_pid 2>/dev/null || break
  sleep 0.2
done
if [ -n "$victim" ]; then
  kill -KILL "$victim"
  echo "killed rollout-0 (pid $victim)"
fi
wait $slurm_pid
status=$?
out=$(cat "$work/slurm.out")
echo "$out"
id=$(echo "$out" | sed -n 's/^submitted Slurm job \([0-9]*\).*/\1/p')
if [ $status -ne 0 ]; then
  for f in "$run"/slurm-*.out "$run"/*.log; do
    [ -e "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
  done
  fail "the Slurm job failed (status $status)"
fi
[ -n "$victim" ] || fail "the job ended before rollout-0 could be killed"
[ -n "$id" ] || fail "no job id in: $out"
echo "$out" | grep -q "Slurm job $id COMPLETED; outcome: ok" || fail "not completed: $out"
grep -q "job slurm-small (sluice) done" "$run/slurm-$id.out" ||
  fail "the batch script's output: $(cat "$run/slurm-$id.out")"

# The run folder, as sluice run leaves it.
for f in job.json job.sbatch role.sh summary.json actor-summary.json metrics.jsonl report.html \
  events.jsonl manager.db weightstore.json rollout-manager.json \
  relay-0.json rollout-0.json rollout-1.json actor.json weightstore.log rollout-manager.log \
  relay-0.log rollout-0.log rollout-1.log actor.log; do
  [ -s "$run/$f" ] || fail "no $f in the run folder"
done
for f in "$run"/keys/*; do
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f")"
done
# The roles reached the head by its node name, filled in on the node.
grep -q "\"store\": \"tcp://$(hostname -s):$store_port\"" "$run/rollout-1.json" ||
  fail "rollout-1's store endpoint: $(grep '"store"' "$run/rollout-1.json")"
grep -q '@HEAD@' "$run/conf/rollout-1.json" || fail "the role template lost its @HEAD@"

python3 - "$run" "$prompts" "$group" <<'PY' || exit 1
import json, sys
run, prompts, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)
s = json.load(open(f"{run}/summary.json"))
if s["outcome"] != "ok":
    fail(f"outcome {s['outcome']}")
a, m = s["actor"], s["manager"]
want = {f"p{p}/{k}" for p in range(prompts) for k in range(group)}
got = a["accepted_ids"]
if len(got) != len(want) or set(got) != want:
    missing = sorted(want - set(got))[:5]
    fail(f"{len(got)} trajectories accepted, {len(want)} expected; missing {missing}")
if a["trained_samples"] + a["dropped_stale"] != prompts * group:
    fail(f"trained {a['trained_samples']} + dropped {a['dropped_stale']} != {prompts * group}")
if a["staleness_max"] > 2:
    fail(f"staleness {a['staleness_max']} beyond the bound 2")
# Repack moves only between rollouts of one version; tails that continue on a newer version (the
# default) do mix versions, each trajectory recording them, and their staleness is checked above.
if m["cross_version_moves"] != 0:
    fail(f"manager cross_version_moves = {m['cross_version_moves']}")
if m["finished"] < prompts * group:
    fail(f"the manager finished {m['finished']} trajectories of {prompts * group}")
if len(m["rollouts"]) != 2:
    fail(f"the manager saw {len(m['rollouts'])} rollouts")
if s["mode"] != "sluice" or s["job"] != "slurm-small":
    fail(f"job {s['job']} mode {s['mode']}")
starts, stopped, died = {}, set(), []
for line in open(f"{run}/events.jsonl"):
    e = json.loads(line)
    if e["event"] == "started":
        starts[e["name"]] = starts.get(e["name"], 0) + 1
    elif e["event"] == "stopped":
        stopped.add(e["name"])
    elif e["event"] == "died":
        died.append((e["name"], e["status"]))
want_starts = {"weightstore": 1, "relay-0": 1, "rollout-manager": 1, "rollout-0": 2,
               "rollout-1": 1, "actor": 1}
if starts != want_starts:
    fail(f"starts per role {starts}, expected {want_starts} (rollout-0 killed once)")
if died != [("rollout-0", 137)]:
    fail(f"deaths {died}")
if s["restarts"].get("rollout-0", {}).get("restarts") != 1 or len(s["restarts"]) != 1:
    fail(f"summary restarts {s['restarts']}")
# The roles that run until the job ends were stopped by the batch script, not killed.
if stopped != {"weightstore", "relay-0", "rollout-manager"}:
    fail(f"stopped at the end: {sorted(stopped)}")
print(f"ok: {len(got)} trajectories exactly once with rollout-0 killed and restarted, "
      f"{a['steps']} steps, staleness max {a['staleness_max']}; store, relay, manager stopped")
PY

# Nothing of the job is left running once Slurm says it ended.
for _ in $(seq 1 50); do
  left=$(pgrep -f -- "$run/" || true)
  [ -z "$left" ] && break
  sleep 0.2
done
[ -z "$left" ] || fail "still running after the job: $(ps -o pid,args -p "$(echo "$left" | paste -sd,)")"
echo "ok: no role left running"

# A job whose actor fails is reported as failed, by Slurm and by sluice slurm --wait, with the
# reason in the batch output and in summary.json.
python3 - "$work/job.json" "$work/failing.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
job.update(name="slurm-failing", actor_command={"argv": ["false"]}, restart={"enabled": False})
json.dump(job, open(sys.argv[2], "w"))
PY
if out=$(timeout 300 "$sluice" slurm "$work/failing.json" --out "$work/failing" --submit --wait \
  --wait-timeout 200 --store-port "$store_port" --manager-port "$manager_port" 2>&1); then
  fail "a job whose actor failed was reported as a success: $out"
fi
echo "$out" | grep -q "COMPLETED" && fail "Slurm says a failed job completed: $out"
grep -q "the actor's step failed (status 1)" "$work"/failing/slurm-*.out ||
  fail "no reason in $(cat "$work"/failing/slurm-*.out)"
grep -q '"outcome": "internal error: the actor.s step failed' "$work/failing/summary.json" ||
  fail "summary.json: $(grep outcome "$work/failing/summary.json")"
echo "ok: a failed actor fails the job: $(echo "$out" | grep '^Slurm job')"
