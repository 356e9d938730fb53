#!/usr/bin/env bash
# CI splits the tests between two builds: the plain build runs those labelled slow or python
# (scripts/test.sh --ci-plain), the sanitizer build every other one (scripts/test.sh --sanitizer
# address+undefined, which leaves out slow). This checks that every test either build knows runs
# in one of the two passes, so that none is dropped from both.
#   scripts/ci_coverage.sh PLAIN_BUILD SANITIZER_BUILD
set -euo pipefail
plain=${1:?ci_coverage.sh: name the plain build folder}
san=${2:?ci_coverage.sh: name the sanitizer build folder}
for b in "$plain" "$san"; do
  [ -f "$b/CTestTestfile.cmake" ] || { echo "ci_coverage.sh: $b is not a configured build" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names() {  # BUILD [ctest label arguments...]: the test names, sorted; doctest placeholders of
  # executables not built are left out (their tests are named by the build that built them)
  local b=$1
  shift
  (cd "$b" && ctest -N "$@") | sed -n 's/^ *Test *#[0-9]*: //p' | grep -v '_NOT_BUILT-' | sort -u
}
{ names "$plain"; names "$san"; } | sort -u >"$tmp/all"
names "$plain" -L 'slow|python' >"$tmp/plain"
names "$san" -LE slow >"$tmp/san"
sort -u "$tmp/plain" "$tmp/san" >"$tmp/ran"
comm -23 "$tmp/all" "$tmp/ran" >"$tmp/missing"
if [ -s "$tmp/missing" ]; then
  echo "ci_coverage.sh: these tests run in neither CI pass (label them slow, or build them in the plain pass: tests/CMakeLists.txt ci_plain):"
  sed 's/^/  /' "$tmp/missing"
  exit 1
fi
echo "ci_coverage.sh: $(wc -l <"$tmp/all") tests, $(wc -l <"$tmp/plain") in the plain pass, $(wc -l <"$tmp/san") under the sanitizers"
