# Sourced by the busy_fault drivers (busy_fault.sh: tcp in network namespaces,
# busy_fault_verbs.sh: verbs in the Soft-RoCE guest): what they share, so that the two judge
# a seed alike. Not run on its own. The functions work on the drivers' variables (bin, fault,
# victim, home, seeds, ..., wrap_pid, logdir) and on run_seed's locals (dir, rc, survivors,
# why, t_started, t_fault: bash scoping is dynamic), and use only builtins where they poll:
# the verbs driver competes with the busy ranks for the guest's (emulated) cpus.

# bf_parse_args NAME HELP_LAST ARG...: sets the common options' variables from ARG...
# (-h prints lines 2..HELP_LAST of the driver). An option not common to both goes to the
# driver's bf_own_opt OPT VALUE..., if it defines one: it returns 0 when it took OPT and its
# value; anything else is an unknown argument (exit 2).
bf_parse_args() {
  local name=$1 help_last=$2; shift 2
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
      -h|--help) sed -n "2,${help_last}p" "$0"; exit 0 ;;
      *)
        if declare -F bf_own_opt >/dev/null && bf_own_opt "$@"; then
          shift
        else
          echo "$name: unknown argument $1" >&2; exit 2
        fi ;;
    esac
    shift
  done
}

# bf_check_fault NAME LIST: exit 2 unless --fault is one of kill, freeze, cut (LIST: how
# the driver's usage spells them, its default first).
bf_check_fault() {
  case "$fault" in kill|freeze|cut) ;; *) echo "$1: --fault $2" >&2; exit 2 ;; esac
}

# bf_check_rest NAME: splits --seeds into seed_lo and seed_hi, defaults the bound (a call
# may take the peer timeout, its sweep and a margin for a slow machine), exit 2 without
# an executable --bin.
bf_check_rest() {
  case "$seeds" in
    *-*) seed_lo=${seeds%-*} seed_hi=${seeds#*-} ;;
    *) seed_lo=$seeds seed_hi=$seeds ;;
  esac
  [ -n "$bound" ] || bound=$((peer_timeout + peer_timeout / 4 + 3000))
  if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$1: --bin must name the built lock_busy_fault" >&2; exit 2
  fi
}

# bf_traps NAME: cleanup (the driver's) on every exit; a signal counts as a failure, so
# that cleanup keeps the logs.
bf_traps() {
  trap cleanup EXIT
  trap "echo \"$1: interrupted\"; failed_any=1; exit 130" INT TERM HUP
}

# bf_logs_disposable: true when cleanup may delete the log folder (ours, nothing failed,
# no --keep-logs).
bf_logs_disposable() {
  [ $own_logdir -eq 1 ] && [ $failed_any -eq 0 ] && [ $keep_logs -eq 0 ]
}

# bf_kill_wrappers: kills the `timeout` wrappers we started and reaps them (so no job
# report and no zombie is left), forgets them. The ranks themselves are the driver's.
bf_kill_wrappers() {
  local p
  for p in "${wrap_pid[@]:-}"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
  done
  for p in "${wrap_pid[@]:-}"; do
    [ -n "$p" ] && { wait "$p"; } 2>/dev/null
  done
  wrap_pid=()
}

