/*
 * A waiter keeps its place in a lock's queue while a rank it waits on reads down but
 * alive (docs/failure.md, "Down after an operation timeout is not dead"). 3 ranks over
 * tcp, N-CoSED, run with a short DDSS_OP_TIMEOUT_MS and a peer timeout T of a few seconds:
 *
 *   DDSS_OP_TIMEOUT_MS=1000 DDSS_PEER_TIMEOUT_MS=4000 ddssrun -n 3 lock_waiter_cut
 *
 * Rank 1 homes the lock; rank 2 holds it exclusively; a thread of rank 3 asks for it
 * exclusively and waits behind rank 2 for its grant. Once rank 2 saw rank 3's request
 * announced, rank 3's main thread fails one of its own connections by an operation
 * timeout: it freezes the other rank (SIGSTOP), its get there times out, and it wakes the
 * rank. That rank now reads down at rank 3, though it lives and its own connection to
 * rank 3 works. Rank 2 holds on for 3 s, then releases.
 *
 *  D. The connection to rank 2, the predecessor whose grant the waiter waits for.
 *  E. The connection to rank 1, the lock's home.
 *
 * Checked each time: rank 3's acquire returns 0, only after rank 2 began its release (a
 * word rank 2 sets in a segment at rank 3 first), without being queued again (the lock's
 * recovery counter "requeued" of rank 3 is unchanged), and rank 2's release says 0.
 * Before the fix the wait read "down" as "gone": in D the waiter gave up its place and
 * queued again behind a recovery agent of the home, in E it failed as if the home were
 * dead (-EHOSTDOWN, "the segment is gone") or queued again.
 *
 * Rank 3 never talks to the cut rank until rank 2 released: its next operation there
 * would connect again and close the window. It waits only on words of its own segment.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "lock/lock.h"
#include "net/transport.h" /* ddss_now_ns */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOLD_MS 3000  /* rank 2 holds on this long after the cut: several heartbeat rounds */
#define ASK_MS 15000  /* rank 3's timed acquire */
#define WAIT_MS 30000 /* a signal between ranks */

/* Words. At rank 3: rank 2's "holding", "queued" (rank 3's request announced to it) and
 * "releasing" (phase). At rank 2: its pid; rank 3's "cut done" for phase E. At rank 1:
 * rank 3's "cut done" for phase D, and "done" of ranks 2 and 3 (phase): rank 1 waits there
 * rather than in a barrier, which fails at once where a rank it waits for reads down. */
enum { W_HOLDING = 0, W_QUEUED = 1, W_RELEASING = 2, W_PID_2 = 0, W_CUT = 1, W_DONE_2 = 2,
       W_DONE_3 = 3 };

static ddss_ctx_t *ctx;
static uint32_t me;
static unsigned noted; /* rank 2: lock notifications handled (its progress thread) */

static void hook(ddss_ctx_t *c, enum ddss_lock_test_point point)
{
	(void)c;
	if (point == DDSS_LOCK_TP_NOTED)
		__atomic_add_fetch(&noted, 1, __ATOMIC_RELEASE);
}

static uint64_t read_word(ddss_key_t key, unsigned w)
{
	uint64_t v = 0;

	return ddss_get(ctx, key, 8 * w, &v, 8) == 0 ? v : 0;
}

/* Word @w of @key reaching @v (polled, bounded). */
static void await_word(ddss_key_t key, unsigned w, uint64_t v)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	uint64_t got = 0;

	while (ddss_now_ns() < give_up) {
		got = read_word(key, w);
		if (got == v)
			return;
		usleep(1000);
	}
	printf("rank %u: FAIL: word %u never reached %llu (last %llu)\n", me, w,
	       (unsigned long long)v, (unsigned long long)got);
	exit(1);
}

/* Rank 2: a lock notification handled after @base (polled, bounded). */
static void await_noted(unsigned base)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;

	while (__atomic_load_n(&noted, __ATOMIC_ACQUIRE) == base) {
		if (ddss_now_ns() >= give_up) {
			printf("rank 2: FAIL: rank 3's request was never announced here\n");
			exit(1);
		}
		usleep(1000);
	}
}

struct phase {
	uint64_t n;
	const char *what;
	uint32_t cut_rank; /* whose connection rank 3 cuts: 2 (D) or 1 (E) */
};

struct keys {
	ddss_key_t lock, pid_1, at_1, at_2, at_3;
};

static void holder(const struct phase *p, const struct keys *k)
{
	unsigned base;
	int r;

	r = ddss_acquire_lock_ss(ctx, k->lock, DDSS_LOCK_EXCLUSIVE);
	TEST_CHECK(2, r == 0, "%s: exclusive acquire: %s", p->what, ddss_strerror(r));
	base = __atomic_load_n(&noted, __ATOMIC_ACQUIRE);
	test_put_word(ctx, me, k->at_3, W_HOLDING, p->n);
	await_noted(base); /* rank 3's request: its id in our record, and a notification */
	test_put_word(ctx, me, k->at_3, W_QUEUED, p->n);
	/* Never at the rank rank 3 freezes: our own connection there would time out too. */
	await_word(p->cut_rank == 2 ? k->at_1 : k->at_2, W_CUT, p->n);
	usleep(HOLD_MS * 1000); /* holding: rank 3 waits, reading the cut rank down */
	test_put_word(ctx, me, k->at_3, W_RELEASING, p->n);
	r = ddss_release_lock_ss(ctx, k->lock);
	printf("rank 2: %s: release: %d (%s)\n", p->what, r, ddss_strerror(r));
	TEST_CHECK(2, r == 0, "%s: the release: %d, not 0", p->what, r);
}

