/*
 * The operation timeout against a rank that stops answering (frozen with SIGSTOP), 2 ranks,
 * run with a short DDSS_OP_TIMEOUT_MS and a long DDSS_PEER_TIMEOUT_MS, so that the
 * operation timeout and not the heartbeat ends the wait:
 *  1. rank 2 says where it is (its pid in its pool), then freezes;
 *  2. rank 1 reads from it with the blocking helper, whose wait ends only with the request:
 *     -ETIMEDOUT, no earlier than the operation timeout, and the request expired (counted
 *     in the transport's timeouts). Before the fix the wait's last poll(2) was rounded down
 *     to whole milliseconds and ended just before the deadline: the read returned
 *     -ETIMEDOUT with its request still queued on the channel, on a stack frame that was
 *     gone;
 *  3. rank 1 wakes rank 2, and the two still talk.
 * Each check is made in each completion mode the test is run with (DDSS_COMPLETION).
 */
#include "common/test_util.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_LEN 65536
#define TAG_CTRL DDSS_MSG_USER_FIRST
#define WAIT_MS 20000
#define OP_TIMEOUT_MS 300 /* as the test's environment sets it */

enum ctrl { CTRL_AWAKE = 1, CTRL_BYE = 2 };

static struct ddss_net *net;
static struct ddss_tp *tp;
static uint32_t me;
static uint64_t *pool;

static void test_connect(void)
{
	CU_ASSERT_EQUAL_FATAL(ddss_net_size(net), 2);
	pool[0] = (uint64_t)getpid();
	test_barrier_or_exit(net, WAIT_MS);
}

static void test_expires(void)
{
	uint64_t pid = 0, v, timeouts;
	int64_t t0, took_ms;
	int r;

	if (me == 2) {
		test_barrier_or_exit(net, WAIT_MS); /* rank 1 has read our pid */
		raise(SIGSTOP);
		CU_ASSERT(test_ctrl_wait(CTRL_AWAKE, 1, WAIT_MS));
		CU_ASSERT_EQUAL(test_ctrl_send(1, CTRL_BYE), 0);
		return;
	}
	CU_ASSERT_EQUAL_FATAL(ddss_tp_read(tp, 2, 0, &pid, 8), 0);
	CU_ASSERT_FATAL(pid > 1);
	test_barrier_or_exit(net, WAIT_MS);
	CU_ASSERT_FATAL(test_wait_stopped((int)pid, WAIT_MS));

	timeouts = __atomic_load_n(&tp->timeouts, __ATOMIC_RELAXED);
	t0 = ddss_now_ns();
	r = ddss_tp_read(tp, 2, 0, &v, 8);
	took_ms = (ddss_now_ns() - t0) / 1000000;
	printf("rank 1: the read of a frozen rank ended after %lld ms with %d (%s)\n",
	       (long long)took_ms, r, ddss_strerror(r));
	CU_ASSERT_EQUAL(r, -ETIMEDOUT);
	CU_ASSERT(took_ms >= OP_TIMEOUT_MS);
	CU_ASSERT(took_ms < WAIT_MS);
	CU_ASSERT_EQUAL(__atomic_load_n(&tp->timeouts, __ATOMIC_RELAXED), timeouts + 1);

	CU_ASSERT_EQUAL(kill((pid_t)pid, SIGCONT), 0);
	CU_ASSERT_EQUAL(test_ctrl_send(2, CTRL_AWAKE), 0);
	CU_ASSERT(test_ctrl_wait(CTRL_BYE, 1, WAIT_MS));
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	net = test_net_open_or_exit();
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	pool = test_alloc_pool(POOL_LEN);
	if (test_ctrl_register(net, TAG_CTRL) || ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("op_timeout", NULL, NULL);
	CU_add_test(suite, "connected", test_connect);
	CU_add_test(suite, "a frozen rank's operation expires at the operation timeout",
		    test_expires);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
