#!/bin/bash
# bench-heal.sh [RUNS] [BUILD_DIR] [FAULT...]
#
# How fast a group heals (docs/membership.md, "Replacement"): runs
# tests/coord/netns_fault.sh RUNS times (default 5) per fault (default: kill freeze cut
# cut-home cut-etcd): 4 ranks, each in its own network namespace, etcd in another, TTL 3 s;
# rank 4 suffers the fault and a replacement takes its slot from a fifth namespace. Prints,
# per fault, the median and worst of
#   view   ms from the fault until the survivors saw rank 4 leave (one view number for all)
#   in     ms from the fault until the replacement served (it started at the fault)
#   start  ms from the replacement's start until its start barrier was passed
# plots each run's view and replacement times on a 0-5 s line per fault, and writes every
# run as CSV to stdout's last lines. Needs root, ip netns and etcd.
# What coordinator mode costs on the data path is scripts/bench-coordinator.sh.
set -uo pipefail
runs=${1:-5}
build=${2:-build}
shift 2 2>/dev/null || shift $#
faults=${*:-kill freeze cut cut-home cut-etcd}
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$build/tests/coord/coord_netns_member
[ -x "$bin" ] || { echo "bench-heal: $bin missing (build first)" >&2; exit 2; }
csv=$(mktemp /tmp/bench-heal.XXXXXX)
trap 'rm -f "$csv"' EXIT
echo "fault,run,view_ms,in_ms,start_ms" >"$csv"

median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
worst() { sort -n | tail -1; }

for f in $faults; do
  for i in $(seq 1 "$runs"); do
    log=$("$top/tests/coord/netns_fault.sh" --bin "$bin" --fault "$f" 2>&1)
    if ! grep -q "^PASS" <<<"$log"; then
      echo "bench-heal: $f run $i failed:" >&2; tail -5 <<<"$log" >&2; continue
    fi
    view=$(grep -o "left in view [0-9]*, [0-9]* ms" <<<"$log" | awk '{print $5}' | worst)
    in=$(grep -o "replacement was in [0-9]* ms" <<<"$log" | awk '{print $4}')
    start=$(grep -o "replacement: in [0-9]* ms" <<<"$log" | awk '{print $3}')
    echo "$f,$i,$view,$in,$start" >>"$csv"
  done
done
printf '%-9s %5s %14s %14s %16s\n' fault runs "view med/max" "in med/max" "start med/max"
for f in $faults; do
  col() { grep "^$f," "$csv" | cut -d, -f"$1"; }
  n=$(grep -c "^$f," "$csv")
  printf '%-9s %5s %14s %14s %16s\n' "$f" "$n" "$(col 3 | median)/$(col 3 | worst)" \
    "$(col 4 | median)/$(col 4 | worst)" "$(col 5 | median)/$(col 5 | worst)"
done
# The plot: each run's view (v) and replacement-in (i) times on one line per fault, 100 ms
# a column from the fault (x: both in one column; > past the right end).
echo
printf '%-9s %s\n' "ms" "0         1000      2000      3000      4000      5000"
for f in $faults; do
  grep "^$f," "$csv" | awk -F, -v f="$f" '
    function mark(ms, c,   x) { x = int(ms / 100) + 1; if (x > 51) x = 51;
      cur = substr(line, x, 1); c = (x == 51) ? ">" : (cur == "." || cur == c) ? c : "x";
      line = substr(line, 1, x - 1) c substr(line, x + 1) }
    BEGIN { line = sprintf("%51s", ""); gsub(/ /, ".", line) }
    { mark($3, "v"); mark($4, "i") }
    END { printf "%-9s %s\n", f, line }'
done
echo
cat "$csv"
