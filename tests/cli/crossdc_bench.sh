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
[ "$(echo "$out" | grep -Ec '^(direct|seed|delta|default) +auto +[12] ')" -eq 8 ] || { echo "rows missing"; exit 1; }
# Bytes, not time: version 2 differs from version 1 in 3% of its elements, so the delta design's
# seed of dc1 takes in far less of it over the WAN than the seed design's does (a full copy), and
# so does the default design's, with no delta setting at all.
wan_in() { echo "$out" | awk -v d="$1" '$1 == d && $3 == 2 { for (i = 1; i <= NF; ++i) if ($i == "dc1") { split($(i + 1), a, "/"); print a[2] } }'; }
seed_in=$(wan_in seed); delta_in=$(wan_in delta); default_in=$(wan_in default)
echo "dc1 WAN copies in, version 2: seed $seed_in, delta $delta_in, default $default_in"
awk -v s="$seed_in" -v d="$delta_in" -v f="$default_in" 'BEGIN { exit !(s >= 0.9 && d < 0.5 && f < 0.5) }' ||
  { echo "deltas did not cut dc1's WAN bytes (seed $seed_in, delta $delta_in, default $default_in)"; exit 1; }
echo "$out" | grep -Eq '^seed +auto +2 .*dc0 [0-9.]+/[0-9.]+ +dc1 ' || { echo "no WAN figures"; exit 1; }
