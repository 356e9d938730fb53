// The two scripts `sluice slurm` writes into a run folder, as templates: job.sbatch (the batch
// script) and role.sh (one role in a step's task, restarted when it dies). Words in double
// underscores (__RUN__, ...) are filled in by `sluice slurm` with shell-quoted values; @HEAD@ and
// @HOST@ are left for the scripts to fill in on the nodes.
#pragma once

namespace sluice::cli {

// Tokens: __SBATCH__ (#SBATCH lines), __NAME__, __RUN__, __SLUICE__, __STORE_PORT__,
// __MANAGER_PORT__, __RELAYS__, __ROLLOUTS__, __AUTH__ (ping's --keys DIR or --plain),
// __READY_S__, __ACTOR_LIMIT_S__, __STOPS_ACTOR__ (1 when reaching the limit is the job's planned
// end, duration_s; 0 when it is a time-out).
inline constexpr const char* kJobSbatch = R"SH(#!/bin/bash
# Written by `sluice slurm` for job __NAME__ (docs/clusters.md). One allocation; the first node is
# the head: the weight store, the rollout manager and the actor run there, the relays and the
# rollouts on the other nodes (on the head too when the allocation has one node). One srun step per
# role group; every task runs role.sh, which restarts its role when it dies. The run folder must be
# on a file system every node sees.
__SBATCH__
set -uo pipefail
unset SLUICE_PARENT_PID  # the roles' parent is role.sh on their node, not whoever submitted
run=__RUN__
sluice=__SLUICE__
stops_actor=__STOPS_ACTOR__
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head=${nodes[0]}
workers=("${nodes[@]:1}")
[ ${#workers[@]} -gt 0 ] || workers=("$head")
worker_list=$(IFS=,; echo "${workers[*]}")
echo "sluice: Slurm job $SLURM_JOB_ID: store, manager and actor on $head; relays and rollouts on ${workers[*]}"

# Steps share the allocation: --overlap lets them run side by side, --overcommit lets a node run
# more roles than it has CPUs allocated.
steps=()
start() {  # start SRUN_ARGS... ROLE_SH ROLE NAME (the head's name is added)
  srun --overlap --overcommit --kill-on-bad-exit=0 "$@" "$head" &
  steps+=($!)
}
ready() {  # ready NAME IDENTITY ENDPOINT
  local deadline=$((SECONDS + __READY_S__))
  until "$sluice" --log-level off ping "$3" --peer "$2" __AUTH__ --timeout-ms 1000 >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "sluice: $1 did not answer at $3 within __READY_S__ s; its log: $run/$1.log" >&2
      return 1
    fi
    sleep 0.5
  done
}
stop_steps() {  # the other roles: SIGTERM through Slurm (srun itself would SIGKILL its tasks)
  local i pid
  scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null
  for pid in "${steps[@]}"; do
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}
fail() {
  echo "sluice: $*" >&2
  stop_steps
  exit 1
}

store="tcp://$head:__STORE_PORT__"
manager="tcp://$head:__MANAGER_PORT__"
start --nodes=1 --ntasks=1 -w "$head" "$run/role.sh" weightstore weightstore
ready weightstore weightstore "$store" || fail "the weight store did not start"
start --nodes=${#workers[@]} -w "$worker_list" --ntasks=__RELAYS__ --distribution=cyclic \
  "$run/role.sh" relay relay-#
start --nodes=1 --ntasks=1 -w "$head" "$run/role.sh" rollout-manager rollout-manager
ready rollout-manager rollout-manager "$manager" || fail "the rollout manager did not start"
start --nodes=${#workers[@]} -w "$worker_list" --ntasks=__ROLLOUTS__ --distribution=cyclic \
  "$run/role.sh" rollout rollout-#
# The actor in the foreground: the job ends with it.
timeout --signal=TERM --kill-after=30 __ACTOR_LIMIT_S__ \
  srun --overlap --overcommit --nodes=1 --ntasks=1 -w "$head" "$run/role.sh" actor actor "$head"
actor_status=$?
stopped=()
if [ $actor_status -eq 124 ] && [ "$stops_actor" -eq 1 ]; then stopped=(--stopped); fi
"$sluice" --log-level warn slurm-collect "$run" --manager "$manager" \
  --actor-status $actor_status --wall-s $SECONDS "${stopped[@]}"
outcome=$?
stop_steps
exit $outcome
)SH";

// Tokens: __RUN__, __SLUICE__, __WORKDIR__ (where command roles' relative paths start),
// __ACTOR_CMD__ and __ROLLOUT_CMD__ (a command role's words, or empty for the built-in role),
// __LIMITS__ (a case body: restarts allowed per role), __BACKOFF_MS__, __BACKOFF_MAX_MS__.
inline constexpr const char* kRoleSh = R"SH(#!/bin/bash
# Written by `sluice slurm`: runs one role of the job in a Slurm task and restarts it when it dies
# (up to the job's restart limit, with backoff), as `sluice run` does on one machine.
# usage: role.sh ROLE NAME HEAD. A NAME ending in '#' takes the task's index (SLURM_PROCID) there.
# The role's file is conf/NAME.json with @HEAD@ (the head node) and @HOST@ (this node) filled in,
# written to NAME.json in the run folder; its output goes to NAME.log; each start, death and
# restart is a line of events.jsonl.
set -u
unset SLUICE_PARENT_PID
run=__RUN__
role=$1 name=$2 head=$3
case $name in *'#') name=${name%'#'}$SLURM_PROCID ;; esac
host=$(hostname -s)
cd __WORKDIR__ || exit 1
sed -e "s/@HEAD@/$head/g" -e "s/@HOST@/$host/g" "$run/conf/$name.json" >"$run/$name.json.tmp" &&
  mv "$run/$name.json.tmp" "$run/$name.json" || exit 1
case $role in
  actor) cmd=(__ACTOR_CMD__) ;;
  rollout) cmd=(__ROLLOUT_CMD__) ;;
  *) cmd=() ;;
