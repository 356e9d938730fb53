#!/bin/sh
# A command role for command_roles.sh: records how `sluice run` started it and keeps the role's
# contract (docs/architecture.md, "Command roles") with no work behind it.
# usage: fake_role.sh actor|rollout RECORD_DIR --config FILE
set -eu
role=$1 record=$2
[ "${3:-}" = --config ] || { echo "fake_role: expected --config FILE, got: $*" >&2; exit 2; }
config=$4
# The value of the first "key": "string" line of the (pretty-printed) role file.
field() { sed -n "s/^ *\"$1\": \"\([^\"]*\)\".*/\1/p" "$config" | head -n 1; }
id=$(field "${role}_id")
[ -r "$(field key_file)" ] || { echo "fake_role: $id cannot read its key file" >&2; exit 2; }
cp "$config" "$record/$id.json"
echo "$*" >"$record/$id.argv"
echo "${FAKE_ROLE_GREETING:-}" >"$record/$id.env"

if [ "$role" = rollout ]; then
  # rollout-0 dies once right after it came up, to be restarted like a built-in rollout.
  if [ "$id" = rollout-0 ] && [ ! -e "$record/rollout-0.died" ]; then
    touch "$record/rollout-0.died"
    echo "rollout $id"
    exit 3
  fi
  echo "rollout $id"
  # After the ready line: the launcher has it before the actor, waiting for this file, ends.
  if [ -e "$record/$id.died" ]; then touch "$record/$id.back"; fi
  exec sleep 600
fi

echo "actor $id"
metrics=$(field metrics_path)
summary=$(field summary_path)
# Waits (bounded) for the restarted rollout-0, so that the job sees the restart before it ends.
n=0
while [ ! -e "$record/rollout-0.back" ] && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
{
  echo '{"t": 0.5, "step": 0, "version": 0, "accuracy": 0.25}'
  echo '{"t": 1.0, "step": 1, "version": 1, "reward_mean": 0.5, "tokens_per_s": 100.0, "staleness_mean": 0.0, "loss": 0.7}'
  echo '{"t": 1.5, "step": 2, "version": 2, "reward_mean": 0.75, "tokens_per_s": 120.0, "staleness_mean": 1.0, "loss": 0.5, "accuracy": 0.5}'
} >>"$metrics"
s='{"wall_s": 1.5, "steps": 2, "version": 2, "trained_tokens": 180, "tokens_per_s": 120.0, "staleness_mean": 0.5, "staleness_max": 1, "duplicates": 0, "initial_accuracy": 0.25, "final_accuracy": 0.5}'
echo "$s" >"$summary"
echo "summary $s"