# rank_pid FILE: sets RP to the rank's pid, from its STARTED line ("" until then).
rank_pid() {
  local l
  RP=""
  [ -r "$1" ] || return 0
  while IFS= read -r l; do
    case $l in STARTED\ rank=*\ pid=*) l=${l#*pid=}; RP=${l%% *}; return 0 ;; esac
  done < "$1"
}
alive() { kill -0 "$1" 2>/dev/null; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
# tnow: sets NOW (ms), without the fork of $(now_ms).
tnow() { local t=${EPOCHREALTIME/./}; NOW=$(( t / 1000 )); }
# nap SECS: sleeps; without a fork (a timed read on a fifo nobody writes to) once
# bf_nap_fifo has opened one.
nap() {
  if [ -n "${sleep_fd:-}" ]; then read -r -t "$1" -u "$sleep_fd"; else sleep "$1"; fi
}
# bf_nap_fifo PATH: makes the fifo for nap (the driver removes it).
bf_nap_fifo() { mkfifo "$1" && exec {sleep_fd}<>"$1"; }

# Wait until every pid given has exited (the wrappers, our children) or @1 ms pass.
wait_exit() {
  local deadline p any; tnow; deadline=$(( NOW + $1 )); shift
  while :; do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    [ $any -eq 0 ] && return 0
    tnow; [ "$NOW" -ge $deadline ] && return 1
    nap 0.05
  done
}

# bf_new_secret: a fresh random group secret for the seed in $secret_file.
bf_new_secret() {
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file"
  chmod 600 "$secret_file"
}

# bf_spawn_rank R NODES TRANSPORT CONNECT_MS LIMIT_S [PREFIX...]: starts rank R of
# busy_fault.c in the background (through PREFIX..., e.g. `ip netns exec NS`), logging to
# $dir/rankR.log, killed after LIMIT_S s whatever happens; its wrapper goes to wrap_pid[R].
bf_spawn_rank() {
  local r=$1 nodes=$2 transport=$3 connect_ms=$4 limit=$5; shift 5
  # In a subshell: timeout re-raises its child's fatal signal on itself, and bash would
  # report that job as "Killed"; the subshell exits with 128 + the signal instead.
  ( timeout -s KILL "$limit" "$@" env \
    DDSS_NODES="$nodes" DDSS_RANK=$r DDSS_SIZE=$nranks DDSS_SECRET_FILE="$secret_file" \
    DDSS_TRANSPORT=$transport DDSS_PEER_TIMEOUT_MS=$peer_timeout DDSS_LOCK_SCHEME=$scheme \
    DDSS_LOG_LEVEL=info DDSS_CONNECT_TIMEOUT_MS=$connect_ms \
    "$bin" --threads "$threads" --duration-ms "$duration" --seed "$seed" --home "$home" \
    --victim "$victim" --fault "$fault" --bound-ms "$bound" ${allow:+--allow "$allow"} \
    >"$dir/rank$r.log" 2>&1; exit $? ) 2>/dev/null &
  wrap_pid[$r]=$!
}

# bf_stack R PID GDB_S: keeps a stack of a hung rank for the report (gdb, at most GDB_S s).
bf_stack() {
  command -v gdb >/dev/null &&
    timeout "$3" gdb -p "$2" -batch -ex "thread apply all bt" >"$dir/rank$1.gdb" 2>&1
}

# bf_wait_survivors GDB_S: waits for the survivors (every rank but the victim) to end by
# themselves: the rest of the duration + at most the bound for a call in flight, + the
# checker's wait; a little more, then they count as hung (stack kept, killed). Sets
# survivors, rc[R] (exit status or "hung") and adds to why.
bf_wait_survivors() {
  local r sw=() hp s
  survivors=()
  for ((r = 1; r <= nranks; r++)); do
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
      rank_pid "$dir/rank$r.log"; hp=$RP
      [ -n "$hp" ] && bf_stack "$r" "$hp" "$1"
      kill -KILL "$hp" 2>/dev/null
    fi
  done
  for r in "${survivors[@]}"; do
    { wait "${wrap_pid[$r]}"; } 2>/dev/null; s=$?
    [ "${rc[$r]:-}" = hung ] || rc[$r]=$s
  done
}

# bf_wait_victim VPID GDB_S: a frozen victim is thawed; a frozen or cut one must then exit
# on its own (else stack kept, killed). Sets rc[victim] and adds to why.
bf_wait_victim() {
  if [ "$fault" = freeze ]; then
    kill -CONT "$1" 2>/dev/null
  fi
  if [ "$fault" != kill ]; then
    if ! wait_exit $(( bound + duration + 5000 )) "${wrap_pid[$victim]}"; then
      why="$why victim-did-not-exit"
      bf_stack "$victim" "$1" "$2"
      kill -KILL "$1" 2>/dev/null
    fi
  fi
  { wait "${wrap_pid[$victim]}"; } 2>/dev/null; rc[$victim]=$?
}

# bf_judge: the exit statuses (survivors 0, a killed victim 137, any other victim 0 on
# its own) and no -EPROTO line in any rank's log; adds to why.
bf_judge() {
  local r eproto
  for r in "${survivors[@]}"; do
    if [ "${rc[$r]}" != 0 ]; then why="$why rank$r:rc=${rc[$r]}"; fi
  done
  if [ "$fault" = kill ]; then
    [ "${rc[$victim]}" = 137 ] || why="$why victim:rc=${rc[$victim]}(expected-killed)"
  else
    [ "${rc[$victim]}" = 0 ] || why="$why victim:rc=${rc[$victim]}"
  fi
  eproto=$(cat "$dir"/rank*.log | grep -c -- "-EPROTO\|EPROTO:" )
  [ "$eproto" -gt 0 ] && why="$why eproto-lines=$eproto"
}

# bf_report HEAD TIME [EXTRA]: prints the seed's line: HEAD, PASS or FAIL:why, TIME,
# EXTRA, the home's counter check and a digest of each rank's RESULT line; on FAIL also
# the ranks' FAIL lines and where the logs are (returns 1). A passed seed's logs go,
# unless --keep-logs.
bf_report() {
  local summary="" line r chk
  for ((r = 1; r <= nranks; r++)); do
    line=$(grep '^RESULT' "$dir/rank$r.log" | tail -1)
    if [ -n "$line" ]; then
      summary="$summary | r$r $(echo "$line" | sed -n 's/.*incs=\([0-9]*\) errors=\([^ ]*\) .*maxlat_ms=\([^ ]*\) .*status=\([A-Z]*\).*/incs=\1 err=\2 lat=\3 \4/p')"
    else
      summary="$summary | r$r no-result"
    fi
  done
  chk=$(grep -h -o 'check=.*status' "$dir"/rank*.log | head -1 | sed 's/ status$//')
  if [ -z "$why" ]; then
    echo "$1 PASS $2${3:+ $3} ${chk}${summary}"
    [ $keep_logs -eq 1 ] || rm -rf "$dir"
    return 0
  fi
  echo "$1 FAIL:$why $2${3:+ $3} ${chk}${summary}"
  grep -h '^FAIL' "$dir"/rank*.log | head -12 | sed 's/^/    /'
  echo "    logs: $dir"
  return 1
}

# bf_run_seeds: run_seed (the driver's) for each seed, stopping at the first failure
# unless --keep-going; sets runs, fails, first_fail (and failed_any, for cleanup).
bf_run_seeds() {
  local seed
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
}
