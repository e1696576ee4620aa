#!/bin/bash
# loopback-floor.sh [TRIES] [ROUNDS]: the fastest a request and its reply can cross loopback
# TCP here, and whether that changes from moment to moment. Two processes, pinned to CPUs 0
# and 1 (where the benchmarks pin their two ranks), ping-pong a 64-byte request and a
# 16-byte reply over one TCP_NODELAY connection, each end spinning on a non-blocking recv, so
# no wake-up is in the path: what is left is the kernel's TCP send and receive. Prints the
# median, p10 and p90 round trip of each of TRIES (default 10) tries of ROUNDS (default
# 5000) round trips, one second apart. On the 2-vCPU VM of issue 31 the tries fall into two
# speeds that last seconds to minutes (docs/performance.md, "Two speeds of loopback").
set -euo pipefail
tries=${1:-10}
rounds=${2:-5000}
for v in "$tries" "$rounds"; do
	case $v in '' | *[!0-9]*) echo "usage: $0 [TRIES] [ROUNDS]" >&2; exit 2 ;; esac
	if [ ${#v} -gt 7 ] || [ "$v" -lt 1 ]; then
		echo "usage: $0 [TRIES] [ROUNDS] (each 1..9999999)" >&2
		exit 2
	fi
done
if ! taskset -c 0,1 true 2>/dev/null; then
	echo "loopback-floor: SKIP: needs CPUs 0 and 1 (both ends spin, one on each)" >&2
	exit 77
fi
if ! command -v cc >/dev/null; then
	echo "loopback-floor: SKIP: no C compiler (cc)" >&2
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/floor.c" <<'C'
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s)) {
		perror("sched_setaffinity"); /* unpinned, the figure would mean something else */
		exit(1);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Spin until @n bytes came in; 0, or -1 when the connection ended. */
static int recv_spin(int fd, char *buf, int n)
{
	for (int got = 0; got < n;) {
		ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);

		if (r > 0)
			got += r;
		else if (r == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int n = atoi(argv[1]), one = 1, ls = socket(AF_INET, SOCK_STREAM, 0), fd;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	char buf[64] = { 0 };
	double *t = calloc(n, sizeof(*t));

	if (!t || ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &alen))
		return perror("setup"), 1;
	pid_t child = fork();
	if (child < 0)
		return perror("fork"), 1;
	if (child == 0) { /* the server: a 16-byte reply to each 64-byte request */
		alarm(60); /* never outlives a parent that failed before connecting */
		pin(1);
		fd = accept(ls, NULL, NULL);
		if (fd < 0)
			_exit(1);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		while (recv_spin(fd, buf, 64) == 0)
			if (send(fd, buf, 16, 0) != 16)
				_exit(1);
		_exit(0);
	}
	close(ls);
	pin(0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("connect");
		kill(child, SIGKILL);
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < n; i++) {
		double t0 = now_us();

		if (send(fd, buf, 64, 0) != 64 || recv_spin(fd, buf, 16)) {
			perror("round trip");
			kill(child, SIGKILL);
			return 1;
		}
		t[i] = now_us() - t0;
	}
	close(fd);
	waitpid(child, NULL, 0);
	qsort(t, n, sizeof(*t), cmp);
	printf("%.2f %.2f %.2f\n", t[n / 2], t[n / 10], t[n * 9 / 10]);
	return 0;
}
C
cc -O2 -o "$tmp/floor" "$tmp/floor.c"
echo "loopback TCP round trip, 64 B request + 16 B reply, both ends spinning, CPUs 0 and 1"
echo "$rounds round trips per try, in us:"
for i in $(seq 1 "$tries"); do
	out=$(timeout 120 "$tmp/floor" "$rounds") || { echo "loopback-floor: try $i failed" >&2; exit 1; }
	read -r med p10 p90 <<<"$out"
	echo "  try $i: median $med  (p10 $p10, p90 $p90)"
	[ "$i" = "$tries" ] || sleep 1 # spacing between tries, not synchronisation
done
