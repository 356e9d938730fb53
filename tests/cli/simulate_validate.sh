#!/bin/sh
# sluice simulate --validate end to end: it runs bench e2e itself (a small job, --set on both
# sides), reads the bench's --json lines, including its exactly-once line, and sets every mode's
# simulated figures beside the measured ones. With root and network namespaces the four emulated
# hosts run too. How close the two are is not asserted here (docs/benchmarks.md records it).
# Usage: simulate_validate.sh SLUICE
set -eu
sluice=$1
out=$("$sluice" simulate --validate --modes sync,sluice --set manager.prompts=64 2>&1) ||
  { echo "simulate --validate failed:"; printf '%s\n' "$out"; exit 1; }
printf '%s\n' "$out" | grep -q "== one host: simulated against measured (a bench e2e run just now)" ||
  { echo "no measured one-host table"; printf '%s\n' "$out"; exit 1; }
hosts=1
if printf '%s\n' "$out" | grep -q "== four emulated hosts: simulated against measured"; then
  hosts=2
fi
for m in sync sluice; do
  # mode, simulated tokens/s, measured tokens/s, their difference in per cent
  n=$(printf '%s\n' "$out" | grep -cE "^$m +[0-9]+ +[0-9]+ +[-+][0-9.]+%") || true
  [ "$n" -eq "$hosts" ] || { echo "mode $m: $n measured rows, not $hosts"; printf '%s\n' "$out"; exit 1; }
done
printf '%s\n' "$out" | grep -q "largest throughput difference" || { echo "no summary"; exit 1; }
echo "ok: --validate measured and simulated $hosts configuration(s)"
