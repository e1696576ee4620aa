#!/usr/bin/env bash
# Black-box checks of the ddssrun launcher: environment contract, output
# forwarding, failure propagation, timeouts, usage errors, and daemon mode with
# fake_ddssd.sh as the daemon.
# Usage: ddssrun_test.sh /path/to/ddssrun
# The rank commands are single-quoted on purpose: the ranks expand them.
# shellcheck disable=SC2016
set -u

DDSSRUN=${1:?usage: $0 /path/to/ddssrun}
[ -x "$DDSSRUN" ] || { echo "not executable: $DDSSRUN" >&2; exit 1; }

# Start from a clean fd table (only stdio and bash's script fd), so that an fd the
# fake daemon finds open was leaked by ddssrun, not inherited from whoever runs us.
for fd in "/proc/$$/fd"/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && [ "$fd" != 255 ] && eval "exec $fd>&-"
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The fake daemon as "ddssd" beside a copy of ddssrun, for the default --ddssd.
mkdir "$TMP/bin"
cp "$DDSSRUN" "$TMP/bin/ddssrun"
cp "$(dirname "$0")/fake_ddssd.sh" "$TMP/bin/ddssd"
chmod +x "$TMP/bin/ddssd"
FAKE=$TMP/bin/ddssd
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
                "-n 2" "-n 1 --transport ib sh -c true" "-n 1 --host nowhere sh -c true" \
                "-n 1 --clients 2 sh -c true" "-n 1 --ddssd $FAKE sh -c true" \
                "-n 1 --daemon --ddssd $FAKE --clients 0 sh -c true" \
                "-n 1 --daemon --ddssd $FAKE --clients 257 sh -c true" \
                "-n 1 --daemon --ddssd $FAKE"; do
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

# --- daemon mode -------------------------------------------------------------

# Runs ddssrun --daemon with the fake daemon; its records go to a fresh $FAKE_DIR.
daemon_run() {
    FAKE_DIR=$(mktemp -d -p "$TMP")
    FAKE_DDSSD_DIR=$FAKE_DIR run --daemon --ddssd "$FAKE" "$@"
}

# Prints the processes recorded in $FAKE_DIR/pids (fake daemons, their children,
# clients) that still run, after giving the killed ones a moment to vanish.
leftovers() {
    local try pid state left
    for try in 1 2 3 4 5 6 7 8 9 10; do
        left=""
        while read -r pid; do
            state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
            [ -n "$state" ] && [ "$state" != Z ] && left="$left $pid"
        done <"$FAKE_DIR/pids"
        [ -z "$left" ] && return
        [ "$try" = 10 ] || sleep 0.2
    done
    echo "$left"
}

# The socket directories named in the run's output that still exist.
sock_dirs_left() {
    local dir
    grep -ohE '/tmp/ddssrun\.[A-Za-z0-9]{6}' "$TMP/out" | sort -u | while read -r dir; do
        [ -e "$dir" ] && echo "$dir"
    done
}

# Checks that the run left no process and no socket directory behind.
check_clean_end() {
    local what=$1 left dirs
    left=$(leftovers)
    dirs=$(sock_dirs_left)
    if [ -z "$left" ] && [ -z "$dirs" ] && grep -q '/tmp/ddssrun\.' "$TMP/out"; then
        pass "$what: no process and no socket directory left"
    else
        fail "$what: no process and no socket directory left" \
             "alive:$left dirs:$dirs out=$(cat "$TMP/out")"
    fi
}

CLIENT_LINE='echo "client $DDSS_RANK.$DDSS_CLIENT/$DDSS_CLIENTS size=$DDSS_SIZE mode=$DDSS_MODE" \
    "listen=${DDSS_LISTEN_FD-unset} group=$DDSS_GROUP sock=$DDSS_DAEMON_SOCKET" \
    "ready=$(ls "$FAKE_DDSSD_DIR" | grep -c "^ready\.")"'

check_daemon_clients() {
    daemon_run -n 2 --clients 3 sh -c "$CLIENT_LINE"
    local r i expected="" got groups
    for r in 1 2; do
        expected+="[ddssd $r] fake ddssd rank=$r clients=3 size=2 listen=3 sock=DIR/ddssd-$r.sock"$'\n'
        for i in 1 2 3; do
            expected+="[$r.$i] client $r.$i/3 size=2 mode=daemon listen=unset sock=DIR/ddssd-$r.sock ready=2"$'\n'
        done
    done
    expected=$(LC_ALL=C sort <<<"${expected%$'\n'}")
    got=$(sed -E 's| group=[0-9a-f]+||; s|/tmp/ddssrun\.[A-Za-z0-9]{6}/|DIR/|' "$TMP/out" | LC_ALL=C sort)
    groups=$(grep -oE 'group=[0-9a-f]+' "$TMP/out" | sort -u | wc -l)
    if [ "$RC" -eq 0 ] && [ "$got" = "$expected" ] && [ "$groups" -eq 1 ] &&
       [ "$(grep -ohE '/tmp/ddssrun\.[A-Za-z0-9]{6}' "$TMP/out" | sort -u | wc -l)" -eq 1 ] &&
       [ ! -s "$TMP/err" ]; then
        pass "daemon mode: 2 ranks x 3 clients, started after all daemons are ready, env and prefixes"
    else
        fail "daemon mode: 2 ranks x 3 clients, started after all daemons are ready, env and prefixes" \
             "rc=$RC got=$got err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, success"
}

