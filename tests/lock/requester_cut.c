/*
 * A live requester between connections is not dead to the home (docs/failure.md, "Down
 * after an operation timeout is not dead"). 3 ranks over tcp, N-CoSED, run with a short
 * DDSS_OP_TIMEOUT_MS and a peer timeout T of a few seconds:
 *
 *   DDSS_OP_TIMEOUT_MS=1000 DDSS_PEER_TIMEOUT_MS=4000 ddssrun -n 3 lock_requester_cut
 *
 * Rank 1 homes the lock; rank 2 (the requester) holds it shared; rank 3 asks for it
 * exclusively. Rank 2's connection to rank 1 fails: it freezes rank 1 (SIGSTOP), its get
 * there times out, and it wakes rank 1. Rank 1's own connection to rank 2 still works.
 *
 *  A. At once, rank 3 asks for the lock. Its drain waits for rank 2's hold, and its check
 *     makes rank 1 survey the members. Before the fix rank 1 read rank 2 down (the
 *     connection rank 2 had made to it closed), declared it dead without asking, and told
 *     rank 3 the epoch was clear: rank 3 entered while rank 2 held the lock shared, and
 *     rank 2's release said -EHOSTDOWN.
 *  B. Rank 2 stays idle for 1.5 T after the cut, talking to nobody, then rank 3 asks. With
 *     only rank 1's side fixed, rank 2 sent rank 1 no heartbeat meanwhile (it sends only
 *     to ranks it reads up), and rank 1 declared it dead after T.
 *  C. The other way round: rank 1's connection to rank 2 fails (rank 1 freezes rank 2, and
 *     its get there times out), and rank 3 asks at once. Rank 1 reads rank 2 down until
 *     it connects again; its survey in that window declared rank 2 dead without asking.
 *
 * Checked each time: rank 3 gets the lock only after rank 2 began its release (a word
 * rank 2 sets in a segment at rank 3 first), within its 15 s bound; rank 2's release says
 * 0; rank 2 still reads the segment at rank 1 afterwards.
 *
 * The signals between ranks 2 and 3 go through segments homed at them, never through
 * rank 1: a message to rank 1 would make rank 2 connect again and close the window.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "net/transport.h" /* ddss_now_ns */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOLD_MS 3000     /* rank 2 holds on this long once rank 3 asks: 3 drain checks */
#define ASK_MS 15000     /* rank 3's timed acquire */
#define WAIT_MS 30000    /* a signal between ranks 2 and 3 */

/* Words of the signal segments. At rank 3: rank 2's "cut done" (phase), "releasing"
 * (phase). At rank 2: rank 3's "asking" (phase). At rank 1: "done" of ranks 2 and 3
 * (phase): rank 1 waits there rather than in a barrier, which fails at once where a rank
 * it waits for reads down, so that the phase shows what it checks. */
enum { W_CUT = 0, W_RELEASING = 1, W_ASKING = 0, W_PID_2 = 2, W_DONE_2 = 0, W_DONE_3 = 1,
       W_HOLDING = 2 };

static ddss_ctx_t *ctx;
static uint32_t me;

/* Our own segment's word @w reaching @v (polled, bounded). */
static void await_word(ddss_key_t key, unsigned w, uint64_t v)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	uint64_t got = 0;

	while (ddss_now_ns() < give_up) {
		if (ddss_get(ctx, key, 8 * w, &got, 8) == 0 && got == v)
			return;
		usleep(1000);
	}
	printf("rank %u: FAIL: word %u never reached %llu (last %llu)\n", me, w,
	       (unsigned long long)v, (unsigned long long)got);
	exit(1);
}

/* Rank 2. @home_pid: cut our connection to rank 1 first (else rank 1 cuts its own, C). */
static void requester(uint64_t phase, const char *what, pid_t home_pid, ddss_key_t lock_key,
		      ddss_key_t at_1, ddss_key_t at_3, ddss_key_t mine, int idle_ms)
{
	uint64_t v;
	int r;

	r = ddss_acquire_lock_ss(ctx, lock_key, DDSS_LOCK_SHARED);
	TEST_CHECK(2, r == 0, "%s: shared acquire: %s", what, ddss_strerror(r));
	if (home_pid) {
		test_cut_by_timeout(ctx, me, (int)home_pid, lock_key);
		if (idle_ms) /* the condition under test: silent to rank 1 for longer than T */
			usleep((useconds_t)idle_ms * 1000);
		test_put_word(ctx, me, at_3, W_CUT, phase);
	} else {
		test_put_word(ctx, me, at_1, W_HOLDING, phase);
	}
	await_word(mine, W_ASKING, phase);
	usleep(HOLD_MS * 1000); /* holding: rank 3's drain checks run meanwhile */
	test_put_word(ctx, me, at_3, W_RELEASING, phase);
	r = ddss_release_lock_ss(ctx, lock_key);
	printf("rank 2: %s: shared release: %d (%s)\n", what, r, ddss_strerror(r));
	TEST_CHECK(2, r == 0, "%s: the shared release: %d, not 0", what, r);
	r = ddss_get(ctx, lock_key, 0, &v, 8);
	TEST_CHECK(2, r == 0, "%s: a get at rank 1 afterwards: %s", what, ddss_strerror(r));
}

