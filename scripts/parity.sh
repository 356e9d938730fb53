#!/usr/bin/env bash
# Learning at parity: the default job in sync mode and in sluice mode on the same task seeds, at
# equal samples, paired by seed. Prints each seed's end-of-run held-out accuracy in both modes,
# their difference (sluice - sync), the mean difference with its standard error, and each mode's
# wall time.
#
#   scripts/parity.sh --seeds 311,419,523 [--job FILE] [--out DIR] [--set key=value ...]
#
# The seed S is set as manager.task.seed, rollout.task.seed and actor.learner.task.seed. Extra
# --set overrides go to both modes' runs; --sluice-set and --sync-set go to one mode only. Run
# folders are DIR/sync-S and DIR/sluice-S (DIR defaults to runs/parity-<time>); a seed whose two
# folders both hold a summary.json is read, not run again, so an interrupted study resumes.
# Needs a built build/sluice (scripts/demo.sh or scripts/test.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."

job=examples/grpo_arith.json
seeds=""
out="runs/parity-$(date +%Y%m%d-%H%M%S)"
both=()
only_sync=()
only_sluice=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds=${2:?--seeds needs a comma-separated list}; shift 2 ;;
    --job) job=${2:?--job needs a file}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --set) both+=(--set "${2:?--set needs key=value}"); shift 2 ;;
    --sync-set) only_sync+=(--set "${2:?--sync-set needs key=value}"); shift 2 ;;
    --sluice-set) only_sluice+=(--set "${2:?--sluice-set needs key=value}"); shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "parity.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$seeds" ] || { echo "parity.sh: --seeds is required (e.g. --seeds 311,419)" >&2; exit 2; }
[ -x build/sluice ] || { echo "parity.sh: build/sluice is missing: run scripts/demo.sh first" >&2; exit 2; }
mkdir -p "$out"

IFS=, read -r -a seed_list <<<"$seeds"
for s in "${seed_list[@]}"; do
  [[ "$s" =~ ^[0-9]+$ ]] || { echo "parity.sh: seed '$s' is not a number" >&2; exit 2; }
  for mode in sync sluice; do
    dir="$out/$mode-$s"
    [ -f "$dir/summary.json" ] && continue
    rm -rf "$dir"
    extra=("${only_sync[@]}")
    [ "$mode" = sluice ] && extra=("${only_sluice[@]}")
    echo "== seed $s, $mode (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    ./build/sluice run "$job" --set mode="$mode" --set manager.task.seed="$s" \
      --set rollout.task.seed="$s" --set actor.learner.task.seed="$s" --out "$dir" \
      "${both[@]}" "${extra[@]}" >"$out/$mode-$s.log" 2>&1 ||
      { echo "parity.sh: the $mode run of seed $s failed: see $out/$mode-$s.log" >&2; exit 1; }
  done
done

python3 - "$out" "${seed_list[@]}" <<'EOF'
import json, math, sys
out, seeds = sys.argv[1], sys.argv[2:]
def read(mode, s):
    with open(f"{out}/{mode}-{s}/actor-summary.json") as f:
        a = json.load(f)
    return 100.0 * a["final_accuracy"], a["wall_s"], a["trained_samples"], a["steps"]
print("| seed | sync | sluice | sluice - sync | sync wall | sluice wall | samples (sync, sluice) | steps |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
diffs = []
for s in seeds:
    y, yw, yn, ys = read("sync", s)
    l, lw, ln, ls = read("sluice", s)
    diffs.append(l - y)
    print(f"| {s} | {y:.2f} | {l:.2f} | {l - y:+.2f} | {yw:.1f} s | {lw:.1f} s | {yn}, {ln} | {ys}, {ls} |")
n = len(diffs)
mean = sum(diffs) / n
se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else float("nan")
print(f"\nmean difference {mean:+.2f} points, standard error {se:.2f}, {n} seeds")
EOF
