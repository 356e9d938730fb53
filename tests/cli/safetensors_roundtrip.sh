#!/usr/bin/env bash
# A safetensors checkpoint goes through a running weight store byte for byte:
# `sluice weightstore`, `sluice publish --safetensors`, `sluice pull --out`, then cmp.
# Truncated files and headers whose offsets lie are refused with a clear error.
set -euo pipefail
sluice=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A checkpoint written by hand per the format: three tensors, metadata, header padded with
# spaces, 150 KiB of data so that it spans many 4 KiB chunks.
python3 - "$work/in.safetensors" <<'PY'
import json, struct, sys, random
random.seed(7)
tensors = [("embed", "F32", [300, 128]), ("ln.bias", "BF16", [128]), ("step", "I64", [])]
header, blobs, off = {"__metadata__": {"format": "pt", "note": "sluice test"}}, [], 0
for name, dtype, shape in tensors:
    n = 1
    for d in shape: n *= d
    size = n * {"F32": 4, "BF16": 2, "I64": 8}[dtype]
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
    blobs.append(bytes(random.getrandbits(8) for _ in range(size)))
    off += size
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY

# The job's keys: the store admits only their members; publish acts as the actor, pull as the
# operator.
"$sluice" keys "$work/keys" >/dev/null
"$sluice" --log-level warn weightstore --set store.listen='tcp://127.0.0.1:*' \
  --set store.security.key_file="$work/keys/weightstore.key" \
  --set store.security.members_file="$work/keys/members.json" >"$work/store.out" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q '^endpoint ' "$work/store.out" && break; sleep 0.05; done
store=$(sed -n 's/^endpoint //p' "$work/store.out")
[ -n "$store" ] || { echo "store did not start"; cat "$work/store.out"; exit 1; }

"$sluice" --log-level warn publish --keys "$work/keys" --store "$store" --safetensors "$work/in.safetensors" \
  --model ckpt --version 1 --chunk 4KiB >"$work/pub.out" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q '^published ' "$work/pub.out" && break; sleep 0.05; done
grep -q '^published ckpt@1' "$work/pub.out" || { echo "publish failed"; cat "$work/pub.out"; exit 1; }

"$sluice" --log-level warn pull --keys "$work/keys" --store "$store" --model ckpt --out "$work/out.safetensors"
cmp "$work/in.safetensors" "$work/out.safetensors"
echo "ok: pulled bytes equal the published file ($(stat -c %s "$work/in.safetensors") bytes)"

# A truncated file is refused.
head -c 1000 "$work/in.safetensors" >"$work/truncated.safetensors"
if "$sluice" --log-level warn publish --keys "$work/keys" --store "$store" --safetensors "$work/truncated.safetensors" \
     --version 2 >"$work/bad.out" 2>&1; then
  echo "a truncated file was published"; exit 1
fi
grep -Eq 'beyond|truncated|short|past the end' "$work/bad.out" || { cat "$work/bad.out"; exit 1; }
echo "ok: truncated file refused: $(tail -1 "$work/bad.out")"

# A header whose offsets lie (one tensor claims more bytes than its shape needs) is refused.
python3 - "$work/in.safetensors" "$work/lying.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
b, e = h["ln.bias"]["data_offsets"]
h["ln.bias"]["data_offsets"] = [b, e + 2]
h["step"]["data_offsets"] = [h["step"]["data_offsets"][0] + 2, h["step"]["data_offsets"][1]]
raw = json.dumps(h).encode(); raw += b" " * (-len(raw) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
PY
if "$sluice" --log-level warn publish --keys "$work/keys" --store "$store" --safetensors "$work/lying.safetensors" \
     --version 3 >"$work/lie.out" 2>&1; then
  echo "a lying header was published"; exit 1
fi
grep -q 'ln.bias' "$work/lie.out" || { cat "$work/lie.out"; exit 1; }
echo "ok: lying header refused: $(tail -1 "$work/lie.out")"
