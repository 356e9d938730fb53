#!/bin/sh
# `sluice bench transfer --sources 2 --link-rate`: runs in emulated hosts and prints the speedup.
# Needs root and network namespaces: exit 77 (skipped) without them.
set -u
sluice=$1
. "$(dirname "$0")/netns_probe.sh"
out=$("$sluice" --log-level warn bench transfer --sources 2 --link-rate 500mbit --size 16MiB --chunk 1MiB 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
echo "$out" | grep -Eq '^two sources / one source: [0-9.]+x faster' || { echo "no speedup line"; exit 1; }
# Both rows are there, and each read moved the whole region.
[ "$(echo "$out" | grep -Ec '^[12] +500mbit +16 MiB')" -eq 2 ] || { echo "rows missing"; exit 1; }
