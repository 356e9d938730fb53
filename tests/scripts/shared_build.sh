#!/usr/bin/env bash
# scripts/demo.sh and scripts/test.sh must configure build/ with the same flags, or the tests
# recompile everything the demo built: each configures only through scripts/configure.sh, and
# the plain build of each is build/ with no sanitizer.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "shared_build.sh: $1"; exit 1; }
for s in scripts/demo.sh scripts/test.sh; do
  grep -q "scripts/configure.sh" "$s" || fail "$s does not configure through scripts/configure.sh"
  ! grep -nE '^[^#]*cmake +(-S|-B|\.)' "$s" || fail "$s runs its own cmake configure"
done
grep -q 'scripts/configure.sh build none' scripts/demo.sh || fail "demo.sh: not build/ without a sanitizer"
grep -q 'build=build$' scripts/test.sh || fail "test.sh: its plain build is not build/"
echo "shared_build.sh: pass"
