#!/bin/bash
# rxe completing an atomic without its result (src/net/verbs/verbs_guard.c, path 2): on the
# guest's rxe link, drop acknowledgements in pairs (2 of every --every RC ACK / ATOMIC ACK
# packets, each direction, nftables at both veth ends' ingress), so that now and then a held
# write's ACK and the ATOMIC ACK of the compare&swap behind it are both lost. Then run the
# conformance suite's held-post tests, 4 ranks alternating between the devices: each round
# writes a word, then a held write and a compare&swap of that word, and checks the
# compare&swap's old value. With the read guard (the default on rxe) every value is right;
# without it (DDSS_VERBS_READ_GUARD=off) rxe's completer takes the ACK answering the
# retried write for the compare&swap's and completes it without a result.
#
# Invoked outside the guest, the script runs itself there through
# `scripts/rdma-exec --two-devices` (exit 77 = SKIP without the guest or nftables in it).
# It never runs on a native RDMA machine: it changes the firewall of the machine it runs on.
#
# usage: rxe_lost_response.sh --ddssrun PATH --conformance PATH [--every N] [--expect-wrong]
#   --expect-wrong: PASS only if some rank saw a wrong value (to show the guard matters).
set -u

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
repo=$(cd "$(dirname "$0")/../.." && pwd)
args=("$@")
ddssrun="" conformance="" every=40 expect_wrong=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ddssrun) ddssrun=$2; shift ;;
    --conformance) conformance=$2; shift ;;
    --every) every=$2; shift ;;
    --expect-wrong) expect_wrong=1 ;;
    -h|--help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "rxe_lost_response.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$ddssrun" ] && [ -x "$conformance" ] ||
  { echo "rxe_lost_response.sh: --ddssrun and --conformance must name the built binaries" >&2; exit 2; }

if [ -z "${DDSS_RDMA_IN_GUEST:-}" ]; then
  if [ "${DDSS_RDMA_MODE:-auto}" = skip ]; then echo "SKIP: DDSS_RDMA_MODE=skip"; exit 77; fi
  export DDSS_RDMA_MODE=guest
  cd "$repo" && exec timeout -k 10 240 "$repo/scripts/rdma-exec" --two-devices bash "$self" "${args[@]}"
fi

# ---- in the guest ------------------------------------------------------------------------
skip() { echo "SKIP: rxe_lost_response.sh: $*"; exit 77; }
[ -n "${RXE_DEV2:-}" ] && [ "${DDSS_RDMA_HOST:-}" != "${DDSS_RDMA_HOST#*,}" ] || skip "needs two rxe devices"
[ "$(id -u)" -eq 0 ] || skip "needs root in the guest"
command -v nft >/dev/null || skip "no nft in the guest (run scripts/rxe/setup as root)"
[ -d /sys/module/nf_tables ] || modprobe nf_tables 2>/dev/null || skip "no nf_tables in the guest"
ip_a=${DDSS_RDMA_HOST%%,*} ip_b=${DDSS_RDMA_HOST#*,}
ip_b=${ip_b%%,*}
ndev_of() { ip -4 -o addr show | awk -v a="$1" '{split($4, p, "/")} p[1] == a {print $2; exit}'; }
dev_a=$(ndev_of "$ip_a") dev_b=$(ndev_of "$ip_b")
[ -n "$dev_a" ] && [ -n "$dev_b" ] || { echo "rxe_lost_response.sh: no netdev for $ip_a or $ip_b"; exit 2; }

table=ddss_lost_response
trap 'nft delete table netdev $table 2>/dev/null' EXIT
# RoCEv2: UDP port 4791; the BTH opcode is the first payload byte (IPv4 without options:
# byte 28 of the network header). RC ACKNOWLEDGE = 0x11, RC ATOMIC ACKNOWLEDGE = 0x12.
rule="meta protocol ip udp dport 4791 @nh,224,8 { 0x11, 0x12 } numgen inc mod $every < 2 counter drop"
nft -f - <<EOF || skip "nft refused the rule set"
table netdev $table {
  chain in_a { type filter hook ingress device "$dev_a" priority 0; policy accept; $rule; }
  chain in_b { type filter hook ingress device "$dev_b" priority 0; policy accept; $rule; }
}
EOF
log=$(mktemp)
DDSS_LOG_LEVEL=warn timeout -k 5 200 "$ddssrun" -n 4 --transport verbs --timeout 180 -- \
  "$conformance" --only="held posts" >"$log" 2>&1
rc=$?
dropped=$(nft list table netdev $table | awk '/counter packets/ {for (i = 1; i < NF; i++) if ($i == "packets") s += $(i+1)} END {print s + 0}')
wrong=$(grep -c "behind a held write: old" "$log")
grep "behind a held write\|FAILED\|passed\|declared dead" "$log" | head -20
echo "rxe_lost_response: rc=$rc acks dropped=$dropped wrong compare&swap results=$wrong" \
     "guard=${DDSS_VERBS_READ_GUARD:-auto}"
rm -f "$log"
[ "$dropped" -gt 0 ] || { echo "FAIL: nothing was dropped (the rule did not match)"; exit 1; }
if [ $expect_wrong -eq 1 ]; then
  [ "$wrong" -gt 0 ] && { echo "PASS: without the guard rxe returned wrong results"; exit 0; }
  echo "FAIL: expected wrong results without the guard, saw none"; exit 1
fi
[ $rc -eq 0 ] && [ "$wrong" -eq 0 ] && { echo "PASS"; exit 0; }
echo "FAIL"; exit 1
