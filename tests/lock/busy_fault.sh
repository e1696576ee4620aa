#!/bin/bash
# Fault tests with BUSY victims (issue 26, part 3): three ranks of tests/lock/busy_fault.c,
# each in its own network namespace on one bridge (the bridge in a namespace of its own:
# the host's interfaces are never touched), over tcp with a random group secret. All ranks
# loop on one lock homed at rank --home; at a random moment in [0.5 s, 1.5 s] after the
# start (from the seed) one rank is
#   kill    killed (SIGKILL)
#   freeze  stopped (SIGSTOP), and continued (SIGCONT) after the survivors have finished:
#           everything it tries must fail, and it must exit on its own
#   cut     cut off: its link is set down (bridge side), so it stays alive but unreachable;
#           it must get errors, never hang, and exit on its own
# Every rank checks itself (busy_fault.c) and prints a RESULT line; this driver checks the
# exit statuses and the bounds, prints one line per seed and PASS/FAIL.
#
# usage: busy_fault.sh --bin PATH [--fault kill|freeze|cut] [--victim R] [--home R]
#          [--seed S | --seeds A-B] [--peer-timeout-ms T] [--duration-ms MS]
#          [--threads N] [--bound-ms MS] [--scheme ncosed|dqnl|srsl] [--logdir DIR]
#          [--allow ENOLCK,...] [--keep-logs] [--keep-going]
# Needs root and `ip netns` (else exit 77, SKIP). Logs (DDSS_LOG_LEVEL=info) per seed and
# rank under --logdir (default: a new /tmp/busy_fault.XXXXXX), kept on failure.
set -u

# What busy_fault_verbs.sh shares: options, waiting, judging and reporting a seed.
. "$(dirname "$0")/busy_fault_lib.sh"
bin="" fault=kill victim=3 home=1 seeds="1-1" peer_timeout=2000 duration=5000 threads=3
allow="" bound="" scheme=ncosed logdir="" keep_logs=0 keep_going=0 nranks=3 port=7000
bf_parse_args busy_fault.sh 22 "$@"
bf_check_fault busy_fault.sh "kill|freeze|cut"
bf_check_rest busy_fault.sh
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: busy_fault.sh needs root (network namespaces)"; exit 77
fi
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: busy_fault.sh needs iproute2 with 'ip netns'"; exit 77
fi
if ! command -v timeout >/dev/null; then
  echo "SKIP: busy_fault.sh needs timeout (coreutils)"; exit 77
fi

tag="ddssbf$$"            # every namespace of this run carries it
brns="$tag-br"
own_logdir=0
if [ -z "$logdir" ]; then
  logdir=$(mktemp -d /tmp/busy_fault.XXXXXX); own_logdir=1
fi
mkdir -p "$logdir"
secret_file="$logdir/secret"
declare -a wrap_pid   # the `timeout` wrappers we started, by rank
failed_any=0

# Kill every process in our namespaces (all started by us) and delete the namespaces.
teardown_net() {
  local ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
    done
  done
  bf_kill_wrappers
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do
    ip netns del "$ns" 2>/dev/null
  done
}
cleanup() {
  trap - EXIT INT TERM HUP
  teardown_net
  if bf_logs_disposable; then
    rm -rf "$logdir"
  else
    rm -f "$secret_file"
  fi
}
bf_traps busy_fault.sh

setup_net() {
  local r
  ip netns add "$brns" || return 1
  ip -n "$brns" link set lo up
  ip -n "$brns" link add br0 type bridge || return 1
  ip -n "$brns" link set br0 up
  for r in $(seq 1 $nranks); do
    ip netns add "$tag-r$r" || return 1
    ip -n "$tag-r$r" link set lo up
    ip link add "v$r" netns "$brns" type veth peer name eth0 netns "$tag-r$r" || return 1
    ip -n "$brns" link set "v$r" master br0
    ip -n "$brns" link set "v$r" up
    ip -n "$tag-r$r" addr add "198.18.0.$r/24" dev eth0
    ip -n "$tag-r$r" link set eth0 up
  done
}

run_seed() {
  local seed=$1 dir="$logdir/seed-$seed" r nodes="" delay t0 t_fault why="" vpid=""
  local -a rc survivors
  mkdir -p "$dir"
  RANDOM=$seed
  delay=$(( 500 + RANDOM % 1001 ))
  bf_new_secret
  for r in $(seq 1 $nranks); do nodes="$nodes${nodes:+,}198.18.0.$r:$port"; done
  if ! setup_net >"$dir/net.log" 2>&1; then
    echo "seed=$seed FAIL: network setup failed ($(tail -1 "$dir/net.log"))"; return 1
  fi
  local rank_limit=$(( (duration + 4 * bound + 30000) / 1000 ))
  t0=$(now_ms)
  for r in $(seq 1 $nranks); do
    bf_spawn_rank "$r" "$nodes" tcp 10000 "$rank_limit" ip netns exec "$tag-r$r"
  done
  # Wait for every rank's STARTED line (the start barrier passed).
  local deadline=$(( $(now_ms) + 20000 )) ok
  while :; do
    ok=1
    for r in $(seq 1 $nranks); do rank_pid "$dir/rank$r.log"; [ -n "$RP" ] || ok=0; done
    [ $ok -eq 1 ] && break
    if [ "$(now_ms)" -ge $deadline ]; then
      echo "seed=$seed FAIL: the ranks did not start (see $dir)"; teardown_net; return 1
    fi
    sleep 0.02
  done
  local t_started; t_started=$(now_ms)
  rank_pid "$dir/rank$victim.log"; vpid=$RP
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  t_fault=$(now_ms)
  case "$fault" in
    kill) kill -KILL "$vpid" || why="$why victim-gone-before-the-fault" ;;
    freeze) kill -STOP "$vpid" || why="$why victim-gone-before-the-fault" ;;
    cut) ip -n "$brns" link set "v$victim" down ;;
  esac
  echo "FAULT $fault victim=$victim at ${delay}ms after start" >>"$dir/driver.log"
  bf_wait_survivors 20
  bf_wait_victim "$vpid" 20
  wrap_pid=()
  teardown_net
  bf_judge
  local secs; secs=$(( ($(now_ms) - t0) / 100 ))
  bf_report "seed=$seed fault=$fault victim=$victim delay=${delay}ms" "${secs:0:-1}.${secs: -1}s"
}

bf_run_seeds
if [ $fails -eq 0 ]; then
  echo "PASS: busy_fault fault=$fault victim=$victim home=$home scheme=$scheme seeds $seed_lo-$seed_hi ($runs runs)"
  exit 0
fi
echo "FAIL: busy_fault fault=$fault victim=$victim home=$home scheme=$scheme: $fails of $runs runs failed, first at seed $first_fail (rerun: $0 --bin $bin --fault $fault --victim $victim --seed $first_fail)"
echo "logs: $logdir"
exit 1
