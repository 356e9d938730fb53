#!/usr/bin/env bash
# Runs the default job (examples/grpo_arith.json) twice, in sync mode and in sluice mode, with
# the same seed, prompts and batch sizes, then prints held-out accuracy at equal numbers of
# trained samples and the time each mode took to get there (`sluice compare`).
#
#   scripts/compare_modes.sh [--set key=value ...]     extra overrides go to both runs
# The two run folders are runs/compare-sync-<time> and runs/compare-sluice-<time>.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DSLUICE_BUILD_TESTS=ON >/dev/null
cmake --build build --target sluice -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

stamp=$(date +%Y%m%d-%H%M%S)
for mode in sync sluice; do
  echo "== ${mode} =="
  ./build/sluice run examples/grpo_arith.json --set mode="${mode}" \
    --out "runs/compare-${mode}-${stamp}" "$@"
  echo
done
./build/sluice compare "runs/compare-sync-${stamp}" "runs/compare-sluice-${stamp}"
