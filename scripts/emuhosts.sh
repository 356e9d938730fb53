#!/usr/bin/env bash
# Emulated hosts on this one Linux machine, for transfer benchmarks.
#
#   emuhosts.sh up N [--rate RATE] [--host-rate I=RATE]... [--burst BYTES]
#                    [--latency TIME] [--prefix P]
#       Creates hosts P0..P{N-1} (network namespaces) joined by a bridge in
#       namespace Phub. Host I has address 198.18.0.(I+1)/24 on its eth0.
#       --rate limits every host's link, both directions, with tbf (tc syntax:
#       500mbit, 1gbit, 2.5gbit). --host-rate I=RATE overrides host I only
#       (RATE "none" leaves it unlimited), e.g. a reader with a fatter link.
#       --burst/--latency override the tbf bucket and queue (the defaults
#       are explained at tbf_params in this script).
#       Existing hosts with the same prefix are torn down first.
#   emuhosts.sh up --dcs K --hosts-per-dc N [--lan-rate RATE] [--wan-rate RATE]
#                    [--host-rate I=RATE]... [--burst BYTES] [--latency TIME] [--prefix P]
#       Datacenters: K*N hosts, host I in datacenter I/N (host 0, the trainer's, in
#       datacenter 0), addresses as above. Each datacenter has its own bridge in
#       Phub; its hosts' links run at the LAN rate (--lan-rate, or --rate). Each
#       datacenter reaches the others through one WAN link (a veth pair between its
#       bridge and a WAN bridge, tbf both ways at --wan-rate), so all traffic between
#       two datacenters crosses exactly their two WAN links.
#   emuhosts.sh wan [--prefix P]       per datacenter, the bytes its WAN link has
#                                      carried so far: "dc D egress BYTES ingress BYTES"
#   emuhosts.sh down [--prefix P]      removes P0.., Phub (and stops processes in them)
#   emuhosts.sh exec [--prefix P] I CMD...   runs CMD inside host I, status passed through
#   emuhosts.sh addr I                 prints host I's address
#   emuhosts.sh status [--prefix P]    lists hosts, addresses and tc qdiscs
#                                      (out: host to bridge, in: bridge to host)
#
# The default prefix is sluice-h, or $EMUHOSTS_PREFIX when set.
# Exit status: 0 ok, 1 failure (no root, no ip/tc, ...), 2 bad usage.
set -euo pipefail

prog=${0##*/}
prefix=${EMUHOSTS_PREFIX:-sluice-h}

# 198.18.0.0/15 is reserved for benchmarking (RFC 2544), so these addresses can
# never collide with a real network, and with no default route in the hosts
# nothing they send can leave the emulated /24.
subnet=198.18.0
max_hosts=254

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$prog: $*" >&2; exit 1; }
usage_error() { echo "$prog: $*" >&2; echo "$prog: see '$prog --help'" >&2; exit 2; }

need_tools() {
  local t
  for t in ip tc; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found (install iproute2)"
  done
}

need_root() {
  [ "$EUID" -eq 0 ] || die "needs root (network namespaces, veth pairs and tc need CAP_NET_ADMIN/CAP_SYS_ADMIN)"
}

check_prefix() {
  # The prefix becomes a file name under /run/netns and a regex below, so keep
  # it to characters that are harmless in both.
  [[ $1 =~ ^[A-Za-z0-9_-]{1,40}$ ]] || usage_error "bad prefix '$1' (letters, digits, '_' and '-', at most 40)"
}

# The options of down, status, wan and exec: --prefix (sets $prefix) and --help. Leaves the
# first other argument and all after it in the array `rest`.
take_prefix() {
  rest=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --prefix) [ $# -ge 2 ] || usage_error "--prefix needs a value"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#*=}; shift ;;
      -h|--help) usage; exit 0 ;;
      *) rest=("$@"); return ;;
    esac
  done
}

check_index() {
  if ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -ge "$max_hosts" ]; then
    usage_error "bad host index '$1' (0..$((max_hosts - 1)))"
  fi
}

host_addr() { echo "$subnet.$(($1 + 1))"; }

# Names of our namespaces only: P<digits> and Phub. A bare "starts with P"
# match could delete someone else's namespace that happens to share the prefix.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${1}([0-9]+|hub)\$" || true
}

