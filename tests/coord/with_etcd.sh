#!/bin/bash
# with_etcd.sh [--members N] -- command [args...]
#
# Run a command against a private etcd: N members (default 1) on free loopback ports, data
# in a temporary directory, all removed when the command ends (or fails, or is killed).
# The command sees:
#   DDSS_TEST_ETCD       the client endpoints, "127.0.0.1:port,..."
#   DDSS_TEST_ETCD_CTL   this script's control file: "stop I" / "start I" lines written to it
#                        stop or restart member I (1..N), "freeze I" / "thaw I" stall it
#                        (SIGSTOP) and let it go on; the script answers by writing
#                        "done" to the file named after it with .ack (fault tests)
# Exits 77 (SKIP) when etcd is not installed (scripts/install-deps.sh installs it).
set -u
members=1
while [ $# -gt 0 ]; do
  case $1 in
    --members) members=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--members N] -- command [args...]" >&2; exit 2; }
if ! command -v etcd >/dev/null; then
  echo "SKIP: etcd is not installed (scripts/install-deps.sh installs etcd-server)"
  exit 77
fi

dir=$(mktemp -d /tmp/ddss-etcd.XXXXXX)
declare -a pids client peer
cmd_pid=""
cleanup() {
  [ -n "$cmd_pid" ] && kill "$cmd_pid" 2>/dev/null
  for p in "${pids[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do [ -n "$p" ] && kill -CONT "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free loopback ports, two per member (client, peer), held by nobody when etcd binds them.
# Below the ephemeral range where it leaves room: a member stopped by a test gets its port
# back when it restarts (up to 9 s later in coord_etcd_outage_tcp), and meanwhile another
# test running beside this one (ctest -j2) binds port 0 or connects, from that range only.
mapfile -t ports < <(python3 - "$members" <<'EOF'
import random, socket, sys
want = 2 * int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
socks, tries = [], 0
while len(socks) < want:
    s = socket.socket()
    tries += 1
    try:
        s.bind(("127.0.0.1", random.randrange(10000, low) if low > 11000 and tries < 1000 else 0))
    except OSError:
        s.close()
        continue
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
)
cluster=""
for i in $(seq 1 "$members"); do
  client[$i]=${ports[$((2 * i - 2))]}
  peer[$i]=${ports[$((2 * i - 1))]}
  cluster+="${cluster:+,}m$i=http://127.0.0.1:${peer[$i]}"
done

start_member() {
  local i=$1 state=new
  [ -d "$dir/m$i" ] && state=existing
  etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:${client[$i]}" \
    --advertise-client-urls "http://127.0.0.1:${client[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${peer[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${peer[$i]}" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" \
    --initial-cluster-token "ddss-test-$$" \
    --heartbeat-interval 100 --election-timeout 1000 \
    >>"$dir/m$i.log" 2>&1 &
  pids[$i]=$!
}

# Healthy: the member answers a read through the gateway (bounded: 20 s).
wait_healthy() {
  local i=$1
  for _ in $(seq 1 200); do
    if curl -s -m 1 -X POST "http://127.0.0.1:${client[$i]}/v3/kv/range" -d '{"key":"AA=="}' \
         2>/dev/null | grep -q '"header"'; then
      return 0
    fi
    kill -0 "${pids[$i]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "with_etcd: member $i did not come up; its log:" >&2
  tail -20 "$dir/m$i.log" >&2
  return 1
}

for i in $(seq 1 "$members"); do start_member "$i"; done
for i in $(seq 1 "$members"); do wait_healthy "$i" || exit 1; done
endpoints=""
for i in $(seq 1 "$members"); do endpoints+="${endpoints:+,}127.0.0.1:${client[$i]}"; done
export DDSS_TEST_ETCD=$endpoints
export DDSS_TEST_ETCD_CTL=$dir/ctl
: >"$DDSS_TEST_ETCD_CTL"

"$@" &
cmd_pid=$!
# Serve the command's fault requests while it runs.
done_lines=0
while kill -0 "$cmd_pid" 2>/dev/null; do
  n=$(wc -l <"$DDSS_TEST_ETCD_CTL")
  while [ "$done_lines" -lt "$n" ]; do
    done_lines=$((done_lines + 1))
    read -r what i < <(sed -n "${done_lines}p" "$DDSS_TEST_ETCD_CTL")
    case $what in
      stop) kill -9 "${pids[$i]}" 2>/dev/null; wait "${pids[$i]}" 2>/dev/null; pids[$i]="" ;;
      start) start_member "$i"; wait_healthy "$i" ;;
      freeze) kill -STOP "${pids[$i]}" 2>/dev/null ;;
      thaw) kill -CONT "${pids[$i]}" 2>/dev/null ;;
    esac
    echo done >>"$DDSS_TEST_ETCD_CTL.ack"
  done
  sleep 0.05
done
wait "$cmd_pid"
rc=$?
cmd_pid=""
exit $rc
