#!/usr/bin/env bash
# emuhosts.sh datacenter mode: 2 datacenters of 2 hosts come up, hosts reach each other
# across both, each datacenter's WAN counters grow by what crosses between datacenters and stay put
# for traffic inside one, and everything is removed at the end. Flat mode still comes up.
# Needs root, network namespaces and python3: exit 77 (skipped) without them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
emu="$here/../../scripts/emuhosts.sh"
# shellcheck disable=SC1091  # the probe beside this script
. "$here/netns_probe.sh"
command -v python3 >/dev/null 2>&1 || { echo "skipped: needs python3"; exit 77; }

prefix="sluice-dct$$-"
cleanup() { "$emu" down --prefix "$prefix" >/dev/null 2>&1 || true; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$emu" up --dcs 2 --hosts-per-dc 2 --lan-rate 1gbit --wan-rate 200mbit --prefix "$prefix"
"$emu" status --prefix "$prefix"
[ "$("$emu" status --prefix "$prefix" | grep -c '  dc 1$')" -eq 2 ] || fail "hosts 2 and 3 are not in dc 1"
[ "$("$emu" status --prefix "$prefix" | grep -c 'rate 200Mbit')" -eq 4 ] || fail "WAN links not limited both ways"

# Sends BYTES from host FROM to host TO over TCP; prints what arrived.
send() {
  local from=$1 to=$2 bytes=$3 port=$((5400 + $2))
  "$emu" exec --prefix "$prefix" "$to" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print(n)' "$port" > "/tmp/$prefix.got" &
  local listener=$!
  for _ in $(seq 50); do
    "$emu" exec --prefix "$prefix" "$from" python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"x" * int(sys.argv[3])); s.close()' "$("$emu" addr "$to")" "$port" "$bytes" 2>/dev/null && break
    sleep 0.1
  done
  wait "$listener"
  cat "/tmp/$prefix.got"; rm -f "/tmp/$prefix.got"
}

# dc D's egress and ingress bytes so far.
wan() { "$emu" wan --prefix "$prefix" | awk -v d="$1" '$1 == "dc" && $2 == d {print $4, $6}'; }

# Every host reaches the trainer's host 0 and back, and the two datacenters' other hosts reach
# each other.
for pair in "1 0" "2 0" "3 0" "0 1" "0 2" "0 3" "1 2" "3 1"; do
  read -r a b <<<"$pair"
  [ "$(send "$a" "$b" 1000)" = 1000 ] || fail "host $a cannot reach host $b"
done

mib=$((1 << 20))
read -r e0 i0 <<<"$(wan 0)"; read -r e1 i1 <<<"$(wan 1)"
# Inside dc 0: the WAN carries (almost) nothing.
[ "$(send 0 1 $((4 * mib)))" = $((4 * mib)) ] || fail "4 MiB inside dc 0 did not arrive"
read -r E0 I0 <<<"$(wan 0)"; read -r E1 I1 <<<"$(wan 1)"
echo "inside dc 0: dc0 out $((E0 - e0)) in $((I0 - i0)), dc1 out $((E1 - e1)) in $((I1 - i1))"
for d in $((E0 - e0)) $((I0 - i0)) $((E1 - e1)) $((I1 - i1)); do
  [ "$d" -lt $((mib / 16)) ] || fail "traffic inside dc 0 crossed a WAN link ($d bytes)"
done
# dc 0 to dc 1: dc 0's egress and dc 1's ingress each carry it once; the way back only acks.
[ "$(send 0 3 $((4 * mib)))" = $((4 * mib)) ] || fail "4 MiB from dc 0 to dc 1 did not arrive"
read -r F0 J0 <<<"$(wan 0)"; read -r F1 J1 <<<"$(wan 1)"
echo "dc 0 to dc 1: dc0 out $((F0 - E0)) in $((J0 - I0)), dc1 out $((F1 - E1)) in $((J1 - I1))"
[ $((F0 - E0)) -ge $((4 * mib)) ] || fail "dc 0's WAN egress did not count 4 MiB"
[ $((J1 - I1)) -ge $((4 * mib)) ] || fail "dc 1's WAN ingress did not count 4 MiB"
[ $((F0 - E0)) -lt $((5 * mib)) ] || fail "dc 0's WAN egress counted more than 5 MiB"
[ $((J0 - I0)) -lt $((mib / 2)) ] || fail "dc 0's WAN ingress counted more than acks"

"$emu" down --prefix "$prefix"
[ -z "$(ip netns list | awk '{print $1}' | grep -E "^${prefix}([0-9]+|hub)\$" || true)" ] || fail "namespaces left behind"

# The flat layout is unchanged, and has no WAN to read.
"$emu" up 2 --rate 500mbit --prefix "$prefix" >/dev/null
[ "$(send 0 1 1000)" = 1000 ] || fail "flat: host 0 cannot reach host 1"
if "$emu" wan --prefix "$prefix" 2>/dev/null; then fail "flat: wan should fail"; fi
"$emu" down --prefix "$prefix"
echo "PASS"
