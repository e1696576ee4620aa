/*
 * A call at a rank that is frozen (SIGSTOP) and whose connection already failed is bounded
 * by the operation timeout, not by the 5 s a known peer gets for a new connection's
 * handshake. 2 ranks over tcp, run with DDSS_OP_TIMEOUT_MS=1000 and a long peer timeout:
 *
 *   DDSS_OP_TIMEOUT_MS=1000 DDSS_PEER_TIMEOUT_MS=60000 ddssrun -n 2 frozen_reconnect
 *
 * Rank 1 freezes rank 2, and its get there times out (the connection fails). Rank 2 stays
 * frozen: its kernel still accepts a new connection, which nobody serves. Checked:
 *  1. a second get at rank 2 fails within the operation timeout plus slack (before the
 *     fix: after the handshake's 5 s);
 *  2. a third call from another thread, made beside the second, fails within 500 ms of it
 *     (they share the attempt, tcp_chan_ensure);
 *  3. rank 2 woken, a get there succeeds and reads its value (a few tries, bounded: the
 *     first may meet the end of an attempt made while it was frozen).
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "net/transport.h" /* ddss_now_ns */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OP_TIMEOUT_MS 1000    /* as the test's environment sets it */
#define SLACK_MS 1500         /* a loaded 2-core machine, the sanitizers */
#define MAGIC 0x5eed0f2ull
#define WOKEN_TRIES 5         /* gets once rank 2 is woken: each bounded as above */

static ddss_ctx_t *ctx;
static uint32_t me;

struct call {
	ddss_key_t key;
	int r;
	int64_t took_ns, end_ns;
};

static void *get_at_2(void *arg)
{
	struct call *c = arg;
	int64_t t0 = ddss_now_ns();
	uint64_t v;

	c->r = ddss_get(ctx, c->key, 0, &v, 8);
	c->end_ns = ddss_now_ns();
	c->took_ns = c->end_ns - t0;
	return NULL;
}

int main(void)
{
	uint64_t v = MAGIC;
	int pid_2 = 0;
	const char *op = getenv("DDSS_OP_TIMEOUT_MS");
	struct call second = { 0 }, third = { 0 };
	pthread_t th2, th3;
	ddss_key_t at_2;
	int r;

	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	if (!op || atoi(op) != OP_TIMEOUT_MS) {
		printf("rank %u: FAIL: run with DDSS_OP_TIMEOUT_MS=%d\n", me, OP_TIMEOUT_MS);
		return 1;
	}
	at_2 = test_freeze_rank2(ctx, me, "fr-at-2", MAGIC, &pid_2);
	if (me == 1) {
		r = ddss_get(ctx, at_2, 0, &v, 8);
		printf("rank 1: the first get at the frozen rank: %d (%s)\n", r, ddss_strerror(r));
		TEST_CHECK(1, r == -ETIMEDOUT, "the first get: %d, not -ETIMEDOUT", r);

		second.key = third.key = at_2;
		pthread_create(&th2, NULL, get_at_2, &second);
		pthread_create(&th3, NULL, get_at_2, &third);
		pthread_join(th2, NULL);
		pthread_join(th3, NULL);
		printf("rank 1: 1. a second get, still frozen: %d (%s) after %lld ms\n", second.r,
		       ddss_strerror(second.r), (long long)(second.took_ns / 1000000));
		printf("rank 1: 2. a third get beside it: %d (%s) after %lld ms\n", third.r,
		       ddss_strerror(third.r), (long long)(third.took_ns / 1000000));
		TEST_CHECK(1, second.r < 0 && third.r < 0, "a get at a frozen rank succeeded");
		TEST_CHECK(1, second.took_ns < (OP_TIMEOUT_MS + SLACK_MS) * 1000000ll,
			   "the second get outlived the operation timeout by more than %d ms",
			   SLACK_MS);
		TEST_CHECK(1, third.took_ns < (OP_TIMEOUT_MS + SLACK_MS) * 1000000ll,
			   "the third get outlived the operation timeout by more than %d ms",
			   SLACK_MS);
		TEST_CHECK(1, llabs(second.end_ns - third.end_ns) < 500000000ll,
			   "the two gets ended %lld ms apart: they did not share the attempt",
			   llabs(second.end_ns - third.end_ns) / 1000000);

		test_wake_rank2(ctx, pid_2, at_2, MAGIC, WOKEN_TRIES);
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
