#!/bin/bash
# busy_fault over verbs (issue 26, part 3): the three BUSY ranks of tests/lock/busy_fault.c
# with DDSS_TRANSPORT=verbs in the project's Soft-RoCE guest (scripts/rxe), one rank cut
# off at a random moment. Invoked outside the guest, the script runs itself there through
# `scripts/rdma-exec --two-devices` (exit 77 = SKIP when there is no guest: run
# scripts/rxe/setup as root once). It never runs on a native RDMA machine: the cut
# changes the routing rules of the machine it runs on, which is fine only in the guest.
#
# In the guest: rxe0 on rxe0v = A (192.0.2.1) and rxe1 on rxe1v = B (192.0.2.2), the
# two ends of a veth pair (scripts/rxe/guest-init). rxe works only in the initial netns,
# so there are no namespaces: the victim (--victim, default 3) listens on B, the other
# ranks on A (different rdma_cm ports), so all the victim's traffic crosses the veth. At
# a random moment in [0.5 s, 1.5 s] after the start (from the seed):
#   cut     --cut rule (default): the victim is cut off silently, its port stays up:
#             ip rule add pref 1 iif rxe0v from B to A blackhole
#             ip rule add pref 2 iif rxe1v from A to B blackhole
#           every RoCEv2 packet (UDP 4791, rdma_cm's MADs included) between A and B is
#           dropped on input, where rxe hands it to the IP stack; the senders see nothing
#           (no local error) and retransmit into the void, like a pulled cable.
#           --cut rule-out: `from B to A blackhole` and `from A to B blackhole`, without
#           iif: output route lookups fail too, so rxe fails the victim's sends locally
#           (rxe_find_route: no route) as well as dropping packets on input.
#           --cut link: ip link set rxe1v down (both rxe ports go down).
#   kill    SIGKILL;  freeze  SIGSTOP, SIGCONT after the survivors have finished.
# The rules are removed (the link set up) after each seed and on every exit (trap).
# The driver counts rxe packets received by the victim's device (rcvd_pkts of its
# /sys/class/infiniband/DEV/ports/1/hw_counters) from 0.3 s after the cut until the
# victim exits: with a working cut that stays 0 (`leak=N` in the seed line; N > 0 FAILs).
#
# Every rank checks itself (busy_fault.c, told --fault/--victim so that the victim is
# held to the victim's rules) and prints a RESULT line; this driver checks the exit
# statuses (survivors 0, cut/frozen victim 0 on its own, killed victim 137), no
# -EPROTO line, no hang (every rank bounded by `timeout`), the home's counter check.
#
# usage: busy_fault_verbs.sh --bin PATH [--fault cut|kill|freeze] [--cut rule|rule-out|link]
#          [--victim R] [--home R] [--seed S | --seeds A-B] [--peer-timeout-ms T]
#          [--duration-ms MS] [--threads N] [--bound-ms MS] [--scheme ncosed|dqnl|srsl]
#          [--logdir DIR] [--allow ENOLCK,...] [--keep-logs] [--keep-going]
# Defaults for the slow guest (TCG): 2 threads, 6 s, T = 2000 ms, bound T + T/4 + 3 s.
# Logs (DDSS_LOG_LEVEL=info) per seed and rank under --logdir (default: a new
# /tmp/busy_fault_verbs.XXXXXX on the host, shared with the guest), kept on failure.
set -u

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
repo=$(cd "$(dirname "$0")/../.." && pwd)
args=("$@")
# What busy_fault.sh shares: options, waiting, judging and reporting a seed ($0 is
# absolute in the guest, which sees this tree at the same path).
. "$(dirname "$0")/busy_fault_lib.sh"

bin="" fault=cut cut=rule victim=3 home=1 seeds="1-1" peer_timeout=2000 duration=6000
threads=2 allow="" bound="" scheme=ncosed logdir="" keep_logs=0 keep_going=0 nranks=3
port=7000
# --cut VALUE, the one option busy_fault.sh has not.
bf_own_opt() { case "$1" in --cut) cut=$2 ;; *) return 1 ;; esac; }
bf_parse_args busy_fault_verbs.sh 42 "$@"
bf_check_fault busy_fault_verbs.sh "cut|kill|freeze"
case "$cut" in rule|rule-out|link) ;; *) echo "busy_fault_verbs.sh: --cut rule|rule-out|link" >&2; exit 2 ;; esac
bf_check_rest busy_fault_verbs.sh
case "$victim" in [1-3]) ;; *) echo "busy_fault_verbs.sh: --victim 1..3" >&2; exit 2 ;; esac

in_guest() {
  [ -n "${DDSS_RDMA_IN_GUEST:-}" ] && [ -n "${RXE_DEV2:-}" ] &&
    [ -d "/sys/class/infiniband/$RXE_DEV2" ] && [ "${DDSS_RDMA_HOST:-}" != "${DDSS_RDMA_HOST#*,}" ]
}

