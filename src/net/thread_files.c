/*
 * Helper threads with a file table of their own (see thread_files.h for why and the
 * contract).
 */
#include "net/thread_files.h"
#include "net/transport.h"
#include "core/log.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

/* The most fds a provider may ask a helper to keep. */
#define KEEP_MAX 64

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Close [lo, hi] in this thread's table (close_range, or one by one on old kernels). */
static void close_span(unsigned lo, unsigned hi)
{
	if (lo > hi)
		return;
#ifdef SYS_close_range
	if (syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
#endif
	long max = sysconf(_SC_OPEN_MAX);

	if (max > 0 && hi >= (unsigned long)max)
		hi = (unsigned)max - 1;
	for (unsigned fd = lo; fd <= hi && fd >= lo; fd++)
		close((int)fd);
}

int ddss_thread_files_private(const int *keep, size_t n)
{
	int sorted[KEEP_MAX];
	unsigned next = 3; /* 0-2 stay: the log goes to stderr */

	if (n > KEEP_MAX)
		return -E2BIG;
	memcpy(sorted, keep, n * sizeof(*keep));
	qsort(sorted, n, sizeof(*sorted), cmp_int);
	if (unshare(CLONE_FILES))
		return -errno;
	for (size_t i = 0; i < n; i++) {
		if (sorted[i] < (int)next)
			continue; /* negative (unused), a standard stream or a duplicate */
		close_span(next, (unsigned)sorted[i] - 1);
		next = (unsigned)sorted[i] + 1;
	}
	close_span(next, UINT_MAX);
	return 0;
}

void ddss_tp_thread_files(struct ddss_tp *tp)
{
	int keep[KEEP_MAX];
	int n, r;

	if (tp->cfg.share_files)
		return;
	n = tp->ops->thread_fds(tp, keep, KEEP_MAX);
	if (n < 0)
		return; /* this provider's helpers need the shared table */
	r = ddss_thread_files_private(keep, (size_t)n);
	if (r)
		DDSS_INFO("helper thread keeps the shared file table: %s", strerror(-r));
}
