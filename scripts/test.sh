#!/usr/bin/env bash
# Installs what is missing, configures, builds (warnings are errors) and runs every test.
#   scripts/test.sh                      the normal build, in build/
#   scripts/test.sh --sanitizer address  an AddressSanitizer build, in build-address/
#   scripts/test.sh --sanitizer undefined
#   scripts/test.sh --sanitizer address+undefined   both in one build (what CI runs)
#   scripts/test.sh --ci-plain           CI's plain pass: builds and runs only the tests that run in
#                                        no sanitizer build (labels slow and python); with the
#                                        address+undefined pass every test runs once
#                                        (scripts/ci_coverage.sh checks it)
# Extra arguments after -- go to ctest (e.g. -- -R messaging).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitizer=none
ci_plain=0
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitizer) sanitizer=${2:?--sanitizer needs a value}; shift 2 ;;
    --sanitizer=*) sanitizer=${1#*=}; shift ;;
    --ci-plain) ci_plain=1; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

case "$sanitizer" in
  none | address | undefined | address+undefined) ;;
  *) echo "test.sh: --sanitizer must be address, undefined or address+undefined, not '$sanitizer'" >&2; exit 2 ;;
esac

if [ $ci_plain -eq 1 ] && [ "$sanitizer" != none ]; then
  echo "test.sh: --ci-plain is the plain build's pass; it takes no --sanitizer" >&2; exit 2
fi

bash scripts/setup.sh

build=build
[ "$sanitizer" != none ] && build=build-${sanitizer/+/-}
jobs=$(nproc 2>/dev/null || echo 2)

echo "== configure ($build, sanitizer=$sanitizer)"
# The same flags as scripts/demo.sh's (scripts/configure.sh): after the demo only the tests and
# the tools it did not need are left to build.
bash scripts/configure.sh "$build" "$sanitizer"
echo "== build"
if [ $ci_plain -eq 1 ]; then
  cmake --build "$build" -j "$jobs" --target ci_plain
else
  cmake --build "$build" -j "$jobs"
fi
echo "== test"
if [[ "$sanitizer" == address* ]]; then
  # UCX installs memory hooks that LeakSanitizer cannot see through; leaks are still checked.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
fi
if [[ "$sanitizer" == *undefined ]]; then
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
cd "$build"
# Tests labelled slow (whole jobs, benches, the simulator at scale) run in the plain build only:
# under the sanitizers they take several times as long and exercise the same code as the unit
# tests beneath them. Arguments after -- replace this choice.
if [ "$sanitizer" != none ] && [ ${#ctest_args[@]} -eq 0 ]; then
  ctest_args=(-LE slow)
fi
if [ $ci_plain -eq 1 ] && [ ${#ctest_args[@]} -eq 0 ]; then
  ctest_args=(-L 'slow|python')
fi
ctest --output-on-failure --timeout 300 -j "$jobs" "${ctest_args[@]}"
