#!/usr/bin/env bash
# perf-report.sh BUILD_DIR [--runs N] [--quick] [--against OLD_BUILD_DIR]
#
# The performance targets of issue 31, measured and written down by one command, so no
# figure in the docs is typed by hand. Runs, N times each (default 5), taking turns run by
# run, on tcp:
#   daemon  ddssrun --daemon -n 2 ddss-daemon-bench --csv: time daemon mode adds to get 1 B,
#           put 1 B and lock + unlock (target: <= 1 us, median);
#   lock    ddssrun -n 2 ddss-lock-bench --csv, with one waiter, one thread and 10 ms slices,
#           since only its table (a) is used: uncontended N-CoSED lock / raw atomic
#           (exclusive <= 1.05 x compare&swap, shared <= 1.1 x fetch&add);
#   peers   apps/peers/run-peers.sh BUILD_DIR --csv: 8-client throughput against Redis and
#           the raw TCP ceiling, poll-mode put 64 B and lock + unlock against Open MPI.
# Each run's CSV is stored as docs/perf/data/BENCH.RUN.csv, with machine.txt (date, CPUs,
# kernel, the haltpoll setting, the commit, the commands); then scripts/perf-tables.py
# writes docs/performance-targets.md and the README's table from them. The data set is
# replaced only when every run succeeded.
#
# --quick: fewer samples (the programs' --quick; ddss-daemon-bench has none, so --iters
# 200 --rounds 1), for trying the script; machine.txt and the page then say "quick run".
# --against OLD_BUILD_DIR: also runs the same benchmarks with the build before, alternating
# old and new run by run (which goes first alternates too), and prints each target old
# against new; that comparison is printed only, never written into the docs.
#
# Environment: PERF_TIMEOUT (default 600) bounds one daemon or lock run in seconds; a peers
# run gets 8 times as much (it runs DDSS seven times and MPI five, most of them short:
# run-peers.sh's pairs). DDSS_* variables are passed through and recorded in machine.txt.
# Exit status: 0; 1 when a benchmark fails, times out or prints no figures, or the tables
# cannot be written; 2 on bad usage.
set -u

usage() {
	echo "usage: $0 BUILD_DIR [--runs N] [--quick] [--against OLD_BUILD_DIR]" >&2
	exit 2
}

[ $# -ge 1 ] || usage
build=$(cd "$1" 2>/dev/null && pwd) || usage
shift
runs=5
quick=0
old=
while [ $# -gt 0 ]; do
	case $1 in
	--runs)
		[ $# -ge 2 ] || usage
		case $2 in '' | *[!0-9]*) usage ;; esac
		if [ "$2" -lt 1 ] || [ "$2" -gt 100 ]; then usage; fi
		runs=$2
		shift ;;
	--quick) quick=1 ;;
	--against)
		[ $# -ge 2 ] || usage
		old=$(cd "$2" 2>/dev/null && pwd) || usage
		shift ;;
	*) usage ;;
	esac
	shift
done

top=$(cd "$(dirname "$0")/.." && pwd)
data=$top/docs/perf/data
limit=${PERF_TIMEOUT:-600}
case $limit in '' | *[!0-9]*) echo "perf-report: PERF_TIMEOUT must be seconds" >&2; exit 2 ;; esac

say() { echo "perf-report: $*" >&2; }

for b in "$build" ${old:+"$old"}; do
	for p in apps/ddssrun apps/ddssd apps/ddss-daemon-bench apps/ddss-lock-bench \
		apps/peers/ddss-peers-bench; do
		if [ ! -x "$b/$p" ]; then
			say "$b/$p not found: build it (cmake --build $b --target $(basename "$p"))"
			exit 1
		fi
	done
done
# run-peers.sh would exit 77 (SKIP); here a target without its peer is a failure.
if ! command -v redis-server >/dev/null; then
	say "redis-server is not installed (scripts/install-deps.sh): the throughput targets need it"
	exit 1
fi
for c in python3 timeout; do
	command -v $c >/dev/null || { say "$c not found"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-report.XXXXXX") || exit 1
child=
cleanup() {
	# A benchmark still running (the script was interrupted): timeout passes the signal on.
	if [ -n "$child" ]; then
		kill "$child" 2>/dev/null
		wait "$child" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir "$tmp/new" "$tmp/old" || exit 1

# ---- the benchmarks ----

# bench_cmd NAME BUILD: the command of one run of benchmark NAME, into the array cmd.
bench_cmd() {
	local b=$2
	# ddssrun ends its ranks itself before timeout ends ddssrun.
	local t=$((limit > 90 ? limit - 60 : (limit * 2 + 2) / 3))
	case $1 in
	daemon)
		cmd=("$b/apps/ddssrun" --daemon -n 2 --transport tcp --timeout "$t" --
			"$b/apps/ddss-daemon-bench")
		[ $quick = 1 ] && cmd+=(--iters 200 --rounds 1)
		cmd+=(--csv) ;;
	lock)
		# Tables (b) and (c) run too (there is no option to skip them); at their
		# smallest they take a second.
		cmd=("$b/apps/ddssrun" -n 2 --transport tcp --timeout "$t" --
			"$b/apps/ddss-lock-bench")
		[ $quick = 1 ] && cmd+=(--quick)
		cmd+=(--waiters 1 --threads 1 --duration-ms 10 --csv) ;;
	peers)
		cmd=("$top/apps/peers/run-peers.sh" "$b" --csv)
		[ $quick = 1 ] && cmd+=(--quick) ;;
	esac
}

