/*
 * A rank whose receive path is held up does not take the silence for its peers' death.
 *
 * Each transport delivers messages on one thread. A handler can hold it up: a reply to a
 * rank whose connection is still being made waits for that connection, and a lost connect
 * request costs rdma_cm seconds (a lossy fabric, docs/failure.md). While it waits, the
 * rank hears nobody, though everyone is alive and sending heartbeats. 3 ranks:
 *  1. everyone connects to everyone, so heartbeats flow on every pair;
 *  2. rank 2 sends rank 1 a message whose handler holds rank 1's receive path for 2.5
 *     peer timeouts (the stand-in for the wait above);
 *  3. afterwards nobody has declared anybody dead (rank 1 would have declared ranks 2 and 3
 *     dead before the fix), every rank still reaches every other one, and rank 1 checks
 *     that the hold did last that long.
 * Option: --timeout-ms N (default 1000; the environment's DDSS_PEER_TIMEOUT_MS wins).
 */
#include "common/test_util.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_LEN 65536
#define W_ALL 0
#define TAG_HOLD DDSS_MSG_USER_FIRST
#define WAIT_MS 30000
#define NRANKS 3u

static struct ddss_net *net;
static struct ddss_tp *tp;
static uint32_t me;
static int timeout_ms = 1000;
static uint64_t *pool;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool hold_done;
static double hold_ms;

/* Rank 1's receive thread: held for 2.5 peer timeouts, as by a reply that cannot go. */
static void on_hold(void *arg, uint32_t from, const void *buf, size_t len)
{
	pthread_cond_t never = PTHREAD_COND_INITIALIZER;
	double t0 = test_now_ms();
	struct timespec ts;
	int64_t ns;

	(void)arg;
	(void)buf;
	(void)len;
	if (from != 2)
		return;
	ns = (int64_t)timeout_ms * 2500000;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ns / 1000000000;
	ts.tv_nsec += ns % 1000000000;
	ts.tv_sec += ts.tv_nsec / 1000000000;
	ts.tv_nsec %= 1000000000;
	pthread_mutex_lock(&mu);
	/* Nobody signals `never`: this is the hold itself, not a wait for an event. */
	while (pthread_cond_timedwait(&never, &mu, &ts) != ETIMEDOUT)
		;
	hold_ms = test_now_ms() - t0;
	hold_done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	pthread_cond_destroy(&never);
}

static void test_connect_all(void)
{
	for (uint32_t r = 1; r <= ddss_net_size(net); r++)
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, r, W_ALL, 1, NULL), 0);
	test_barrier_or_exit(net, WAIT_MS);
	CU_ASSERT_EQUAL(pool[W_ALL / 8], ddss_net_size(net));
	test_barrier_or_exit(net, WAIT_MS);
}

static void test_held_receive_path(void)
{
	uint64_t one = 1;
	struct timespec ts;
	int r;

	if (me == 2)
		CU_ASSERT_EQUAL(ddss_net_send(net, 1, TAG_HOLD, &one, sizeof(one)), 0);
	if (me == 1) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += WAIT_MS / 1000;
		pthread_mutex_lock(&mu);
		while (!hold_done && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
			;
		pthread_mutex_unlock(&mu);
		CU_ASSERT_FATAL(hold_done);
		printf("rank 1: receive path held for %.0f ms (peer timeout %d ms)\n", hold_ms,
		       timeout_ms);
		CU_ASSERT(hold_ms >= 2.0 * timeout_ms);
	}
	/* Rank 1 enters only once its hold is over: everyone's checks come after it. */
	test_barrier_or_exit(net, WAIT_MS);
	r = (int)ddss_net_peers_declared_dead(net);
	if (r)
		printf("rank %u: declared %d peer(s) dead\n", me, r);
	CU_ASSERT_EQUAL(r, 0);
	for (uint32_t p = 1; p <= ddss_net_size(net); p++)
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, p, W_ALL, 1, NULL), 0);
	test_barrier_or_exit(net, WAIT_MS);
	CU_ASSERT_EQUAL(pool[W_ALL / 8], 2 * ddss_net_size(net));
	test_barrier_or_exit(net, WAIT_MS);
}

int main(int argc, char **argv)
{
	CU_pSuite suite;
	unsigned failed;
	int r;

	r = test_peer_timeout_args(argc, argv, NRANKS, &timeout_ms);
	if (r)
		return r;
	net = test_net_open_or_exit();
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	pool = test_alloc_pool(POOL_LEN);
	if (ddss_net_on_msg(net, TAG_HOLD, on_hold, NULL) || ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("held_handler", NULL, NULL);
	CU_add_test(suite, "everyone connected", test_connect_all);
	CU_add_test(suite, "a held receive path declares nobody dead", test_held_receive_path);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
