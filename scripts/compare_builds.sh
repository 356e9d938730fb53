#!/usr/bin/env bash
# Runs one bench with two sluice binaries in turn (before, after, before, after, ...) and prints
# their figures side by side: the median of each over the rounds, after / before, and each side's
# lowest and highest (a difference inside both sides' spread is noise). A change
# that should leave speed alone is checked this way, both measured in one run under the same load.
#
#   scripts/compare_builds.sh BEFORE AFTER ROUNDS KEYS -- BENCH ARGS...
#     BEFORE, AFTER  two sluice executables (build one from an older commit in its own folder)
#     ROUNDS         runs of each, alternating
#     KEYS           comma-separated numeric fields of the bench's --json rows to compare
#     BENCH ARGS     the bench, with --json (e.g. bench transfer --transport tcp,sm --json)
#
# Rows are matched by their mode, transport, encryption and chunk_bytes fields (whichever they
# have). The load average and the CPU's busy share over the whole run are printed with the
# figures: a figure taken on a busy machine is not one.
set -euo pipefail

if [ $# -lt 6 ] || [ "$5" != "--" ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
before=$1 after=$2 rounds=$3 keys=$4
shift 5
for bin in "$before" "$after"; do
  [ -x "$bin" ] || { echo "compare_builds: '$bin' is not an executable" >&2; exit 2; }
done
case "$rounds" in
  '' | *[!0-9]* | 0) echo "compare_builds: ROUNDS must be a whole number >= 1, not '$rounds'" >&2; exit 2 ;;
esac

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
read -r busy0 total0 < <(cpu)
load0=$(cut -d' ' -f1 /proc/loadavg)
for ((i = 1; i <= rounds; i++)); do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    echo "== round $i of $rounds: $side ($bin $*)" >&2
    "$bin" "$@" | grep '^{' | sed "s/^{/{\"_side\":\"$side\",\"_round\":$i,/" >>"$out/rows.jsonl"
  done
done
read -r busy1 total1 < <(cpu)
load1=$(cut -d' ' -f1 /proc/loadavg)

python3 - "$out/rows.jsonl" "$keys" "$load0" "$load1" "$busy0" "$total0" "$busy1" "$total1" <<'EOF'
import json, statistics, sys
path, keys = sys.argv[1], sys.argv[2].split(",")
load0, load1 = sys.argv[3], sys.argv[4]
busy = (float(sys.argv[7]) - float(sys.argv[5])) / max(1.0, float(sys.argv[8]) - float(sys.argv[6]))
rows = [json.loads(line) for line in open(path)]
def ident(r):
    return " ".join(str(r[k]) for k in ("mode", "transport", "encryption", "chunk_bytes") if k in r)
figures = {}
for r in rows:
    for k in keys:
        if isinstance(r.get(k), (int, float)):
            figures.setdefault((ident(r), k), {"before": [], "after": []})[r["_side"]].append(float(r[k]))
print(f"load average {load0} at the start, {load1} at the end; CPU busy {100 * busy:.1f}% over the run")
print("| row | figure | before (median) | after (median) | after / before | before min-max | after min-max | runs |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (row, k), v in figures.items():
    b = statistics.median(v["before"]) if v["before"] else float("nan")
    a = statistics.median(v["after"]) if v["after"] else float("nan")
    ratio = a / b if b else float("nan")
    spread = lambda xs: f"{min(xs):.4g}-{max(xs):.4g}" if xs else "-"
    print(f"| {row} | {k} | {b:.4g} | {a:.4g} | {ratio:.3f} | {spread(v['before'])} | "
          f"{spread(v['after'])} | {len(v['before'])}+{len(v['after'])} |")
if not figures:
    sys.exit("compare_builds: no row had any of the keys " + ",".join(keys))
EOF
