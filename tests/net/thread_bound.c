/*
 * A thread with a connect bound of its own (ddss_tp_set_thread_connect_bound, as the
 * daemon's lane sets 100 ms) waits for a reconnect to a peer that was up at most that
 * long, on tcp and on verbs, whether the attempt is its own or another thread's.
 *
 *   ddssrun -n 2 --transport verbs tp_thread_bound     (and --transport tcp)
 *
 * Rank 1 reads at rank 2 once (the connection is up), freezes rank 2 (SIGSTOP: its
 * kernel takes a new connection, and nobody answers it) and gives its connection to rank 2
 * up. Checked:
 *  1. a bounded thread's get at rank 2 fails within the bound plus slack (its own
 *     attempt). On verbs before 2026-12-07 it waited out the 3 s a reconnect gets;
 *  2. an unbounded thread's get and a bounded one started beside it: the bounded one fails
 *     within the bound plus slack, and the unbounded one takes longer than that (so the
 *     attempt was really slow, and the bound is what cut the other), but no longer than one
 *     reconnect's bound: on verbs, until 2026-12-07, a thread that waited out the bound on
 *     an attempt it found under way then made its own, with a fresh bound (6068 ms);
 *  3. rank 2 woken, a get there reads its value (a few tries, bounded).
 * The operation timeout (4 s) and the peer timeout (60 s: the frozen rank is not declared
 * dead meanwhile) are set here.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "core/ctx.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREAD_BOUND_MS 100 /* as the daemon's lane */
#define SLACK_MS 1500       /* a loaded 2-core machine, the guest under TCG */
#define SLOW_MS 2000        /* the unbounded reconnect: 3 s (verbs), 4 s (tcp) */
#define WHOLE_MS 5500       /* ... and its limit: one bound plus slack */
#define MAGIC 0x7b0d7b0dull
#define WOKEN_TRIES 5

static ddss_ctx_t *ctx;
static uint32_t me;

struct call {
	ddss_key_t key;
	bool bounded;
	int r;
	int64_t took_ns;
};

static void *get_at_2(void *arg)
{
	struct call *c = arg;
	int64_t t0;
	uint64_t v;

	if (c->bounded)
		ddss_tp_set_thread_connect_bound(THREAD_BOUND_MS);
	t0 = ddss_now_ns();
	c->r = ddss_get(ctx, c->key, 0, &v, 8);
	c->took_ns = ddss_now_ns() - t0;
	return NULL;
}

static void run(struct call *calls, unsigned n)
{
	pthread_t th[2];

	for (unsigned i = 0; i < n; i++)
		pthread_create(&th[i], NULL, get_at_2, &calls[i]);
	for (unsigned i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

static void check_bounded(const char *what, const struct call *c)
{
	printf("rank 1: %s: %d (%s) after %lld ms\n", what, c->r, ddss_strerror(c->r),
	       (long long)(c->took_ns / 1000000));
	TEST_CHECK(1, c->r < 0, "%s succeeded at a frozen rank", what);
	TEST_CHECK(1, c->took_ns < (THREAD_BOUND_MS + SLACK_MS) * 1000000ll,
		   "%s took %lld ms: more than its bound (%d ms) plus %d ms", what,
		   (long long)(c->took_ns / 1000000), THREAD_BOUND_MS, SLACK_MS);
}

int main(void)
{
	int pid_2 = 0;
	struct call alone = { .bounded = true }, beside[2] = { { .bounded = false },
							       { .bounded = true } };
	ddss_key_t at_2;

	setenv("DDSS_OP_TIMEOUT_MS", "4000", 1);
	setenv("DDSS_PEER_TIMEOUT_MS", "60000", 1);
	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	at_2 = test_freeze_rank2(ctx, me, "tb-at-2", MAGIC, &pid_2);
	if (me == 1) {
		ddss_tp_peer_disconnect(ctx->tp, 2);

		alone.key = beside[0].key = beside[1].key = at_2;
		run(&alone, 1);
		check_bounded("1. a bounded get, alone", &alone);
		run(beside, 2);
		printf("rank 1: 2. an unbounded get beside it: %d (%s) after %lld ms\n",
		       beside[0].r, ddss_strerror(beside[0].r),
		       (long long)(beside[0].took_ns / 1000000));
		check_bounded("2. a bounded get beside an unbounded one", &beside[1]);
		TEST_CHECK(1, beside[0].r < 0, "the unbounded get succeeded at a frozen rank");
		TEST_CHECK(1, beside[0].took_ns < WHOLE_MS * 1000000ll,
			   "the unbounded get took %lld ms: more than one reconnect's bound",
			   (long long)(beside[0].took_ns / 1000000));
		TEST_CHECK(1, beside[0].took_ns >= SLOW_MS * 1000000ll,
			   "the unbounded get took only %lld ms: the reconnect was not slow, so "
			   "this run shows nothing of the bound", (long long)(beside[0].took_ns / 1000000));

		test_wake_rank2(ctx, pid_2, at_2, MAGIC, WOKEN_TRIES);
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
