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

bin="" fault=kill victim=3 home=1 seeds="1-1" peer_timeout=2000 duration=5000 threads=3
allow="" bound="" scheme=ncosed logdir="" keep_logs=0 keep_going=0 nranks=3 port=7000
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift ;;
    --fault) fault=$2; shift ;;
    --victim) victim=$2; shift ;;
    --home) home=$2; shift ;;
    --seed) seeds="$2-$2"; shift ;;
    --seeds) seeds=$2; shift ;;
    --peer-timeout-ms) peer_timeout=$2; shift ;;
    --duration-ms) duration=$2; shift ;;
    --threads) threads=$2; shift ;;
    --bound-ms) bound=$2; shift ;;
    --scheme) scheme=$2; shift ;;
    --allow) allow=$2; shift ;;
    --logdir) logdir=$2; shift ;;
    --keep-logs) keep_logs=1 ;;
    --keep-going) keep_going=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "busy_fault.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$fault" in kill|freeze|cut) ;; *) echo "busy_fault.sh: --fault kill|freeze|cut" >&2; exit 2 ;; esac
case "$seeds" in
  *-*) seed_lo=${seeds%-*} seed_hi=${seeds#*-} ;;
  *) seed_lo=$seeds seed_hi=$seeds ;;
esac
[ -n "$bound" ] || bound=$((peer_timeout + peer_timeout / 4 + 3000))
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "busy_fault.sh: --bin must name the built lock_busy_fault" >&2; exit 2
fi
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
  for p in "${wrap_pid[@]:-}"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
  done
  for p in "${wrap_pid[@]:-}"; do
    [ -n "$p" ] && { wait "$p"; } 2>/dev/null
  done
  wrap_pid=()
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do
    ip netns del "$ns" 2>/dev/null
  done
}
cleanup() {
  trap - EXIT INT TERM HUP
  teardown_net
  if [ $own_logdir -eq 1 ] && [ $failed_any -eq 0 ] && [ $keep_logs -eq 0 ]; then
    rm -rf "$logdir"
  else
    rm -f "$secret_file"
  fi
}
trap cleanup EXIT
trap 'echo "busy_fault.sh: interrupted"; failed_any=1; exit 130' INT TERM HUP

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

