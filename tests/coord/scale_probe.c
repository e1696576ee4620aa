/*
 * One rank of scripts/scale-coordinator.sh: how long ddss_init took (the join, the wait
 * for the group to form, the start barrier), then, after a locked increment each and a
 * barrier, what this rank holds: RSS, open fds, sockets. Prints one SCALE line.
 */
#include "common/test_util.h"

#include <ddss/ddss.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int main(void)
{
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "scalecount" };
	double t0 = test_now_ms(), t_init;
	ddss_ctx_t *ctx = test_init_peer_timeout(10000);
	long pages = 0, rss = 0;
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
	printf("SCALE rank %u init_ms %.0f rss_kib %ld fds %u sockets %u\n", ddss_rank(ctx),
	       t_init, rss * (sysconf(_SC_PAGESIZE) / 1024), fds, sockets);
	fflush(stdout);
	return ddss_finalize(ctx) ? 1 : 0;
}