# Converts a tc rate ("200mbit", "1.5gbit", "10mbps", "1000000") to bytes per
# second, which the burst and queue sizes are derived from. Prints nothing for
# a rate it cannot read.
rate_to_bytes() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit
    n = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
    m["bit"] = 1/8;       m["bps"] = 1;      m[""] = 1
    m["kbit"] = 1e3/8;    m["mbit"] = 1e6/8; m["gbit"] = 1e9/8; m["tbit"] = 1e12/8
    m["kibit"] = 1024/8;  m["mibit"] = 1048576/8; m["gibit"] = 1073741824/8
    m["kbps"] = 1e3;      m["mbps"] = 1e6;   m["gbps"] = 1e9
    m["kibps"] = 1024;    m["mibps"] = 1048576; m["gibps"] = 1073741824
    if (!(u in m)) exit
    printf "%d\n", n * m[u]
  }'
}

# tbf parameters for a rate, as "burst latency".
#
# burst (bucket size): the most that may leave back to back. It must hold at
# least one GSO/TSO super-packet (veth passes segments of up to 64 KiB; a
# smaller bucket makes tbf split or drop them: at 2gbit a 64 KiB bucket gave
# 1.1-1.8 Gbit/s with thousands of retransmits, a 10 KiB one ~0.7 Gbit/s).
# It must also cover the longest time the qdisc can go unserviced: tokens
# that arrive while the bucket is full are thrown away, so a late watchdog
# timer, a busy softirq or (in a VM) a descheduled vCPU turns directly into
# lost rate. A 250 Hz tick is 4 ms, and a 4 ms bucket reached the rate on a
# quiet machine, but while the VM's vCPUs were being stolen it lost about
# 8-15% more than a 10 ms one (medians of 8 interleaved runs at 1 and 2gbit). So: 10 ms worth of the rate, never less than 128 KiB
# (250 KB at 200mbit, 1.25 MB at 1gbit, 2.5 MB at 2gbit). The price is that
# a flow may start with 10 ms at full veth speed, which is noise against
# measurements of a second or more.
#
# latency (the longest a packet may queue, which sets the queue length): long
# enough that the tbf on the receiving side of the bridge can take a full
# bucket from the sender's side, or two senders converging on one reader,
# without dropping; short enough that a queue filled by TCP adds at most
# 20 ms to the RTT.
tbf_params() {
  local bytes=$1 burst
  burst=$((bytes / 100))
  [ "$burst" -ge 131072 ] || burst=131072
  echo "${burst_override:-$burst} ${latency_override:-20ms}"
}

# Sends TERM to the processes still inside a namespace, waits up to 5 s, then
# KILLs what is left: a leftover reader would keep the namespace alive after
# its name is gone and hold on to its port.
stop_processes() {
  local ns=$1 pids i
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 50); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

teardown() {
  local p=$1 ns
  for ns in $(our_namespaces "$p"); do
    stop_processes "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  [ -z "$(our_namespaces "$p")" ] || die "could not remove: $(our_namespaces "$p" | tr '\n' ' ')"
}

# Waits (at most 5 s) until host I's eth0 reports carrier: the bridge port has
# no STP, so once the link is up it forwards at once.
wait_link_up() {
  local ns=$1 dev=$2 i
  for i in $(seq 50); do
    ip -n "$ns" -o link show dev "$dev" 2>/dev/null | grep -q 'LOWER_UP' && return 0
    sleep 0.1
  done
  die "$dev in $ns did not come up within 5 s"
}

quiet_ipv6() {
  # IPv6 would send router solicitations and DAD probes on every link; turned
  # off so that a benchmark's traffic is the only traffic. Best effort: a
  # kernel without IPv6 has nothing to turn off.
  # shellcheck disable=SC2016  # $f is for the inner shell
  ip netns exec "$1" sh -c 'for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do echo 1 > "$f"; done' 2>/dev/null || true
}

apply_rate() {
  local ns=$1 dev=$2 rate=$3 bytes params
  bytes=$(rate_to_bytes "$rate")
  if [ -z "$bytes" ] || [ "$bytes" -le 0 ]; then usage_error "bad rate '$rate' (tc syntax, e.g. 500mbit, 1gbit)"; fi
  read -r -a params <<<"$(tbf_params "$bytes")"
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "${params[0]}" latency "${params[1]}" \
    || die "tc tbf on $dev in $ns failed (rate $rate burst ${params[0]} latency ${params[1]})"
}

