#!/usr/bin/env bash
# run-peers.sh BUILD_DIR [--csv] [--quick] [--pairs N] [--transport tcp|verbs]
#
# DDSS against what users would pick instead, the same workload in the same run, all on
# loopback (the driver behind `ddss-bench peers`):
#   1. starts its own redis-server (a free port on 127.0.0.1, no persistence, a temporary
#      directory, pinned to CPU 1 where DDSS's home rank runs; stopped when this script
#      exits), and waits until it answers PING;
#   2. ddssrun -n 2 ddss-peers-bench: DDSS (direct mode, tcp, event completion) vs Redis:
#      get/put 1 B, 64 B, 4 KiB, lock + unlock, 8-client throughput, ratios and targets;
#   3. ddssrun --daemon -n 2 ddss-peers-bench: DDSS in daemon mode vs Redis;
#   4. --pairs N (default 5) pairs of runs back to back: the same as 2 with
#      DDSS_COMPLETION=poll, latencies only (MPI polls: the fair comparison), and
#      mpirun -np 2 ddss-mpi-bench: Open MPI one-sided RMA (osc pt2pt over btl tcp on lo),
#      DDSS first in odd pairs, MPI first in even ones; MPI is skipped with the reason when
#      mpirun cannot run here (then one poll run, no pairs);
#   5. a summary of the ratios: DDSS vs Redis (get, put, lock + unlock, throughput; direct
#      and daemon mode) and DDSS vs MPI (get, put, lock): each pair's DDSS / MPI, and their
#      median.
# Why pairs: loopback TCP on a VM has states that last seconds to minutes. On the 2-vCPU
# VM of issue 31 a bare round trip, both ends spinning, took 4.4 us in one and 9.7 us in
# the other, and every program's latency moved with it (docs/performance.md, "Two speeds of
# loopback"). Two programs cannot share blocks of calls as DDSS and Redis do, so each DDSS
# run is compared with the MPI run next to it, the two most likely to share a state. A
# state can still change inside a pair, either way; the median of the pairs' ratios holds
# while most pairs share one.
# --quick passes --quick to the programs (the smoke test: about a second each) and makes
# the default --pairs 1. --csv
# prints one CSV instead (the programs' rows with a leading "run" column, then the DDSS /
# MPI ratios as run "summary"); the programs' own output then goes to stderr only if one
# fails. --transport verbs runs DDSS over an RDMA device (on a machine without one, inside
# the Soft-RoCE guest: scripts/rdma-exec apps/peers/run-peers.sh build --transport verbs);
# Redis and the raw TCP ceiling stay on loopback TCP, and so does MPI.
#
# Environment: DDSSRUN, PEERS_BENCH, MPI_BENCH override the programs' paths (default: under
# BUILD_DIR). The targets are reported, never asserted.
# Exit status: 0 when every part ran (the MPI part may be skipped, with the reason); 77
# (SKIP) when redis-server is not installed; 1 on any error; 2 on bad usage.
set -u

usage() {
	echo "usage: $0 BUILD_DIR [--csv] [--quick] [--pairs N] [--transport tcp|verbs]" >&2
	exit 2
}

[ $# -ge 1 ] || usage
build=$(cd "$1" 2>/dev/null && pwd) || usage
shift
csv=0
quick=()
transport=tcp
pairs=
while [ $# -gt 0 ]; do
	case $1 in
	--csv) csv=1 ;;
	--quick) quick=(--quick) ;;
	--pairs)
		[ $# -ge 2 ] || usage
		case $2 in '' | *[!0-9]*) usage ;; esac
		if [ ${#2} -gt 2 ] || [ "$2" -lt 1 ] || [ "$2" -gt 20 ]; then usage; fi
		pairs=$2
		shift ;;
	--transport)
		[ $# -ge 2 ] || usage
		case $2 in tcp | verbs) transport=$2 ;; *) usage ;; esac
		shift ;;
	*) usage ;;
	esac
	shift
done

