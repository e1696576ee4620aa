#!/bin/bash
# Usage: scripts/rdma-exec scripts/bench-verbs.sh [--iters N] [--rounds R] [--size B] [--verbose]
#                                                [BUILD_DIR]
# The verbs transport benchmark beside perftest's raw verbs latencies, measured in the same
# run on the same device (the one that owns $DDSS_RDMA_HOST, which rdma-exec sets; in the
# rxe guest that is rxe0), same sizes, both polling for completions. Each round runs, op by
# op, perftest's tool (ib_read_lat, ib_write_lat, ib_atomic_lat CMP_AND_SWAP / FETCH_AND_ADD)
# and right after it ddss-tp-bench --ops OP: both sides a homogeneous loop of that one op,
# next to each other in time, so drift (large under emulation) hits both alike. The table
# shows the median over rounds of each side's median (perftest's t_typical), and x_raw, the
# median over rounds of ours / perftest in that round (robust to the emulator's slow and
# fast spells, which last seconds), with the quartiles of those per-round ratios beside it
# (how far one round can be trusted); --verbose also prints every round.
#   raw read / cas / fadd: perftest's full round trip, like ours.
#   raw write: 2 x ib_write_lat, because ib_write_lat reports half a ping-pong round trip
#   while our write completes when its acknowledgement is back (one round trip).
# Ranks and perftest processes are pinned the same way (CPU 0 measures, CPU 1 serves).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
iters=2000 rounds=3 size=1 build=$top/build verbose=0
while [ $# -gt 0 ]; do
  case $1 in
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --verbose) verbose=1; shift ;;
    -h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
host=${DDSS_RDMA_HOST%%,*}
[ -n "$host" ] || { echo "bench-verbs: run it under scripts/rdma-exec" >&2; exit 2; }
command -v ib_read_lat >/dev/null || { echo "bench-verbs: perftest is not installed" >&2; exit 2; }

dev_of_ip() {  # the RDMA device whose port's netdev has address $1
  local port ndev
  for port in /sys/class/infiniband/*/ports/*; do
    ndev=$(cat "$port"/gid_attrs/ndevs/0 2>/dev/null || true)
    [ -n "$ndev" ] && ip -4 -o addr show dev "$ndev" | grep -qw "inet $1" &&
      { basename "$(dirname "$(dirname "$port")")"; return; }
  done
}
dev=$(dev_of_ip "$host")
[ -n "$dev" ] || { echo "bench-verbs: no RDMA device owns $host" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# perftest server on CPU 1, client on CPU 0 (retried until the server listens); prints
# the client's t_typical for @iters iterations.
# (Each side under `timeout`: a perftest that crashes mid-handshake can leave its peer
# waiting forever.)
perftest() {
  local tool=$1; shift
  local args=(-R -d "$dev" -n "$iters" "$@")
  timeout 60 taskset -c 1 "$tool" "${args[@]}" >"$work/server.log" 2>&1 & local srv=$!
  local try ok=0
  for try in $(seq 1 50); do
    if timeout 60 taskset -c 0 "$tool" "${args[@]}" "$host" >"$work/client.log" 2>&1; then ok=1; break; fi
    kill -0 $srv 2>/dev/null || { timeout 60 taskset -c 1 "$tool" "${args[@]}" >"$work/server.log" 2>&1 & srv=$!; }
  done
  wait $srv || true
  [ $ok = 1 ] || { echo "bench-verbs: $tool failed:" >&2; cat "$work/client.log" >&2; exit 1; }
  awk -v n="$iters" '$2 == n && $1 ~ /^[0-9]+$/ {print $5; exit}' "$work/client.log"
}

ours() {  # ddss-tp-bench's median for one op, alone
  DDSS_COMPLETION=poll "$build/apps/ddssrun" -n 2 --transport verbs --timeout 600 -- \
    "$build/apps/ddss-tp-bench" --ops "$1" --iters "$iters" --rounds 1 --size "$size" --csv |
    sed 's/^\[[0-9]*\] //' | awk -F, -v o="$1" -v r="$r" '$3 == o {print $3, $5, r}' >>"$work/ddss"
}
for r in $(seq 1 "$rounds"); do
  echo "read $(perftest ib_read_lat -s "$size") $r" >>"$work/raw"
  ours read
  echo "write $(perftest ib_write_lat -s "$size" | awk '{print 2 * $1}') $r" >>"$work/raw"
  ours write
  echo "cas $(perftest ib_atomic_lat -A CMP_AND_SWAP) $r" >>"$work/raw"
  ours cas
  echo "fadd $(perftest ib_atomic_lat -A FETCH_AND_ADD) $r" >>"$work/raw"
  ours fadd
done

quantile() {  # nearest-rank quantile $1 (0..1; 0.5 is the median) of the numbers on stdin
  sort -g | awk -v q="$1" '{v[NR] = $1} END {i = int(q * NR + 0.999999); print v[i < 1 ? 1 : i]}'
}
echo "verbs transport vs perftest on $dev ($host), size $size B (atomics 8 B), $iters iterations x $rounds rounds, polling"
# "op perftest ours ratio round" for every round that has both sides (no process
# substitution: the guest has no /dev/fd).
pairs() {
  awk 'FNR == NR {raw[$1 " " $3] = $2; next}
       ($1 " " $3) in raw {printf "%s %.2f %.2f %.3f %s\n", $1, raw[$1 " " $3], $2, $2 / raw[$1 " " $3], $3}' \
    "$work/raw" "$work/ddss"
}
pairs >"$work/pairs"
if [ $verbose = 1 ]; then
  echo "op perftest_us ddss_us ratio round"
  cat "$work/pairs"
fi
printf '%-6s %14s %14s %8s %13s  %s\n' op perftest_us ddss_us x_raw "x_raw p25-p75" "raw baseline"
for op in read write cas fadd; do
  raw=$(awk -v o=$op '$1 == o {print $2}' "$work/raw" | quantile 0.5)
  ours=$(awk -v o=$op '$1 == o {print $2}' "$work/ddss" | quantile 0.5)
  awk -v o=$op '$1 == o {print $4}' "$work/pairs" >"$work/ratios"
  ratio=$(quantile 0.5 <"$work/ratios")
  spread=$(quantile 0.25 <"$work/ratios")-$(quantile 0.75 <"$work/ratios")
  case $op in
    read) what="ib_read_lat t_typical" ;;
    write) what="2 x ib_write_lat t_typical (one round trip)" ;;
    cas) what="ib_atomic_lat -A CMP_AND_SWAP t_typical" ;;
    fadd) what="ib_atomic_lat -A FETCH_AND_ADD t_typical" ;;
  esac
  printf '%-6s %14.2f %14.2f %8.3f %13s  %s\n' $op "$raw" "$ours" "$ratio" "$spread" "$what"
done