/* Ranks 2 and 3 at the end of a phase; rank 1 waits for both. */
static void phase_done(ddss_key_t at_1, uint64_t phase)
{
	if (me == 1) {
		await_word(at_1, W_DONE_2, phase);
		await_word(at_1, W_DONE_3, phase);
	} else {
		test_put_word(ctx, me, at_1, me == 2 ? W_DONE_2 : W_DONE_3, phase);
	}
}

static void closer(uint64_t phase, const char *what, ddss_key_t lock_key, ddss_key_t at_2,
		   ddss_key_t mine)
{
	uint64_t releasing = 0;
	int64_t t0;
	int r;

	await_word(mine, W_CUT, phase);
	test_put_word(ctx, me, at_2, W_ASKING, phase);
	t0 = ddss_now_ns();
	r = ddss_acquire_lock_timed_ss(ctx, lock_key, DDSS_LOCK_EXCLUSIVE, ASK_MS);
	TEST_CHECK(3, ddss_get(ctx, mine, 8 * W_RELEASING, &releasing, 8) == 0, "get");
	printf("rank 3: %s: exclusive acquire: %d (%s) after %lld ms, rank 2 %s\n", what, r,
	       ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000),
	       releasing == phase ? "releasing" : "STILL HOLDING IT SHARED");
	TEST_CHECK(3, r == 0, "%s: exclusive acquire: %d", what, r);
	TEST_CHECK(3, releasing == phase, "%s: entered beside rank 2's shared hold", what);
	if (r == 0)
		TEST_CHECK(3, ddss_release_lock_ss(ctx, lock_key) == 0, "%s: release", what);
}

int main(void)
{
	ddss_key_t pid_key, lock_key, at_1, at_2, at_3;
	uint64_t pid = (uint64_t)getpid();
	const char *t_env = getenv("DDSS_PEER_TIMEOUT_MS");
	int t_ms = t_env ? atoi(t_env) : 0;

	ctx = test_init_ranks_or_exit(3);
	me = ddss_rank(ctx);
	if (t_ms <= 0) {
		printf("rank %u: FAIL: run with DDSS_PEER_TIMEOUT_MS set (phase B idles 1.5 T)\n",
		       me);
		return 1;
	}
	pid_key = test_segment_at(ctx, me, "rc-pid", 1, 64);
	lock_key = test_segment_at(ctx, me, "rc-lock", 1, 64);
	at_1 = test_segment_at(ctx, me, "rc-at-1", 1, 64);
	at_2 = test_segment_at(ctx, me, "rc-at-2", 2, 64);
	at_3 = test_segment_at(ctx, me, "rc-at-3", 3, 64);
	if (me == 1)
		TEST_CHECK(1, ddss_put(ctx, pid_key, 0, &pid, 8) == 0, "put of the pid");
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		uint64_t v;

		TEST_CHECK(2, ddss_put(ctx, at_2, 8 * W_PID_2, &pid, 8) == 0, "put of the pid");
		/* Every descriptor cached here now: no lookup at rank 1 during a phase. */
		TEST_CHECK(2, ddss_get(ctx, pid_key, 0, &pid, 8) == 0, "get of rank 1's pid");
		TEST_CHECK(2, ddss_get(ctx, at_3, 0, &v, 8) == 0 && ddss_get(ctx, at_1, 0, &v, 8) == 0 &&
				      ddss_get(ctx, at_2, 0, &v, 8) == 0,
			   "first gets");
	} else if (me == 3) {
		uint64_t v;

		TEST_CHECK(3, ddss_get(ctx, at_2, 0, &v, 8) == 0 &&
				      ddss_get(ctx, lock_key, 0, &v, 8) == 0,
			   "first gets");
	}
	/* Before rank 2 freezes rank 1 in A: rank 3's first get there timed out once (CI28). */
	test_ctx_barrier_or_exit(ctx);
	if (me == 2)
		requester(1, "A. asked at once", (pid_t)pid, lock_key, at_1, at_3, at_2, 0);
	else if (me == 3)
		closer(1, "A. asked at once", lock_key, at_2, at_3);
	phase_done(at_1, 1);
	test_ctx_barrier_or_exit(ctx);
	if (me == 2)
		requester(2, "B. asked after 1.5 T idle", (pid_t)pid, lock_key, at_1, at_3, at_2,
			  t_ms * 3 / 2);
	else if (me == 3)
		closer(2, "B. asked after 1.5 T idle", lock_key, at_2, at_3);
	phase_done(at_1, 2);
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		uint64_t pid_2 = 0;

		TEST_CHECK(1, ddss_get(ctx, at_2, 8 * W_PID_2, &pid_2, 8) == 0 && pid_2,
			   "get of rank 2's pid");
		await_word(at_1, W_HOLDING, 3);
		test_cut_by_timeout(ctx, me, (int)pid_2, at_2);
		test_put_word(ctx, me, at_3, W_CUT, 3);
	} else if (me == 2) {
		requester(3, "C. the home's connection cut", 0, lock_key, at_1, at_3, at_2, 0);
	} else {
		closer(3, "C. the home's connection cut", lock_key, at_2, at_3);
	}
	phase_done(at_1, 3);
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
