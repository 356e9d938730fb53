#!/usr/bin/env bash
# The weight path alone, every role a real process on loopback: a weight store, two relays, a
# publisher serving a safetensors file, and a pull that writes the file back, compared byte for
# byte. (scripts/demo.sh runs the default job, which uses the same path for every version.)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DSLUICE_BUILD_TESTS=ON >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

echo
echo "sluice weight-path demo"
echo
./build/sluice version
echo

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
wait_for() {  # wait_for FILE PATTERN: up to 20 s
  for _ in $(seq 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "demo: timed out waiting for '$2' in $1:"; cat "$1"; exit 1
}

# A checkpoint of about 24 MiB in the safetensors format, written per the format by hand.
python3 - "$work/model.safetensors" <<'PY'
import json, os, struct, sys
shapes = {"embed.weight": [4096, 1024], "block0.mlp.weight": [1024, 2048], "head.bias": [4096]}
header, blobs, off = {"__metadata__": {"source": "sluice demo"}}, [], 0
for name, shape in shapes.items():
    n = 1
    for d in shape: n *= d
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n]}
    blobs.append(os.urandom(4 * n)); off += 4 * n
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
echo "checkpoint: $(stat -c %s "$work/model.safetensors") bytes"

# The job's keys: every role authenticates its peers (CURVE); files mode 0600.
./build/sluice keys "$work/keys" --relays 3 >/dev/null
keys="$work/keys"
./build/sluice weightstore --set store.listen='tcp://127.0.0.1:*' \
  --set store.security.key_file="$keys/weightstore.key" \
  --set store.security.members_file="$keys/members.json" >"$work/store.log" 2>&1 &
pids+=($!)
wait_for "$work/store.log" '^endpoint '
store=$(sed -n 's/^endpoint //p' "$work/store.log")
echo "weight store on $store"

for r in relay-1 relay-2; do
  ./build/sluice relay --set relay.store="$store" --set relay.relay_id=$r --set relay.model=demo \
    --set relay.security.key_file="$keys/$r.key" --set relay.security.members_file="$keys/members.json" \
    >"$work/$r.log" 2>&1 &
  pids+=($!)
  wait_for "$work/$r.log" "^relay $r"
done
echo "relays relay-1 and relay-2 joined the chain"

./build/sluice publish --keys "$keys" --store "$store" --safetensors "$work/model.safetensors" --model demo \
  --version 1 --chunk 1MiB >"$work/publish.log" 2>&1 &
pids+=($!)
wait_for "$work/publish.log" '^published '
grep '^published ' "$work/publish.log"
wait_for "$work/relay-2.log" 'holds demo@1'
echo "both relays hold demo@1"

./build/sluice pull --keys "$keys" --store "$store" --model demo --out "$work/pulled.safetensors" 2>/dev/null
cmp "$work/model.safetensors" "$work/pulled.safetensors"
echo "pulled file equals the published checkpoint byte for byte"
echo
echo "a ping to a port where nothing listens ends with a clear error within its timeout:"
./build/sluice ping tcp://127.0.0.1:1 --timeout-ms 300 --keys "$keys" || true
