#!/bin/sh
# check.sh CHECK ARGS...: ddss-info's tests (apps/info/tests.cmake). Each runs ddss-info,
# shows its output, and checks the lines that matter; exit 0 pass, 1 fail, 77 skip.
#
#   report DDSS_INFO VERSION VERBS_BUILT   the local report: version, tcp usable, verbs
#                                          usable or, on a host without RDMA, unusable
#                                          with the reason
#   config DDSS_INFO SRC_DIR               every DDSS_* variable src/ reads is listed; a
#                                          value from the environment says so; an invalid
#                                          one is flagged
#   group DDSSRUN DDSS_INFO N TRANSPORT    N ranks under ddssrun: rank 1 lists ranks 1..N as
#                                          answering with a round trip in us
#   missing DDSSRUN DDSS_INFO              3 ranks, the third never starts: the others give
#                                          up after the connect timeout (3 s), saying why
#   daemon DDSSRUN DDSS_INFO DDSS_HELLO    2 ranks in daemon mode, each client runs
#                                          ddss-hello then ddss-info --daemon: the daemon's
#                                          totals count hello's calls; no daemon: status 1
#   guest DDSS_INFO DDSSRUN                under scripts/rdma-exec --two-devices: both
#                                          devices usable (rxe0 and rxe1 in the guest), and
#                                          --group over verbs across them
set -u

out=$(mktemp "${TMPDIR:-/tmp}/ddss-info-check.XXXXXX")
trap 'rm -f "$out"' EXIT

fail() {
	echo "check.sh: FAIL: $*" >&2
	exit 1
}

# expect REGEX WHAT: the output has a line matching the extended REGEX.
expect() {
	grep -Eq -- "$1" "$out" || fail "$2 (no line matches '$1')"
}

# run CMD...: run it with its output in $out and shown; its exit status in $rc.
run() {
	echo "== $*"
	t0=$(date +%s)
	"$@" >"$out" 2>&1
	rc=$?
	cat "$out"
	echo "== exit status $rc after $(($(date +%s) - t0)) s"
}

check=${1:-}
[ $# -ge 1 ] && shift
case $check in
report)
	info=$1 version=$2 verbs_built=$3
	run "$info"
	[ $rc = 0 ] || fail "exit status $rc"
	expect "^ddss-info: DDSS $version\$" "no version line"
	expect "^  tcp: +usable " "tcp not reported usable"
	if [ "$verbs_built" != 1 ] && [ "$verbs_built" != ON ]; then
		expect "^  verbs: +unusable: not built " "verbs not reported as not built"
	elif [ ! -d /sys/class/infiniband ]; then
		expect "^  verbs: +unusable: no RDMA device: /sys/class/infiniband is absent" \
			"verbs not reported unusable for want of an RDMA driver"
	else
		expect "^  verbs: +(usable: [a-z]|unusable: [a-z])" "verbs: no verdict with a reason"
	fi
	expect "^  automatic choice: +(tcp|verbs) " "no automatic choice"
	;;
config)
	info=$1 src=$2
	# The names the library reads: every name passed first to a call, getenv("DDSS_...")
	# and the readers around it (core/config.c, verbs_env_choice).
	names=$(grep -rhoE '[A-Za-z_0-9]+\("DDSS_[A-Z0-9_]+"' "$src/src" |
		sed 's/.*("//; s/"$//' | sort -u)
	[ -n "$names" ] || fail "found no DDSS_* variable read under $src/src"
	run env DDSS_POOL_SIZE=2097152 DDSS_LOCK_SCHEME=bogus DDSS_POOL_SIZ=1 "$info"
	[ $rc = 0 ] || fail "exit status $rc"
	for n in $names; do
		expect "^  $n +[^ ]" "$n is read by the library but not listed"
	done
	expect "^  DDSS_POOL_SIZE +2097152 \\(2 MiB\\) +environment\$" "a set value not shown as such"
	expect "^  DDSS_CACHE_SIZE +16777216 \\(16 MiB\\) +default\$" "a default not shown as such"
	expect "^  DDSS_LOCK_SCHEME +bogus: .*INVALID" "an invalid value not flagged"
	expect "^  DDSS_POOL_SIZ .*not read by DDSS" "an unknown DDSS_* variable not flagged"
	echo "check.sh: $(echo "$names" | wc -l) variables read by src/, all listed"
	;;