struct ask {
	ddss_key_t lock;
	int r;
	int64_t took_ns;
};

static void *asker(void *arg)
{
	struct ask *a = arg;
	int64_t t0 = ddss_now_ns();

	a->r = ddss_acquire_lock_timed_ss(ctx, a->lock, DDSS_LOCK_EXCLUSIVE, ASK_MS);
	a->took_ns = ddss_now_ns() - t0;
	return NULL;
}

static void waiter(const struct phase *p, const struct keys *k, pid_t pid_1, pid_t pid_2)
{
	struct ddss_lock_recovery_stats before, after;
	struct ask a = { .lock = k->lock };
	pthread_t th;
	uint64_t releasing;

	await_word(k->at_3, W_HOLDING, p->n);
	ddss_lock_recovery_stats(ctx, &before);
	if (pthread_create(&th, NULL, asker, &a)) {
		printf("rank 3: FAIL: pthread_create\n");
		exit(1);
	}
	await_word(k->at_3, W_QUEUED, p->n);
	if (p->cut_rank == 2)
		test_cut_by_timeout(ctx, me, (int)pid_2, k->at_2);
	else
		test_cut_by_timeout(ctx, me, (int)pid_1, k->pid_1);
	test_put_word(ctx, me, p->cut_rank == 2 ? k->at_1 : k->at_2, W_CUT, p->n);
	pthread_join(th, NULL);
	releasing = read_word(k->at_3, W_RELEASING);
	ddss_lock_recovery_stats(ctx, &after);
	printf("rank 3: %s: exclusive acquire: %d (%s) after %lld ms, rank 2 %s, queued again "
	       "%llu time(s)\n", p->what, a.r, ddss_strerror(a.r),
	       (long long)(a.took_ns / 1000000),
	       releasing == p->n ? "releasing" : "STILL HOLDING IT",
	       (unsigned long long)(after.requeued - before.requeued));
	TEST_CHECK(3, a.r == 0, "%s: exclusive acquire: %d", p->what, a.r);
	TEST_CHECK(3, a.r != 0 || releasing == p->n, "%s: entered while rank 2 held the lock",
		   p->what);
	TEST_CHECK(3, after.requeued == before.requeued,
		   "%s: the waiter lost its place: queued again %llu time(s)", p->what,
		   (unsigned long long)(after.requeued - before.requeued));
	if (a.r == 0)
		TEST_CHECK(3, ddss_release_lock_ss(ctx, k->lock) == 0, "%s: release", p->what);
}

/* Ranks 2 and 3 at the end of a phase; rank 1 waits for both. */
static void phase_done(const struct keys *k, uint64_t n)
{
	if (me == 1) {
		await_word(k->at_1, W_DONE_2, n);
		await_word(k->at_1, W_DONE_3, n);
	} else {
		test_put_word(ctx, me, k->at_1, me == 2 ? W_DONE_2 : W_DONE_3, n);
	}
}

int main(void)
{
	static const struct phase phases[] = {
		{ 1, "D. the waiter's connection to its predecessor cut", 2 },
		{ 2, "E. the waiter's connection to the home cut", 1 },
	};
	uint64_t pid = (uint64_t)getpid(), pid_1 = 0, pid_2 = 0, v;
	const char *t_env = getenv("DDSS_PEER_TIMEOUT_MS");
	struct keys k;

	ctx = test_init_ranks_or_exit(3);
	me = ddss_rank(ctx);
	if (!t_env || atoi(t_env) <= 0) {
		printf("rank %u: FAIL: run with DDSS_PEER_TIMEOUT_MS set (rank 3 must be heard "
		       "from by heartbeats while it reads a rank down)\n", me);
		return 1;
	}
	if (me == 2)
		ddss_lock_test_hook = hook;
	k.pid_1 = test_segment_at(ctx, me, "wc-pid", 1, 64);
	k.lock = test_segment_at(ctx, me, "wc-lock", 1, 64);
	k.at_1 = test_segment_at(ctx, me, "wc-at-1", 1, 64);
	k.at_2 = test_segment_at(ctx, me, "wc-at-2", 2, 64);
	k.at_3 = test_segment_at(ctx, me, "wc-at-3", 3, 64);
	if (me == 1)
		TEST_CHECK(1, ddss_put(ctx, k.pid_1, 0, &pid, 8) == 0, "put of the pid");
	if (me == 2)
		TEST_CHECK(2, ddss_put(ctx, k.at_2, 8 * W_PID_2, &pid, 8) == 0, "put of the pid");
	test_ctx_barrier_or_exit(ctx);
	/* Every descriptor cached now, and every connection made: no lookup during a phase. */
	TEST_CHECK(me, ddss_get(ctx, k.lock, 0, &v, 8) == 0 && ddss_get(ctx, k.at_1, 0, &v, 8) == 0 &&
			       ddss_get(ctx, k.at_2, 0, &v, 8) == 0 &&
			       ddss_get(ctx, k.at_3, 0, &v, 8) == 0,
		   "first gets");
	if (me == 3) {
		TEST_CHECK(3, ddss_get(ctx, k.pid_1, 0, &pid_1, 8) == 0 && pid_1, "rank 1's pid");
		TEST_CHECK(3, ddss_get(ctx, k.at_2, 8 * W_PID_2, &pid_2, 8) == 0 && pid_2,
			   "rank 2's pid");
	}
	test_ctx_barrier_or_exit(ctx);
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		if (me == 2)
			holder(&phases[i], &k);
		else if (me == 3)
			waiter(&phases[i], &k, (pid_t)pid_1, (pid_t)pid_2);
		phase_done(&k, phases[i].n);
		test_ctx_barrier_or_exit(ctx);
	}
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
