/* A transport read in a thread of its own (tp_reader.h). */
#include "common/tp_reader.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t th;
static struct ddss_tp *read_tp;
static uint32_t read_rank;
static bool read_done;
static int read_rc;
static int64_t read_ns;

static void *reader(void *arg)
{
	uint64_t v;
	int64_t t0 = ddss_now_ns();
	int r = ddss_tp_read(read_tp, read_rank, 0, &v, sizeof(v));

	(void)arg;
	pthread_mutex_lock(&mu);
	read_rc = r;
	read_ns = ddss_now_ns() - t0;
	read_done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

void tp_reader_start(struct ddss_tp *tp, uint32_t rank)
{
	read_done = false;
	read_tp = tp;
	read_rank = rank;
	if (pthread_create(&th, NULL, reader, NULL)) {
		printf("FAIL: pthread_create\n");
		exit(1);
	}
}

int tp_reader_result(int wait_ms, int64_t *ns_p)
{
	/* The condition variable's clock: CLOCK_REALTIME, the default. */
	struct timespec until = ddss_time_after(CLOCK_REALTIME, (int64_t)wait_ms * 1000000);

	pthread_mutex_lock(&mu);
	while (!read_done && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	pthread_mutex_unlock(&mu);
	if (!read_done) {
		printf("FAIL: the read had not returned after %d ms\n", wait_ms);
		fflush(stdout);
		_exit(1);
	}
	pthread_join(th, NULL);
	if (ns_p)
		*ns_p = read_ns;
	return read_rc;
}
