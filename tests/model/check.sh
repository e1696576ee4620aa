#!/bin/bash
# Model-check the lock protocol of docs/locks.md (tests/model/lock.pml) and its recovery
# from a dead rank (docs/failure.md, tests/model/recover.pml) with spin.
#
# usage: check.sh [workdir]      (ctest passes its binary dir; default: a temporary dir)
# env:   DDSS_MODEL_JOBS=n       parallel pan runs (default: min(2, nproc))
#        DDSS_MODEL_FULL=1       also the big configurations (fair and try-locks at 2 rounds,
#                                the non-progress-cycle search at 3 processes x 2
#                                rounds, recovery's other mode combinations):
#                                ~2-5 min, ~2-6 GB per run
#
# Every configuration is a full (exhaustive, -DCOLLAPSE, no bitstate) safety search without
# -E, so assertion violations and invalid end states (deadlocks) both count as errors.
# Expected outcome per configuration:
#   ok       0 errors, and (lock.pml) every statement of the processes reached (no vacuous
#            pass; recover.pml configurations restrict the modes, so unreached code is normal)
#   witness  an assertion fails on purpose: the state it excludes is reachable
#   broken   a deliberately broken protocol variant: must be caught
# Exit: 0 if every configuration behaved as expected, 1 if not, 77 if spin (or a C
# compiler) is missing.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

if ! command -v spin >/dev/null 2>&1; then
	echo "check.sh: spin not installed (apt-get install spin); SKIP"
	exit 77
fi
cc=${CC:-cc}
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "check.sh: no C compiler ($cc); SKIP"
	exit 77
fi

