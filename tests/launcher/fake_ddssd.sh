#!/usr/bin/env bash
# A stand-in for ddssd in ddssrun's daemon-mode tests (ddssrun_test.sh). It checks what
# ddssrun gives a daemon (arguments, environment, open fds), says one line, writes its
# ready byte, and runs until SIGTERM, which makes it exit 0.
# Usage: fake_ddssd.sh --ready-fd N
# Environment (inherited through ddssrun):
#   FAKE_DDSSD_DIR   (required) where it appends its pids and those of its children to
#                    "pids" and creates "ready.<rank>" just before it is ready
#   FAKE_DDSSD_MODE  misbehave: early-exit (exit 3 before ready), close (close the ready
#                    fd without writing, then run on), never-ready (keep it open, run on),
#                    die (exit 3 one second after ready), bad-exit (exit 5 on SIGTERM),
#                    ignore-term (ignore SIGTERM)
#   FAKE_DDSSD_RANK  only this rank misbehaves (default: all)
# The last rank takes 0.2 s to get ready, as a real one waits for the others.
set -u

die() { echo "fake ddssd: $*" >&2; exit 1; }

if [ $# -ne 2 ] || [ "$1" != --ready-fd ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
    die "usage: $0 --ready-fd N, not: $*"
fi
fd=$2
: "${FAKE_DDSSD_DIR:?}"
[[ ${DDSS_RANK-} =~ ^[0-9]+$ ]] || die "bad DDSS_RANK '${DDSS_RANK-}'"
[[ ${DDSS_DAEMON_CLIENTS-} =~ ^[0-9]+$ ]] || die "bad DDSS_DAEMON_CLIENTS '${DDSS_DAEMON_CLIENTS-}'"
case ${DDSS_DAEMON_SOCKET-} in
/tmp/ddssrun.*/ddssd-"$DDSS_RANK".sock) ;;
*) die "bad DDSS_DAEMON_SOCKET '${DDSS_DAEMON_SOCKET-}'" ;;
esac
[ -d "${DDSS_DAEMON_SOCKET%/*}" ] || die "no directory for $DDSS_DAEMON_SOCKET"
[ -z "${DDSS_MODE+x}${DDSS_CLIENT+x}${DDSS_CLIENTS+x}" ] || die "a client's variable is set"

# Only stdio, the listen socket (tcp), the ready fd and bash's own script fd may be open.
# ls lists our fds from its own process, so the listing adds none.
ls "/proc/$$/fd" >"$FAKE_DDSSD_DIR/fds.$DDSS_RANK"
while read -r n; do
    case $n in 0 | 1 | 2 | "$fd") continue ;; esac
    [ "$n" = 3 ] && [ "${DDSS_LISTEN_FD-}" = 3 ] && continue
    [ "$(readlink "/proc/$$/fd/$n")" = "$(readlink -f "$0")" ] && continue
    die "unexpected open fd $n -> $(readlink "/proc/$$/fd/$n")"
done <"$FAKE_DDSSD_DIR/fds.$DDSS_RANK"
{ true >&"$fd"; } 2>/dev/null || die "ready fd $fd is not open for writing"

echo $$ >>"$FAKE_DDSSD_DIR/pids"
echo "fake ddssd rank=$DDSS_RANK clients=$DDSS_DAEMON_CLIENTS size=$DDSS_SIZE" \
     "listen=${DDSS_LISTEN_FD-unset} group=$DDSS_GROUP sock=$DDSS_DAEMON_SOCKET"
: >"$DDSS_DAEMON_SOCKET"        # left behind, as by a killed daemon: ddssrun removes it

mode=${FAKE_DDSSD_MODE-}
[ -z "${FAKE_DDSSD_RANK-}" ] || [ "$FAKE_DDSSD_RANK" = "$DDSS_RANK" ] || mode=""
case $mode in
ignore-term) trap '' TERM ;;
bad-exit) trap 'exit 5' TERM ;;
*) trap 'exit 0' TERM ;;
esac

case $mode in
early-exit)
    echo "fake ddssd: giving up before ready" >&2
    exit 3 ;;
close)
    exec {fd}>&- ;;
never-ready)
    ;;
*)
    [ "$DDSS_RANK" = "$DDSS_SIZE" ] && sleep 0.2
    : >"$FAKE_DDSSD_DIR/ready.$DDSS_RANK"
    printf x >&"$fd"
    exec {fd}>&- ;;
esac

if [ "$mode" = die ]; then
    sleep 1
    echo "fake ddssd: dying while clients run" >&2
    exit 3
fi
while :; do
    sleep 3600 &
    echo $! >>"$FAKE_DDSSD_DIR/pids"
    wait $!
done
