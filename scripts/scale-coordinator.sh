#!/bin/bash
# scale-coordinator.sh [N] [BUILD_DIR] [TRANSPORT] [IDLE_S]
#
# N ranks (default 64) on this machine form one group through a private etcd
# (coordinator mode, small pools), each does one locked increment, then the group idles
# for IDLE_S seconds (default 10), and they leave. Prints the time each rank's ddss_init
# took (join, wait for the group to form, start barrier), per-rank RSS, open fds and
# sockets, the CPU each rank spent idle, and what etcd sent and received while the group
# formed and while it idled (its /metrics: gRPC bytes, which the JSON gateway's requests
# and watch streams pass through; lease keep-alives). TRANSPORT: tcp (default) or verbs
# (in the Soft-RoCE guest: scripts/rdma-exec scripts/scale-coordinator.sh 16 build verbs).
# docs/scale.md extrapolates from these. Needs etcd, etcdctl and curl.
set -euo pipefail
n=${1:-64}
build=${2:-build}
transport=${3:-tcp}
idle_s=${4:-10}
probe=$build/tests/coord/coord_scale_probe
run=$build/apps/ddssrun
for f in "$probe" "$run"; do
  [ -x "$f" ] || { echo "scale-coordinator: $f missing (build first)" >&2; exit 2; }
done
for c in etcd etcdctl curl; do
  command -v $c >/dev/null || { echo "scale-coordinator: $c is not installed" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/scale-coordinator.XXXXXX)
etcd_pid=""
watcher=""
cleanup() {
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  [ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cport=$(port); pport=$(port)
etcd --name scale --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$cport" \
  --advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "scale=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 1 200); do
  etcdctl --endpoints "127.0.0.1:$cport" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
metric() { # the sum of every sample of metric $1 (whose labels match $2, if given)
  curl -s "http://127.0.0.1:$cport/metrics" |
    awk -v m="$1" -v l="${2:-}" '$1 ~ "^"m"({|$)" && index($1, l) {s += $2} END {printf "%.0f", s}'
}
sample() { # etcd's counters now: sent received keepalives
  echo "$(metric etcd_network_client_grpc_sent_bytes_total)" \
    "$(metric etcd_network_client_grpc_received_bytes_total)" \
    "$(metric etcd_debugging_lease_renewed_total)"
}
# Rank 1 marks the idle window with files; sample etcd at each end (bounded waits).
mkdir "$dir/marks"
(
  for m in idle-begin idle-end; do
    for _ in $(seq 1 6000); do [ -e "$dir/marks/$m" ] && break; sleep 0.05; done
    [ -e "$dir/marks/$m" ] && echo "$(date +%s%N) $(sample)" >"$dir/$m.sample"
    # verbs: the QPs each process holds while the group idles (iproute2's rdma tool)
    if [ "$m" = idle-begin ] && [ "$transport" = verbs ] && command -v rdma >/dev/null; then
      rdma resource show qp >"$dir/qps.txt" 2>/dev/null || true
    fi
  done
) &
watcher=$!
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
sent0=$(metric etcd_network_client_grpc_sent_bytes_total)
recv0=$(metric etcd_network_client_grpc_received_bytes_total)
t0=$(date +%s%N)
DDSS_COORDINATOR="etcd://127.0.0.1:$cport/scale" DDSS_SECRET_FILE="$dir/secret" \
  DDSS_POOL_SIZE=1048576 DDSS_LOG_LEVEL=error SCALE_IDLE_S="$idle_s" SCALE_MARK_DIR="$dir/marks" \
  "$run" --coordinator -n "$n" --transport "$transport" --timeout 600 -- "$probe" \
  >"$dir/out.log" 2>&1 || {
  echo "scale-coordinator: the run failed:"; tail -20 "$dir/out.log"; exit 1; }
t1=$(date +%s%N)
sent=$(( $(metric etcd_network_client_grpc_sent_bytes_total) - sent0 ))
recv=$(( $(metric etcd_network_client_grpc_received_bytes_total) - recv0 ))
lines=$(grep -c "SCALE rank" "$dir/out.log")
stat() { # median and max of field $1 of the SCALE lines
  grep -o "SCALE rank.*" "$dir/out.log" | awk -v f="$1" '{for (i = 1; i < NF; i++) if ($i == f) print $(i + 1)}' |
    sort -n | awk '{v[NR] = $1} END {printf "%s median, %s max", v[int((NR + 1) / 2)], v[NR]}'
}
echo "ranks:            $lines of $n reported ($transport)"
echo "whole run:        $(( (t1 - t0) / 1000000 )) ms (start, group formed, one increment each, finalize)"
echo "ddss_init:        $(stat init_ms) ms"
echo "RSS per rank:     $(stat rss_kib) KiB (pool 1 MiB)"
echo "open fds:         $(stat fds)"
echo "sockets:          $(stat sockets)"
echo "etcd sent:        $sent bytes ($(( sent / n )) per rank)"
echo "etcd received:    $recv bytes ($(( recv / n )) per rank)"
wait "$watcher" 2>/dev/null || true
if [ "$idle_s" -gt 0 ] && [ -s "$dir/idle-begin.sample" ] && [ -s "$dir/idle-end.sample" ]; then
  read -r tb sb rb kb <"$dir/idle-begin.sample"
  read -r te se re ke <"$dir/idle-end.sample"
  ms=$(( (te - tb) / 1000000 ))
  echo "idle window:      $ms ms (every rank idle between two barriers)"
  echo "idle CPU per rank: $(stat idle_cpu_ms) ms in ${idle_s} s"
  rate() { awk -v d="$1" -v ms="$ms" 'BEGIN {printf "%.1f", d * 1000 / ms}'; }
  echo "idle etcd sent:   $(rate $((se - sb))) bytes/s"
  echo "idle etcd recv:   $(rate $((re - rb))) bytes/s"
  if [ -s "$dir/qps.txt" ]; then
    echo "QPs per rank:     $(grep -o 'pid [0-9]*' "$dir/qps.txt" | sort | uniq -c | awk '{print $1}' |
      sort -n | awk '{v[NR] = $1} END {printf "%s median, %s max (%d processes)", v[int((NR + 1) / 2)], v[NR], NR}')"
  fi
  echo "idle keep-alives: $(rate $((ke - kb))) per s ($n ranks, lease TTL 10 s: $n / 3.3 s expected)"
fi
