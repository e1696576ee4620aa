#!/bin/bash
# Model-check the lock protocol of docs/locks.md (tests/model/lock.pml) with spin.
#
# usage: check.sh [workdir]      (ctest passes its binary dir; default: a temporary dir)
# env:   DDSS_MODEL_JOBS=n       parallel pan runs (default: min(2, nproc))
#        DDSS_MODEL_FULL=1       also the big configurations (try-locks at 2 rounds
#                                and the non-progress-cycle search at 3 processes x 2
#                                rounds): ~5 min, ~6 GB per run
#
# Every configuration is a full (exhaustive, -DCOLLAPSE, no bitstate) safety search without
# -E, so assertion violations and invalid end states (deadlocks) both count as errors.
# Expected outcome per configuration:
#   ok       0 errors, and every statement of the processes reached (no vacuous pass)
#   witness  an assertion fails on purpose: the state it excludes is reachable
#   broken   a deliberately broken protocol variant: must be caught
# Exit: 0 if every configuration behaved as expected, 1 if not, 77 if spin (or a C
# compiler) is missing.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
model=$here/lock.pml

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

# name | expect | spin -D flags | pan compile flags | pan run flags
configs=(
	"np3|ok|-DNP=3 -DITERS=2|-DSAFETY|"
	"np3-fair|ok|-DNP=3 -DITERS=2 -DFAIR|-DSAFETY|"
	"np4-1round|ok|-DNP=4 -DITERS=1|-DSAFETY|"
	"np4-1round-fair|ok|-DNP=4 -DITERS=1 -DFAIR|-DSAFETY|"
	"np3-1round-try|ok|-DNP=3 -DITERS=1 -DTRY|-DSAFETY|"
	"np3-1round-progress|ok|-DNP=3 -DITERS=1|-DNP|-l"
	"bug-try-blind-reset|broken|-DNP=3 -DITERS=2 -DTRY -DBUG_TRY_BLIND_RESET|-DSAFETY|"
	"reach-shared|witness|-DNP=3 -DITERS=2 -DREACH=1|-DSAFETY|"
	"reach-granted-together|witness|-DNP=3 -DITERS=2 -DREACH=2|-DSAFETY|"
	"bug-blind-release|broken|-DNP=3 -DITERS=2 -DBUG_BLIND_RELEASE|-DSAFETY|"
	"bug-no-drain|broken|-DNP=3 -DITERS=2 -DBUG_NO_DRAIN|-DSAFETY|"
	"bug-no-grant-wait|broken|-DNP=3 -DITERS=2 -DBUG_NO_GRANT_WAIT|-DSAFETY|"
)
if [ "${DDSS_MODEL_FULL:-0}" = 1 ]; then
	configs+=(
		"np3-try|ok|-DNP=3 -DITERS=2 -DTRY|-DSAFETY|"
		"np3-progress|ok|-DNP=3 -DITERS=2|-DNP|-l"
	)
fi

# run_one <name> <spin flags> <cc flags> <pan flags>: leaves $work/<name>/{pan.out,rc}
run_one() {
	local d=$work/$1
	mkdir -p "$d" && cp "$model" "$d/" || return
	(
		cd "$d" || exit 1
		spin -a $2 lock.pml >spin.out 2>&1 || { echo "spin -a failed" >>spin.out; exit 2; }
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
	IFS='|' read -r name expect sflags cflags pflags <<<"$c"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run_one "$name" "$sflags" "$cflags" "$pflags" &
done
wait

fail=0
printf '%-24s %-8s %12s %6s %6s %8s  %s\n' config expect states depth errors "time(s)" verdict
for c in "${configs[@]}"; do
	IFS='|' read -r name expect sflags cflags pflags <<<"$c"
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
			# vacuity guard: every statement of P was reached
			bad=$(awk '/^unreached in proctype P/ { on = 1; next }
			           /^unreached in/ { on = 0 }
			           on && /lock.pml:/ { sub(/.*lock.pml:/, ""); sub(/,.*/, "");
			                               print }' "$out" | sort -un | tr '\n' ' ')
			if [ -z "$bad" ]; then
				verdict="PASS"
			else
				verdict="FAIL: unreached code at lock.pml line(s) $bad"
			fi
		else
			verdict="FAIL: ${first:-search incomplete}"
		fi
		;;
	witness | broken | known)
		if [ "${errors:-0}" != 0 ] && grep -q '^pan:1:' "$out"; then
			verdict="PASS (found: ${first#pan:1: })"
			[ "$expect" = known ] && verdict="PASS, KNOWN PROTOCOL BUG (found: ${first#pan:1: })"
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