# The header each program's CSV starts with.
declare -A header=([daemon]="call,direct_med_us" [lock]="table,transport"
	[peers]="run,mode,transport")
declare -A rows=([daemon]=4 [lock]=10 [peers]=10) # at least: header and the target rows

# run_bench NAME BUILD OUT: one run; its CSV (ddssrun's "[rank] " prefixes taken off, only
# the lines of the rank that printed the header) into OUT.
run_bench() {
	local name=$1 b=$2 out=$3 rc bound=$limit t0=$SECONDS
	local raw=$tmp/$name.out log=$tmp/$name.log

	bench_cmd "$name" "$b"
	[ "$name" = peers ] && bound=$((limit * 8))
	timeout -k 10 "$bound" "${cmd[@]}" </dev/null >"$raw" 2>"$log" &
	child=$!
	wait "$child"
	rc=$?
	child=
	if [ $rc != 0 ]; then
		if [ $rc = 124 ] || [ $rc = 137 ]; then
			say "$name: timed out (limit: PERF_TIMEOUT=$limit s, peers 8 times that): ${cmd[*]}"
		else
			say "$name: failed (exit $rc): ${cmd[*]}"
		fi
		tail -n 30 "$log" >&2
		return 1
	fi
	if ! awk -v hdr="${header[$name]}" '
	{
		p = ""
		if (match($0, /^\[[^]]*\] /)) {
			p = substr($0, 1, RLENGTH)
			$0 = substr($0, RLENGTH + 1)
		}
	}
	!seen && index($0, hdr) == 1 { seen = 1; prefix = p }
	seen && p == prefix && index($0, ",") { print }
	END { exit !seen }' "$raw" >"$out" || [ "$(wc -l <"$out")" -lt "${rows[$name]}" ]; then
		say "$name: ran but printed no CSV (no \"${header[$name]}\" line): ${cmd[*]}"
		tail -n 30 "$raw" "$log" >&2
		return 1
	fi
	say "$name: $((SECONDS - t0)) s"
}

# The machine, and what was measured on it.
describe() {
	local src type
	echo "# Written by scripts/perf-report.sh; read by scripts/perf-tables.py."
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	if [ $quick = 1 ]; then
		echo "quick: yes (--quick: fewer samples; a smoke test, not the figures of record)"
	else
		echo "quick: no"
	fi
	echo "runs: $runs"
	echo "nproc: $(nproc)"
	echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "kernel: $(uname -sr)"
	# On this VM an idle vCPU's wake-up cost dominates loopback latency.
	if [ -r /sys/module/haltpoll/parameters/guest_halt_poll_ns ]; then
		echo "guest_halt_poll_ns: $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns)"
	fi
	type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
	echo "build_type: ${type:-not set}"
	src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
	if [ -n "$src" ] && git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
		if [ -n "$(git -C "$src" status --porcelain --untracked-files=no -- src include apps \
			2>/dev/null)" ]; then
			echo "commit: $(git -C "$src" rev-parse --short=12 HEAD), with uncommitted changes in src/, include/ or apps/"
		else
			echo "commit: $(git -C "$src" rev-parse --short=12 HEAD)"
		fi
	fi
	local e
	e=$(env | grep '^DDSS_' | sort | tr '\n' ' ')
	[ -n "$e" ] && echo "env: ${e% }"
	for name in daemon lock peers; do
		bench_cmd "$name" BUILD
		e=$limit
		[ "$name" = peers ] && e=$((limit * 8))
		echo "command $name: timeout $e ${cmd[*]}" | sed "s|$top/||g"
	done
}
describe >"$tmp/new/machine.txt" || exit 1

# ---- the runs ----

total=$SECONDS
for i in $(seq 1 "$runs"); do
	# With --against, the first build alternates, so neither always runs on a warm machine.
	if [ -z "$old" ]; then
		order=(new)
	elif [ $((i % 2)) = 1 ]; then
		order=(old new)
	else
		order=(new old)
	fi
	for name in daemon lock peers; do
		for which in "${order[@]}"; do
			b=$build
			[ "$which" = old ] && b=$old
			say "run $i of $runs: $name${old:+ ($which build)}"
			run_bench "$name" "$b" "$tmp/$which/$name.$i.csv" || exit 1
			if [ "$name" = peers ] && [ "$which" = new ]; then
				sed -n "s/^run-peers: \(MPI: SKIP.*\)/note: peers run $i: \1/p" \
					"$tmp/peers.log" >>"$tmp/new/machine.txt"
			fi
		done
	done
done
echo "end: $(date -u '+%Y-%m-%d %H:%M UTC')" >>"$tmp/new/machine.txt"
say "all runs: $((SECONDS - total)) s"

# ---- the data set and the tables ----

mkdir -p "$data" || exit 1
rm -f "$data"/daemon.*.csv "$data"/lock.*.csv "$data"/peers.*.csv "$data/machine.txt"
cp "$tmp/new/"* "$data/" || exit 1
python3 "$top/scripts/perf-tables.py" "$data" || exit 1
say "wrote $data, docs/performance-targets.md and README.md's table"

if [ -n "$old" ]; then
	echo
	echo "old: $old"
	echo "new: $build"
	python3 "$top/scripts/perf-tables.py" --compare "$tmp/old" "$tmp/new" || exit 1
fi
