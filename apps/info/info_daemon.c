/*
 * --daemon [SOCKET]: a running ddssd's counters, summed over its clients (struct
 * ddss_stats, read by attaching to the daemon for one call: ddss_daemon_stats_read).
 */
#include "info.h"

#include "daemon/client_api.h"
#include "daemon/sock_path.h"

#include <ddss/ddss.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A daemon on this node answers at once; a missing one is known at once (no socket). */
#define DAEMON_MS 3000

static void print_stats(const struct ddss_stats *st)
{
	uint64_t failed = 0;

	printf("calls (succeeded; bytes moved)\n");
	for (int op = 0; op < DDSS_STAT_NOPS; op++)
		if (st->bytes[op])
			printf("  %-22s %llu; %llu bytes\n", ddss_stat_op_name(op),
			       (unsigned long long)st->ops[op], (unsigned long long)st->bytes[op]);
		else
			printf("  %-22s %llu\n", ddss_stat_op_name(op),
			       (unsigned long long)st->ops[op]);
	printf("locks, coherence, timeouts\n");
	info_line("lock contended:", "%llu", (unsigned long long)st->lock_contended);
	info_line("lock recovered:", "%llu", (unsigned long long)st->lock_recovered);
	info_line("read retries:", "%llu", (unsigned long long)st->retries);
	info_line("timeouts:", "%llu", (unsigned long long)st->timeouts);
	info_line("cache hits:", "%llu", (unsigned long long)st->cache_hits);
	info_line("cache misses:", "%llu", (unsigned long long)st->cache_misses);
	info_line("home polled:", "%llu", (unsigned long long)st->home_polled);
	info_line("home poll yields:", "%llu", (unsigned long long)st->home_poll_yields);
	info_line("sends combined:", "%llu", (unsigned long long)st->sends_combined);
	info_line("replies batched:", "%llu", (unsigned long long)st->replies_batched);
	info_line("calls in the fast lane:", "%llu", (unsigned long long)st->lane_calls);
	printf("failed calls, by error\n");
	for (int e = 0; e < DDSS_STAT_NERRNO; e++) {
		char key[48];

		if (!st->errors[e])
			continue;
		if (e)
			snprintf(key, sizeof(key), "%s:", ddss_strerror(-e));
		else
			snprintf(key, sizeof(key), "errno >= %d:", DDSS_STAT_NERRNO);
		info_line(key, "%llu", (unsigned long long)st->errors[e]);
		failed += st->errors[e];
	}
	if (!failed)
		printf("  none\n");
}

int info_daemon_run(const char *socket_path)
{
	const char *env = getenv("DDSS_DAEMON_SOCKET");
	char dflt[PATH_MAX];
	struct ddss_stats st;
	int r;

	if (!socket_path && env && *env)
		socket_path = env;
	if (!socket_path) {
		if (ddss_daemon_socket_default(dflt, sizeof(dflt)))
			return 1;
		socket_path = dflt;
	}
	r = ddss_daemon_stats_read(socket_path, DAEMON_MS, &st);
	if (r) {
		fprintf(stderr, "ddss-info: no ddssd answers at %s: %s%s\n", socket_path,
			ddss_strerror(r), r == -ENOENT || r == -ECONNREFUSED ?
			" (is one running? ddssd --socket PATH, or ddssrun --daemon)" : "");
		return 1;
	}
	printf("ddss-info: DDSS %s, ddssd at %s: its clients' totals\n", ddss_version_string(),
	       socket_path);
	print_stats(&st);
	return 0;
}