group)
	ddssrun=$1 info=$2 n=$3 transport=$4
	run "$ddssrun" -n "$n" --transport "$transport" --timeout 60 -- "$info" --group
	[ $rc = 0 ] || fail "exit status $rc"
	expect "^\\[1\\] ddss-info: DDSS .*group of $n ranks, .*transport $transport" "no header"
	r=1
	while [ $r -le "$n" ]; do
		expect "^\\[1\\]   rank $r +[^ ]+ +answers, rtt [0-9]+\\.[0-9] us " \
			"rank $r not listed as answering with a round trip"
		r=$((r + 1))
	done
	expect "^\\[1\\] group: $n of $n ranks answer\$" "no summary"
	;;
missing)
	ddssrun=$1 info=$2
	start=$(date +%s)
	# shellcheck disable=SC2016 # expanded by the rank's shell
	run env DDSS_CONNECT_TIMEOUT_MS=3000 "$ddssrun" -n 3 --transport tcp --timeout 60 -- \
		sh -c '[ "$DDSS_RANK" = 3 ] || exec "$0" --group' "$info"
	took=$(($(date +%s) - start))
	[ $rc != 0 ] || fail "a group with a rank missing reported success"
	[ $rc != 124 ] || fail "ddssrun had to kill it: ddss-info --group did not give up"
	[ $took -le 30 ] || fail "took $took s to give up (connect timeout 3 s)"
	expect "cannot join the group: " "no rank said why it could not join"
	;;
daemon)
	ddssrun=$1 info=$2 hello=$3
	# shellcheck disable=SC2016 # expanded by the client's shell
	run "$ddssrun" -n 2 --daemon --timeout 60 -- \
		sh -c '"$0" >/dev/null && exec "$1" --daemon' "$hello" "$info"
	[ $rc = 0 ] || fail "exit status $rc"
	for r in 1 2; do
		expect "^\\[$r\\] ddss-info: DDSS .*, ddssd at .*ddssd-$r\\.sock: " "rank $r: no header"
		expect "^\\[$r\\]   get +[1-9][0-9]*; [1-9][0-9]* bytes\$" "rank $r: hello's get not counted"
		expect "^\\[$r\\]   barrier +[1-9]" "rank $r: hello's barriers not counted"
		expect "^\\[$r\\]   lock contended: +[0-9]+\$" "rank $r: no lock counters"
	done
	run "$info" --daemon "${TMPDIR:-/tmp}/ddss-info-no-such.sock"
	[ $rc = 1 ] || fail "no daemon: exit status $rc, not 1"
	expect "^ddss-info: no ddssd answers at " "no daemon: not said"
	;;
guest)
	info=$1 ddssrun=$2
	run "$info"
	[ $rc = 0 ] || fail "exit status $rc"
	if [ -n "${DDSS_RDMA_IN_GUEST:-}" ]; then
		for dev in "${RXE_DEV:-rxe0}" "${RXE_DEV2:-rxe1}"; do
			expect "^  $dev: +usable \\(port 1, " "$dev not listed as usable"
		done
		expect "^  verbs: +usable: " "verbs not reported usable"
	else
		expect "^  verbs: +usable: " "verbs not reported usable next to an RDMA device"
	fi
	expect "^ +atomics (yes|no) .*; SRQ (yes|no).*; inline [0-9]+ bytes" "no capabilities"
	run "$ddssrun" -n 2 --transport verbs --timeout 60 -- "$info" --group
	[ $rc = 0 ] || fail "--group over verbs: exit status $rc"
	expect "^\\[1\\] .*group of 2 ranks, transport verbs on " "--group: not on verbs"
	expect "^\\[1\\]   rank 2 +[^ ]+ +answers, rtt [0-9]+\\.[0-9] us " "--group: rank 2"
	;;
*)
	sed -n '2,20s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
echo "check.sh: PASS: $check"
