/*
 * A daemon's barrier for its clients (ddss_server_barrier, src/daemon/server.c), driven
 * from threads of rank 1, which serves as a daemon would:
 *
 *   ddssrun -n 2 --transport tcp daemon_server_barrier
 *
 * The last client to arrive runs the daemons' barrier, which lasts until every rank has
 * come. Rank 2 comes only when rank 1 says so, on a word of a segment. Checked:
 * 1. Both clients arrived, the daemons' barrier still running past the first one's own
 *    timeout: the first one waits for its end (it is counted in it) instead of giving up.
 *    Both get its result, 0.
 * 2. The next barrier of both then completes: the count was left right. (Before the fix
 *    the first client timed out, took itself off a count the last one had already reset,
 *    and every later barrier waited for one client more than there were.)
 * 3. A client alone times out (-ETIMEDOUT) and leaves the count as before: the next
 *    barrier of both completes.
 */
#include "common/test_util.h"
#include "daemon/serve.h"
#include "ddss/ddss.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CLIENT_TIMEOUT_MS 400 /* a client's wait in the daemon's barrier */
#define PAST_TIMEOUT_MS 2000  /* how long step 1 watches for a client that gives up */
#define GO_WAIT_MS 60000      /* rank 2's bound for rank 1's word */

static ddss_ctx_t *ctx;
static ddss_key_t go_key;
static struct ddss_server *srv;

/* The clients' threads: how many returned, and what. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned returned;

struct client {
	pthread_t th;
	int rc;
};

static void *client_main(void *arg)
{
	struct client *c = arg;

	c->rc = ddss_server_barrier(srv);
	pthread_mutex_lock(&mu);
	returned++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

static void start_clients(struct client *c, unsigned n)
{
	pthread_mutex_lock(&mu);
	returned = 0;
	pthread_mutex_unlock(&mu);
	for (unsigned i = 0; i < n; i++)
		if (pthread_create(&c[i].th, NULL, client_main, &c[i])) {
			fprintf(stderr, "rank 1: pthread_create failed\n");
			exit(1);
		}
}

/* Whether a client returned within @ms (CLOCK_REALTIME: the default condvar's clock). */
static bool one_returned_within(int ms)
{
	struct timespec until;
	bool any;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000l;
	if (until.tv_nsec >= 1000000000l) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000l;
	}
	pthread_mutex_lock(&mu);
	while (!returned && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	any = returned != 0;
	pthread_mutex_unlock(&mu);
	return any;
}

static void join_clients(struct client *c, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		pthread_join(c[i].th, NULL);
}

/* Rank 1: let rank 2 into the daemons' barrier number @round. */
static void let_in(unsigned round)
{
	uint64_t one = 1;

	TEST_CHECK(1, ddss_put(ctx, go_key, 8 * round, &one, 8) == 0, "put of word %u", round);
}

static void rank1(void)
{
	struct client c[2];

	if (ddss_server_start(ctx, &(struct ddss_server_conf){
		    .socket_path = getenv("TEST_SOCKET"), .expected_clients = 2,
		    .barrier_timeout_ms = CLIENT_TIMEOUT_MS }, &srv)) {
		fprintf(stderr, "rank 1: cannot start the server\n");
		exit(1);
	}
	/* 1: the daemons' barrier outlasts the first client's timeout. */
	start_clients(c, 2);
	TEST_CHECK(1, !one_returned_within(PAST_TIMEOUT_MS),
		   "a client left a barrier that had filled (rc %d, %d)", c[0].rc, c[1].rc);
	let_in(1);
	join_clients(c, 2);
	TEST_CHECK(1, c[0].rc == 0 && c[1].rc == 0, "step 1: rc %d, %d", c[0].rc, c[1].rc);

	/* 2: the count is right afterwards. */
	start_clients(c, 2);
	let_in(2);
	join_clients(c, 2);
	TEST_CHECK(1, c[0].rc == 0 && c[1].rc == 0, "step 2: rc %d, %d", c[0].rc, c[1].rc);

	/* 3: alone, one client times out; then both complete one. */
	start_clients(c, 1);
	join_clients(c, 1);
	TEST_CHECK(1, c[0].rc == -ETIMEDOUT, "step 3, alone: rc %d", c[0].rc);
	start_clients(c, 2);
	let_in(3);
	join_clients(c, 2);
	TEST_CHECK(1, c[0].rc == 0 && c[1].rc == 0, "step 3: rc %d, %d", c[0].rc, c[1].rc);

	TEST_CHECK(1, ddss_server_stop(srv, 10000) == 0, "workers still busy at stop");
}

static void rank2(void)
{
	for (unsigned round = 1; round <= 3; round++) {
		if (!test_wait_word(ctx, go_key, round, GO_WAIT_MS)) {
			TEST_CHECK(2, false, "rank 1 never let me into barrier %u", round);
			return;
		}
		TEST_CHECK(2, ddss_barrier(ctx) == 0, "daemons' barrier %u", round);
	}
}

int main(void)
{
	char sock[64];
	uint32_t me;
	int r;

	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	if (ddss_size(ctx) != 2) {
		fprintf(stderr, "run with 2 ranks\n");
		return 1;
	}
	r = ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){ .name = "go", .rank = 1,
							  .placement = DDSS_PLACE_RANK },
			     &go_key);
	if (r) {
		fprintf(stderr, "rank %u: allocate: %s\n", ddss_rank(ctx), ddss_strerror(r));
		return 1;
	}
	test_ctx_barrier_or_exit(ctx);
	me = ddss_rank(ctx);
	if (me == 1) {
		snprintf(sock, sizeof(sock), "/tmp/ddss-server-barrier-%d.sock", (int)getpid());
		setenv("TEST_SOCKET", sock, 1);
		rank1();
		unlink(sock);
	} else {
		rank2();
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
