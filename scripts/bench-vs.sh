#!/bin/bash
# Compare two builds on the default path (tcp, direct mode): get and put of 1 B
# (ddss-seg-bench, library medians) and an uncontended exclusive ncosed lock + unlock
# (ddss-lock-bench part (a)), 2 ranks each. The builds take turns (old, new, old, new, ...)
# so both see the same machine; prints every run, then the median of the runs per build,
# new/old, and the noise of the machine in the same run: each build's runs spread (p25..p75
# relative to their median). A difference inside that spread is not one this machine shows.
#
#   scripts/bench-vs.sh OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]   (default 5)
set -euo pipefail
old=${1:?usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]}
new=${2:?usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]}
runs=${3:-5}
export DDSS_TRANSPORT=tcp
unset DDSS_MODE DDSS_TCP_PROTECT

# "get put lock" medians (us) of one run of build $1.
one_run() {
  local b=$1 seg lock
  seg=$(timeout 300 "$b/apps/ddssrun" -n 2 "$b/apps/ddss-seg-bench" --iters 4000 --rounds 3 \
        --max-size 1 2>&1)
  lock=$(timeout 300 "$b/apps/ddssrun" -n 2 "$b/apps/ddss-lock-bench" --quick --iters 2000 2>&1)
  local g p l
  g=$(awk '/raw_read_us/ {h=1; next} h && $2 == "1" {print $4; exit}' <<<"$seg")
  p=$(awk '/raw_read_us/ {h=1; next} h && $2 == "1" {print $8; exit}' <<<"$seg")
  l=$(awk '$2 == "ncosed" && NF >= 8 {print $6 + $7; exit}' <<<"$lock")
  if [ -z "$g" ] || [ -z "$p" ] || [ -z "$l" ]; then
    echo "bench-vs: could not read the results of $b" >&2
    printf '%s\n%s\n' "$seg" "$lock" | tail -20 >&2
    exit 1
  fi
  echo "$g $p $l"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# p25..p75 of the values on stdin, relative to their median, as "-a%..+b%".
spread() {
  sort -g | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    lo = v[int((NR - 1) * 0.25) + 1]; hi = v[int((NR - 1) * 0.75 + 0.5) + 1]
    printf "%+.1f%%..%+.1f%%", 100 * (lo / m - 1), 100 * (hi / m - 1) }'
}

declare -a og op ol ng np nl
printf '%-4s %-4s %10s %10s %14s\n' run build get_1B_us put_1B_us lock+unlock_us
for i in $(seq 1 "$runs"); do
  read -r g p l < <(one_run "$old")
  og+=("$g"); op+=("$p"); ol+=("$l")
  printf '%-4s %-4s %10s %10s %14s\n' "$i" old "$g" "$p" "$l"
  read -r g p l < <(one_run "$new")
  ng+=("$g"); np+=("$p"); nl+=("$l")
  printf '%-4s %-4s %10s %10s %14s\n' "$i" new "$g" "$p" "$l"
done
mo=($(printf '%s\n' "${og[@]}" | median) $(printf '%s\n' "${op[@]}" | median) $(printf '%s\n' "${ol[@]}" | median))
mn=($(printf '%s\n' "${ng[@]}" | median) $(printf '%s\n' "${np[@]}" | median) $(printf '%s\n' "${nl[@]}" | median))
printf 'median of %d runs: old get %.3f put %.3f lock+unlock %.3f us; new get %.3f put %.3f lock+unlock %.3f us\n' \
  "$runs" "${mo[@]}" "${mn[@]}"
awk -v a="${mo[0]}" -v b="${mn[0]}" -v c="${mo[1]}" -v d="${mn[1]}" -v e="${mo[2]}" -v f="${mn[2]}" \
  'BEGIN { printf "new/old: get %.3f, put %.3f, lock+unlock %.3f\n", b / a, d / c, f / e }'
printf 'noise (p25..p75 of the runs around their median): old get %s put %s lock %s; new get %s put %s lock %s\n' \
  "$(printf '%s\n' "${og[@]}" | spread)" "$(printf '%s\n' "${op[@]}" | spread)" \
  "$(printf '%s\n' "${ol[@]}" | spread)" "$(printf '%s\n' "${ng[@]}" | spread)" \
  "$(printf '%s\n' "${np[@]}" | spread)" "$(printf '%s\n' "${nl[@]}" | spread)"