check_daemon_default_path() {
    DDSSRUN=$TMP/bin/ddssrun FAKE_DDSSD_DIR=$TMP run -n 1 --daemon sh -c 'echo "ok $DDSS_MODE"'
    if [ "$RC" -eq 0 ] && grep -qx '\[1\] ok daemon' "$TMP/out"; then
        pass "daemon mode: ddssd found beside ddssrun by default; one client is prefixed [r]"
    else
        fail "daemon mode: ddssd found beside ddssrun by default; one client is prefixed [r]" \
             "rc=$RC out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi
}

check_daemon_missing() {
    run -n 1 --daemon --ddssd /nonexistent/ddssd sh -c true
    if [ "$RC" -eq 2 ] && grep -q 'no daemon binary /nonexistent/ddssd' "$TMP/err"; then
        pass "daemon mode: missing ddssd is a usage error"
    else
        fail "daemon mode: missing ddssd is a usage error" "rc=$RC err=$(cat "$TMP/err")"
    fi
}

check_daemon_client_fails() {
    daemon_run -n 2 --clients 2 sh -c 'echo $$ >>"$FAKE_DDSSD_DIR/pids"
        if [ $DDSS_RANK.$DDSS_CLIENT = 2.2 ]; then exit 7; fi; exec sleep 1000'
    if [ "$RC" -eq 7 ] && [ "$ELAPSED" -lt 10000 ] &&
       grep -q 'rank 2 client 2 exited with status 7' "$TMP/err"; then
        pass "daemon mode: a failing client fails the run and stops the rest (${ELAPSED} ms)"
    else
        fail "daemon mode: a failing client fails the run and stops the rest" \
             "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, failing client"
}

check_daemon_skip() {
    daemon_run -n 2 --clients 2 sh -c 'exit 77'
    if [ "$RC" -eq 77 ]; then
        pass "daemon mode: clients that all exit 77 give 77"
    else
        fail "daemon mode: clients that all exit 77 give 77" "rc=$RC err=$(cat "$TMP/err")"
    fi
}

check_daemon_not_ready() {
    FAKE_DDSSD_MODE=early-exit FAKE_DDSSD_RANK=2 daemon_run -n 2 sh -c "$CLIENT_LINE"
    if [ "$RC" -eq 3 ] && [ "$ELAPSED" -lt 5000 ] && ! grep -q "] client " "$TMP/out" &&
       grep -q 'ddssd of rank 2 exited before it was ready: status 3' "$TMP/err"; then
        pass "daemon mode: a daemon that exits before it is ready fails the run (${ELAPSED} ms)"
    else
        fail "daemon mode: a daemon that exits before it is ready fails the run" \
             "rc=$RC elapsed=${ELAPSED}ms out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, daemon not ready"

    FAKE_DDSSD_MODE=close FAKE_DDSSD_RANK=1 daemon_run -n 2 sh -c "$CLIENT_LINE"
    if [ "$RC" -eq 1 ] && [ "$ELAPSED" -lt 5000 ] && ! grep -q "] client " "$TMP/out" &&
       grep -q 'ddssd of rank 1 closed its ready fd without writing to it' "$TMP/err"; then
        pass "daemon mode: a daemon that closes its ready fd unready fails the run (${ELAPSED} ms)"
    else
        fail "daemon mode: a daemon that closes its ready fd unready fails the run" \
             "rc=$RC elapsed=${ELAPSED}ms out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi
}

check_daemon_timeout() {
    FAKE_DDSSD_MODE=never-ready daemon_run -n 2 --timeout 1 sh -c "$CLIENT_LINE"
    if [ "$RC" -eq 124 ] && [ "$ELAPSED" -lt 5000 ] && ! grep -q "] client " "$TMP/out"; then
        pass "daemon mode: --timeout covers the wait for the daemons (${ELAPSED} ms)"
    else
        fail "daemon mode: --timeout covers the wait for the daemons" \
             "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, timeout"
}