if [ -z "$pairs" ]; then
	pairs=5
	[ ${#quick[@]} = 0 ] || pairs=1
fi

ddssrun=${DDSSRUN:-$build/apps/ddssrun}
peers=${PEERS_BENCH:-$build/apps/peers/ddss-peers-bench}
mpib=${MPI_BENCH:-$build/apps/peers/ddss-mpi-bench}

say() { echo "run-peers: $*" >&2; }
# Headings go where the tables go: stdout, unless stdout is CSV.
note() {
	if [ $csv = 0 ]; then
		echo "$*"
	elif [ -n "$*" ]; then
		echo "$*" >&2
	fi
}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	say "SKIP: redis-server / redis-cli not installed (scripts/install-deps.sh installs them)"
	exit 77
fi
for p in "$ddssrun" "$peers"; do
	if [ ! -x "$p" ]; then
		say "$p not found: build it (make ddssrun ddssd ddss-peers-bench; hiredis needed)"
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddss-peers.XXXXXX") || exit 1
redis_pid=
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null
		wait "$redis_pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ncpu=$(nproc)
pin=()
if command -v taskset >/dev/null && [ "$ncpu" -ge 2 ]; then
	pin=(taskset -c 1)
fi

# ---- Redis ----

# Start redis-server on a random port; a port someone else holds makes it exit at once
# ("Address already in use"), then another is tried. Readiness is polled with PING,
# bounded at 10 s, never assumed after a fixed sleep.
start_redis() {
	local attempt i
	for attempt in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 40000))
		: >"$tmp/redis.log"
		"${pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' \
			--appendonly no --daemonize no --dir "$tmp" --logfile "$tmp/redis.log" \
			--loglevel warning </dev/null >/dev/null 2>&1 &
		redis_pid=$!
		for i in $(seq 200); do
			if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
				return 0
			fi
			kill -0 "$redis_pid" 2>/dev/null || break
			sleep 0.05
		done
		if kill -0 "$redis_pid" 2>/dev/null; then
			say "redis-server (pid $redis_pid, port $port) does not answer PING after 10 s"
			return 1
		fi
		wait "$redis_pid" 2>/dev/null
		redis_pid=
		if ! grep -q "Address already in use" "$tmp/redis.log"; then
			say "redis-server failed to start:"
			cat "$tmp/redis.log" >&2
			return 1
		fi
	done
	say "no free port for redis-server after 10 attempts"
	return 1
}

start_redis || exit 1
note "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (pid $redis_pid${pin:+, pinned to CPU 1}), no persistence"

# ---- the runs ----

# run NAME CMD...: run one program; it writes $tmp/NAME.csv. In --csv mode its output is
# kept and shown only if it fails.
run() {
	local name=$1 rc
	shift
	if [ $csv = 1 ]; then
		"$@" >"$tmp/$name.log" 2>&1
		rc=$?
		[ $rc = 0 ] || cat "$tmp/$name.log" >&2
	else
		"$@" </dev/null
		rc=$?
	fi
	if [ $rc != 0 ]; then
		say "$name: failed (exit $rc): $*"
		return 1
	fi
	if [ ! -s "$tmp/$name.csv" ] || [ "$(wc -l <"$tmp/$name.csv")" -lt 10 ]; then
		say "$name: ran but printed no numbers ($tmp/$name.csv)"
		return 1
	fi
}

peers_args=(--redis-port "$port" "${quick[@]}")
runs=()

note ""
note "== DDSS vs Redis: direct mode, $transport, event completion =="
DDSS_COMPLETION=event run direct-event "$ddssrun" -n 2 --transport "$transport" --timeout 300 -- \
	"$peers" "${peers_args[@]}" --csv-out "$tmp/direct-event.csv" || exit 1
runs+=(direct-event)

note ""
note "== DDSS vs Redis: daemon mode (a ddssd per rank, the bench as its client), $transport, event =="
DDSS_COMPLETION=event run daemon-event "$ddssrun" -n 2 --transport "$transport" --daemon --timeout 300 \
	-- "$peers" "${peers_args[@]}" --csv-out "$tmp/daemon-event.csv" || exit 1
runs+=(daemon-event)

# ---- MPI ----

note ""
note "== MPI one-sided RMA (Open MPI; passive target; osc pt2pt over btl tcp on lo): can it run? =="
mpi_skip=
mpi_label=tcp-lo/osc-pt2pt
if [ ! -x "$mpib" ]; then
	mpi_skip="ddss-mpi-bench was not built (no MPI C compiler: install libopenmpi-dev)"
elif ! command -v mpirun >/dev/null; then
	mpi_skip="mpirun not found (install openmpi-bin)"
