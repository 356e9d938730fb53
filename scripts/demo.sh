#!/usr/bin/env bash
# Installs what is missing, builds, and runs the most complete thing sluice can do today.
#
# The default job (a real GRPO run on the built-in reference model, every role a process) is not
# built yet. Until it is, this demo starts a real sluice messaging server, pings it from the
# sluice command line, and stops it with SIGTERM, so that what exists can be seen working.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DSLUICE_BUILD_TESTS=ON >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

echo
echo "sluice demo: the default GRPO job is not built yet; showing the control plane instead."
echo
./build/sluice version
echo
log=$(mktemp)
./build/tests/sluice_test_echo_server tcp://127.0.0.1:* >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q '^endpoint ' "$log" && break; sleep 0.05; done
endpoint=$(sed -n 's/^endpoint //p' "$log")
[ -n "$endpoint" ] || { echo "demo: the server did not start:"; cat "$log"; exit 1; }
echo "a server is listening on $endpoint; pinging it three times:"
./build/sluice ping "$endpoint" --count 3
echo
echo "a ping to a port where nothing listens ends with a clear error within its timeout:"
./build/sluice ping tcp://127.0.0.1:1 --timeout-ms 300 || true
echo
kill -TERM $pid
wait $pid || true
echo "server after SIGTERM: $(grep shutdown "$log" || echo 'no orderly shutdown seen')"
