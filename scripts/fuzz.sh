#!/bin/bash
# Build every libFuzzer target in tests/fuzz with clang (-fsanitize=fuzzer,address,undefined)
# straight from the source files (no CMake), then run each for a bounded time on a copy of
# its seed corpus. Fails on any crash, leak, sanitizer report or broken invariant, and prints
# the crashing input's path and the fuzzer's report; prints the executions per target.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 20)
#
# Environment: FUZZ_DIR (work dir, default a fresh mktemp -d, kept on failure),
# FUZZ_TARGETS (space-separated subset, default all), FUZZ_JOBS (parallel builds, nproc).
# Exit: 0 all clean, 1 a target failed, 77 clang (with libFuzzer) is unavailable.
# Every target first replays tests/fuzz/crashes/<name>/* (reproducers of fixed bugs).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-20}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS_PER_TARGET]" >&2; exit 2 ;; esac
fz=$top/tests/fuzz

# Invariants that a known, reported and not yet fixed source bug breaks. Each -D switches
# one check off (see the target's source); drop it once the fix is in.
known_bugs=()

# target name -> library sources linked into it (fuzz_<name>.c and fuzz_log.c always are;
# some targets #include the one source they test to reach its static functions).
declare -A srcs=(
  [tcp_wire]="src/net/tcp/tcp_wire.c"
  [tcp_protect]="src/net/tcp/tcp_protect.c"
  [verbs_wire]="src/net/verbs/verbs_wire.c"
  [key]="src/core/key.c"
  [nodes]="src/net/nodes.c src/core/config.c src/net/auth.c src/net/auth_keys.c"
  [config]="src/core/config.c"
  [seg_service]="src/core/errors.c"
  [seg_reply]="src/core/errors.c src/core/key.c"
  [chan]="src/daemon/chan.c src/core/config.c"
  [sock]="src/daemon/sock.c"
  [lock_wire]="src/lock/recover_wire.c"
  [srsl]="src/core/errors.c"
  [barrier]=""
)
all_targets=$(printf '%s\n' "${!srcs[@]}" | sort | tr '\n' ' ')
targets=${FUZZ_TARGETS:-$all_targets}

# ---- the compiler ----
cc=""
for c in clang clang-16 clang-15 clang-14; do
  if command -v "$c" >/dev/null; then cc=$c; break; fi
done
if [ -z "$cc" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  if command -v apt-get >/dev/null && { [ -z "$sudo" ] || sudo -n true 2>/dev/null; }; then
    echo "fuzz: installing clang" >&2
    export DEBIAN_FRONTEND=noninteractive
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends clang; } \
      >/dev/null 2>&1 || true
    command -v clang >/dev/null && cc=clang
  fi
fi
work=${FUZZ_DIR:-$(mktemp -d /tmp/ddss-fuzz.XXXXXX)}
mkdir -p "$work"
if [ -z "$cc" ] || ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' |
   "$cc" -x c -fsanitize=fuzzer - -o "$work/probe" 2>/dev/null; then
  echo "fuzz: SKIP: clang with libFuzzer is not available (apt-get install clang)" >&2
  exit 77
fi

# ---- build ----
cflags=(-std=c11 -D_GNU_SOURCE -DDDSS_BUILDING_LIBRARY -DDDSS_DEBUG_LOG=1 -g -O1
        -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
        -fno-sanitize-recover=all -Wall -Wextra -Wno-unused-parameter
        -I"$top/include" -I"$top/src" -I"$fz" "${known_bugs[@]}")
libs=(-lpthread -lsodium) # -lsodium: nodes.c loads the group key (net/auth.c)
build() {
  local t=$1 s srcpaths=()
  for s in ${srcs[$t]}; do srcpaths+=("$top/$s"); done
  "$cc" "${cflags[@]}" "$fz/fuzz_$t.c" "$fz/fuzz_log.c" "${srcpaths[@]}" "${libs[@]}" \
    -o "$work/fuzz_$t" >"$work/build_$t.log" 2>&1 || { echo "fuzz: $t: build failed" >&2; cat "$work/build_$t.log" >&2; return 1; }
}
jobs=${FUZZ_JOBS:-$(nproc)}
pids=() names=()
for t in $targets; do
  [ -n "${srcs[$t]+x}" ] || { echo "fuzz: unknown target $t (have: $all_targets)" >&2; exit 2; }
  build "$t" & pids+=($!) names+=("$t")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
bad=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || bad=1; done
[ "$bad" -eq 0 ] || exit 1

# ---- run ----
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
printf '%-14s %12s %8s  %s\n' target executions "exec/s" result
for t in $targets; do
  corpus=$work/corpus_$t
  arts=$work/artifacts_$t/
  rm -rf "$corpus" "$arts"; mkdir -p "$corpus" "$arts"
  [ -d "$fz/corpus/$t" ] && cp -r "$fz/corpus/$t/." "$corpus/"
  log=$work/run_$t.log
  result=ok
  if [ -d "$fz/crashes/$t" ] && [ -n "$(ls -A "$fz/crashes/$t")" ]; then
    if ! "$work/fuzz_$t" "$fz/crashes/$t"/* >"$work/regress_$t.log" 2>&1; then
      result="FAILED (a reproducer in tests/fuzz/crashes/$t crashes again)"
      failed+=("$t")
      printf '%-14s %12s %8s  %s\n' "$t" - - "$result"
      echo "---- $t: reproducer report ($work/regress_$t.log) ----"
      tail -n 60 "$work/regress_$t.log"
      continue
    fi
  fi
  rc=0
  ( "$work/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -error_exitcode=1 \
    -artifact_prefix="$arts" "$corpus" >"$log" 2>&1 ) 2>/dev/null || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc)"
    failed+=("$t")
  fi
  printf '%-14s %12s %8s  %s\n' "$t" "${execs:--}" "${rate:--}" "$result"
  if [ "$rc" -ne 0 ]; then
    for a in "$arts"*; do [ -e "$a" ] && echo "  crashing input: $a"; done
    echo "---- $t: fuzzer report ($log) ----"
    grep -v '^#[0-9]' "$log" | tail -n 80
    echo "----"
  fi
done
if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (work dir kept: $work)" >&2
  exit 1
fi
[ -n "${FUZZ_DIR:-}" ] || rm -rf "$work"
echo "fuzz: all clean: $(echo $targets)"
