#!/bin/sh
# `sluice bench crossdc` runs in emulated datacenters and prints a row per design and version
# (figures not checked: they are timing); a design it does not know is refused.
# Needs root and network namespaces: exit 77 (skipped) without them.
set -u
sluice=$1
out=$("$sluice" bench crossdc --designs nosuch 2>&1)
status=$?
if [ $status -ne 2 ] || ! echo "$out" | grep -q "unknown design 'nosuch'"; then
  echo "bad design not refused ($status): $out"; exit 1
fi
# shellcheck disable=SC1091  # the probe beside this script
. "$(dirname "$0")/netns_probe.sh"
out=$("$sluice" --log-level warn bench crossdc --dcs 2 --hosts-per-dc 2 --rollouts-per-host 1 \
        --size 4MiB --chunk 256KiB 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
[ "$(echo "$out" | grep -Ec '^(direct|seed) +[12] ')" -eq 4 ] || { echo "rows missing"; exit 1; }
echo "$out" | grep -Eq '^seed +2 .*dc0 [0-9.]+/[0-9.]+ +dc1 ' || { echo "no WAN figures"; exit 1; }
