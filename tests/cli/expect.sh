#!/bin/sh
# Runs a command and checks both its exit status and its output (stdout and stderr together).
# usage: expect.sh STATUS REGEX COMMAND [ARGS...]
#   STATUS: the exact exit status, or "nonzero"
set -u
want=$1; pattern=$2; shift 2
out=$("$@" 2>&1); got=$?
if [ "$want" = nonzero ]; then
  [ "$got" -ne 0 ] || { echo "expected a non-zero exit, got 0; output:"; echo "$out"; exit 1; }
else
  [ "$got" -eq "$want" ] || { echo "expected exit $want, got $got; output:"; echo "$out"; exit 1; }
fi
printf '%s\n' "$out" | grep -Eq -- "$pattern" || {
  echo "output does not match /$pattern/:"; echo "$out"; exit 1; }
echo "ok: exit $got, output matches /$pattern/"
