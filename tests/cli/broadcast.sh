#!/bin/sh
# `sluice bench broadcast` runs in emulated hosts and prints its table (figures not checked).
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
out=$("$sluice" --log-level warn bench broadcast --relays 2 --size 4MiB --chunk 256KiB \
        --designs chain,direct --link-rate 500mbit 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
[ "$(echo "$out" | grep -Ec '^(chain|direct) +[12] +4 MiB')" -eq 4 ] || { echo "rows missing"; exit 1; }
echo "$out" | grep -q '^publisher stall' || { echo "no stall line"; exit 1; }
