#!/bin/bash
# wakeup-cost.sh [ROUNDS]: what waking a thread costs on this machine, the figure that
# decides loopback latencies on a VM whose idle vCPUs halt (docs/performance.md, "What
# decides the VM's latencies"). Two processes ping-pong one byte over two pipes, each
# blocked in read() until the other writes; prints the median round trip of 5 tries of
# ROUNDS (default 20000) round trips, with the processes on two CPUs and on one CPU, and
# the guest's halt-polling setting when the kernel has one.
set -euo pipefail
rounds=${1:-20000}
case $rounds in '' | *[!0-9]*) echo "usage: $0 [ROUNDS]" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pp.c" <<'C'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s))
		perror("sched_setaffinity");
}

int main(int argc, char **argv)
{
	int n = atoi(argv[1]), other = atoi(argv[2]), a[2], b[2];
	struct timespec t0, t1;
	char x = 0;

	if (pipe(a) || pipe(b))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		pin(other);
		for (int i = 0; i < n; i++)
			if (read(a[0], &x, 1) != 1 || write(b[1], &x, 1) != 1)
				_exit(1);
		_exit(0);
	}
	pin(0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++)
		if (write(a[1], &x, 1) != 1 || read(b[0], &x, 1) != 1)
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waitpid(child, NULL, 0);
	printf("%.2f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / n);
	return 0;
}
C
cc -O2 -o "$tmp/pp" "$tmp/pp.c"
median5() { for _ in 1 2 3 4 5; do "$tmp/pp" "$rounds" "$1"; done | sort -g | sed -n 3p; }
cpus=$(nproc)
echo "pipe ping-pong round trip, median of 5 x $rounds, us:"
[ "$cpus" -ge 2 ] && echo "  two CPUs (0 and 1): $(median5 1)"
echo "  one CPU (0):        $(median5 0)"
hp=/sys/module/haltpoll/parameters/guest_halt_poll_ns
[ -r $hp ] && echo "  guest_halt_poll_ns: $(cat $hp) (0: an idle vCPU halts at once)"
exit 0
