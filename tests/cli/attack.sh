#!/bin/bash
# `sluice attack` against the default job (examples/grpo_arith.json as it is, or shortened to
# PROMPTS prompts), mid-run. The job runs twice, one after the other with the same settings: once left alone, once
# attacked from its first trained step on. Checks:
#   - the attack exits 0 (nothing breached) and played the attempts it must (strangers, a relay
#     forging versions, members acting for others, every chunk server's four attacks, a member
#     serving changed bytes and one answering in another holder's place, a host share its
#     version does not give). The default job's chunk streams are clear on one host
#     (stream_encryption auto), which the chunk-server attempts' raw requests need, so the
#     clear read of an encrypting job is skipped here; it is played against a job with
#     stream_encryption on.
#   - the attacked job completes, with every trajectory consumed exactly once (none lost, none
#     twice, none trained twice), as `sluice chaos` and cli.elastic check it;
#   - its held-out accuracy at the end is at most 8 points below the run left alone's. Two
#     asynchronous runs of this job end a few points apart (0.53 to 0.57 attacked, 0.555 alone,
#     here); forged weights taken in would bring it near 0. A better run is no failure.
#   - bad input exits 2 with a clear message: a folder that does not exist, one that is not a run
#     folder, and the finished job's run folder.
# UCX_TLS=tcp,sm,self: every holder of a weight version then serves a chunk stream (on loopback)
# beside shared memory, so the chunk-server attacks have servers to play against; the readers on
# this host still read by shared memory.
set -u
sluice=${1:?usage: attack.sh SLUICE JOB [PROMPTS]}
job=${2:?usage: attack.sh SLUICE JOB [PROMPTS]}
prompts=${3:-}
command -v python3 >/dev/null || { echo "attack.sh: no python3 to read the summaries; skipped"; exit 77; }
tmp=$(mktemp -d)
job_pid=
cleanup() {
  [ -n "$job_pid" ] && kill "$job_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "attack.sh: $*"
  for f in "$tmp/attack.out" "$tmp/attacked.err" "$tmp/base.err"; do
    [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }
  done
  echo "attack.sh: $*"  # again, where a shortened log keeps it
  exit 1
}
# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local t=$(( $1 * 10 )); shift
  while [ $t -gt 0 ]; do "$@" && return 0; sleep 0.1; t=$((t - 1)); done
  return 1
}
lines() { [ -f "$1" ] && [ "$(grep -c "$2" "$1")" -ge "$3" ]; }
export UCX_TLS=tcp,sm,self
settings=(--set progress_s=0 --set timeout_s=1500)
[ -n "$prompts" ] && settings+=(--set manager.prompts="$prompts")

# Bad input first: it starts nothing.
out=$("$sluice" attack "$tmp/no-such-dir" 2>&1)
[ $? -eq 2 ] || fail "a missing folder did not exit 2: $out"
echo "$out" | grep -q "no such run folder" || fail "no clear message for a missing folder: $out"
mkdir "$tmp/empty"
out=$("$sluice" attack "$tmp/empty" 2>&1)
[ $? -eq 2 ] || fail "a folder without job.json did not exit 2: $out"
echo "$out" | grep -q "not a run folder" || fail "no clear message for a non-run folder: $out"

start=$(date +%s)
"$sluice" run "$job" "${settings[@]}" --out "$tmp/base" >"$tmp/base.out" 2>"$tmp/base.err" ||
  fail "the job left alone failed"
base_s=$(( $(date +%s) - start ))

"$sluice" run "$job" "${settings[@]}" --out "$tmp/attacked" >"$tmp/attacked.out" 2>"$tmp/attacked.err" &
job_pid=$!
wait_for 600 lines "$tmp/attacked/metrics.jsonl" reward_mean 1 || fail "the job did not train a step"
attack_start=$(date +%s)
timeout 600 "$sluice" attack "$tmp/attacked" >"$tmp/attack.out" 2>"$tmp/attack.err"
attack_status=$?
attack_end=$(date +%s)
cat "$tmp/attack.out"
wait "$job_pid"; job_status=$?; job_pid=
echo "attack.sh: the attack ran from $(( attack_start - start - base_s )) s to $(( attack_end - start - base_s )) s" \
  "of the attacked job, which took $(( $(date +%s) - start - base_s )) s"