# The rank's pid, from its STARTED line ("" until then).
rank_pid() { sed -n 's/^STARTED rank=[0-9]* pid=\([0-9][0-9]*\) size=.*/\1/p' "$1" 2>/dev/null | head -1; }
alive() { kill -0 "$1" 2>/dev/null; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Wait until every pid given has exited (the wrappers, our children) or @1 ms pass.
wait_exit() {
  local deadline=$(( $(now_ms) + $1 )) p any; shift
  while :; do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    [ $any -eq 0 ] && return 0
    [ "$(now_ms)" -ge $deadline ] && return 1
    sleep 0.05
  done
}

run_seed() {
  local seed=$1 dir="$logdir/seed-$seed" r nodes="" delay t0 t_fault why="" vpid=""
  local -a rc
  mkdir -p "$dir"
  RANDOM=$seed
  delay=$(( 500 + RANDOM % 1001 ))
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file"
  chmod 600 "$secret_file"
  for r in $(seq 1 $nranks); do nodes="$nodes${nodes:+,}198.18.0.$r:$port"; done
  if ! setup_net >"$dir/net.log" 2>&1; then
    echo "seed=$seed FAIL: network setup failed ($(tail -1 "$dir/net.log"))"; return 1
  fi
  local rank_limit=$(( (duration + 4 * bound + 30000) / 1000 ))
  t0=$(now_ms)
  for r in $(seq 1 $nranks); do
    # In a subshell: timeout re-raises its child's fatal signal on itself, and bash would
    # report that job as "Killed"; the subshell exits with 128 + the signal instead.
    ( timeout -s KILL "$rank_limit" ip netns exec "$tag-r$r" env \
      DDSS_NODES="$nodes" DDSS_RANK=$r DDSS_SIZE=$nranks DDSS_SECRET_FILE="$secret_file" \
      DDSS_TRANSPORT=tcp DDSS_PEER_TIMEOUT_MS=$peer_timeout DDSS_LOCK_SCHEME=$scheme \
      DDSS_LOG_LEVEL=info DDSS_CONNECT_TIMEOUT_MS=10000 \
      "$bin" --threads "$threads" --duration-ms "$duration" --seed "$seed" --home "$home" \
      --victim "$victim" --fault "$fault" --bound-ms "$bound" ${allow:+--allow "$allow"} \
      >"$dir/rank$r.log" 2>&1; exit $? ) 2>/dev/null &
    wrap_pid[$r]=$!
  done
  # Wait for every rank's STARTED line (the start barrier passed).
  local deadline=$(( $(now_ms) + 20000 )) ok
  while :; do
    ok=1
    for r in $(seq 1 $nranks); do [ -n "$(rank_pid "$dir/rank$r.log")" ] || ok=0; done
    [ $ok -eq 1 ] && break
    if [ "$(now_ms)" -ge $deadline ]; then
      echo "seed=$seed FAIL: the ranks did not start (see $dir)"; teardown_net; return 1
    fi
    sleep 0.02
  done
  local t_started; t_started=$(now_ms)
  vpid=$(rank_pid "$dir/rank$victim.log")
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  t_fault=$(now_ms)
  case "$fault" in
    kill) kill -KILL "$vpid" || why="$why victim-gone-before-the-fault" ;;
    freeze) kill -STOP "$vpid" || why="$why victim-gone-before-the-fault" ;;
    cut) ip -n "$brns" link set "v$victim" down ;;
  esac
  echo "FAULT $fault victim=$victim at ${delay}ms after start" >>"$dir/driver.log"
  # Survivors end by themselves: duration + at most the bound for a call in flight,
  # + the checker's wait; give them a little more, then they count as hung.
  local survivors=() sw=()
  for r in $(seq 1 $nranks); do
    [ "$r" -eq "$victim" ] && continue
    survivors+=("$r"); sw+=("${wrap_pid[$r]}")
  done
  local left=$(( duration - (t_fault - t_started) + 2 * bound + 5000 ))
  if ! wait_exit $left "${sw[@]}"; then
    why="$why survivors-hung"
  fi
  for r in "${survivors[@]}"; do
    if alive "${wrap_pid[$r]}"; then
      rc[$r]=hung
      # Keep a stack of the hung rank for the report.
      local hp; hp=$(rank_pid "$dir/rank$r.log")
      if [ -n "$hp" ] && command -v gdb >/dev/null; then
        timeout 20 gdb -p "$hp" -batch -ex "thread apply all bt" >"$dir/rank$r.gdb" 2>&1
      fi
      kill -KILL "$hp" 2>/dev/null
    fi
  done
  for r in "${survivors[@]}"; do
    { wait "${wrap_pid[$r]}"; } 2>/dev/null; local s=$?
    [ "${rc[$r]:-}" = hung ] || rc[$r]=$s
  done
  # The victim: thaw it, then it must exit on its own.
  if [ "$fault" = freeze ]; then
    kill -CONT "$vpid" 2>/dev/null
  fi
  if [ "$fault" != kill ]; then
    if ! wait_exit $(( bound + duration + 5000 )) "${wrap_pid[$victim]}"; then
      why="$why victim-did-not-exit"
      command -v gdb >/dev/null &&
        timeout 20 gdb -p "$vpid" -batch -ex "thread apply all bt" >"$dir/rank$victim.gdb" 2>&1
      kill -KILL "$vpid" 2>/dev/null
    fi
  fi
  { wait "${wrap_pid[$victim]}"; } 2>/dev/null; rc[$victim]=$?
  wrap_pid=()
  teardown_net
  # Judge.
  for r in "${survivors[@]}"; do
    if [ "${rc[$r]}" != 0 ]; then why="$why rank$r:rc=${rc[$r]}"; fi
  done
  if [ "$fault" = kill ]; then
    [ "${rc[$victim]}" = 137 ] || why="$why victim:rc=${rc[$victim]}(expected-killed)"
  else
    [ "${rc[$victim]}" = 0 ] || why="$why victim:rc=${rc[$victim]}"
  fi
  local eproto; eproto=$(cat "$dir"/rank*.log | grep -c -- "-EPROTO\|EPROTO:" )
  [ "$eproto" -gt 0 ] && why="$why eproto-lines=$eproto"
  local secs; secs=$(( ($(now_ms) - t0) / 100 ))
  local summary="" line
  for r in $(seq 1 $nranks); do
    line=$(grep '^RESULT' "$dir/rank$r.log" | tail -1)
    if [ -n "$line" ]; then
      summary="$summary | r$r $(echo "$line" | sed -n 's/.*incs=\([0-9]*\) errors=\([^ ]*\) .*maxlat_ms=\([^ ]*\) .*status=\([A-Z]*\).*/incs=\1 err=\2 lat=\3 \4/p')"
    else
      summary="$summary | r$r no-result"
    fi
  done
  local chk; chk=$(grep -h -o 'check=.*status' "$dir"/rank*.log | head -1 | sed 's/ status$//')
  if [ -z "$why" ]; then
    echo "seed=$seed fault=$fault victim=$victim delay=${delay}ms PASS ${secs:0:-1}.${secs: -1}s ${chk}${summary}"
    [ $keep_logs -eq 1 ] || rm -rf "$dir"
    return 0
  fi
  echo "seed=$seed fault=$fault victim=$victim delay=${delay}ms FAIL:$why ${secs:0:-1}.${secs: -1}s ${chk}${summary}"
  grep -h '^FAIL' "$dir"/rank*.log | head -12 | sed 's/^/    /'
  echo "    logs: $dir"
  return 1
}

fails=0 runs=0
first_fail=""
for seed in $(seq "$seed_lo" "$seed_hi"); do
  runs=$((runs + 1))
  if ! run_seed "$seed"; then
    fails=$((fails + 1)); failed_any=1
    [ -n "$first_fail" ] || first_fail=$seed
    [ $keep_going -eq 1 ] || break
  fi
done
if [ $fails -eq 0 ]; then
  echo "PASS: busy_fault fault=$fault victim=$victim home=$home scheme=$scheme seeds $seed_lo-$seed_hi ($runs runs)"
  exit 0
fi
echo "FAIL: busy_fault fault=$fault victim=$victim home=$home scheme=$scheme: $fails of $runs runs failed, first at seed $first_fail (rerun: $0 --bin $bin --fault $fault --victim $victim --seed $first_fail)"
echo "logs: $logdir"
exit 1
