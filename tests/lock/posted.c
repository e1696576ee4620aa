/*
 * Exclusive releases that return before their CAS completes (src/lock/lock_posted.c),
 * over a real group of 3 ranks: rank 1 releases, rank 2 queues behind it, rank 3 is the
 * home of the lock word (and of the flags segment the ranks signal each other through).
 *
 *  - uncontended: every release is posted, a later call frees its slot, nothing is handed
 *    to the finisher; a scheme switch drains the last one, and the counts add up;
 *  - a successor that swapped itself in while the release was being posted, and
 *    announced itself only after the release had returned: the finisher thread hands the
 *    lock over (test hooks hold each side at the right point, so this is deterministic);
 *  - a successor whose announcement arrived before the release marked its slot: the
 *    release takes its CAS back and hands over itself;
 *  - a barrier lands the releases posted before it: another rank's try finds the lock free;
 *  - under contention (2 threads on each of ranks 1 and 2, one lock, get / +1 / put, varying
 *    pauses): the counter is exact, whichever way each release ended.
 *
 *   ddssrun -n 3 lock_posted [--iters N]
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 20000 /* a flag that never comes: fail instead of hanging */

enum flag { F_GO, F_SWAPPED, F_RETURNED, NFLAGS };

static ddss_ctx_t *ctx;
static uint32_t me;
static unsigned iters = 2000;
static ddss_key_t key, flags; /* the lock's segment (a counter) and the flags, at rank 3 */

/* The hooks' state: which point to act at (0 = none), and what the progress thread saw. */
static _Atomic int armed;
static atomic_uint noted;
static atomic_uint hook_failures;

static void put_flag(enum flag f, uint64_t v)
{
	if (ddss_put(ctx, flags, 8 * f, &v, 8))
		atomic_fetch_add(&hook_failures, 1);
}

/* Wait until flag @f reaches @v (polling the home: these are the test's messages). */
static bool wait_flag(enum flag f, uint64_t v)
{
	double until = test_now_ms() + WAIT_MS;
	uint64_t got = 0;

	while (test_now_ms() < until) {
		if (ddss_get(ctx, flags, 8 * f, &got, 8)) {
			atomic_fetch_add(&hook_failures, 1);
			return false;
		}
		if (got >= v)
			return true;
		sched_yield();
	}
	fprintf(stderr, "rank %u: flag %d never reached %llu (is %llu)\n", me, f,
		(unsigned long long)v, (unsigned long long)got);
	atomic_fetch_add(&hook_failures, 1);
	return false;
}

static bool wait_noted(unsigned want)
{
	double until = test_now_ms() + WAIT_MS;

	while (atomic_load(&noted) < want) {
		if (test_now_ms() >= until) {
			atomic_fetch_add(&hook_failures, 1);
			return false;
		}
		sched_yield();
	}
	return true;
}

static uint64_t round_no;

/*
 * Rank 1 at DDSS_LOCK_TP_RELEASE_CAS: let rank 2 queue, and wait until it has swapped
 * itself in (hold it there: finisher case) or until its announcement was handled here
 * (take-back case). Rank 2 at DDSS_LOCK_TP_SWAPPED: say so, then wait until rank 1's
 * release has returned.
 */
static void hook(ddss_ctx_t *c, enum ddss_lock_test_point point)
{
	int want = atomic_load(&armed);

	(void)c;
	if (point == DDSS_LOCK_TP_NOTED) {
		atomic_fetch_add(&noted, 1);
		return;
	}
	if (!want || (int)point != want - 1)
		return;
	atomic_store(&armed, 0); /* once: our own later calls pass */
	if (point == DDSS_LOCK_TP_RELEASE_CAS) {
		unsigned seen = atomic_load(&noted);

		put_flag(F_GO, round_no);
		if (round_no == 1)
			wait_flag(F_SWAPPED, round_no); /* it waits in its hook to announce */
		else
			wait_noted(seen + 1); /* its announcement is here: before our mark */
	} else if (point == DDSS_LOCK_TP_SWAPPED) {
		put_flag(F_SWAPPED, round_no);
		wait_flag(F_RETURNED, round_no);
	}
}

static void arm(enum ddss_lock_test_point point)
{
	atomic_store(&armed, (int)point + 1);
}

static void stats(struct ddss_lock_posted_stats *st)
{
	ddss_lock_posted_stats(ctx, st);
}

/* ---- uncontended ---- */