do_up() {
  local n=$1 hub="${prefix}hub" i ns rate
  teardown "$prefix"
  # Leave nothing half built behind if any step fails.
  trap 'teardown "$prefix" >/dev/null 2>&1 || true' EXIT

  ip netns add "$hub" || die "cannot create network namespace $hub"
  ip -n "$hub" link set lo up
  quiet_ipv6 "$hub"
  # Flat: one bridge, br0. Datacenters: br<D> per datacenter, joined through brw.
  local bridges=1 d
  [ "$dcs" -eq 0 ] || bridges=$dcs
  for ((d = 0; d < bridges; d++)); do
    ip -n "$hub" link add "br$d" type bridge stp_state 0
    ip -n "$hub" link set "br$d" up
  done
  if [ "$dcs" -gt 0 ]; then
    ip -n "$hub" link add brw type bridge stp_state 0
    ip -n "$hub" link set brw up
    for ((d = 0; d < dcs; d++)); do
      # u<D> sits on the datacenter's bridge, w<D> on the WAN bridge: what u<D> sends is the
      # datacenter's egress, what w<D> sends its ingress, each limited by its own tbf.
      ip -n "$hub" link add "u$d" type veth peer name "w$d"
      ip -n "$hub" link set "u$d" master "br$d"
      ip -n "$hub" link set "w$d" master brw
      ip -n "$hub" link set "u$d" up
      ip -n "$hub" link set "w$d" up
      if [ -n "$wan_rate" ] && [ "$wan_rate" != none ]; then
        apply_rate "$hub" "u$d" "$wan_rate"
        apply_rate "$hub" "w$d" "$wan_rate"
      fi
    done
  fi

  for ((i = 0; i < n; i++)); do
    ns="${prefix}$i"
    ip netns add "$ns" || die "cannot create network namespace $ns"
    ip -n "$ns" link set lo up
    quiet_ipv6 "$ns"
    # Created directly in the two namespaces, so nothing ever appears in the
    # machine's own namespace and interface names cannot clash with its ones.
    ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$hub"
    d=0
    [ "$dcs" -eq 0 ] || d=$((i / per_dc))
    ip -n "$hub" link set "h$i" master "br$d"
    ip -n "$hub" link set "h$i" up
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up

    rate=${host_rates[$i]:-$default_rate}
    if [ -n "$rate" ] && [ "$rate" != none ]; then
      apply_rate "$ns" eth0 "$rate"    # host -> bridge
      apply_rate "$hub" "h$i" "$rate"  # bridge -> host
    fi
  done

  for ((i = 0; i < n; i++)); do wait_link_up "${prefix}$i" eth0; done
  trap - EXIT
  if [ "$dcs" -gt 0 ]; then
    echo "$prog: up $dcs datacenter(s) of $per_dc host(s) ${prefix}0..${prefix}$((n - 1)), LAN ${default_rate:-unlimited}, WAN ${wan_rate:-unlimited}"
  else
    echo "$prog: up $n host(s) ${prefix}0..${prefix}$((n - 1)), rate ${default_rate:-unlimited}"
  fi
}

# One line per datacenter: the bytes its WAN link has carried out of it and into it so far
# (the veths' counters, so every byte that crossed counts, headers and retransmits included).
do_wan() {
  local hub="${prefix}hub" d out in found=0
  for d in $(ip -n "$hub" -o link show type veth 2>/dev/null | sed -n 's/^[0-9]*: u\([0-9]*\)@.*/\1/p' | sort -n); do
    found=1
    out=$(cat_counter "$hub" "u$d" tx_bytes)
    in=$(cat_counter "$hub" "w$d" tx_bytes)
    echo "dc $d egress $out ingress $in"
  done
  [ "$found" -eq 1 ] || die "no datacenters with prefix '$prefix' (run '$prog up --dcs K ...' first)"
}

cat_counter() {
  # /sys inside the namespace holds the counters; ip netns exec mounts it there.
  ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3" 2>/dev/null || die "cannot read $3 of $2 in $1"
}

