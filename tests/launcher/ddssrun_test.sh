#!/usr/bin/env bash
# Black-box checks of the ddssrun launcher: environment contract, output
# forwarding, failure propagation, timeouts and usage errors.
# Usage: ddssrun_test.sh /path/to/ddssrun
# The rank commands are single-quoted on purpose: the ranks expand them.
# shellcheck disable=SC2016
set -u

DDSSRUN=${1:?usage: $0 /path/to/ddssrun}
[ -x "$DDSSRUN" ] || { echo "not executable: $DDSSRUN" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PASSED=0
FAILED=0

pass() { echo "PASS: $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $1${2:+ ($2)}"; FAILED=$((FAILED + 1)); }

# Every launch goes through timeout(1) so a broken ddssrun cannot hang the suite.
# Sets RC and ELAPSED (ms); stdout/stderr land in $TMP/out and $TMP/err.
run() {
    local start end
    start=$(date +%s%N)
    timeout 30 "$DDSSRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    RC=$?
    end=$(date +%s%N)
    ELAPSED=$(( (end - start) / 1000000 ))
}

# Strips the "[r] " prefix of a rank's line.
rank_line() { sed -n "s/^\[$1\] //p" "$TMP/out"; }

check_env_per_rank() {
    run -n 3 sh -c 'echo rank=$DDSS_RANK size=$DDSS_SIZE'
    local expected=$'[1] rank=1 size=3\n[2] rank=2 size=3\n[3] rank=3 size=3'
    if [ "$RC" -eq 0 ] && [ "$(sort "$TMP/out")" = "$expected" ]; then
        pass "rank and size per rank"
    else
        fail "rank and size per rank" "rc=$RC out=$(cat "$TMP/out")"
    fi
}

check_nodes_and_group() {
    run -n 3 sh -c 'echo "$DDSS_NODES $DDSS_GROUP"'
    local distinct nodes group entries ports
    distinct=$(sed 's/^\[[0-9]*\] //' "$TMP/out" | sort -u | wc -l)
    nodes=$(rank_line 1 | cut -d' ' -f1)
    group=$(rank_line 1 | cut -d' ' -f2)
    entries=$(tr ',' '\n' <<<"$nodes" | grep -cE '^127\.0\.0\.1:[0-9]+$')
    ports=$(tr ',' '\n' <<<"$nodes" | cut -d: -f2 | sort -u | wc -l)
    if [ "$RC" -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 3 ] && [ "$distinct" -eq 1 ] &&
       [ "$entries" -eq 3 ] && [ "$ports" -eq 3 ] && [ -n "$group" ]; then
        pass "DDSS_NODES and DDSS_GROUP identical across ranks, distinct ports"
    else
        fail "DDSS_NODES and DDSS_GROUP identical across ranks, distinct ports" \
             "rc=$RC out=$(cat "$TMP/out")"
    fi
}

check_listen_fd() {
    run -n 3 python3 -c '
import os, socket
fd = int(os.environ["DDSS_LISTEN_FD"])
rank = int(os.environ["DDSS_RANK"])
port = int(os.environ["DDSS_NODES"].split(",")[rank - 1].rsplit(":", 1)[1])
s = socket.socket(fileno=fd)
listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
print("ok" if listening and s.getsockname()[1] == port else "bad %r" % (s.getsockname(),))
s.detach()
'
    if [ "$RC" -eq 0 ] && [ "$(grep -c '^\[[123]\] ok$' "$TMP/out")" -eq 3 ]; then
        pass "tcp: DDSS_LISTEN_FD is a listening socket on the rank's port"
    else
        fail "tcp: DDSS_LISTEN_FD is a listening socket on the rank's port" \
             "rc=$RC out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi
}

check_verbs_env() {
    DDSS_LISTEN_FD=9 DDSS_NODES_FILE=/nonexistent RXE_IP='' run -n 2 --transport verbs \
        sh -c 'echo "${DDSS_TRANSPORT}:${DDSS_LISTEN_FD-unset}:${DDSS_NODES_FILE-unset}:$DDSS_NODES"'
    if [ "$RC" -eq 0 ] && [ "$(grep -cE '^\[[12]\] verbs:unset:unset:127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+$' "$TMP/out")" -eq 2 ]; then
        pass "verbs: no DDSS_LISTEN_FD, inherited DDSS_NODES_FILE removed"
    else
        fail "verbs: no DDSS_LISTEN_FD, inherited DDSS_NODES_FILE removed" "rc=$RC out=$(cat "$TMP/out")"
    fi
}

check_failure_propagation() {
    run -n 3 sh -c 'if [ $DDSS_RANK = 2 ]; then exit 7; fi; exec sleep 1000'
    if [ "$RC" -eq 7 ] && [ "$ELAPSED" -lt 10000 ] &&
       grep -q 'rank 2 exited with status 7' "$TMP/err"; then
        pass "failing rank fails the run and stops the others (${ELAPSED} ms)"
    else
        fail "failing rank fails the run and stops the others" \
             "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
}

check_killed_rank() {
    run -n 2 sh -c 'if [ $DDSS_RANK = 1 ]; then kill -9 $$; fi; exec sleep 1000'
    if [ "$RC" -ne 0 ] && [ "$ELAPSED" -lt 10000 ] && grep -q 'signal 9' "$TMP/err"; then
        pass "rank killed by a signal is reported (rc=$RC)"
    else
        fail "rank killed by a signal is reported" "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
}

check_stderr_forwarding() {
    run -n 1 sh -c 'echo out; printf "err1\nerr2-no-newline" >&2'
    if [ "$RC" -eq 0 ] && [ "$(cat "$TMP/out")" = "[1] out" ] &&
       [ "$(cat "$TMP/err")" = $'[1] err1\n[1] err2-no-newline' ]; then
        pass "stderr forwarded with prefix, unterminated last line kept"
    else
        fail "stderr forwarded with prefix, unterminated last line kept" \
             "rc=$RC out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi
}

check_long_line() {
    run -n 1 python3 -c 'import sys; sys.stdout.write("x" * 65536 + "\n")'
    local len
    len=$(head -n 1 "$TMP/out" | wc -c)
    if [ "$RC" -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 1 ] && [ "$len" -eq $((4 + 65536 + 1)) ]; then
        pass "64 KiB line forwarded whole"
    else
        fail "64 KiB line forwarded whole" "rc=$RC lines=$(wc -l <"$TMP/out") len=$len"
    fi
}

check_timeout() {
    run -n 2 --timeout 1 sleep 1000
    if [ "$RC" -eq 124 ] && [ "$ELAPSED" -lt 5000 ]; then
        pass "--timeout kills the ranks and exits 124 (${ELAPSED} ms)"
    else
        fail "--timeout kills the ranks and exits 124" "rc=$RC elapsed=${ELAPSED}ms"
    fi
}

check_exec_failure() {
    run -n 2 /nonexistent/program
    if [ "$RC" -eq 127 ] && grep -q 'cannot exec /nonexistent/program' "$TMP/err"; then
        pass "exec failure exits 127"
    else
        fail "exec failure exits 127" "rc=$RC err=$(cat "$TMP/err")"
    fi
}

check_sigterm_forwarded() {
    local start end pid
    start=$(date +%s%N)
    timeout 30 "$DDSSRUN" -n 2 sleep 1000 >"$TMP/out" 2>"$TMP/err" </dev/null &
    pid=$!
    sleep 0.5
    # $pid is timeout(1), which forwards SIGTERM to ddssrun.
    kill -TERM "$pid"
    wait "$pid"
    RC=$?
    end=$(date +%s%N)
    ELAPSED=$(( (end - start) / 1000000 ))
    if [ "$RC" -eq 143 ] && [ "$ELAPSED" -lt 5000 ]; then
        pass "SIGTERM to ddssrun stops the ranks, exit 143"
    else
        fail "SIGTERM to ddssrun stops the ranks, exit 143" "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
}

check_grandchild_holding_pipe() {
    # The backgrounded sleep keeps the rank's stdout open after the rank exits.
    run -n 1 sh -c 'sleep 4 & echo done'
    if [ "$RC" -eq 0 ] && [ "$ELAPSED" -lt 3000 ] && [ "$(cat "$TMP/out")" = "[1] done" ]; then
        pass "grandchild holding the pipe does not keep ddssrun alive (${ELAPSED} ms)"
    else
        fail "grandchild holding the pipe does not keep ddssrun alive" "rc=$RC elapsed=${ELAPSED}ms"
    fi
}

check_usage_errors() {
    local args bad=""
    for args in "sh -c true" "-n 0 sh -c true" "-n 1025 sh -c true" "--bogus -n 1 sh -c true" \
                "-n 2" "-n 1 --transport ib sh -c true" "-n 1 --host nowhere sh -c true"; do
        # shellcheck disable=SC2086  # word splitting of $args is intended
        run $args
        [ "$RC" -eq 2 ] || bad="$bad [$args -> $RC]"
    done
    if [ -z "$bad" ]; then
        pass "bad usage exits 2"
    else
        fail "bad usage exits 2" "$bad"
    fi
}

check_env_per_rank
check_nodes_and_group
check_listen_fd
check_verbs_env
check_failure_propagation
check_killed_rank
check_stderr_forwarding
check_long_line
check_timeout
check_exec_failure
check_sigterm_forwarded
check_grandchild_holding_pipe
check_usage_errors

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
