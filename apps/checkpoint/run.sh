#!/bin/sh
# Run ddss-checkpoint at N = 2, 4 and 8 processes (tcp, this machine) and print one table:
# average checkpoint time and restart time per number of processes (the DDSS paper's
# Figure 6b). Extra arguments go to every run (e.g. --steps 2000 --restarts 20).
#
#   apps/checkpoint/run.sh BUILD_DIR [ddss-checkpoint options...]
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/apps/ddssrun" ] || [ ! -x "$1/apps/checkpoint/ddss-checkpoint" ]; then
	echo "usage: $0 BUILD_DIR [ddss-checkpoint options...] (BUILD_DIR with ddssrun and ddss-checkpoint built)" >&2
	exit 2
fi
build=$1
shift
rows=""
for n in 2 4 8; do
	# Process 1 prints a CSV header and one row; ddssrun prefixes its lines with "[1] ".
	out=$("$build/apps/ddssrun" -n "$n" --transport tcp --timeout 120 \
		"$build/apps/checkpoint/ddss-checkpoint" --csv "$@") || {
		echo "$0: the run with $n processes failed:" >&2
		echo "$out" >&2
		exit 1
	}
	row=$(printf '%s\n' "$out" | sed -n 's/^\[1[.0-9]*\] \([0-9].*\)$/\1/p' | tail -n 1)
	[ -n "$row" ] || { echo "$0: no result from the run with $n processes" >&2; exit 1; }
	rows="$rows$row
"
done
echo "| processes | checkpoints | checkpoint avg (us) | restarts | restart avg (us) | freeze (us) | decide (us) | to step 0 |"
echo "|---|---|---|---|---|---|---|---|"
# procs,ranks,state_bytes,steps,checkpoints,ckpt_avg_us,restarts,restart_avg_us,freeze_avg_us,decide_avg_us,to_step0
printf '%s' "$rows" | awk -F, '{ printf "| %s | %s | %.1f | %s | %.1f | %.1f | %.1f | %s |\n", $1, $5, $6, $7, $8, $9, $10, $11 }'
