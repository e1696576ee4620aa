#!/bin/bash
# A group of 4 formed through etcd, every rank in its own network namespace and etcd in
# another, all on one bridge (in a namespace of its own: the host's interfaces are never
# touched; addresses in 198.18.0.0/24). Rank 4 is
#   kill    killed (SIGKILL)
#   freeze  stopped (SIGSTOP), and continued once its slot has been taken over
#   cut     cut off: its link (vr4, bridge side) is set down, and up again once its slot
#           has been taken over
#   cut-home  cut off from rank 2 only, the fence word's home (a blackhole route each way),
#           while it still reaches etcd: rank 2 reports it silent, and it stops
#   cut-etcd  cut off from etcd only, while it still reaches every rank: its renewals
#           fail, the others say etcd answers them, and it stops at its lease deadline
# and a replacement takes slot 4 from a fifth namespace (another "machine"). The cuts are
# undone once the replacement is in.
# tests/coord/netns_member.c checks the rest: every survivor reports the same view, with
# the time from the fault; the locked counter is exact; the replacement serves a segment
# of its own; the old process stops (freeze, cut) with an error, and the fence word it
# wrote to has not changed since the replacement came in (nothing it sent later landed).
#
# usage: netns_fault.sh --bin PATH --fault kill|freeze|cut|cut-home|cut-etcd [--keep-logs]
# Needs root, `ip netns` and etcd (else exit 77, SKIP). Logs under a new
# /tmp/ddss-netns.XXXXXX, kept on failure.
set -u
bin="" fault=kill keep_logs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift ;;
    --fault) fault=$2; shift ;;
    --keep-logs) keep_logs=1 ;;
    *) echo "netns_fault.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$fault" in
  kill|freeze|cut|cut-home|cut-etcd) ;;
  *) echo "netns_fault.sh: --fault kill|freeze|cut|cut-home|cut-etcd" >&2; exit 2 ;;
