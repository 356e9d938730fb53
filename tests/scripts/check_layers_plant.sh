#!/usr/bin/env bash
# scripts/check_layers.sh passes on a copy of the source tree, then fails on each of three
# back-includes planted in copies of it: a file in src/core including src/wire (folders), a
# lower file of src/core including a higher one (modules inside a folder), and a header
# including itself.
#   tests/scripts/check_layers_plant.sh ROOT
set -euo pipefail
root=${1:?usage: check_layers_plant.sh ROOT}
check="$root/scripts/check_layers.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

copy() {  # the source folders check_layers reads, without build trees
  local to=$1
  mkdir -p "$to"
  (cd "$root" && find . -path ./.git -prune -o -path './build*' -prune -o -path ./tests -prune \
    -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print0 |
    tar --null -T - -cf -) | tar -C "$to" -xf -
}

expect_fail() {  # NAME PATTERN: check_layers on $work/NAME exits 1 and prints PATTERN
  local name=$1 pattern=$2 out rc=0
  out=$(python3 "$check" "$work/$name" 2>&1) || rc=$?
  if [ $rc -ne 1 ]; then
    echo "FAIL: $name: check_layers exited $rc, expected 1"; echo "$out"; exit 1
  fi
  if ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: output lacks '$pattern'"; echo "$out"; exit 1
  fi
  echo "ok: $name refused: $(grep -m1 -- "$pattern" <<<"$out")"
}

copy "$work/clean"
python3 "$check" "$work/clean" >/dev/null || { echo "FAIL: the unplanted copy has a circle"; exit 1; }
echo "ok: the copy as it is passes"

# core includes wire: folders in a circle.
copy "$work/folders"
sed -i '1i #include "wire/messaging.hpp"' "$work/folders/src/core/units.cpp"
expect_fail folders "folders in a circle: .*src/core.*src/wire"

# Inside one folder: core/log.hpp includes core/status.hpp, so status.cpp including log.hpp runs
# back up (no file includes itself; the modules log and status are in a circle).
copy "$work/modules"
sed -i '1i #include "core/log.hpp"' "$work/modules/src/core/status.cpp"
expect_fail modules "modules in a circle.*src/core/log, src/core/status"

# A header that includes itself.
copy "$work/self"
sed -i '1i #include "core/status.hpp"' "$work/self/src/core/status.hpp"
expect_fail self "files in a circle: src/core/status.hpp"
echo "check_layers_plant: all plants refused"
