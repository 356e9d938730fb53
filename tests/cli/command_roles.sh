#!/bin/sh
# `sluice run` with the actor and the rollouts as programs of the user's (actor_command,
# rollout_command): each is started as ARGV... --config FILE with the role file a built-in role
# would get (its endpoints, id, own key file) plus its options and env; ready lines, a restart,
# the actor's metrics and summary, and the report work as for built-in roles. A program that does
# not exist fails the job before anything starts, naming it.
# usage: command_roles.sh SLUICE
set -eu
sluice=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/record"
fail() { echo "FAIL: $*"; exit 1; }

job() {  # job ACTOR_COMMAND ROLLOUT_COMMAND (JSON objects)
  cat <<JSON
{
  "name": "command-roles",
  "rollouts": 2,
  "progress_s": 0,
  "timeout_s": 60,
  "manager": {"prompts": 4},
  "actor_command": $1,
  "rollout_command": $2
}
JSON
}
job "{\"argv\": [\"sh\", \"$here/fake_role.sh\", \"actor\", \"$work/record\"],
      \"env\": [\"FAKE_ROLE_GREETING=hello\"], \"options\": {\"lr\": 0.001, \"layers\": [1, 2]}}" \
    "{\"argv\": [\"$here/fake_role.sh\", \"rollout\", \"$work/record\"]}" >"$work/job.json"
out=$("$sluice" run "$work/job.json" --out "$work/run" 2>&1) || fail "the job failed: $out"
run="$work/run"
echo "$out" | grep -q "25.0% after the warm start, 50.0% at the end (+25.0 points)" ||
  fail "no accuracy line in: $out"

# Each program got --config and its role file, with its own key file and the job's endpoints.
grep -qx "actor $work/record --config $run/actor.json" "$work/record/actor-0.argv" ||
  fail "actor argv: $(cat "$work/record/actor-0.argv")"
for id in actor-0 rollout-0 rollout-1; do
  f="$work/record/$id.json"
  [ -e "$f" ] || fail "$id was not started"
  case $id in actor-0) key=actor ;; *) key=$id ;; esac
  grep -q "\"key_file\": \"$run/keys/$key.key\"" "$f" || fail "$id: no own key file in $(cat "$f")"
  grep -q "\"members_file\": \"$run/keys/members.json\"" "$f" || fail "$id: no members file"
  grep -q '"mode": "curve"' "$f" || fail "$id: not curve"
  grep -Eq '"store": "tcp://127.0.0.1:[0-9]+"' "$f" || fail "$id: no store endpoint"
  grep -Eq '"manager": "tcp://127.0.0.1:[0-9]+"' "$f" || fail "$id: no manager endpoint"
done
grep -q '"lr": 0.001' "$work/record/actor-0.json" || fail "the actor's options were not passed"
grep -q '"options": {}' "$work/record/rollout-0.json" || fail "a rollout's options are not {}"
[ "$(cat "$work/record/actor-0.env")" = hello ] || fail "the actor's env was not passed"
echo "ok: actor and rollouts started with their role files, keys, endpoints, options and env"

# rollout-0 died once and was restarted; the run folder is a job's run folder.
grep '"name":"rollout-0"' "$run/events.jsonl" | grep -q '"event":"died"' || fail "no death"
grep '"name":"rollout-0"' "$run/events.jsonl" | grep -q '"event":"ready"' || fail "no restart"
grep -q '"final_accuracy": 0.5' "$run/summary.json" || fail "summary.json: $(cat "$run/summary.json")"
[ -s "$run/report.html" ] || fail "no report"
echo "ok: restart, summary and report as for built-in roles"

# A program that does not exist: a clear error, and nothing started.
missing() {  # missing ACTOR_COMMAND ROLLOUT_COMMAND EXPECTED
  job "$1" "$2" >"$work/missing.json"
  if out=$("$sluice" run "$work/missing.json" --out "$work/missing" 2>&1); then
    fail "a job with a missing program ran"
  fi
  echo "$out" | grep -qF "$3" || fail "unclear error: $out"
  [ ! -e "$work/missing" ] || fail "a run folder was made for a job that cannot start"
  echo "ok: $(echo "$out" | tail -n 1)"
}
missing '{"argv": ["/nonexistent/sluice-role"]}' '{}' \
  "actor_command: the program /nonexistent/sluice-role does not exist"
missing '{}' '{"argv": ["sluice-no-such-program", "--flag"]}' \
  "rollout_command: the program sluice-no-such-program is not on PATH"
missing '{"argv": ["./sluice-missing-role.py"]}' '{}' \
  "relative paths are taken from its workdir"