[ $attack_status -eq 0 ] || fail "sluice attack exited $attack_status"
[ $job_status -eq 0 ] || fail "the attacked job exited $job_status"
# Every attempt the job offers was played while it ran (none skipped because it had ended).
grep -q "job ended" "$tmp/attack.out" && fail "the job ended before the attack was over: use more prompts"
for want in '^refused +stranger-curve weightstore' '^refused +stranger-curve rollout-manager' \
    '^refused +stranger-plain weightstore' '^refused +stranger-plain rollout-manager' \
    '^refused +relay-new-version:' '^refused +relay-forged-latest:' '^refused +relay-huge-version:' \
    '^refused +relay-forged-digest:' \
    '^refused +unpublish-another-copy:' '^refused +add-chunks-for-another:' \
    '^refused +heartbeat-for-another:' '^refused +join-as-another-relay:' \
    '^refused +chain-source-as-another-relay:' '^refused +pin-as-another:' \
    '^refused +unpin-as-another:' '^refused +renew-another-lease:' \
    '^refused +release-another-lease:' '^refused +release-readers-leases:' \
    '^refused +squat-holder-id:' '^refused +delta-as-another:' '^refused +lease-flood:' \
    '^refused +rollout-collect:' '^refused +report-as-another:' '^refused +forged-kv-ref:' \
    '^refused +finish-another-rollouts-trajectory:' \
    '^refused +oversized-message:' '^refused +key-file-modes:' '^survived +chunk-idle ' \
    '^survived +chunk-slow-loris ' '^refused +chunk-bad-tokens ' '^refused +chunk-out-of-range ' \
    '^refused +member-forged-bytes: .* refused the copy: .*digest' \
    '^refused +stand-in-holder: .*not holder .*as itself: verified' \
    '^refused +share-not-following: ' \
    '^survived +job-alive:'; do
  grep -Eq -- "$want" "$tmp/attack.out" || fail "the attack did not report /$want/"
done

checks=$(python3 - "$tmp/base" "$tmp/attacked" <<'PY'
import json, os, sys
base, attacked = (json.load(open(os.path.join(d, "summary.json"))) for d in sys.argv[1:3])
job = json.load(open(os.path.join(sys.argv[2], "job.json")))
def exactly_once(s):
    a, m = s["actor"], s["manager"]
    expected = job["manager"]["prompts"] * job["manager"]["group_size"]
    consumed, trained = a["accepted_ids"], a["trained_ids"]
    return {
        "outcome ok": s["outcome"] == "ok",
        "manager done": m.get("done") is True,
        "none lost": len(set(consumed)) == expected,
        "none consumed twice": len(consumed) == len(set(consumed)),
        "none trained twice": len(trained) == len(set(trained)),
        "no version backwards": s["watch"]["versions_backwards"] == 0,
    }
checks = {f"left alone: {k}": v for k, v in exactly_once(base).items()}
checks.update({f"attacked: {k}": v for k, v in exactly_once(attacked).items()})
acc_base = base["actor"]["final_accuracy"]
acc_attacked = attacked["actor"]["final_accuracy"]
checks["accuracy at most 8 points below"] = (acc_base - acc_attacked) * 100 <= 8
bad = [k for k, ok in checks.items() if not ok]
print(json.dumps({"consumed": len(attacked["actor"]["accepted_ids"]),
                  "accuracy_left_alone": acc_base, "accuracy_attacked": acc_attacked,
                  "failed": bad}))
sys.exit(1 if bad else 0)
PY
) || fail "the checks failed: $checks"
echo "$checks"

# The finished job's folder is no running job.
out=$("$sluice" attack "$tmp/attacked" 2>&1)
[ $? -eq 2 ] || fail "a finished job's folder did not exit 2: $out"
echo "$out" | grep -q "has ended" || fail "no clear message for a finished job: $out"
echo "attack.sh: pass (the job left alone took ${base_s} s)"
