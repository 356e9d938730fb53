#!/usr/bin/env bash
# A one-host Slurm cluster from Debian's packages (slurm-wlm, munge; scripts/setup.sh installs
# them), for trying `sluice slurm` and for its test. Everything it writes lives in one private
# folder (default /tmp/sluice-slurm, or $SLUICE_SLURM_DIR): slurm.conf, munge's key and socket,
# Slurm's state, spool and logs. Nothing goes to /etc, and no systemd or cgroups are needed
# (proctrack/linuxproc, task/none), so it runs in a container as root.
#
# usage: slurm_local.sh up|down|status|env
#   up      write the configuration, start munged, slurmctld and slurmd, wait until the node is
#           idle (at most $SLUICE_SLURM_WAIT_S seconds, default 60); does nothing when it is up
#   down    cancel the cluster's jobs, stop the daemons this script started (by their pid files)
#   status  say what runs; exit 0 only when the node is up and takes jobs
#   env     print `export SLURM_CONF=...`: Slurm's commands (sbatch, squeue, srun) need it
# Ports: slurmctld on $SLUICE_SLURM_PORT (default 6817), slurmd on the next one.
# Exit status: 0 done, 1 failed (the reason and the logs to read are printed), 2 bad usage.
set -euo pipefail

dir=${SLUICE_SLURM_DIR:-/tmp/sluice-slurm}
port=${SLUICE_SLURM_PORT:-6817}
wait_s=${SLUICE_SLURM_WAIT_S:-60}
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

say() { echo "slurm_local: $*"; }
die() {
  echo "slurm_local: $*" >&2
  exit 1
}

# The pid in a pid file when that process is alive and runs `name`, else nothing.
live_pid() {  # live_pid PIDFILE NAME
  local pid
  [ -s "$1" ] || return 0
  pid=$(cat "$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  if [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]; then echo "$pid"; fi
}

munged_pid() { live_pid "$dir/munge/munged.pid" munged; }
ctld_pid() { live_pid "$dir/slurmctld.pid" slurmctld; }
slurmd_pid() { live_pid "$dir/slurmd.pid" slurmd; }

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n 1; }

need() {
  local missing=()
  for c in munged mungekey slurmctld slurmd sinfo scontrol squeue scancel; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: install slurm-wlm and munge (scripts/setup.sh does)"
  [ "$(id -u)" -eq 0 ] || die "run as root: slurmd starts jobs as their users"
  # Jobs reach their first node by its Slurm name, which is this host's name.
  getent hosts "$(hostname -s)" >/dev/null ||
    die "this host's name $(hostname -s) does not resolve: add it to /etc/hosts"
}

# Is a TCP port taken on this host?
port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

write_config() {
  local host node_line
  host=$(hostname -s)
  # The node as slurmd sees this machine (CPUs, sockets, memory), under this host's name.
  node_line=$(slurmd -C | head -n 1)
  [[ $node_line == NodeName=* ]] || die "slurmd -C did not describe this node: $node_line"
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 0700 "$dir" "$dir/munge"
  cat >"$conf.tmp" <<EOF
# Written by scripts/slurm_local.sh: a one-host cluster for sluice's tests.
ClusterName=sluice
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups in a container: processes are tracked by their parent ids, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
$(sed "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/; s/ UpTime=.*//" <<<"$node_line") State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  mv "$conf.tmp" "$conf"
}

start_munged() {
  [ -n "$(munged_pid)" ] && return 0
  if [ ! -s "$dir/munge/munge.key" ]; then
    mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null ||
      die "mungekey could not make $dir/munge/munge.key"
  fi
  chmod 0600 "$dir/munge/munge.key"
  # --force: munged refuses root otherwise; here root is the only user of the cluster.
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" ||
    die "munged did not start; its log: $dir/munge/munged.log"
}

# Starts a daemon unless it runs; it forks and writes its pid file.
start_daemon() {  # start_daemon NAME PIDFUNC ARGS...
  local name=$1 pidf=$2
  shift 2
  [ -n "$($pidf)" ] && return 0
  "$name" "$@" || die "$name did not start; its log: $dir/$name.log"
}

wait_idle() {
  local deadline=$((SECONDS + wait_s)) state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(node_state)
    case $state in
      idle | mixed | allocated) return 0 ;;
      down* | drain*)
        # A node that was down before (an earlier run's leftovers) is told to come back.
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        ;;
    esac
    [ -n "$(ctld_pid)" ] || die "slurmctld exited; its log: $dir/slurmctld.log"
    [ -n "$(slurmd_pid)" ] || die "slurmd exited; its log: $dir/slurmd.log"
    sleep 0.5
  done
  echo "slurm_local: the node is '${state:-unknown}', not idle, after ${wait_s}s" >&2
  tail -n 5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 2>/dev/null || true
  exit 1
}

up() {
  need
  if [ -n "$(ctld_pid)" ] && [ -n "$(slurmd_pid)" ] && [ -n "$(munged_pid)" ]; then
    wait_idle
    say "already up (SLURM_CONF=$conf)"
    return 0
  fi
  if [ -z "$(ctld_pid)" ] && [ -z "$(slurmd_pid)" ]; then
    for p in "$port" "$((port + 1))"; do
      port_busy "$p" && die "port $p is taken by another program (set SLUICE_SLURM_PORT)"
    done
    # A fresh cluster: no jobs or node states of an earlier run.
    rm -rf "$dir/state" "$dir/spool"
    write_config
  fi
  start_munged
  # -c: forget saved jobs; slurmd by name, as this host is the node of slurm.conf.
  start_daemon slurmctld ctld_pid -c -f "$conf"
  start_daemon slurmd slurmd_pid -f "$conf" -N "$(hostname -s)"
  wait_idle
  say "up: node $(hostname -s) $(node_state), partition debug (SLURM_CONF=$conf)"
}

stop_pid() {  # stop_pid NAME PID
  local name=$1 pid=$2
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "slurm_local: $name ($pid) did not stop in 10 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

down() {
  local pid jobs
  if [ -n "$(ctld_pid)" ]; then
    # This private cluster's jobs are ours: cancel them and give them time to end.
    jobs=$(squeue -h -o '%i' 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 60); do
        [ -z "$(squeue -h -o '%i' 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  pid=$(slurmd_pid)
  [ -z "$pid" ] || stop_pid slurmd "$pid"
  pid=$(ctld_pid)
  [ -z "$pid" ] || stop_pid slurmctld "$pid"
  pid=$(munged_pid)
  [ -z "$pid" ] || stop_pid munged "$pid"
  say "down"
}

status() {
  local ok=0 name pid state
  for name in munged slurmctld slurmd; do
    case $name in
      munged) pid=$(munged_pid) ;;
      slurmctld) pid=$(ctld_pid) ;;
      slurmd) pid=$(slurmd_pid) ;;
    esac
    if [ -n "$pid" ]; then
      echo "$name: running, pid $pid"
    else
      echo "$name: not running"
      ok=1
    fi
  done
  if [ $ok -eq 0 ]; then
    state=$(node_state)
    echo "node $(hostname -s): ${state:-unknown}"
    case $state in idle | mixed | allocated) ;; *) ok=1 ;; esac
  fi
  return $ok
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *)
    echo "usage: $0 up|down|status|env" >&2
    exit 2
    ;;
esac