esac
[ ${#cmd[@]} -gt 0 ] || cmd=(__SLUICE__ "$role")
cmd+=(--config "$run/$name.json")
case $role in
__LIMITS__
esac

restarts=0 stopping=0 child=0
event() {  # event WHAT [,"key":value...]
  printf '{"t":%s,"event":"%s","name":"%s","role":"%s","host":"%s","restarts":%d%s}\n' \
    "$(date +%s.%N)" "$1" "$name" "$role" "$host" "$restarts" "${2:-}" >>"$run/events.jsonl"
}
trap 'stopping=1; [ $child -gt 0 ] && kill -TERM $child 2>/dev/null' TERM INT
while :; do
  event started
  "${cmd[@]}" >>"$run/$name.log" 2>&1 &
  child=$!
  wait $child
  status=$?
  # A signal interrupts wait; the child's own status comes once it has exited.
  while kill -0 $child 2>/dev/null; do
    wait $child
    status=$?
  done
  child=0
  if [ $stopping -eq 1 ]; then
    event stopped
    exit 0
  fi
  if [ $status -eq 0 ]; then
    event exited ',"status":0'
    exit 0
  fi
  if [ $restarts -ge "$limit" ]; then
    event gave_up ",\"status\":$status,\"limit\":$limit"
    exit $status
  fi
  delay=__BACKOFF_MAX_MS__
  [ $restarts -ge 30 ] || delay=$((__BACKOFF_MS__ << restarts))
  [ $delay -le __BACKOFF_MAX_MS__ ] || delay=__BACKOFF_MAX_MS__
  restarts=$((restarts + 1))
  event died ",\"status\":$status,\"restart_in_ms\":$delay"
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
done
)SH";

}  // namespace sluice::cli