else
	# Loopback only, through the network stack: by default one machine would get osc/sm
	# (shared memory: MPI_Get is a memcpy), which compares nothing with a transport.
	mpi=(mpirun -np 2 --oversubscribe --mca pml ob1 --mca btl self,tcp --mca osc pt2pt
	     --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
	     --mca btl_base_warn_component_unused 0)
	if [ "$ncpu" -ge 2 ]; then
		mpi+=(--bind-to core) # rank 0 on CPU 0, rank 1 on CPU 1, as the DDSS ranks
	else
		mpi+=(--bind-to none)
	fi
	if [ "$(id -u)" = 0 ]; then
		export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	fi
	if ! timeout 60 "${mpi[@]}" "$mpib" --probe </dev/null >"$tmp/mpi-probe.log" 2>&1; then
		mpi_skip="mpirun cannot run 2 processes here: $(grep -v '^ *$' "$tmp/mpi-probe.log" |
			head -n 5 | tr '\n' ' ')"
	fi
fi
if [ -n "$mpi_skip" ]; then
	say "MPI: SKIP: $mpi_skip"
	note "MPI: SKIPPED ($mpi_skip)"
fi

# ---- DDSS in poll mode and MPI, pair by pair ----

poll_run() {
	note ""
	note "== pair $1 of $pairs: DDSS vs Redis, direct mode, $transport, poll completion (latencies; for the MPI comparison) =="
	DDSS_COMPLETION=poll run "direct-poll.$1" "$ddssrun" -n 2 --transport "$transport" \
		--timeout 300 -- "$peers" "${peers_args[@]}" --skip-throughput \
		--csv-out "$tmp/direct-poll.$1.csv" || return 1
	runs+=("direct-poll.$1")
}
mpi_run() {
	note ""
	note "== pair $1 of $pairs: MPI one-sided RMA =="
	run "mpi.$1" timeout 300 "${mpi[@]}" "$mpib" --label "$mpi_label" "${quick[@]}" \
		--csv-out "$tmp/mpi.$1.csv" || return 1
	runs+=("mpi.$1")
}
[ -z "$mpi_skip" ] || pairs=1 # nothing to pair with: one poll run for its latencies
for k in $(seq 1 "$pairs"); do
	if [ -n "$mpi_skip" ]; then
		poll_run "$k" || exit 1
	elif [ $((k % 2)) = 1 ]; then # which goes first alternates: no side always second
		poll_run "$k" && mpi_run "$k" || exit 1
	else
		mpi_run "$k" && poll_run "$k" || exit 1
	fi
done

# ---- summary ----

merged=$tmp/all.csv
{
	echo "run,$(head -n 1 "$tmp/direct-event.csv")"
	for r in "${runs[@]}"; do
		tail -n +2 "$tmp/$r.csv" | sed "s/^/$r,/"
	done
} >"$merged"

