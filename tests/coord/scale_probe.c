/*
 * One rank of scripts/scale-coordinator.sh: how long ddss_init took (the join, the wait
 * for the group to form, the start barrier), then, after a locked increment each and a
 * barrier, what this rank holds: RSS, open fds, sockets. Then the group idles for
 * SCALE_IDLE_S seconds (a measurement window, between two barriers): the CPU time this
 * rank spent meanwhile (heartbeats, lease renewals, the view's watch). Rank 1 marks the
 * window's ends with files in SCALE_MARK_DIR, where the script samples etcd's counters.
 * Prints one SCALE line.
 */
#include "common/test_util.h"

#include <ddss/ddss.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void fd_counts(unsigned *fds, unsigned *sockets)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300];
	struct stat st;

	*fds = *sockets = 0;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		(*fds)++;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
			(*sockets)++;
	}
	if (d)
		closedir(d);
}

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Rank 1: the script waits for this file to sample etcd. */
static void mark(ddss_ctx_t *ctx, const char *name)
{
	const char *dir = getenv("SCALE_MARK_DIR");
	char path[512];
	FILE *f;

	if (ddss_rank(ctx) != 1 || !dir)
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f)
		fclose(f);
}

/* The idle window: nothing but the library's own traffic. The CPU it cost, in ms. */
static double idle(ddss_ctx_t *ctx, int seconds)
{
	struct timespec ts = { seconds, 0 };
	double c0;

	if (seconds <= 0)
		return 0;
	c0 = cpu_ms();
	mark(ctx, "idle-begin");
	while (nanosleep(&ts, &ts))
		;
	mark(ctx, "idle-end");
	return cpu_ms() - c0;
}

int main(void)
{
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "scalecount" };
	double t0 = test_now_ms(), t_init;
	ddss_ctx_t *ctx = test_init_peer_timeout(10000);
	long pages = 0, rss = 0;
	int idle_s = getenv("SCALE_IDLE_S") ? atoi(getenv("SCALE_IDLE_S")) : 0;
	double idle_cpu;
	unsigned fds, sockets;
	ddss_key_t counter;
	FILE *f;

	if (!ctx)
		return 1;
	t_init = test_now_ms() - t0;
	if (ddss_allocate_ss(ctx, 8, &c, &counter) || test_locked_increment(ctx, counter) ||
	    ddss_barrier(ctx))
		return 1;
	fd_counts(&fds, &sockets);
	f = fopen("/proc/self/statm", "r");
	if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = 0;
	if (f)
		fclose(f);
	idle_cpu = idle(ctx, idle_s);
	if (idle_s > 0 && ddss_barrier(ctx))
		return 1;
	printf("SCALE rank %u init_ms %.0f rss_kib %ld fds %u sockets %u idle_cpu_ms %.0f\n",
	       ddss_rank(ctx), t_init, rss * (sysconf(_SC_PAGESIZE) / 1024), fds, sockets,
	       idle_cpu);
	fflush(stdout);
	return ddss_finalize(ctx) ? 1 : 0;
}
