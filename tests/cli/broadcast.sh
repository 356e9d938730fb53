#!/bin/sh
# `sluice bench broadcast` runs in emulated hosts and prints its table (figures not checked).
# Needs root and network namespaces: exit 77 (skipped) without them.
set -u
sluice=$1
. "$(dirname "$0")/netns_probe.sh"
out=$("$sluice" --log-level warn bench broadcast --relays 2 --size 4MiB --chunk 256KiB \
        --designs chain,direct --link-rate 500mbit 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
[ "$(echo "$out" | grep -Ec '^(chain|direct) +[12] +4 MiB')" -eq 4 ] || { echo "rows missing"; exit 1; }
echo "$out" | grep -q '^publisher stall' || { echo "no stall line"; exit 1; }
