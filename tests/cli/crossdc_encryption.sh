#!/bin/sh
# `sluice bench crossdc --encryption off,on` runs a design clear and encrypted side by side and
# prints encrypted/clear per version (figures not checked: they are timing); an unknown setting
# is refused. Needs root and network namespaces: exit 77 (skipped) without them.
set -u
sluice=$1
out=$("$sluice" bench crossdc --encryption maybe 2>&1)
status=$?
if [ $status -ne 2 ] || ! echo "$out" | grep -q "unknown encryption 'maybe'"; then
  echo "bad encryption not refused ($status): $out"; exit 1
fi
# shellcheck disable=SC1091  # the probe beside this script
. "$(dirname "$0")/netns_probe.sh"
out=$("$sluice" --log-level warn bench crossdc --dcs 2 --hosts-per-dc 2 --rollouts-per-host 1 \
        --size 4MiB --chunk 256KiB --designs seed --encryption off,on 2>&1)
status=$?
echo "$out"
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
[ "$(echo "$out" | grep -Ec '^seed +off +[12] ')" -eq 2 ] || { echo "clear rows missing"; exit 1; }
[ "$(echo "$out" | grep -Ec '^seed +on +[12] +[0-9.]+ +[0-9.x-]+ +[0-9.]+x ')" -eq 2 ] ||
  { echo "encrypted rows or their ratio missing"; exit 1; }