# ---- outside the guest: run this script in it -------------------------------------------
if ! in_guest; then
  if [ "${DDSS_RDMA_MODE:-auto}" = skip ]; then echo "SKIP: DDSS_RDMA_MODE=skip"; exit 77; fi
  if [ -n "${DDSS_RDMA_IN_GUEST:-}" ]; then
    echo "SKIP: busy_fault_verbs.sh: in the guest but without two rxe devices"; exit 77
  fi
  # Only the guest: the cut rewrites routing rules, never done on a real machine.
  export DDSS_RDMA_MODE=guest
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  own=0 keep=$keep_logs
  if [ -z "$logdir" ]; then
    logdir=$(mktemp -d /tmp/busy_fault_verbs.XXXXXX)/logs; own=1
  fi
  mkdir -p "$logdir"; logdir=$(cd "$logdir" && pwd)
  # rdma-exec shares the parent folder of every existing absolute-path argument with the
  # guest (read-write, same path): the logs land on the host.
  # Everything bounded: each seed's ranks are (in the guest); the guest as a whole too.
  n=$((seed_hi - seed_lo + 1)); [ $n -ge 1 ] || n=1
  limit=$(( 120 + n * ((duration + 4 * bound) / 1000 + 100) ))
  (cd "$repo" && timeout -k 10 "$limit" "$repo/scripts/rdma-exec" --two-devices \
     bash "$self" "${args[@]}" --bin "$bin" --logdir "$logdir")
  rc=$?
  [ $rc -ne 124 ] || echo "FAIL: busy_fault_verbs.sh: the guest did not finish within $limit s"
  if [ $rc -eq 0 ] && [ $own -eq 1 ] && [ "$keep" -eq 0 ]; then
    rm -rf "$(dirname "$logdir")"
  elif [ $rc -ne 77 ] && [ $rc -ne 0 ]; then
    echo "logs (host): $logdir"
  elif [ $rc -eq 77 ] && [ $own -eq 1 ]; then
    rm -rf "$(dirname "$logdir")"
  fi
  exit $rc
fi

# ---- in the guest ------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v timeout >/dev/null; then
  echo "SKIP: busy_fault_verbs.sh needs root, ip and timeout in the guest"; exit 77