static void test_uncontended(void)
{
	struct ddss_lock_posted_stats a, b;

	stats(&a);
	if (me == 1) {
		for (unsigned i = 0; i < iters; i++) {
			EXPECT_RC(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
			EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
		}
		stats(&b);
		EXPECT_EQ(b.posted - a.posted, iters, "releases posted");
		CU_ASSERT(b.reaped - a.reaped >= iters - 1); /* each acquire frees the last one */
		EXPECT_EQ(b.finished - a.finished, 0, "releases the finisher completed");
		EXPECT_EQ(b.taken_back - a.taken_back, 0, "releases taken back");
		/* A scheme switch waits for what is still out: then everything has ended. */
		EXPECT_RC(ddss_lock_scheme_set(ctx, DDSS_LOCK_NCOSED, false), 0);
		stats(&b);
		EXPECT_EQ(b.posted, b.reaped + b.finished + b.drained, "posted = ended");
		printf("rank 1: %u lock/unlock: posted %llu, reaped %llu, drained %llu\n", iters,
		       (unsigned long long)(b.posted - a.posted),
		       (unsigned long long)(b.reaped - a.reaped),
		       (unsigned long long)(b.drained - a.drained));
	}
	test_ctx_barrier_or_exit(ctx);
}

/* ---- a barrier after a posted release ---- */

/*
 * Rank 1 releases (posted: no later lock call reaps it), everyone meets in a barrier, and
 * rank 2 tries the lock: it must be free at once. Without the barrier's flush the try
 * could overtake the CAS (it travels on another channel), and rank 1's posting would still
 * be out after the barrier.
 */
static void test_barrier_lands(void)
{
	struct ddss_lock_posted_stats a, b;

	stats(&a);
	if (me == 1) {
		EXPECT_RC(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
		EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		stats(&b);
		EXPECT_EQ(b.posted - a.posted, 1, "releases posted");
		EXPECT_EQ(b.posted, b.reaped + b.finished + b.drained,
			  "posted = ended, once the barrier returned");
	}
	if (me == 2) {
		int r = ddss_try_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);

		EXPECT_RC(r, 0);
		if (!r)
			EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
	}
	test_ctx_barrier_or_exit(ctx);
}

/* ---- a successor in the window ---- */

static void *queue_behind(void *arg)
{
	int *rc = arg;

	*rc = -EINPROGRESS;
	if (!wait_flag(F_GO, round_no))
		return NULL;
	*rc = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
	return NULL;
}

/*
 * Round 1 (finisher): rank 2 swaps in while rank 1 posts, and announces only after rank
 * 1's release returned. Round 2 (taken back): rank 2 announces before rank 1 marks.
 */
static void successor_round(uint64_t round, bool finisher)
{
	struct ddss_lock_posted_stats a, b;
	uint64_t v = 0;

	round_no = round;
	stats(&a);
	if (me == 1)
		EXPECT_RC(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
	test_ctx_barrier_or_exit(ctx); /* rank 1 holds */
	if (me == 1) {
		arm(DDSS_LOCK_TP_RELEASE_CAS);
		EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
		put_flag(F_RETURNED, round);
		stats(&b);
		if (finisher) {
			EXPECT_EQ(b.posted - a.posted, 1, "posted although a successor swapped in");
			/* The finisher hands over once rank 2 announces: wait for its count. */
			for (double until = test_now_ms() + WAIT_MS;
			     b.finished == a.finished && test_now_ms() < until; stats(&b))
				sched_yield();
			EXPECT_EQ(b.finished - a.finished, 1, "handed over by the finisher");
			EXPECT_EQ(b.taken_back - a.taken_back, 0, "taken back");
		} else {
			EXPECT_EQ(b.posted - a.posted, 0, "posted");
			EXPECT_EQ(b.taken_back - a.taken_back, 1, "taken back (announcement seen)");
			EXPECT_EQ(b.finished - a.finished, 0, "handed to the finisher");
		}
	} else if (me == 2) {
		pthread_t th;
		int rc = 0;

		if (finisher)
			arm(DDSS_LOCK_TP_SWAPPED);
		CU_ASSERT_FATAL(pthread_create(&th, NULL, queue_behind, &rc) == 0);
		pthread_join(th, NULL);
		EXPECT_RC(rc, 0);
		if (!rc) {
			/* We hold it: the counter is ours to bump. */
			EXPECT_RC(ddss_get(ctx, key, 0, &v, 8), 0);
			v++;
			EXPECT_RC(ddss_put(ctx, key, 0, &v, 8), 0);
			EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
		}
	}
	test_ctx_barrier_or_exit(ctx);
	EXPECT_EQ(atomic_load(&hook_failures), 0, "hook failures");
	atomic_store(&armed, 0);
	/* The lock works both ways afterwards. */
	EXPECT_RC(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
	EXPECT_RC(ddss_release_lock_ss(ctx, key), 0);
	test_ctx_barrier_or_exit(ctx);
}

static void test_finisher(void)
{
	successor_round(1, true);
}

static void test_taken_back(void)
{
	successor_round(2, false);
}

/* ---- contention ---- */

#define THREADS 2
static unsigned worker_failures[THREADS]; /* one per worker: test_thread_fail is not atomic */

static void *worker(void *arg)
{
	unsigned tid = (unsigned)(uintptr_t)arg, seed = me * 100 + tid;

	for (unsigned i = 0; i < iters; i++) {
		uint64_t v;
		int r;

		/* A varying pause (pacing, not synchronisation): the lock is sometimes free when
		 * released, and a rival's request sometimes lands while the release is out. */
		for (unsigned k = (unsigned)rand_r(&seed) % 8; k; k--)
			sched_yield();
		r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);

		if (r) {
			test_thread_fail(&worker_failures[tid], me, tid, "acquire: %s",
					 ddss_strerror(r));
			return NULL;
		}
		r = ddss_get(ctx, key, 8, &v, 8);
		v++;
		if (!r)
			r = ddss_put(ctx, key, 8, &v, 8);
		if (!r)
			r = ddss_release_lock_ss(ctx, key);
		if (r) {
			test_thread_fail(&worker_failures[tid], me, tid, "get/put/release: %s",
					 ddss_strerror(r));
			return NULL;
		}
	}
	return NULL;
}

static void test_contention(void)
{
	struct ddss_lock_posted_stats a, b;
	pthread_t th[THREADS];
	uint64_t v = 0;

	stats(&a);
	/* Ranks 1 and 2 only: the home's own releases complete at once on tcp. */
	for (uintptr_t t = 0; me != 3 && t < THREADS; t++)
		CU_ASSERT_FATAL(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
	for (unsigned t = 0; me != 3 && t < THREADS; t++)
		pthread_join(th[t], NULL);
	EXPECT_EQ(worker_failures[0] + worker_failures[1], 0, "worker failures");
	test_ctx_barrier_or_exit(ctx);
	EXPECT_RC(ddss_get(ctx, key, 8, &v, 8), 0);
	EXPECT_EQ(v, 2ull * THREADS * iters, "counter");
	EXPECT_RC(ddss_lock_scheme_set(ctx, DDSS_LOCK_NCOSED, false), 0);
	stats(&b);
	EXPECT_EQ(b.posted, b.reaped + b.finished + b.drained, "posted = ended");
	printf("rank %u: contention: posted %llu (reaped %llu, finisher %llu, drained %llu), "
	       "taken back %llu\n", me, (unsigned long long)(b.posted - a.posted),
	       (unsigned long long)(b.reaped - a.reaped),
	       (unsigned long long)(b.finished - a.finished),
	       (unsigned long long)(b.drained - a.drained),
	       (unsigned long long)(b.taken_back - a.taken_back));
	test_ctx_barrier_or_exit(ctx);
}

int main(int argc, char **argv)
{
	struct ddss_attr attr = { 0 };
	struct ddss_seg_attr at3 = { .placement = DDSS_PLACE_RANK, .rank = 3 };
	CU_pSuite s;
	unsigned failed;
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = (unsigned)atoi(argv[++i]);
	}
	ddss_lock_test_hook = hook;
	ddss_lock_test_always_post = true; /* also where the CAS completes inside the post */
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	if (ddss_size(ctx) != 3 || test_ctx_is_client(ctx)) {
		printf("SKIP: this suite needs 3 ranks in direct mode\n");
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	at3.name = "posted-lock";
	r = ddss_allocate_ss(ctx, 64, &at3, &key);
	if (!r) {
		at3.name = "posted-flags";
		r = ddss_allocate_ss(ctx, 8 * NFLAGS, &at3, &flags);
	}
	if (r) {
		fprintf(stderr, "allocate: %s\n", ddss_strerror(r));
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("posted releases (3 ranks)", NULL, NULL);
	CU_add_test(s, "uncontended: every release posted, its slot freed later", test_uncontended);
	CU_add_test(s, "a barrier lands the releases before it: another rank's try succeeds",
		    test_barrier_lands);
	CU_add_test(s, "successor swapped in during the release: the finisher hands over",
		    test_finisher);
	CU_add_test(s, "announcement before the mark: the release takes its CAS back",
		    test_taken_back);
	CU_add_test(s, "contention: counter exact", test_contention);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	if (r)
		fprintf(stderr, "ddss_finalize: %s\n", ddss_strerror(r));
	return failed || r ? 1 : 0;
}