esac
[ -x "$bin" ] || { echo "netns_fault.sh: --bin must name netns_member" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: netns_fault.sh needs root and 'ip netns'"; exit 77
fi
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "SKIP: etcd is not installed"; exit 77
fi

tag="ddssnf$$"
dir=$(mktemp -d /tmp/ddss-netns.XXXXXX)
etcd_ip=198.18.0.100
ok=0
declare -a pid

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

teardown() {
  local ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
    done
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do
    ip netns del "$ns" 2>/dev/null
  done
}
cleanup() {
  trap - EXIT INT TERM HUP
  teardown
  if [ $ok -eq 1 ] && [ $keep_logs -eq 0 ]; then rm -rf "$dir"; else echo "logs: $dir"; fi
}
trap cleanup EXIT INT TERM HUP

# Namespace $tag-$1 with address 198.18.0.$2 on the bridge (veth v$1 on the bridge side).
add_host() {
  ip netns add "$tag-$1" || return 1
  ip -n "$tag-$1" link set lo up
  ip link add "v$1" netns "$tag-br" type veth peer name eth0 netns "$tag-$1" || return 1
  ip -n "$tag-br" link set "v$1" master br0
  ip -n "$tag-br" link set "v$1" up
  ip -n "$tag-$1" addr add "198.18.0.$2/24" dev eth0
  ip -n "$tag-$1" link set eth0 up
}
setup_net() {
  ip netns add "$tag-br" || return 1
  ip -n "$tag-br" link set lo up
  ip -n "$tag-br" link add br0 type bridge || return 1
  ip -n "$tag-br" link set br0 up
  for h in 1 2 3 4 5; do add_host "r$h" "$h" || return 1; done
  add_host etcd 100
}
if ! setup_net >"$dir/net.log" 2>&1; then
  echo "FAIL: network setup failed ($(tail -1 "$dir/net.log"))"; exit 1
fi

ip netns exec "$tag-etcd" timeout 150 etcd --name nf --data-dir "$dir/etcd" \
  --listen-client-urls "http://$etcd_ip:2379" --advertise-client-urls "http://$etcd_ip:2379" \
  --listen-peer-urls "http://$etcd_ip:2380" --initial-advertise-peer-urls "http://$etcd_ip:2380" \
  --initial-cluster "nf=http://$etcd_ip:2380" >"$dir/etcd.log" 2>&1 &
deadline=$(( $(now_ms) + 20000 ))
until ip netns exec "$tag-etcd" etcdctl --endpoints "$etcd_ip:2379" --dial-timeout 1s \
      endpoint health >/dev/null 2>&1; do
  [ "$(now_ms)" -lt $deadline ] || { echo "FAIL: etcd did not start"; exit 1; }
  sleep 0.1
done

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
# start_rank HOST RANK ROLE: one process in namespace HOST as slot RANK.
start_rank() {
  ip netns exec "$tag-$1" env DDSS_COORDINATOR="etcd://$etcd_ip:2379/nf$$" \
    DDSS_LISTEN="198.18.0.${1#r}:7000" DDSS_SIZE=4 DDSS_RANK="$2" DDSS_TRANSPORT=tcp \
    DDSS_SECRET_FILE="$dir/secret" DDSS_LOG_LEVEL=warn TEST_ROLE="$3" TEST_DIR="$dir" \
    DDSS_OP_TIMEOUT_MS=5000 \
    timeout 120 "$bin" >"$dir/$1.log" 2>&1 &
  pid[${1#r}]=$!
}
for r in 1 2 3; do start_rank "r$r" "$r" survivor; done
start_rank r4 4 victim
# wait_for FILE SECONDS
wait_for() {
  local deadline=$(( $(now_ms) + $2 * 1000 ))
  until [ -e "$dir/$1" ]; do
    [ "$(now_ms)" -lt $deadline ] || return 1
    sleep 0.02
  done
}
for r in 1 2 3 4; do
  wait_for "ready-$r" 30 || { echo "FAIL: rank $r did not start (logs: $dir)"; exit 1; }
done
sleep 0.5 # the workload runs a while before the fault (a delay, not a synchronisation)
vpid=$(ip netns pids "$tag-r4" | while read -r p; do
  [ "$(cat /proc/$p/comm 2>/dev/null)" = "$(basename "$bin" | cut -c1-15)" ] && echo "$p"
done | head -1)
echo $(( $(date +%s%N) )) >"$dir/fault-ns"
# cut_net add|del: make or undo the cut of --fault (nothing for kill and freeze).
cut_net() {
  local link; [ "$1" = add ] && link=down || link=up
  case "$fault" in
    cut) ip -n "$tag-br" link set vr4 "$link" ;;
    cut-home)
      ip -n "$tag-r4" route "$1" blackhole 198.18.0.2/32
      ip -n "$tag-r2" route "$1" blackhole 198.18.0.4/32 ;;
    cut-etcd) ip -n "$tag-r4" route "$1" blackhole $etcd_ip/32 ;;
  esac
}
case "$fault" in
  kill) kill -KILL "$vpid" ;;
  freeze) kill -STOP "$vpid" ;;
  *) cut_net add ;;
esac
t_fault=$(now_ms)
start_rank r5 4 replacement
wait_for back 60 || { echo "FAIL: the replacement did not come in (logs: $dir)"; exit 1; }
t_back=$(now_ms)
case "$fault" in
  freeze) kill -CONT "$vpid" ;;
  *) cut_net del ;;
esac
wait "${pid[4]}"; vrc=$?
echo 1 >"$dir/victim-done"
fail=0
for r in 1 2 3 5; do
  wait "${pid[$r]}"; rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: r$r exited with $rc"; fail=1; }
done
if [ "$fault" = kill ]; then
  [ $vrc -eq 137 ] || [ $vrc -eq 124 ] || { echo "FAIL: the killed rank exited with $vrc"; fail=1; }
else
  [ $vrc -eq 0 ] || { echo "FAIL: the old rank 4 exited with $vrc"; fail=1; }
  grep -q "RESULT victim stopped" "$dir/r4.log" || { echo "FAIL: the old rank 4 did not stop"; fail=1; }
fi
grep -h RESULT "$dir"/r*.log
echo "fault=$fault: the replacement was in $(( t_back - t_fault )) ms after the fault"
if [ $fail -eq 0 ]; then
  ok=1
  echo "PASS: netns_fault fault=$fault"
  exit 0
fi
echo "FAIL: netns_fault fault=$fault (logs: $dir)"
exit 1
