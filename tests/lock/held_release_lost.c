/*
 * A released lock whose compare&swap is lost with its connection while tcp holds it for
 * the next request (docs/locks.md, "What the posted release costs the next lock, and the
 * release held for it"). 2 ranks over tcp, N-CoSED:
 *
 *   ddssrun -n 2 --transport tcp lock_held_release_lost
 *
 * Rank 1 homes the lock. Rank 2 holds the release for 30 s (the bound, a test knob,
 * tcp_later_ns), takes the lock and releases it: the call returns, and the release's
 * compare&swap waits in rank 2 for its next request to rank 1. Rank 2 then shuts its
 * connection to rank 1 (ddss_tp_peer_disconnect, as a cut does): the held frame fails
 * with it, never sent, and rank 2's id still stands in the lock word. Rank 2 then takes
 * and releases a lock of its own: the lock call reaps the failed release (the first to see
 * it; rank 2 makes no barrier before rank 1 is done, whose drain would see it first). It
 * tells rank 1 by a put over a new connection, and waits for rank 1's answer.
 *
 * Rank 1 then only try-locks, for at most TAKE_MS: nobody queues behind the id, so nobody
 * asks rank 2 to hand the lock on. Before the fix (3177ecf) the reaper only retired the
 * failed release's slot, and every try said -EBUSY for as long as rank 2 lived. Now the
 * finisher ends it as a failed release and asks the home to take the lock past rank 2's
 * id (lock_stray_ask): a try succeeds. Rank 2 then takes and releases the lock again, and
 * rank 1 once more, to show nothing of the lost release stays behind.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "ddss/ddss.h"
#include "net/tcp/tcp.h" /* tcp_later_ns */
#include "net/transport.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define TAKE_MS 10000 /* rank 1's try-locks behind the lost release */
#define HOLD_NS 30000000000L
#define WAIT_NS 30000000000LL

static ddss_ctx_t *ctx;
static uint32_t me;

/* Wait (bounded) for the other rank's put of @phase into our own segment @key. */
static void phase_wait(ddss_key_t key, uint64_t phase)
{
	int64_t give_up = ddss_now_ns() + WAIT_NS;
	uint64_t v = 0;

	while (v != phase && ddss_now_ns() < give_up)
		if (ddss_get(ctx, key, 0, &v, 8) || v != phase)
			usleep(1000);
	TEST_CHECK(me, v == phase, "rank %u never reached phase %llu", 3 - me,
		   (unsigned long long)phase);
}

/* Tell the other rank, whose segment @key is, that @phase may go on. */
static void phase_go(ddss_key_t key, uint64_t phase)
{
	int r = ddss_put(ctx, key, 0, &phase, 8);

	TEST_CHECK(me, r == 0, "the put of phase %llu: %d (%s)", (unsigned long long)phase, r,
		   ddss_strerror(r));
}

/* Rank 1: try-locks only, until one succeeds or TAKE_MS passed. */
static void try_only(ddss_key_t key, const char *what)
{
	unsigned tries, busy;
	double ms;
	int r = test_try_lock_until(ctx, key, TAKE_MS, &tries, &busy, &ms);

	printf("rank 1: %s: %d (%s) after %u tries (%u said -EBUSY), %.0f ms\n", what, r,
	       ddss_strerror(r), tries, busy, ms);
	TEST_CHECK(1, r == 0, "%s: no try-lock took the lock past rank 2's lost release in %d "
		   "ms: %d (%s)", what, TAKE_MS, r, ddss_strerror(r));
	if (r == 0)
		TEST_CHECK(1, ddss_release_lock_ss(ctx, key) == 0, "%s: the release", what);
}

int main(void)
{
	ddss_key_t phase_at_1, phase_at_2, key, own;
	uint64_t v = 0;
	int r;

	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	phase_at_1 = test_segment_at(ctx, me, "hrl-phase-1", 1, 8);
	phase_at_2 = test_segment_at(ctx, me, "hrl-phase-2", 2, 8);
	key = test_segment_at(ctx, me, "hrl-lock", 1, 8);
	own = test_segment_at(ctx, me, "hrl-own", 2, 8);
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		TEST_CHECK(2, ctx->tp->holds_later, "tcp does not hold releases: nothing to lose");
		tcp_later_ns = HOLD_NS;
		r = ddss_get(ctx, key, 0, &v, 8); /* the descriptor cached, connected */
		TEST_CHECK(2, r == 0, "a first get: %d (%s)", r, ddss_strerror(r));
		r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
		TEST_CHECK(2, r == 0, "the lock: %d (%s)", r, ddss_strerror(r));
		r = ddss_release_lock_ss(ctx, key);
		TEST_CHECK(2, r == 0, "the release: %d (%s)", r, ddss_strerror(r));
		r = ddss_tp_peer_disconnect(ctx->tp, 1);
		printf("rank 2: released, then shut the connection to rank 1 with the release "
		       "held: %d (%s)\n", r, ddss_strerror(r));
		tcp_later_ns = TCP_LATER_NS;
		r = ddss_acquire_lock_ss(ctx, own, DDSS_LOCK_EXCLUSIVE);
		TEST_CHECK(2, r == 0, "a lock of its own: %d (%s)", r, ddss_strerror(r));
		r = r ? r : ddss_release_lock_ss(ctx, own);
		TEST_CHECK(2, r == 0, "its release: %d (%s)", r, ddss_strerror(r));
		phase_go(phase_at_1, 1);
		phase_wait(phase_at_2, 1);
	} else {
		phase_wait(phase_at_1, 1);
		try_only(key, "1. try-locks behind the lost release");
		phase_go(phase_at_2, 1);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
		TEST_CHECK(2, r == 0, "the lock again: %d (%s)", r, ddss_strerror(r));
		r = r ? r : ddss_release_lock_ss(ctx, key);
		TEST_CHECK(2, r == 0, "its release: %d (%s)", r, ddss_strerror(r));
		phase_go(phase_at_1, 2);
	} else {
		phase_wait(phase_at_1, 2);
		try_only(key, "2. try-locks after rank 2's next lock");
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