check_daemon_dies() {
    FAKE_DDSSD_MODE=die FAKE_DDSSD_RANK=2 daemon_run -n 2 --clients 2 \
        sh -c 'echo $$ >>"$FAKE_DDSSD_DIR/pids"; exec sleep 1000'
    if [ "$RC" -eq 3 ] && [ "$ELAPSED" -lt 10000 ] &&
       grep -q 'ddssd of rank 2 died while its clients ran: status 3' "$TMP/err"; then
        pass "daemon mode: a daemon dying under its clients fails the run (${ELAPSED} ms)"
    else
        fail "daemon mode: a daemon dying under its clients fails the run" \
             "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, daemon died"
}

check_daemon_bad_stop() {
    FAKE_DDSSD_MODE=bad-exit FAKE_DDSSD_RANK=1 daemon_run -n 2 sh -c true
    if [ "$RC" -eq 5 ] && grep -q 'ddssd of rank 1 did not stop cleanly: status 5' "$TMP/err"; then
        pass "daemon mode: a daemon that exits non-zero on SIGTERM fails the run"
    else
        fail "daemon mode: a daemon that exits non-zero on SIGTERM fails the run" \
             "rc=$RC err=$(cat "$TMP/err")"
    fi

    FAKE_DDSSD_MODE=ignore-term FAKE_DDSSD_RANK=2 daemon_run -n 2 sh -c true
    if [ "$RC" -eq 137 ] && [ "$ELAPSED" -ge 9500 ] && [ "$ELAPSED" -lt 15000 ] &&
       grep -q 'daemons still running 10 s after SIGTERM, sending SIGKILL' "$TMP/err" &&
       grep -q 'ddssd of rank 2 did not stop cleanly: signal 9 (SIGKILL)' "$TMP/err"; then
        pass "daemon mode: a daemon ignoring SIGTERM is killed after 10 s and fails the run"
    else
        fail "daemon mode: a daemon ignoring SIGTERM is killed after 10 s and fails the run" \
             "rc=$RC elapsed=${ELAPSED}ms err=$(cat "$TMP/err")"
    fi
    check_clean_end "daemon mode, daemon ignoring SIGTERM"
}

# --coordinator: the private etcd binds ports picked free a moment before, which another
# process may take in between; etcd then exits at start, and ddssrun starts it again on
# fresh ports (3 tries). A stand-in etcd first in PATH exits at start as many times as
# FAKE_ETCD_FAILS says (counted in a file), then runs the real one.
check_coordinator_etcd_retry() {
    local real
    real=$(command -v etcd) || { echo "SKIP: --coordinator's etcd retry (etcd is not installed)"; return; }
    mkdir -p "$TMP/etcdbin"
    cat >"$TMP/etcdbin/etcd" <<EOS
#!/bin/sh
n=\$(cat "$TMP/etcd-starts" 2>/dev/null || echo 0)
echo \$((n + 1)) >"$TMP/etcd-starts"
if [ "\$n" -lt "\$FAKE_ETCD_FAILS" ]; then
    echo "listen tcp 127.0.0.1:1: bind: address already in use" >&2
    exit 1
fi
exec "$real" "\$@"
EOS
    chmod +x "$TMP/etcdbin/etcd"

    rm -f "$TMP/etcd-starts"
    FAKE_ETCD_FAILS=1 PATH="$TMP/etcdbin:$PATH" run --coordinator -n 2 sh -c 'echo "$DDSS_COORDINATOR"'
    if [ "$RC" -eq 0 ] && [ "$(cat "$TMP/etcd-starts")" = 2 ] &&
       [ "$(grep -c '^\[[12]\] etcd://127\.0\.0\.1:[0-9]*/' "$TMP/out")" = 2 ]; then
        pass "--coordinator: etcd that exits at start once is started again on fresh ports"
    else
        fail "--coordinator: etcd that exits at start once is started again on fresh ports" \
             "rc=$RC starts=$(cat "$TMP/etcd-starts" 2>/dev/null) out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
    fi

    rm -f "$TMP/etcd-starts"
    FAKE_ETCD_FAILS=99 PATH="$TMP/etcdbin:$PATH" run --coordinator -n 2 sh -c 'echo ran'
    if [ "$RC" -ne 0 ] && [ "$(cat "$TMP/etcd-starts")" = 3 ] && ! grep -q ran "$TMP/out" &&
       grep -q 'etcd exited at start, 3 times' "$TMP/err"; then
        pass "--coordinator: etcd that always exits at start: 3 tries, then an error, no rank run"
    else
        fail "--coordinator: etcd that always exits at start: 3 tries, then an error, no rank run" \
             "rc=$RC starts=$(cat "$TMP/etcd-starts" 2>/dev/null) out=$(cat "$TMP/out") err=$(cat "$TMP/err")"
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
check_daemon_clients
check_daemon_default_path
check_daemon_missing
check_daemon_client_fails
check_daemon_skip
check_daemon_not_ready
check_daemon_timeout
check_daemon_dies
check_daemon_bad_stop
check_coordinator_etcd_retry

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
