#!/bin/sh
# `sluice chaos`: a small simulated job with a kill every second (no fault-free run); the harness
# exits 0 only when the job completed with nothing lost, nothing consumed twice, no version going
# backwards and every kill landed, and its JSON says so. 240 prompts: with 120 the job sometimes
# ended (in about 4.7 s on an idle machine) before its third kill landed, and the test failed.
set -u
sluice=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/job.json" <<'JOB'
{"name": "chaos-cli", "rollouts": 3, "relays": 2, "progress_s": 0, "timeout_s": 240,
 "restart": {"backoff_ms": 100},
 "manager": {"prompts": 480, "group_size": 4, "batch_trajectories": 16, "heartbeat_timeout_ms": 1500},
 "rollout": {"report_ms": 20, "sim": {"max_sequences": 6, "t0_ms": 2.0, "t1_ms": 0.2,
   "lengths": {"median": 16, "p99": 160, "max_len": 256}}},
 "actor": {"weight_bytes": 1048576, "chunk_bytes": 65536, "train_ms_per_token": 0.02,
   "checkpoint_every_steps": 3, "max_staleness": 2}}
JOB
out=$("$sluice" chaos "$dir/job.json" --kills 3 --every 1 --seed 5 --no-baseline --json \
  --out "$dir/runs" 2>"$dir/err")
status=$?
echo "$out"
[ $status -eq 0 ] || { tail -20 "$dir/err"; echo "chaos exited $status"; exit 1; }
for want in '"ok":true' '"lost":0' '"consumed_twice":0' '"versions_backwards":0' '"kills_landed":3'; do
  echo "$out" | grep -q "$want" || { echo "missing $want"; exit 1; }
done
# A role that does not exist is refused before anything starts.
bad=$("$sluice" chaos "$dir/job.json" --kills 1 --roles trainer --no-baseline 2>&1)
[ $? -eq 2 ] || { echo "an unknown role was not refused: $bad"; exit 1; }
echo "$bad" | grep -q "unknown role 'trainer'" || { echo "no clear error: $bad"; exit 1; }
echo "chaos.sh: pass"
