#!/usr/bin/env bash
# Self-check for emuhosts.sh: brings up 2 hosts with a rate limit, measures one
# TCP stream from host 0 to host 1 for about 2 s (up to 3 times, best counts),
# and checks that it lands between 60% and 110% of the rate; then checks that
# without a limit the same
# stream is much faster (at least 2x), i.e. that the limit is what held it.
#
#   scripts/emuhosts_check.sh [RATE]     RATE in tc syntax, default 200mbit
#
# Needs only bash, ip, tc and python3. Exit status: 0 pass, 1 fail,
# 77 skipped (not root, no network namespaces, no python3).
# Always tears its hosts down; finishes within 60 s.
set -euo pipefail

case "${1:-}" in -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -le 1 ] || { echo "emuhosts_check: at most one argument, the rate (see --help)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
emu="$here/emuhosts.sh"
rate=${1:-200mbit}
# The pass band is worked out in Mbit/s, so only bit rates are accepted here.
rate_mbit=$(awk -v r="$rate" 'BEGIN {
  if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit
  n = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
  if (u == "kbit") print n / 1000; else if (u == "mbit") print n; else if (u == "gbit") print n * 1000
}')
[ -n "$rate_mbit" ] || { echo "emuhosts_check: give the rate as kbit, mbit or gbit" >&2; exit 2; }

# Own prefix per run, so the check neither clobbers hosts someone has up with
# the default prefix nor collides with a parallel run.
prefix="sluice-chk$$-"
export EMUHOSTS_PREFIX=$prefix
port=5201
seconds=2

skip() { echo "skipped: $*"; exit 77; }

[ "$EUID" -eq 0 ] || skip "needs root for network namespaces"
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then skip "ip/tc (iproute2) not installed"; fi
command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
probe="${prefix}probe"
if ! ip netns add "$probe" 2>/dev/null; then skip "cannot create network namespaces here"; fi
ip netns del "$probe"

# shellcheck disable=SC2317  # called from the traps
cleanup() { "$emu" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 1' INT TERM
# Every step below is bounded (two transfers of at most 12 s each, bringing
# hosts up and down in a few seconds), so the run ends well inside 60 s. This
# is only a backstop for an ip/tc call that hangs: bash acts on the TERM once
# that call returns, and the EXIT trap still tears down. The sleep's output
# goes to /dev/null so that, left behind, it does not hold a caller's pipe open.
( sleep 50 >/dev/null 2>&1; echo "emuhosts_check: overall time limit reached" >&2; kill -TERM $$ ) &
watchdog=$!
trap 'kill "$watchdog" 2>/dev/null || true; cleanup' EXIT

# Receiver: accepts one connection and reports Mbit/s over what arrived after
# a short warm-up, so that slow start and the initially full token bucket do
# not count. Everything it waits on has a timeout.
receiver=$(cat <<'PY'
import socket, sys, time
host, port, warmup = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, port))
srv.listen(1)
srv.settimeout(8)
conn, _ = srv.accept()
conn.settimeout(5)
buf = bytearray(1 << 22)
view = memoryview(buf)
first = None
counted = 0
start = end = None
while True:
    n = conn.recv_into(view)
    if n == 0:
        break
    now = time.monotonic()
    if first is None:
        first = now
    if now - first >= warmup:
        if start is None:
            start = now
        else:
            counted += n
        end = now
if start is None or end <= start:
    sys.exit("receiver: stream ended before the warm-up did")
print("%.1f" % (counted * 8 / (end - start) / 1e6))
PY
)

# Sender: connects (retrying while the receiver starts) and writes for the
# given time, then closes.
sender=$(cat <<'PY'
import socket, sys, time
host, port, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + 5
while True:
    try:
        s = socket.create_connection((host, port), timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
s.settimeout(5)
block = b"\0" * (1 << 20)
stop = time.monotonic() + duration
while time.monotonic() < stop:
    s.sendall(block)
s.close()
PY
)

# Prints the measured Mbit/s of one stream from host 0 to host 1.
measure() {
  local out rc=0 warmup=0.3
  out=$(mktemp)
  timeout 12 "$emu" exec 1 python3 -c "$receiver" "$("$emu" addr 1)" "$port" "$warmup" >"$out" &
  local rpid=$!
  timeout 12 "$emu" exec 0 python3 -c "$sender" "$("$emu" addr 1)" "$port" \
    "$(awk -v s="$seconds" -v w="$warmup" 'BEGIN{print s + w}')" || rc=$?
  wait "$rpid" || rc=$?
  if [ "$rc" -ne 0 ]; then rm -f "$out"; echo "emuhosts_check: transfer failed (status $rc)" >&2; return 1; fi
  cat "$out"; rm -f "$out"
}

fail=0
"$emu" up 2 --rate "$rate" >/dev/null
low=$(awk -v r="$rate_mbit" 'BEGIN{print r * 0.6}')
high=$(awk -v r="$rate_mbit" 'BEGIN{print r * 1.1}')
# A busy or descheduled host only ever lowers a stream's rate (seen here: 55 and 85 Mbit/s at
# 200mbit on a 2-core VM, between runs at 154-167), so up to three tries are made and the best
# counts; a limit that lets too much through fails on the first try already.
limited=0
for try in 1 2 3; do
  m=$(measure) || exit 1
  limited=$(awk -v a="$limited" -v b="$m" 'BEGIN{print (b > a) ? b : a}')
  if awk -v m="$limited" -v lo="$low" 'BEGIN{exit !(m >= lo)}'; then break; fi
  echo "try $try: $m Mbit/s, below $low; measuring again" >&2
done
if awk -v m="$limited" -v lo="$low" -v hi="$high" 'BEGIN{exit !(m >= lo && m <= hi)}'; then
  verdict=ok
else
  verdict="FAIL (want $low..$high)"; fail=1
fi
echo "limited to $rate: $limited Mbit/s  $verdict"

"$emu" up 2 >/dev/null
unlimited=$(measure) || exit 1
if awk -v m="$unlimited" -v r="$rate_mbit" 'BEGIN{exit !(m >= 2 * r)}'; then
  verdict=ok
else
  verdict="FAIL (want at least $(awk -v r="$rate_mbit" 'BEGIN{print 2 * r}'))"; fail=1
fi
echo "unlimited:        $unlimited Mbit/s  $verdict"

"$emu" down
if ip netns list | awk '{print $1}' | grep -q "^$prefix"; then
  echo "emuhosts_check: namespaces left after down" >&2; fail=1
fi

[ "$fail" -eq 0 ] && echo "emuhosts_check: pass" || echo "emuhosts_check: FAIL"
exit "$fail"
