#!/bin/bash
# A holder outlives readers that are SIGKILLed mid-read.
#
#   reader_death.sh SLUICE [KILLS] [BYTES] [TLS]
#
# Starts `sluice transfer-source` serving BYTES (default 256MiB) in 1 MiB chunks over UCX_TLS
# (default tcp; `default` leaves UCX_TLS unset) on loopback, then KILLS times (default 30) starts a `transfer-read` of the whole
# region, lets it get part-way (a random 50-400 ms after it connected) and SIGKILLs it. After
# each kill it checks that the source is still running. At the end a last reader reads the whole
# region and compares every byte with the seeded pattern.
#
# STALL=1 (the default) stops the source (SIGSTOP) just before the kill and continues it just
# after: a source that is not scheduled while its reader dies, as on a loaded host. STALL=0 kills
# without it.
#
# Prints one line per kill and a summary "source died in K of N kills" (K counts the runs that
# brought it down; the script restarts it to go on), and the holder's stderr around each death
# (UCX's "Caught signal" / "Fatal:" / assertion lines). Exit status 0 only when the source
# survived every kill and the last read was complete and correct.
#
# Extra environment (UCX_*, SLUICE_*) passes through to every process, so UCX settings can be
# compared: `UCX_TCP_KEEPINTVL=... reader_death.sh build/sluice 30`. VIA=ucx-get makes source and
# readers use UCX's GET over tcp instead of chunk streams (the path that aborted holders).
set -u
sluice=${1:?usage: reader_death.sh SLUICE [KILLS] [BYTES] [TLS]}
kills=${2:-30}
bytes=${3:-256MiB}
tls=${4:-tcp}
seed=4242
get_flag=
[ "${VIA:-stream}" = ucx-get ] && get_flag=--ucx-get
if [ "$tls" = default ]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
tmp=$(mktemp -d)
trap 'kill -9 $src_pid 2>/dev/null; rm -rf "$tmp"' EXIT

start_source() {
  : >"$tmp/source.out"
  "$sluice" --log-level warn transfer-source --bytes "$bytes" --chunk "${CHUNK:-1MiB}" --seed $seed $get_flag \
    --listen 'tcp://127.0.0.1:*' >"$tmp/source.out" 2>>"$tmp/source.err" &
  src_pid=$!
  for _ in $(seq 1 300); do
    ep=$(sed -n 's/^endpoint //p' "$tmp/source.out")
    [ -n "$ep" ] && return 0
    kill -0 $src_pid 2>/dev/null || break
    sleep 0.1
  done
  echo "transfer-source did not start:"
  cat "$tmp/source.err"
  exit 1
}

start_source
died=0
for i in $(seq 1 "$kills"); do
  rds=
  rm -f "$tmp"/reader*.err
  for r in $(seq 1 "${READERS:-1}"); do
    # debug: the reader logs its progress, which tells when its GETs are flowing.
    "$sluice" --log-level debug transfer-read --from "$ep" --repeat 1000 $get_flag ${READ_ARGS:-} >/dev/null \
      2>"$tmp/reader$r.err" &
    rds="$rds $!"
  done
  # Mid-read: wait until every reader has had a chunk of the timed read (after its warm-up
  # chunk), then a random 0-300 ms more.
  for _ in $(seq 1 600); do
    n=$(grep -l 'transfer-read: .* of .* ([1-9][0-9]* of' "$tmp"/reader*.err 2>/dev/null | wc -l)
    [ "$n" -ge "${READERS:-1}" ] && break
    sleep 0.05
  done
  [ "$n" -ge "${READERS:-1}" ] || echo "kill $i: the readers never started reading"
  sleep "$(awk -v r=$RANDOM 'BEGIN { print (r % 300) / 1000 }')"
  # A loaded host, made certain: the holder is not scheduled (SIGSTOP) while its reader sends
  # GET requests and dies, so it wakes to requests from a reader that is gone. Without the
  # stall, 0 of 132 kills brought the source down here; with it, most do (UCX 1.13.1).
  [ "${STALL:-1}" = 1 ] && kill -STOP $src_pid
  sleep 0.1
  kill -9 $rds 2>/dev/null
  wait $rds 2>/dev/null
  [ "${STALL:-1}" = 1 ] && kill -CONT $src_pid
  sleep 0.3  # the holder notices the closed socket
  if kill -0 $src_pid 2>/dev/null; then
    echo "kill $i: source alive"
  else
    wait $src_pid
    rc=$?
    died=$((died + 1))
    echo "kill $i: SOURCE DIED (exit status $rc); its stderr:"
    sed 's/^/  | /' "$tmp/source.err" | tail -40
    : >"$tmp/source.err"
    start_source
  fi
done
echo "source died in $died of $kills kills (UCX_TLS=$tls, $bytes in 1 MiB chunks, ${get_flag:-chunk streams})"

out=$("$sluice" --log-level warn transfer-read --from "$ep" --verify-seed $seed $get_flag 2>&1)
rc=$?
echo "final read: $out"
if [ $rc -ne 0 ] || ! echo "$out" | grep -q '"bytes_equal":true'; then
  echo "the final read from the source was not complete and correct"
  exit 1
fi
if grep -Eq 'Caught signal|Fatal|Assertion' "$tmp/source.err"; then
  echo "the source logged:"
  cat "$tmp/source.err"
fi
[ $died -eq 0 ]
