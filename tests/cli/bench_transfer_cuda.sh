#!/bin/sh
# `sluice bench transfer --memory cuda` pulls a version into GPU memory and prints the link, the
# host-to-device copy and the pull into the GPU side by side, the GPU's bytes checked against
# every chunk checksum (figures are not checked here). Without a GPU it must say so and exit 77:
# then this test checks that message and exits 77 (skipped).
set -u
sluice=$1
out=$("$sluice" --log-level warn bench transfer --memory cuda --transport sm --size 64MiB \
        --chunk 4MiB --json 2>&1)
status=$?
echo "$out"
if [ $status -eq 77 ]; then
  echo "$out" | grep -q 'no CUDA device present' || { echo "exit 77 without saying why"; exit 1; }
  echo "skipped: no GPU"
  exit 77
fi
[ $status -eq 0 ] || { echo "bench exited $status"; exit 1; }
row=$(echo "$out" | grep '^{') || { echo "no JSON row"; exit 1; }
for key in link_gbps h2d_gbps device_gbps ratio path; do
  echo "$row" | grep -q "\"$key\"" || { echo "no $key in the row"; exit 1; }
done
echo "$row" | grep -q '"device_bytes_equal":true' || { echo "GPU bytes differ"; exit 1; }
