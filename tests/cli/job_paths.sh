#!/bin/sh
# Relative paths in a job file are taken from the job file's folder, whatever the working folder:
# a command role's program, its arguments and env (it runs in that folder), a lengths file. Paths
# given on the command line (--out, --set) stay relative to the working folder. A missing path is
# named with the rule.
# usage: job_paths.sh SLUICE SOURCE_DIR
set -eu
sluice=$1 src=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/jobs" "$work/jobs/record" "$work/elsewhere"
cp "$here/fake_role.sh" "$work/jobs/role.sh"

# Command roles named relative to the job's folder: ./role.sh, and `sh role.sh`; both write to
# record/, which must be the job folder's.
cat >"$work/jobs/job.json" <<'JSON'
{
  "name": "job-paths",
  "rollouts": 2,
  "progress_s": 0,
  "timeout_s": 60,
  "manager": {"prompts": 4},
  "actor_command": {"argv": ["./role.sh", "actor", "record"]},
  "rollout_command": {"argv": ["sh", "role.sh", "rollout", "record"]}
}
JSON
cd "$work/elsewhere"
out=$("$sluice" run ../jobs/job.json --out run 2>&1) || fail "the job failed: $out"
[ -s "$work/jobs/record/actor-0.json" ] || fail "the actor did not run in the job's folder"
[ -s "$work/jobs/record/rollout-1.json" ] || fail "the rollouts did not run in the job's folder"
grep -qx "actor record --config $work/elsewhere/run/actor.json" "$work/jobs/record/actor-0.argv" ||
  fail "actor argv: $(cat "$work/jobs/record/actor-0.argv")"
grep -q '"outcome": "ok"' run/summary.json || fail "--out is not relative to the working folder"
grep -q "\"workdir\": \"$work/jobs\"" run/job.json || fail "job.json has no workdir: $(cat run/job.json)"
echo "ok: command roles found and run in the job file's folder, from another working folder"

# A missing program names the folder it was looked for in.
sed 's|"./role.sh"|"./no-such-role.sh"|' "$work/jobs/job.json" >"$work/jobs/missing.json"
if out=$("$sluice" run ../jobs/missing.json --out missing 2>&1); then fail "a missing program ran"; fi
echo "$out" | grep -qF "the program $work/jobs/no-such-role.sh does not exist (relative paths are taken from its workdir" ||
  fail "unclear error: $out"
echo "ok: $(echo "$out" | tail -n 1)"

# A simulation whose lengths file sits beside the job file.
cp "$src/examples/lengths_bimodal.txt" "$work/jobs/lengths.txt"
sed 's|"lengths": {[^}]*}|"lengths": {"kind": "file", "file": "lengths.txt"}|' \
  "$src/examples/simulate.json" >"$work/jobs/sim.json"
grep -q '"file": "lengths.txt"' "$work/jobs/sim.json" || fail "sim.json has no lengths file"
out=$("$sluice" simulate ../jobs/sim.json --modes sluice --set manager.prompts=32 2>&1) ||
  fail "simulate failed: $out"
echo "ok: simulate read the lengths file beside its job file"

# A missing lengths file: the error says where relative paths are taken from.
sed 's|lengths.txt|no-such-lengths.txt|' "$work/jobs/sim.json" >"$work/jobs/sim-missing.json"
if out=$("$sluice" simulate ../jobs/sim-missing.json 2>&1); then fail "a missing lengths file ran"; fi
echo "$out" | grep -qF "$work/jobs/no-such-lengths.txt does not exist (relative paths in a job file are taken from the job file's folder)" ||
  fail "unclear error: $out"
echo "ok: $(echo "$out" | tail -n 1)"
