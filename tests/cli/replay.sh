#!/usr/bin/env bash
# `sluice replay RUN_DIR`: a short real job, then its learner updates reproduced bit for bit from
# its run folder (every step's loss, gradient norm and weights digest, then the final weights);
# a record with one flipped byte, one cut inside a frame and one cut after a whole step are each
# refused with a clear error; the same batches fed to another learner setting are evaluated; and
# a job whose actor was killed (SIGKILL) and resumed from its checkpoint still replays bit for
# bit (its record was cut back to the checkpoint's step).
set -euo pipefail
sluice=$1
job=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/replay.XXXXXX")
trap 'rm -rf "$dir"' EXIT
small=(--set actor.learner.warmstart_steps=20 --set actor.learner.eval_prompts=20
  --set actor.eval_every=0 --set manager.batch_trajectories=64)

fail() {
  echo "replay.sh: $1"
  [ $# -gt 1 ] && cat "$2"
  exit 1
}

# ---- a finished run replays bit for bit ----
"$sluice" run "$job" --out "$dir/run" "${small[@]}" --set manager.prompts=32 \
  >"$dir/run.out" 2>&1 || fail "the job failed" "$dir/run.out"
[ -s "$dir/run/actor-batches.bin" ] || fail "no batch record in the run folder"
"$sluice" replay "$dir/run" >"$dir/replay.out" 2>&1 || fail "replay failed" "$dir/replay.out"
grep -q "^step 4: .*, match$" "$dir/replay.out" || fail "no step 4 matched" "$dir/replay.out"
grep -q "the final weights match" "$dir/replay.out" || fail "final weights" "$dir/replay.out"
grep -q "4 steps match the run bit for bit" "$dir/replay.out" || fail "no summary" "$dir/replay.out"

# ---- damaged records: a clear error, exit 1 ----
expect_refused() {  # RECORD PATTERN
  local status=0
  "$sluice" replay "$dir/run" --record "$1" --quiet >"$dir/bad.out" 2>&1 || status=$?
  [ $status -eq 1 ] || fail "a damaged record ($2) exited $status" "$dir/bad.out"
  grep -q "$2" "$dir/bad.out" || fail "no '$2' for a damaged record" "$dir/bad.out"
}
python3 - "$dir/run/actor-batches.bin" "$dir" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
out = sys.argv[2]
flipped = bytearray(data)
flipped[len(data) - 200] ^= 1  # inside the last step's samples
open(f"{out}/flipped.bin", "wb").write(flipped)
open(f"{out}/torn.bin", "wb").write(data[:-1000])
# Frames: kind u32, length u64, payload, checksum u64 (actor/batch_record.hpp); drop the last.
pos, ends = 12, []
while pos < len(data):
    kind, length = struct.unpack_from("<IQ", data, pos)
    pos += 12 + length + 8
    ends.append(pos)
assert pos == len(data), (pos, len(data))
open(f"{out}/short.bin", "wb").write(data[:ends[-2]])
PY
expect_refused "$dir/flipped.bin" "is damaged at byte .*checksum mismatch"
expect_refused "$dir/torn.bin" "the last frame is torn"
expect_refused "$dir/short.bin" "the record ends at step 3, the run took 4 steps"

# ---- the same batches through another learner setting ----
"$sluice" replay "$dir/run" --set correction=none --quiet >"$dir/other.out" 2>&1 ||
  fail "replay with correction=none failed" "$dir/other.out"
grep -q "4 steps fed through the changed learner" "$dir/other.out" || fail "other" "$dir/other.out"
grep -q "held-out evaluation at the end: accuracy" "$dir/other.out" || fail "eval" "$dir/other.out"
status=0
"$sluice" replay "$dir/run" --set no_such_field=1 >"$dir/usage.out" 2>&1 || status=$?
[ $status -eq 2 ] || fail "an unknown --set field exited $status" "$dir/usage.out"

# ---- an actor killed mid-job and resumed from its checkpoint ----
# The kill is timed from version 6 of about 24, not from the clock: on a fast machine the whole
# job can end within a few seconds of its first version. Checkpoints every 3 steps leave the kill
# between two checkpoints most of the time, so the record is cut back.
"$sluice" run "$job" --out "$dir/killed" "${small[@]}" --set manager.prompts=96 \
  --set manager.batch_trajectories=32 --set actor.checkpoint_every_steps=3 \
  --set actor.checkpoint_every_s=0 --set actor.checkpoint_idle_s=0 \
  --set 'chaos={"kills": 1, "roles": "actor", "after_version": 6, "first_s": 0, "every_s": 0.2}' \
  --set log_level=info \
  >"$dir/killed.out" 2>&1 || fail "the job with a killed actor failed" "$dir/killed.out"
restarts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["restarts"])' \
  "$dir/killed/actor-summary.json")
[ "$restarts" -ge 1 ] || fail "the actor was not killed and resumed (restarts $restarts)"
"$sluice" replay "$dir/killed" --quiet >"$dir/killed-replay.out" 2>&1 ||
  fail "replay of the resumed run failed" "$dir/killed-replay.out"
grep -q "steps match the run bit for bit" "$dir/killed-replay.out" ||
  fail "resumed run" "$dir/killed-replay.out"
# The resumed actor continued the record from its checkpoint's step (and cut what the killed one
# trained after it, when the kill came between two checkpoints).
grep -h "batch record .* continues after step" "$dir/killed"/actor*.log ||
  fail "the resumed actor did not continue its record" "$dir/killed.out"
echo "replay.sh: pass"
