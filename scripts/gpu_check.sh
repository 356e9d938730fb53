#!/usr/bin/env bash
# The GPU paths, on a machine with a GPU: installs what is missing, configures and builds with
# CUDA on (build-gpu/, warnings are errors), runs every GPU test and the GPU benchmark, and prints
# a summary.
#   scripts/gpu_check.sh [--size BYTES] [--transport LIST]
#     --size       what the benchmark pulls into GPU memory (default 2GiB)
#     --transport  the benchmark's transports (default sm,tcp)
# GPU tests: the ctest cases about CUDA, cuBLAS, device copies and reads, and NCCL (their names
# say "GPU", "CUDA", "cuda", "NCCL" or "device"). Benchmark: `sluice bench transfer --memory
# cuda`, with --fanout on two or more GPUs. cuBLAS has no benchmark; its tests cover it.
# Exit status: 0 all passed; 1 a test or the benchmark failed (or the build did); 2 a bad
# argument; 77 no GPU here: it built, ran the GPU tests (which then check their no-GPU errors and
# say they skipped the rest) and checked that the benchmark refuses cleanly, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

size=2GiB
transport=sm,tcp
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=${2:?--size needs a value}; shift 2 ;;
    --transport) transport=${2:?--transport needs a value}; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh

build=build-gpu
jobs=$(nproc 2>/dev/null || echo 2)
echo "== configure ($build, cuda on)"
cmake -S . -B "$build" -DSLUICE_WERROR=ON -DSLUICE_BUILD_TESTS=ON -DSLUICE_ENABLE_CUDA=ON >/dev/null
echo "== build"
cmake --build "$build" -j "$jobs" --target sluice core_tests model_tests
"$build/sluice" version
gpus=$("$build/sluice" version | sed -n 's/^gpus \([0-9]*\).*/\1/p')
gpus=${gpus:-0}

results=()
failed=0
record() {  # name, exit status
  if [ "$2" -eq 0 ]; then results+=("pass  $1"); else results+=("FAIL  $1 (exit $2)"); failed=1; fi
}

echo "== GPU tests"
rc=0
(cd "$build" && ctest --output-on-failure --timeout 600 -R 'GPU|CUDA|cuda|NCCL|device') || rc=$?
record "ctest -R 'GPU|CUDA|cuda|NCCL|device'" $rc

echo "== sluice bench transfer --memory cuda"
bench=("$build/sluice" --log-level warn bench transfer --memory cuda --size "$size"
  --transport "$transport")
[ "$gpus" -ge 2 ] && bench+=(--fanout)
rc=0
"${bench[@]}" || rc=$?
if [ "$gpus" -eq 0 ]; then
  # Without a GPU the benchmark must say so and exit 77, not crash or pretend.
  [ $rc -eq 77 ] && rc=0 || rc=1
  record "bench transfer --memory cuda refuses cleanly without a GPU" $rc
else
  record "bench transfer --memory cuda" $rc
fi

echo "== summary ($gpus GPU(s))"
printf '  %s\n' "${results[@]}"
if [ $failed -ne 0 ]; then
  echo "gpu_check: FAILED"
  exit 1
fi
if [ "$gpus" -eq 0 ]; then
  echo "gpu_check: no GPU on this machine: built, and checked the no-GPU paths only (exit 77)"
  exit 77
fi
echo "gpu_check: all passed"