# Columns of all.csv: 1 run, 2 mode, 3 transport, 4 completion, 5 kind, 6 test, 7 size,
# 8 system, 9 call, 10 median_us, 11 p99_us, 12 mean_us, 13 ops_per_s, 14 samples,
# 15 ratio, 16 target, 17 met.
awk -F, -v csv=$csv -v mpi_skip="$mpi_skip" -v tp="$transport" -v pairs="$pairs" '
function sz(s) { return s == 0 ? "" : s " B" }
NR == 1 { if (csv) print; next }
{
	if (csv) print
	if ($5 == "latency") med[$1 SUBSEP $6 SUBSEP $7 SUBSEP $9] = $10
	if ($5 == "throughput") ops[$1 SUBSEP $8] = $13
	if ($5 == "ratio" && ($1 == "direct-event" || $1 == "daemon-event")) {
		n++; rrun[n] = $1; rtest[n] = $6; rsize[n] = $7; rcall[n] = $9
		rval[n] = $15; rtgt[n] = $16; rmet[n] = $17
	}
}
END {
	if (!csv) {
		print ""
		print "== Summary: DDSS / peer (medians; < 1 = DDSS faster; throughput: > 1 = DDSS more) =="
		printf "%-46s %10s %10s %8s  %s\n", "DDSS vs Redis, same run", "DDSS", "Redis", "ratio", "target"
	}
	for (i = 1; i <= n; i++) {
		if (rrun[i] != last) {
			last = rrun[i]
			if (!csv) printf "  %s\n", rrun[i] == "direct-event" ? "direct mode, " tp ", event" : "daemon mode, " tp ", event"
		}
		t = rtest[i]; s = rsize[i]
		if (t == "get") { d = med[rrun[i], t, s, "ddss_get"]; p = med[rrun[i], t, s, "GET"]; what = "get " sz(s) " (GET)" }
		else if (t == "put") { d = med[rrun[i], t, s, "ddss_put"]; p = med[rrun[i], t, s, "SET"]; what = "put " sz(s) " (SET)" }
		else if (t == "lock+unlock") {
			pc = index(rcall[i], "EVALSHA") ? "SET NX PX+EVALSHA" : "SET NX PX+DEL"
			d = med[rrun[i], t, 0, "lock(X)+unlock"]; p = med[rrun[i], t, 0, pc]
			what = "lock+unlock (" pc ")"
		} else if (index(rcall[i], "raw TCP")) {
			d = ops[rrun[i], "raw TCP"]; p = ops[rrun[i], "Redis"]
			what = "raw TCP ceiling, 8 clients, ops/s"
		} else { d = ops[rrun[i], "DDSS"]; p = ops[rrun[i], "Redis"]; what = "throughput, 8 clients, ops/s" }
		info = index(rcall[i], "raw TCP") ? "(information: the most loopback TCP allows)" : "(information: the safe unlock)"
		if (!csv)
			printf "    %-42s %10s %10s %8.3f  %s\n", what, d, p, rval[i],
				rtgt[i] == "" ? info : rtgt[i] "  " rmet[i]
	}
	if (!csv) {
		print ""
		if (mpi_skip != "") { print "DDSS vs MPI: skipped (" mpi_skip ")"; exit }
		print "DDSS vs MPI one-sided (MPI: lock_all epoch + flush per call; lock: empty epoch; Open MPI polls)"
		print "  (DDSS poll, MPI: medians over the pairs; poll/MPI: the median of the ratios of the pairs)"
		printf "    %-34s %9s %9s %9s %10s %10s\n", "", "DDSS evt", "DDSS poll", "MPI", "evt/MPI", "poll/MPI"
	}
	split("get get get put put put lock+unlock", mt, " ")
	split("1 64 4096 1 64 4096 0", ms, " ")
	split("ddss_get ddss_get ddss_get ddss_put ddss_put ddss_put lock(X)+unlock", md, " ")
	split("get+flush get+flush get+flush put+flush put+flush put+flush lock(X)+unlock", mm, " ")
	for (i = 1; i <= 7; i++) {
		de = med["direct-event", mt[i], ms[i], md[i]]
		# Each pair: DDSS in poll mode / the MPI run right after it. The row: medians.
		np = 0; pl = ""
		for (k = 1; k <= pairs; k++) {
			dp = med["direct-poll." k, mt[i], ms[i], md[i]]
			m = med["mpi." k, mt[i], ms[i], mm[i]]
			if (dp == "" || m == "" || m == 0) continue
			np++; pd[np] = dp; pm[np] = m; pr[np] = dp / m
			pl = pl sprintf(" %.3f", dp / m)
		}
		if (np == 0) continue
		m = median(pm, np); dp = median(pd, np); r = median(pr, np)
		if (csv) {
			printf "summary,direct,%s,event,ratio,%s,%s,DDSS/MPI,%s / %s,,,,,,%.3f,,info\n", tp, mt[i], ms[i], md[i], mm[i], de / m
			printf "summary,direct,%s,poll,ratio,%s,%s,DDSS/MPI,%s / %s (median of %d pair%s:%s),,,,,%d,%.3f,,info\n", tp, mt[i], ms[i], md[i], mm[i], np, np == 1 ? "" : "s", pl, np, r
		} else
			printf "    %-34s %9.2f %9.2f %9.2f %10.3f %10.3f  pairs:%s\n", mt[i] (ms[i] ? " " sz(ms[i]) : "") " (MPI: " mm[i] ")", de, dp, m, de / m, r, pl
	}
}
# The median of v[1..n] (sorted in place).
function median(v, n,   a, b, t) {
	for (a = 2; a <= n; a++)
		for (b = a; b > 1 && v[b - 1] > v[b]; b--) { t = v[b]; v[b] = v[b - 1]; v[b - 1] = t }
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}' "$merged"
