#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan and UBSan, in build-fuzz/) and runs
# each one from its committed seed corpus for SECONDS (default 60) or 10 million executions,
# whichever comes first, JOBS targets at a time (default: the number of cores).
#   scripts/fuzz.sh [SECONDS] [JOBS]
# Prints one line per target: executions, seconds, crashes. New inputs go to build-fuzz/corpus/,
# crashing inputs to build-fuzz/crashes/ (replay one: build-fuzz/tests/fuzz/TARGET FILE).
# Exits non-zero when a target crashed, leaked, timed out or ran out of memory.
# FUZZ_SEED=N fixes libFuzzer's random seed (CI does, so that a run is repeatable); default random.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=${2:-$(nproc 2>/dev/null || echo 2)}
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac

bash scripts/setup.sh
build=build-fuzz
echo "== configure ($build, clang, libFuzzer + ASan + UBSan)"
CC=clang CXX=clang++ cmake -S . -B "$build" -DSLUICE_SANITIZER=fuzzer -DSLUICE_ENABLE_CUDA=OFF \
  -DSLUICE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "== build"
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_all
targets=$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')

run_one() {
  local t=$1 work="$build/corpus/$1" crashes="$build/crashes" log="$build/logs/$1.log"
  mkdir -p "$work" "$crashes" "$build/logs"
  rm -f "$crashes/$t-"*
  local start=$SECONDS rc=0
  # -rss_limit_mb: a decoder that allocates what an input claims shows up as an out-of-memory
  # crash. -timeout: one input taking more than 10 s is a hang.
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -runs=10000000 -rss_limit_mb=2048 \
    -timeout=10 -seed="${FUZZ_SEED:-0}" -print_final_stats=1 -artifact_prefix="$crashes/$t-" "$work" \
    "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local execs found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(find "$crashes" -name "$t-*" | wc -l)
  [ $rc -ne 0 ] && [ "$found" -eq 0 ] && found=1
  printf '%-24s %12s executions %6d s %3d crashes\n' "$t" "${execs:-?}" $((SECONDS - start)) "$found"
  [ "$found" -eq 0 ] || { grep -m5 -E "ERROR|SUMMARY|Test unit written" "$log" | sed 's/^/    /'; return 1; }
}

echo "== fuzz ${seconds}s each, $jobs at a time"
failed=0
pids=()
for t in $targets; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
[ $failed -eq 0 ] && echo "fuzz: no crashes" || echo "fuzz: crashes found (see above)"
exit $failed