if [ $# -ge 1 ]; then
	work=$1/lock-model
	rm -rf "$work"
	mkdir -p "$work" || exit 1
else
	work=$(mktemp -d /tmp/lock-model.XXXXXX) || exit 1
	tmpwork=1
fi

jobs=${DDSS_MODEL_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -gt 2 ] && [ -z "${DDSS_MODEL_JOBS:-}" ] && jobs=2
[ "$jobs" -ge 1 ] || jobs=1

# name | expect | spin -D flags | pan compile flags | pan run flags [| model, default lock.pml]
# pan is built with -O2, and with -O0 where the search takes seconds: compiling
# recover.pml's pan takes 16 s at -O2 and 2.4 s at -O0 (and 34 s at -O1), lock.pml's 4.4 s
# and 0.9 s, while -O0 searches about half as fast (rec-x-s-s: 46 s against 23 s).
configs=(
	"np3|ok|-DNP=3 -DITERS=2|-DSAFETY|"
	"np4-1round|ok|-DNP=4 -DITERS=1|-DSAFETY|"
	"np4-1round-fair|ok|-DNP=4 -DITERS=1 -DFAIR|-DSAFETY|"
	"np3-1round-try|ok|-DNP=3 -DITERS=1 -DTRY|-DSAFETY -O0|"
	"np3-1round-progress|ok|-DNP=3 -DITERS=1|-DNP -O0|-l"
	"bug-try-blind-reset|broken|-DNP=3 -DITERS=2 -DTRY -DBUG_TRY_BLIND_RESET|-DSAFETY -O0|"
	"reach-shared|witness|-DNP=3 -DITERS=2 -DREACH=1|-DSAFETY -O0|"
	"reach-granted-together|witness|-DNP=3 -DITERS=2 -DREACH=2|-DSAFETY -O0|"
	"bug-blind-release|broken|-DNP=3 -DITERS=2 -DBUG_BLIND_RELEASE|-DSAFETY -O0|"
	"bug-no-drain|broken|-DNP=3 -DITERS=2 -DBUG_NO_DRAIN|-DSAFETY -O0|"
	"bug-no-grant-wait|broken|-DNP=3 -DITERS=2 -DBUG_NO_GRANT_WAIT|-DSAFETY -O0|"
	# recovery (recover.pml): rank 2 one request, rank 3 two at once and may die
	# (modes: -DM2 for rank 2's request, -DM3A/-DM3B for rank 3's: 1 exclusive, 2 shared).
	# The default is src/lock as it is; each BUG_ variant is one behaviour before a fix.
	"rec-nodeath|ok|-DNODEATH|-DSAFETY -O0||recover.pml"
	"rec-s-s-s|ok|-DM2=2 -DM3A=2 -DM3B=2|-DSAFETY -O0||recover.pml"
	"rec-x-s-s|ok|-DM2=1 -DM3A=2 -DM3B=2|-DSAFETY||recover.pml"
	"rec-bug-late-reg|broken|-DBUG_LATE_REG -DM2=1 -DM3A=2 -DM3B=2|-DSAFETY||recover.pml"
	"rec-bug-idle-survey|broken|-DBUG_IDLE_SURVEY -DNODEATH -DM2=2 -DM3A=1 -DM3B=1|-DSAFETY -O0||recover.pml"
	"rec-bug-agent-stale-d|broken|-DBUG_AGENT_STALE_D -DM2=1 -DM3A=2 -DM3B=1|-DSAFETY -O0||recover.pml"
	"rec-bug-chain-dead|broken|-DBUG_CHAIN_DEAD -DNUDGE -DNO_RANK2 -DM3A=1 -DM3B=1|-DSAFETY -O0||recover.pml"
	"rec-before-fixes|broken|-DBEFORE_FIXES -DM2=1 -DM3A=2 -DM3B=1|-DSAFETY -O0||recover.pml"
)
if [ "${DDSS_MODEL_FULL:-0}" = 1 ]; then
	configs+=(
		# fair at 2 rounds: 64 M states, ~90 s (1 round at 4 processes runs by default)
		"np3-fair|ok|-DNP=3 -DITERS=2 -DFAIR|-DSAFETY|"
		"np3-try|ok|-DNP=3 -DITERS=2 -DTRY|-DSAFETY|"
		"np3-progress|ok|-DNP=3 -DITERS=2|-DNP|-l"
		# recovery, the other mode combinations (rank 3's two threads are symmetric):
		# 30-60 M states, 1.5-3.5 GB, 2-4 min each on an idle core. All modes in one
		# run ("rec-full", no -DM*) is 135 M states, 6.6 GB, ~20 min: run it by hand.
		"rec-x-x-x|ok|-DM2=1 -DM3A=1 -DM3B=1|-DSAFETY||recover.pml"
		"rec-x-s-x|ok|-DM2=1 -DM3A=2 -DM3B=1|-DSAFETY||recover.pml"
		"rec-s-x-x|ok|-DM2=2 -DM3A=1 -DM3B=1|-DSAFETY||recover.pml"
		"rec-s-s-x|ok|-DM2=2 -DM3A=2 -DM3B=1|-DSAFETY||recover.pml"
		"rec-nudge|ok|-DNUDGE -DNO_RANK2|-DSAFETY||recover.pml"
	)
fi

# run_one <name> <spin flags> <cc flags> <pan flags> <model>: leaves $work/<name>/{pan.out,rc}
run_one() {
	local d=$work/$1
	mkdir -p "$d" && cp "$here/$5" "$d/" || return
	(
		cd "$d" || exit 1
		spin -a $2 "$5" >spin.out 2>&1 || { echo "spin -a failed" >>spin.out; exit 2; }
		"$cc" -O2 -w -DCOLLAPSE -DMEMLIM=8192 $3 -o pan pan.c >cc.out 2>&1 || exit 2
		start=$(date +%s.%N)
		./pan -m200000 -w26 $4 >pan.out 2>&1
		end=$(date +%s.%N)
		echo "$start $end" >wall
		exit 0
	)
	echo $? >"$d/rc"
}

for c in "${configs[@]}"; do
	IFS='|' read -r name expect sflags cflags pflags mfile <<<"$c"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run_one "$name" "$sflags" "$cflags" "$pflags" "${mfile:-lock.pml}" &
done
wait

fail=0
printf '%-24s %-8s %12s %6s %6s %8s  %s\n' config expect states depth errors "time(s)" verdict
for c in "${configs[@]}"; do
	IFS='|' read -r name expect sflags cflags pflags mfile <<<"$c"
	mfile=${mfile:-lock.pml}
	d=$work/$name
	out=$d/pan.out
	if [ "$(cat "$d/rc" 2>/dev/null)" != 0 ] || [ ! -s "$out" ]; then
		printf '%-24s %-8s %s\n' "$name" "$expect" "FAIL: could not build or run pan"
		cat "$d/spin.out" "$d/cc.out" 2>/dev/null | head -20
		fail=1
		continue
	fi
	states=$(awk '/states, stored/ { print $1; exit }' "$out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\),.*/\1/p' "$out" | head -1)
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)
	secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$out" | head -1)
	first=$(grep -m1 -E '^pan:1:|^pan: .*(error|out of memory)|^pan: reached -DMEMLIM' "$out")
	complete=1
	grep -q 'Search not completed\|out of memory\|reached -DMEMLIM\|max search depth too small' "$out" \
		&& complete=0
	verdict=""
	case $expect in
	ok)
		if [ "${errors:-x}" = 0 ] && [ $complete = 1 ]; then
			# vacuity guard: every statement of P (lock.pml) was reached; recover.pml
			# configurations restrict the modes, so only its full run is guarded
			# (every statement of Cl and Agent but the asserts' failure paths)
			bad=""
			if [ "$mfile" = lock.pml ]; then
				bad=$(awk '/^unreached in proctype P/ { on = 1; next }
				           /^unreached in/ { on = 0 }
				           on && /lock.pml:/ { sub(/.*lock.pml:/, ""); sub(/,.*/, "");
				                               print }' "$out" | sort -un | tr '\n' ' ')
			elif [ "$name" = rec-full ]; then
				bad=$(awk '/^unreached in proctype (Cl|Agent)/ { on = 1; next }
				           /^unreached in/ { on = 0 }
				           on && /recover.pml:/ && !/-end-/ && !/dead3\)\)"$/ {
				                               sub(/.*recover.pml:/, "");
				                               sub(/,.*/, ""); print }' "$out" |
				      sort -un | tr '\n' ' ')
			fi
			if [ -z "$bad" ]; then
				verdict="PASS"
			else
				verdict="FAIL: unreached code at $mfile line(s) $bad"
			fi
		else
			verdict="FAIL: ${first:-search incomplete}"
		fi
		;;
	witness | broken)
		if [ "${errors:-0}" != 0 ] && grep -q '^pan:1:' "$out"; then
			verdict="PASS (found: ${first#pan:1: })"
		else
			verdict="FAIL: expected a violation, got none"
		fi
		;;
	esac
	case $verdict in PASS*) ;; *) fail=1 ;; esac
	printf '%-24s %-8s %12s %6s %6s %8s  %s\n' "$name" "$expect" "${states:-?}" \
		"${depth:-?}" "${errors:-?}" "${secs:-?}" "$verdict"
done

if [ $fail = 0 ]; then
	echo "lock model: all configurations as expected"
	[ -n "${tmpwork:-}" ] && rm -rf "$work"
else
	echo "lock model: FAILED (pan output under $work)"
fi
exit $fail