fi
ip_a=${DDSS_RDMA_HOST%%,*} ip_b=${DDSS_RDMA_HOST#*,}
ip_b=${ip_b%%,*}
ndev_of() { ip -4 -o addr show | awk -v a="$1" '{split($4, p, "/")} p[1] == a {print $2; exit}'; }
dev_a=$(ndev_of "$ip_a") dev_b=$(ndev_of "$ip_b")
[ "$RXE_IP2" = "$ip_b" ] || { echo "busy_fault_verbs.sh: DDSS_RDMA_HOST=$DDSS_RDMA_HOST, RXE_IP2=$RXE_IP2?"; exit 2; }
ibdev_b=$RXE_DEV2
if [ -z "$dev_a" ] || [ -z "$dev_b" ]; then
  echo "busy_fault_verbs.sh: no netdev for $ip_a or $ip_b"; exit 2
fi
own_logdir=0
if [ -z "$logdir" ]; then
  logdir=$(mktemp -d /tmp/busy_fault_verbs.XXXXXX); own_logdir=1
fi
mkdir -p "$logdir"
# The secret stays in the guest's own tmpfs (mode 600 works there, not perhaps on 9p).
secret_file=$(mktemp /tmp/busy_fault_verbs.secret.XXXXXX)
declare -a wrap_pid   # the `timeout` wrappers we started, by rank
declare -a rank_pids  # the ranks' own pids, from their STARTED lines
failed_any=0
cut_active=0

# counter NAME: sets CNT to the victim's device's rxe counter NAME.
counter() {
  CNT=0
  read -r CNT < "/sys/class/infiniband/$ibdev_b/ports/1/hw_counters/$1" 2>/dev/null
  CNT=${CNT:-0}
}

# snmp: sets UDPIN (Udp InDatagrams: RoCEv2 packets that crossed the veth and reached
# rxe's UDP socket; rxe's loopback, between ranks on one device, never touches UDP) and
# IPDROP (Ip InNoRoutes + InAddrErrors: what a blackhole rule drops on input).
snmp() {
  local l k=() v=() i
  UDPIN=0 IPDROP=0
  while read -r -a l; do
    case ${l[0]-} in # an empty line reads as an empty array
      Ip:|Udp:)
        if [ ${#k[@]} -eq 0 ] || [ "${k[0]}" != "${l[0]}" ]; then k=("${l[@]}"); continue; fi
        v=("${l[@]}")
        for ((i = 1; i < ${#k[@]}; i++)); do
          case ${k[0]}${k[i]} in
            Udp:InDatagrams) UDPIN=${v[i]} ;;
            Ip:InNoRoutes|Ip:InAddrErrors) IPDROP=$((IPDROP + v[i])) ;;
          esac
        done
        k=() ;;
    esac
  done < /proc/net/snmp
}

apply_cut() {
  cut_active=1
  case "$cut" in
    rule)
      printf 'rule add pref 1 iif %s from %s to %s blackhole\nrule add pref 2 iif %s from %s to %s blackhole\n' \
        "$dev_a" "$ip_b" "$ip_a" "$dev_b" "$ip_a" "$ip_b" | ip -b - ;;
    rule-out)
      printf 'rule add pref 1 from %s to %s blackhole\nrule add pref 2 from %s to %s blackhole\n' \
        "$ip_b" "$ip_a" "$ip_a" "$ip_b" | ip -b - ;;
    link)
      # Setting a link down deletes its routes (guest-init's policy table among them):
      # keep them to put back.
      ip -o route show table all dev "$dev_b" >"$secret_file.routes" 2>/dev/null
      ip link set "$dev_b" down ;;
  esac
}
remove_cut() {
  [ $cut_active -eq 1 ] || return 0
  while ip rule show pref 1 | grep -q blackhole; do ip rule del pref 1 || break; done
  while ip rule show pref 2 | grep -q blackhole; do ip rule del pref 2 || break; done
  if [ "$cut" = link ]; then
    # Both rxe ports went down with the veth pair: wait until they are ACTIVE again
    # (their GIDs come back with them), or rdma_cm cannot resolve anything.
    ip link set "$dev_b" up 2>/dev/null
    local i st1 st2 l
    while IFS= read -r l; do
      l=${l//linkdown/}; [ -n "${l// /}" ] && ip route replace $l dev "$dev_b" 2>/dev/null
    done < "$secret_file.routes"
    for ((i = 0; i < 200; i++)); do
      read -r st1 < "/sys/class/infiniband/$RXE_DEV/ports/1/state"
      read -r st2 < "/sys/class/infiniband/$RXE_DEV2/ports/1/state"
      [[ $st1 == *ACTIVE* && $st2 == *ACTIVE* ]] && break
      nap 0.05
    done
    nap 2
  fi
  cut_active=0
}

# Kill what we started (the ranks, then their wrappers), lift the cut.
teardown() {
  local p
  for p in "${rank_pids[@]:-}"; do
    [ -n "$p" ] && { kill -CONT "$p"; kill -KILL "$p"; } 2>/dev/null
  done
  bf_kill_wrappers
  rank_pids=()
  remove_cut
}
cleanup() {
  trap - EXIT INT TERM HUP
  teardown
  rm -f "$secret_file" "$secret_file.fifo" "$secret_file.routes"
  if bf_logs_disposable; then
    rm -rf "$logdir"
  fi
}
bf_traps busy_fault_verbs.sh

# The driver competes with the busy ranks for the guest's (emulated) cpus: builtins only
# in its polling loops (nap without a fork), and the ranks run niced (see run_seed).
has_result() { local l; while IFS= read -r l; do [[ $l == RESULT* ]] && return 0; done < "$1"; return 1; }
bf_nap_fifo "$secret_file.fifo"

run_seed() {
  local seed=$1 dir="$logdir/seed-$seed" r nodes="" delay t0 t_fault why="" vpid="" dropped=""
  local -a rc survivors
  mkdir -p "$dir"
  RANDOM=$seed
  delay=$(( 500 + RANDOM % 1001 ))
  bf_new_secret
  # The victim alone on B, the others on A; one rdma_cm port each.
  for ((r = 1; r <= nranks; r++)); do
    if [ "$r" -eq "$victim" ]; then a=$ip_b; else a=$ip_a; fi
    nodes="$nodes${nodes:+,}$a:$((port + r))"
  done
  echo "NODES $nodes cut=$cut" >"$dir/driver.log"
  local rank_limit=$(( (duration + 4 * bound + 60000) / 1000 ))
  t0=$(now_ms)
  for ((r = 1; r <= nranks; r++)); do
    bf_spawn_rank "$r" "$nodes" verbs 30000 "$rank_limit" nice -n 19
  done
  # Wait for every rank's STARTED line (the start barrier passed).
  local deadline ok; tnow; deadline=$(( NOW + 60000 ))
  while :; do
    ok=1
    for ((r = 1; r <= nranks; r++)); do
      if [ -z "${rank_pids[$r]:-}" ]; then
        rank_pid "$dir/rank$r.log"; rank_pids[$r]=$RP
        [ -n "$RP" ] || ok=0
      fi
    done
    [ $ok -eq 1 ] && break
    local gone=""
    for ((r = 1; r <= nranks; r++)); do
      [ -n "${rank_pids[$r]:-}" ] || alive "${wrap_pid[$r]}" || gone="$gone $r"
    done
    tnow
    if [ "$NOW" -ge $deadline ] || [ -n "$gone" ]; then
      echo "seed=$seed FAIL: the ranks did not start within 60 s (exited before STARTED:${gone:- none}); logs: $dir"
      grep -h 'FAIL\|error\|ERR' "$dir"/rank*.log | head -8 | sed 's/^/    /'
      teardown; return 1
    fi
    nap 0.02
  done
  local t_started; tnow; t_started=$NOW
  echo "STARTED all seen $((t_started - t0)) ms after the spawn" >>"$dir/driver.log"
  vpid=${rank_pids[$victim]}
  local frac=00$((delay % 1000))
  nap "$((delay / 1000)).${frac: -3}"
  tnow; t_fault=$NOW
  local rx0 tx0 rx1="" leak="" u0 u1 d0
  counter rcvd_pkts; rx0=$CNT; counter sent_pkts; tx0=$CNT; snmp; u0=$UDPIN d0=$IPDROP
  case "$fault" in
    kill) kill -KILL "$vpid" || why="$why victim-gone-before-the-fault" ;;
    freeze) kill -STOP "$vpid" || why="$why victim-gone-before-the-fault" ;;
    cut) apply_cut || why="$why cut-failed" ;;
  esac
  tnow
  echo "FAULT $fault victim=$victim at ${delay}ms after start, applied $(( NOW - t_started )) ms after the STARTED lines" >>"$dir/driver.log"
  # A fault that came after the run (a starved driver) tests nothing.
  for ((r = 1; r <= nranks; r++)); do
    has_result "$dir/rank$r.log" && why="$why fault-too-late(rank$r-had-finished)"
  done
  ip rule >>"$dir/driver.log" 2>&1
  if [ "$fault" = cut ]; then
    nap 0.3; counter rcvd_pkts; rx1=$CNT; snmp; u1=$UDPIN
  fi
  bf_wait_survivors 60
  local t_surv; tnow; t_surv=$NOW
  bf_wait_victim "$vpid" 60
  if [ "$fault" = cut ]; then
    local rx2 tx2; counter rcvd_pkts; rx2=$CNT; counter sent_pkts; tx2=$CNT; snmp
    leak=$((UDPIN - u1))
    echo "RXE $ibdev_b rcvd_pkts: at-cut=$rx0 cut+0.3s=$rx1 end=$rx2 (+$((rx2 - rx1)));" \
         "sent_pkts: at-cut=$tx0 end=$tx2 (+$((tx2 - tx0)))" >>"$dir/driver.log"
    echo "SNMP Udp InDatagrams: at-cut=$u0 cut+0.3s=$u1 end=$UDPIN (+$leak after cut+0.3s);" \
         "Ip InNoRoutes+InAddrErrors: at-cut=$d0 end=$IPDROP (+$((IPDROP - d0)) dropped)" >>"$dir/driver.log"
    dropped=$((IPDROP - d0))
    [ "$leak" -gt 0 ] && why="$why cut-leaked:$leak-pkts"
  fi
  wrap_pid=() rank_pids=()
  teardown
  bf_judge
  local secs; secs=$(( ($(now_ms) - t0) / 100 ))
  local ssecs=$(( (t_surv - t_fault) / 100 ))
  local extra="survivors-done=+$((ssecs / 10)).$((ssecs % 10))s"
  [ -n "$leak" ] && extra="$extra leak=$leak dropped=$dropped"
  bf_report "seed=$seed fault=$fault$([ "$fault" = cut ] && echo "($cut)") victim=$victim delay=${delay}ms" \
    "$((secs / 10)).$((secs % 10))s" "$extra"
}

echo "busy_fault_verbs: in the guest ($(uname -r), $(nproc) cpus): A=$ip_a ($dev_a) B=$ip_b ($dev_b, $ibdev_b)" \
     "threads=$threads duration=${duration}ms T=${peer_timeout}ms bound=${bound}ms scheme=$scheme"
bf_run_seeds
if [ $fails -eq 0 ]; then
  echo "PASS: busy_fault_verbs fault=$fault cut=$cut victim=$victim home=$home scheme=$scheme seeds $seed_lo-$seed_hi ($runs runs)"
  exit 0
fi
echo "FAIL: busy_fault_verbs fault=$fault cut=$cut victim=$victim home=$home scheme=$scheme: $fails of $runs runs failed, first at seed $first_fail (rerun: $self --bin $bin --fault $fault --cut $cut --victim $victim --seed $first_fail)"
echo "logs: $logdir"
exit 1