do_status() {
  local ns i addr dc found=0
  for ns in $(our_namespaces "$prefix" | grep -v 'hub$' | sort -V); do
    found=1
    i=${ns#"$prefix"}
    addr=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
    dc=$(ip -n "${prefix}hub" -o link show dev "h$i" 2>/dev/null | sed -n 's/.* master br\([0-9]*\).*/\1/p')
    echo "$ns  ${addr:-(no address)}  dc ${dc:-?}"
    echo "  out: $(tc -n "$ns" qdisc show dev eth0 root 2>/dev/null | head -1)"
    echo "  in:  $(tc -n "${prefix}hub" qdisc show dev "h$i" root 2>/dev/null | head -1)"
  done
  [ "$found" -eq 1 ] || echo "no hosts with prefix '$prefix'"
  for d in $(ip -n "${prefix}hub" -o link show type veth 2>/dev/null | sed -n 's/^[0-9]*: u\([0-9]*\)@.*/\1/p' | sort -n); do
    echo "wan dc $d"
    echo "  out: $(tc -n "${prefix}hub" qdisc show dev "u$d" root 2>/dev/null | head -1)"
    echo "  in:  $(tc -n "${prefix}hub" qdisc show dev "w$d" root 2>/dev/null | head -1)"
  done
}

# --- argument parsing ---------------------------------------------------------

[ $# -gt 0 ] || { usage >&2; exit 2; }
cmd=$1; shift
default_rate=""
wan_rate=""
dcs=0
per_dc=0
burst_override=""
latency_override=""
declare -A host_rates=()

case "$cmd" in
  -h|--help|help) usage; exit 0 ;;
  up)
    n=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) [ $# -ge 2 ] || usage_error "--rate needs a value"; default_rate=$2; shift 2 ;;
        --rate=*) default_rate=${1#*=}; shift ;;
        --lan-rate) [ $# -ge 2 ] || usage_error "--lan-rate needs a value"; default_rate=$2; shift 2 ;;
        --wan-rate) [ $# -ge 2 ] || usage_error "--wan-rate needs a value"; wan_rate=$2; shift 2 ;;
        --dcs) [ $# -ge 2 ] || usage_error "--dcs needs a value"; dcs=$2; shift 2 ;;
        --hosts-per-dc) [ $# -ge 2 ] || usage_error "--hosts-per-dc needs a value"; per_dc=$2; shift 2 ;;
        --host-rate)
          if [ $# -lt 2 ] || ! [[ $2 =~ ^([0-9]+)=(.+)$ ]]; then usage_error "--host-rate needs I=RATE"; fi
          host_rates[$((10#${BASH_REMATCH[1]}))]=${BASH_REMATCH[2]}; shift 2 ;;
        --burst) [ $# -ge 2 ] || usage_error "--burst needs a value"; burst_override=$2; shift 2 ;;
        --latency) [ $# -ge 2 ] || usage_error "--latency needs a value"; latency_override=$2; shift 2 ;;
        --prefix) [ $# -ge 2 ] || usage_error "--prefix needs a value"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) usage_error "unknown argument '$1' for up" ;;
        *) [ -z "$n" ] || usage_error "unexpected argument '$1'"; n=$1; shift ;;
      esac
    done
    if [ "$dcs" != 0 ] || [ "$per_dc" != 0 ]; then
      [ -z "$n" ] || usage_error "give either a host count N or --dcs and --hosts-per-dc, not both"
      if ! [[ $dcs =~ ^[0-9]+$ ]] || [ "$dcs" -lt 1 ] || [ "$dcs" -gt 16 ]; then
        usage_error "--dcs must be 1..16"
      fi
      if ! [[ $per_dc =~ ^[0-9]+$ ]] || [ "$per_dc" -lt 1 ]; then
        usage_error "--hosts-per-dc must be at least 1"
      fi
      dcs=$((10#$dcs)); per_dc=$((10#$per_dc)); n=$((dcs * per_dc))
      [ "$n" -le "$max_hosts" ] || usage_error "--dcs x --hosts-per-dc is $n hosts, at most $max_hosts"
    elif [ -n "$wan_rate" ]; then
      usage_error "--wan-rate needs --dcs and --hosts-per-dc"
    fi
    if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt "$max_hosts" ]; then
      usage_error "up needs a host count N (1..$max_hosts)"
    fi
    for i in "${!host_rates[@]}"; do
      [ "$i" -lt "$n" ] || usage_error "--host-rate for host $i, but only $n host(s)"
    done
    # Rates are checked before anything is torn down or built.
    for r in "$default_rate" "$wan_rate" "${host_rates[@]}"; do
      [ -z "$r" ] || [ "$r" = none ] || [ -n "$(rate_to_bytes "$r")" ] \
        || usage_error "bad rate '$r' (tc syntax, e.g. 500mbit, 1gbit)"
    done
    check_prefix "$prefix"
    need_tools; need_root
    do_up "$n"
    ;;
  down|status|wan)
    take_prefix "$@"
    [ ${#rest[@]} -eq 0 ] || usage_error "unknown argument '${rest[0]}' for $cmd"
    check_prefix "$prefix"
    need_tools; need_root
    case "$cmd" in down) teardown "$prefix" ;; status) do_status ;; wan) do_wan ;; esac
    ;;
  exec)
    take_prefix "$@"
    set -- "${rest[@]}"
    [ $# -ge 2 ] || usage_error "exec needs a host index and a command"
    check_index "$1"
    check_prefix "$prefix"
    need_tools; need_root
    ns="${prefix}$1"; shift
    our_namespaces "$prefix" | grep -qx "$ns" || die "no host $ns (run '$prog up' first)"
    exec ip netns exec "$ns" "$@"
    ;;
  addr)
    [ $# -eq 1 ] || usage_error "addr needs exactly one host index"
    check_index "$1"
    host_addr "$1"
    ;;
  *) usage_error "unknown subcommand '$cmd'" ;;
esac
