#!/bin/sh
# `sluice bench transfer --sources 2 --link-rate`: runs in emulated hosts and prints the speedup.
# Needs root and network namespaces: exit 77 (skipped) without them.
set -u
sluice=$1
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "skipped: needs root and iproute2"; exit 77
fi
if ! ip netns add sluice-probe-$$ 2>/dev/null; then
  echo "skipped: cannot create network namespaces here"; exit 77
fi
ip netns del sluice-probe-$$
out=$("$sluice" --log-level warn bench transfer --sources 2 --link-rate 500mbit --size 16MiB --chunk 1MiB 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
echo "$out" | grep -Eq '^two sources / one source: [0-9.]+x faster' || { echo "no speedup line"; exit 1; }
# Both rows are there, and each read moved the whole region.
[ "$(echo "$out" | grep -Ec '^[12] +500mbit +16 MiB')" -eq 2 ] || { echo "rows missing"; exit 1; }
