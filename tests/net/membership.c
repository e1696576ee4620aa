/*
 * Membership over a real group (ddssrun, 4 ranks, any provider):
 *  1. the last rank starts late: the others' first operations on it wait for it to join;
 *  2. the last rank dies (_exit in a handler) with an operation in flight to it: that
 *     operation fails with an error, every rank notices it down, later operations on it
 *     fail fast;
 *  3. rank 3 leaves cleanly (closes its transport): the others notice;
 *  4. the survivors carry on.
 * Ranks that die or leave exit 0 only if all their checks passed until then.
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
#include <unistd.h>

#define POOL_LEN 65536
#define W_JOIN 0
#define W_ALL 8
#define W_SURVIVORS 16
#define TAG_CTRL DDSS_MSG_USER_FIRST
#define NOTIFY_DIE 0xD1Eu
#define WAIT_MS 20000
#define LATE_START_MS 700

enum ctrl { CTRL_MAY_LEAVE = 1, CTRL_SURVIVOR_DONE = 2 };

static struct ddss_net *net;
static struct ddss_tp *tp;
static uint32_t me, nranks, dier, leaver;
static uint64_t *pool;


static void barrier(void)
{
	test_barrier_or_exit(net, WAIT_MS);
}

static void on_notify(void *arg, uint32_t from, uint32_t value)
{
	if (value == NOTIFY_DIE && me == dier) {
		/* Die abruptly, with requests from rank 1 still queued behind this one. */
		fflush(stdout);
		_exit(CU_get_number_of_failures() ? 1 : 0);
	}
}

static void test_late_joiner(void)
{
	uint64_t v = 0;

	/* The last rank is not up yet: this connects with retries until it is. */
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, dier, W_JOIN, 1, NULL), 0);
	barrier();
	CU_ASSERT_EQUAL(ddss_tp_read(tp, dier, W_JOIN, &v, 8), 0);
	CU_ASSERT_EQUAL(v, nranks);
	/* Connect everyone to everyone, so every rank can notice every departure. */
	for (uint32_t r = 1; r <= nranks; r++)
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, r, W_ALL, 1, NULL), 0);
	barrier();
	CU_ASSERT_EQUAL(pool[W_ALL / 8], nranks);
	for (uint32_t r = 1; r <= nranks; r++) {
		struct ddss_tp_peer_info info;

		CU_ASSERT_EQUAL(ddss_tp_peer_info(tp, r, &info), 0);
		CU_ASSERT_EQUAL(info.state, DDSS_TP_PEER_UP);
	}
	barrier();
}

static void test_dead_rank(void)
{
	struct ddss_tp_req req;
	uint64_t v;
	int r;

	if (me == dier) {
		/* Wait to be killed by rank 1's notification; reaching the end is a failure. */
		CU_ASSERT_EQUAL(ddss_net_wait_peer(net, 1, DDSS_TP_PEER_DOWN, WAIT_MS * 3), 0);
		CU_FAIL("still alive: the die notification never came");
		return;
	}
	if (me == 1) {
		CU_ASSERT_EQUAL(ddss_tp_notify(tp, dier, NOTIFY_DIE), 0);
		CU_ASSERT_EQUAL(ddss_tp_post_read(tp, dier, W_ALL, &v, 8, &req), 0);
		/*
		 * It must complete, not hang. On tcp it is served after the notification, so
		 * never: an error. With RDMA the NIC may serve it while the process is exiting.
		 */
		r = ddss_tp_wait(tp, &req, WAIT_MS);
		CU_ASSERT_EQUAL(r, 0);
		CU_ASSERT(req.status == -ECONNRESET || req.status == -EHOSTDOWN ||
			  (req.status == 0 && strcmp(ddss_net_transport_name(net), "tcp") != 0));
	}
	CU_ASSERT_EQUAL(ddss_net_wait_peer(net, dier, DDSS_TP_PEER_DOWN, WAIT_MS), 0);
	r = ddss_tp_read(tp, dier, W_ALL, &v, 8);
	if (!(r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED))
		printf("read from the dead rank: %d\n", r);
	CU_ASSERT(r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED);
	r = ddss_tp_notify(tp, dier, 1);
	CU_ASSERT(r < 0);
}

static void test_clean_leave(void)
{
	uint64_t v;
	int r;

	if (me == dier)
		return;
	if (me == leaver) {
		/* Leave once every other survivor is done with the previous test. */
		CU_ASSERT(test_ctrl_wait(CTRL_MAY_LEAVE, nranks - 2, WAIT_MS));
		return;
	}
	CU_ASSERT_EQUAL(test_ctrl_send(leaver, CTRL_MAY_LEAVE), 0);
	CU_ASSERT_EQUAL(ddss_net_wait_peer(net, leaver, DDSS_TP_PEER_DOWN, WAIT_MS), 0);
	r = ddss_tp_read(tp, leaver, W_ALL, &v, 8);
	if (!(r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED))
		printf("read from the rank that left: %d\n", r);
	CU_ASSERT(r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED);
}

static void test_survivors_carry_on(void)
{
	uint32_t others = nranks - 2;

	if (me == dier || me == leaver)
		return;
	for (uint32_t r = 1; r <= nranks; r++) {
		if (r == dier || r == leaver)
			continue;
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, r, W_SURVIVORS, 1, NULL), 0);
		CU_ASSERT_EQUAL(test_ctrl_send(r, CTRL_SURVIVOR_DONE), 0);
	}
	CU_ASSERT(test_ctrl_wait(CTRL_SURVIVOR_DONE, others, WAIT_MS));
	CU_ASSERT_EQUAL(pool[W_SURVIVORS / 8], others);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;
	const char *rank_env = getenv("DDSS_RANK"), *size_env = getenv("DDSS_SIZE");

	if (!rank_env || !size_env || atoi(size_env) < 4) {
		fprintf(stderr, "run under ddssrun with at least 4 ranks\n");
		return 2;
	}
	if ((uint32_t)atoi(rank_env) == (uint32_t)atoi(size_env)) {
		/* Creates the late-join scenario; nothing depends on its length. */
		struct timespec ts = { 0, LATE_START_MS * 1000000L };

		nanosleep(&ts, NULL);
	}
	net = test_net_open_or_exit();
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	nranks = ddss_net_size(net);
	dier = nranks;
	leaver = nranks - 1;
	pool = test_alloc_pool(POOL_LEN);
	ddss_net_on_notify(net, on_notify, NULL);
	if (test_ctrl_register(net, TAG_CTRL) || ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("membership", NULL, NULL);
	CU_add_test(suite, "late joiner is waited for", test_late_joiner);
	CU_add_test(suite, "dead rank: errors, not hangs", test_dead_rank);
	CU_add_test(suite, "clean leave is noticed", test_clean_leave);
	CU_add_test(suite, "survivors carry on", test_survivors_carry_on);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
