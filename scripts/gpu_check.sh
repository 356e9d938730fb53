#!/usr/bin/env bash
# The GPU paths, on a machine with a GPU: installs what is missing, configures and builds with
# CUDA on (build-gpu/, warnings are errors), runs every GPU test and the GPU benchmark, and prints
# a summary.
#   scripts/gpu_check.sh [--size BYTES] [--transport LIST] [--digest-size BYTES]
#                        [--bundle DIR | --no-bundle] [--no-cuda]
#     --size       what the benchmark pulls into GPU memory (default 2GiB)
#     --transport  the benchmark's transports (default sm,tcp)
#     --digest-size  what the digest benchmark hashes on each GPU, in 64 MiB chunks (default
#                  32GiB: 512 chunks at once)
#     --bundle     build against the Debian packages in DIR (scripts/gpu_bundle.sh made it),
#                  unpacked into DIR/prefix, instead of installing them: for a bare GPU machine
#                  that has CUDA, CMake, g++ and PyTorch but cannot fetch packages. The default
#                  when gpu-bundle/MANIFEST exists and the machine has no libucx-dev. Warnings
#                  are not errors then (that compiler is not the one the tree is kept
#                  warning-free with); the Python module is built when that python3 has pybind11.
#     --no-cuda    build without the CUDA toolkit (CUDA off): the no-GPU paths only, exit 77. With
#                  --bundle, this shows on a machine without CUDA that the bundle alone builds.
# GPU tests: the ctest cases about CUDA, cuBLAS, device copies and reads, and NCCL (their names
# say "GPU", "CUDA", "cuda", "NCCL" or "device"). Benchmarks: `sluice bench transfer --memory
# cuda`, with --fanout on two or more GPUs; `sluice bench digest --device`, SHA-256 of 64 MiB
# chunks on each GPU (one chunk alone, and --digest-size of them at once: GB/s per GPU). cuBLAS
# has no benchmark; its tests cover it.
# Exit status: 0 all passed; 1 a test or the benchmark failed (or the build did); 2 a bad
# argument; 77 no GPU here: it built, ran the GPU tests (which then check their no-GPU errors and
# say they skipped the rest) and checked that the benchmarks refuse cleanly, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

size=2GiB
digest_size=32GiB
transport=sm,tcp
bundle=auto
cuda=ON
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=${2:?--size needs a value}; shift 2 ;;
    --transport) transport=${2:?--transport needs a value}; shift 2 ;;
    --digest-size) digest_size=${2:?--digest-size needs a value}; shift 2 ;;
    --bundle) bundle=${2:?--bundle needs a folder}; shift 2 ;;
    --no-bundle) bundle=none; shift ;;
    --no-cuda) cuda=OFF; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$bundle" = auto ]; then
  bundle=none
  if [ -f gpu-bundle/MANIFEST ] &&
    ! dpkg-query -W -f='${Status}' libucx-dev 2>/dev/null | grep -q "install ok installed"; then
    bundle=gpu-bundle
  fi
fi

build=build-gpu
jobs=$(nproc 2>/dev/null || echo 2)
configure=(-DSLUICE_BUILD_TESTS=ON -DSLUICE_ENABLE_CUDA=$cuda)
targets=(sluice core_tests core_digest_tests model_tests)
if [ "$bundle" = none ]; then
  bash scripts/setup.sh
  configure+=(-DSLUICE_WERROR=ON)
  targets+=(sluice_python)
else
  echo "== bundle: $bundle (no packages installed)"
  bash scripts/gpu_prefix.sh "$bundle" "$bundle/prefix"
  # shellcheck source=/dev/null
  . "$bundle/prefix/env.sh"
  # CMake 4 refuses package files that ask for a policy level below 3.5.
  configure+=(-DSLUICE_WERROR=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  python=$(command -v python3 || true)
  if [ -n "$python" ] && pybind11_dir=$("$python" -m pybind11 --cmakedir 2>/dev/null); then
    configure+=(-DPython3_EXECUTABLE="$python" -Dpybind11_DIR="$pybind11_dir")
    targets+=(sluice_python)
  else
    configure+=(-DSLUICE_BUILD_PYTHON=OFF)
    echo "   no pybind11 for python3 here: the Python module is not built"
  fi
  # NCCL may come as a Python wheel (nvidia-nccl) rather than with the toolkit.
  if [ -n "$python" ] && nccl=$("$python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null) &&
    [ -f "$nccl/include/nccl.h" ]; then
    lib=$(ls "$nccl"/lib/libnccl.so* 2>/dev/null | head -1)
    [ -n "$lib" ] && configure+=(-DSLUICE_NCCL_LIBRARY="$lib" -DSLUICE_NCCL_INCLUDE="$nccl/include")
  fi
fi
mkdir -p "$build"
echo "== configure ($build, cuda $cuda)"
cmake -S . -B "$build" "${configure[@]}" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
grep -E "^-- sluice:" "$build/configure.log" || true
echo "== build"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
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
# The simulator's and the rollout's cases that match only name a "device" setting or model.
(cd "$build" && ctest --output-on-failure --timeout 600 -R 'GPU|CUDA|cuda|NCCL|device' \
  -E '^(simulate|rollout):') || rc=$?
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

echo "== sluice bench digest --device (SHA-256 of 64 MiB chunks, GB/s per GPU)"
rc=0
"$build/sluice" --log-level warn bench digest --device --chunk 64MiB --size "$digest_size" \
  --rounds 1 || rc=$?
if [ "$gpus" -eq 0 ]; then
  [ $rc -eq 77 ] && rc=0 || rc=1
  record "bench digest --device refuses cleanly without a GPU" $rc
else
  record "bench digest --device" $rc
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
