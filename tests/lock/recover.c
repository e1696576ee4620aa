/*
 * Lock recovery must never take a lock from a live rank (src/lock/lock_recover.c,
 * lock_agent.c, docs/failure.md). 3 ranks, N-CoSED; the lock and the flags segment the
 * ranks signal each other through are homed at rank 1, which runs the recovery agents.
 *
 *  - a closer waits for live shared holders that hold for over a second: its drain checks
 *    (at 250 ms and 1250 ms) must find them and let it wait; it enters after they left;
 *  - an agent asked for (as a failed request would) queues behind a live holder and a live
 *    waiter: it must be granted by them, not take the lock, and whoever queues behind the
 *    agent gets the lock only after both left;
 *  - contention: 2 threads per rank take the lock exclusive (get / +1 / put) or shared
 *    (two reads that must agree), with pauses, while rank 1 asks for an agent every 20 ms;
 *    the counter is exact and no shared holder saw it change.
 *
 *   ddssrun -n 3 lock_recover [--iters N]
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 20000 /* a flag that never comes: fail instead of hanging */
#define HOLD_MS 1300  /* over the first two drain checks (250 ms, then every second) */
#define THREADS 2

enum flag { F_HELD = 0, F_LEFT = 4, F_QUEUED = 8, F_ASKED, F_ROUND, NFLAGS };

static ddss_ctx_t *ctx;
static uint32_t me;
static unsigned iters = 300;
static ddss_key_t key, flags;
static atomic_uint hook_failures;
static atomic_int hook_armed;

static void put_flag(unsigned f, uint64_t v)
{
	if (ddss_put(ctx, flags, 8 * f, &v, 8))
		atomic_fetch_add(&hook_failures, 1);
}

static uint64_t get_flag(unsigned f)
{
	uint64_t v = 0;

	if (ddss_get(ctx, flags, 8 * f, &v, 8))
		atomic_fetch_add(&hook_failures, 1);
	return v;
}

static bool wait_flag(unsigned f, uint64_t v)
{
	double until = test_now_ms() + WAIT_MS;

	while (test_now_ms() < until) {
		if (get_flag(f) >= v)
			return true;
		sched_yield();
	}
	fprintf(stderr, "rank %u: flag %u never reached %llu\n", me, f, (unsigned long long)v);
	return false;
}

static void pause_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000l };

	nanosleep(&ts, NULL); /* a hold time or a pacing, never a synchronisation */
}

/* Rank 3's exclusive request says when it has swapped itself in (queued behind rank 2). */
static void hook(ddss_ctx_t *c, enum ddss_lock_test_point point)
{
	(void)c;
	if (point == DDSS_LOCK_TP_SWAPPED && atomic_exchange(&hook_armed, 0))
		put_flag(F_QUEUED, 1);
}

/* ---- a closer and live shared holders ---- */

static void test_drain_live(void)
{
	struct ddss_lock_recovery_stats a, b;

	ddss_lock_recovery_stats(ctx, &a);
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		double t0, waited;

		CU_ASSERT_FATAL(wait_flag(F_HELD + 2, 1) && wait_flag(F_HELD + 3, 1));
		t0 = test_now_ms();
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
		waited = test_now_ms() - t0;
		printf("[1] drain behind live shared holders: entered after %.0f ms\n", waited);
		CU_ASSERT_EQUAL(get_flag(F_LEFT + 2), 1);
		CU_ASSERT_EQUAL(get_flag(F_LEFT + 3), 1);
		CU_ASSERT(waited >= HOLD_MS / 2);
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, key), 0);
	} else {
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_SHARED), 0);
		put_flag(F_HELD + me, 1);
		pause_ms(HOLD_MS);
		put_flag(F_LEFT + me, 1);
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, key), 0);
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_lock_recovery_stats(ctx, &b);
	CU_ASSERT_EQUAL(b.drains, a.drains); /* nobody entered without a live release */
	CU_ASSERT_EQUAL(atomic_load(&hook_failures), 0);
}

/* ---- an agent behind a live holder and a live waiter ---- */

static void test_agent_live(void)
{
	struct ddss_lock_recovery_stats a, b;

	ddss_lock_recovery_stats(ctx, &a);
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
		put_flag(F_HELD + 2, 2);
		CU_ASSERT(wait_flag(F_ASKED, 1));
		pause_ms(600); /* the agent surveys meanwhile and finds us ahead */
		put_flag(F_LEFT + 2, 2);
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, key), 0);
	} else if (me == 3) {
		CU_ASSERT_FATAL(wait_flag(F_HELD + 2, 2));
		atomic_store(&hook_armed, 1);
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
		CU_ASSERT_EQUAL(get_flag(F_LEFT + 2), 2);
		pause_ms(300);
		put_flag(F_LEFT + 3, 2);
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, key), 0);
	} else {
		CU_ASSERT_FATAL(wait_flag(F_QUEUED, 1));
		/* Returns once the agent has swapped itself in, behind rank 3. */
		CU_ASSERT_EQUAL_FATAL(ddss_lock_test_recover(ctx, key), 0);
		put_flag(F_ASKED, 1);
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
		CU_ASSERT_EQUAL(get_flag(F_LEFT + 2), 2);
		CU_ASSERT_EQUAL(get_flag(F_LEFT + 3), 2);
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, key), 0);
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_lock_recovery_stats(ctx, &b);
	if (me == 1) {
		printf("[1] agent behind live requests: %llu agent(s), %llu took the lock\n",
		       (unsigned long long)(b.agents - a.agents),
		       (unsigned long long)(b.agents_took - a.agents_took));
		CU_ASSERT_EQUAL(b.agents - a.agents, 1);
		CU_ASSERT_EQUAL(b.agents_took, a.agents_took);
	}
	CU_ASSERT_EQUAL(atomic_load(&hook_failures), 0);
}

/* ---- contention with agents asked for all the time ---- */

struct worker {
	pthread_t th;
	unsigned id, incs, torn, fails;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned seed = me * 131u + w->id;

	for (unsigned i = 0; i < iters; i++) {
		bool excl = rand_r(&seed) % 10 < 7;
		uint64_t v = 0, again = 0;
		int r = ddss_acquire_lock_ss(ctx, key, excl ? DDSS_LOCK_EXCLUSIVE : DDSS_LOCK_SHARED);

		if (r) {
			test_thread_fail(&w->fails, me, w->id, "acquire: %s", ddss_strerror(r));
			continue;
		}
		r = ddss_get(ctx, key, 0, &v, 8);
		if (!r && excl) {
			v++;
			r = ddss_put(ctx, key, 0, &v, 8);
			w->incs += !r;
		} else if (!r) {
			sched_yield();
			r = ddss_get(ctx, key, 0, &again, 8);
			w->torn += !r && again != v;
		}
		if (r)
			test_thread_fail(&w->fails, me, w->id, "get/put: %s", ddss_strerror(r));
		r = ddss_release_lock_ss(ctx, key);
		if (r)
			test_thread_fail(&w->fails, me, w->id, "release: %s", ddss_strerror(r));
		if (rand_r(&seed) % 4 == 0)
			pause_ms(rand_r(&seed) % 3); /* idle moments: agents may take it then */
	}
	return NULL;
}

static void test_agents_under_contention(void)
{
	struct ddss_lock_recovery_stats a, b;
	struct worker w[THREADS];
	unsigned incs = 0, torn = 0, fails = 0, asks = 0, ask_fails = 0;
	uint64_t zero = 0, v = 0, total = 0;

	if (me == 1)
		CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, &zero, 8), 0);
	ddss_lock_recovery_stats(ctx, &a);
	test_ctx_barrier_or_exit(ctx);
	for (unsigned t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .id = t };
		pthread_create(&w[t].th, NULL, worker_main, &w[t]);
	}
	if (me == 1) {
		bool joined[THREADS] = { false };

		/* Ask for agents until this rank's workers are done (the others' may run on). */
		for (;;) {
			bool busy = false;

			for (unsigned t = 0; t < THREADS; t++) {
				if (!joined[t])
					joined[t] = pthread_tryjoin_np(w[t].th, NULL) == 0;
				busy |= !joined[t];
			}
			if (!busy)
				break;
			ask_fails += ddss_lock_test_recover(ctx, key) != 0;
			asks++;
			pause_ms(20);
		}
	} else {
		for (unsigned t = 0; t < THREADS; t++)
			pthread_join(w[t].th, NULL);
	}
	for (unsigned t = 0; t < THREADS; t++) {
		incs += w[t].incs;
		torn += w[t].torn;
		fails += w[t].fails;
	}
	test_board_put(0, incs);
	test_ctx_barrier_or_exit(ctx);
	ddss_lock_recovery_stats(ctx, &b);
	CU_ASSERT_EQUAL(fails, 0);
	CU_ASSERT_EQUAL(torn, 0);
	if (me == 1) {
		for (uint32_t r = 1; r <= 3; r++)
			total += test_board_get(r, 0);
		CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, &v, 8), 0);
		printf("[1] contention: counter %llu, increments %llu; %u agents asked (%u "
		       "failed), %llu ran, %llu took the lock with nothing live ahead\n",
		       (unsigned long long)v, (unsigned long long)total, asks, ask_fails,
		       (unsigned long long)(b.agents - a.agents),
		       (unsigned long long)(b.agents_took - a.agents_took));
		CU_ASSERT_EQUAL(v, total);
		CU_ASSERT_EQUAL(ask_fails, 0);
		CU_ASSERT(b.agents - a.agents >= 1);
	}
	test_ctx_barrier_or_exit(ctx);
}

int main(int argc, char **argv)
{
	struct ddss_attr attr = { 0 };
	struct ddss_seg_attr at1 = { .placement = DDSS_PLACE_RANK, .rank = 1 };
	CU_pSuite s;
	unsigned failed;
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = (unsigned)atoi(argv[++i]);
	}
	ddss_lock_test_hook = hook;
	attr.lock_scheme = DDSS_LOCK_NCOSED;
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
	at1.name = "recover-lock";
	r = ddss_allocate_ss(ctx, 64, &at1, &key);
	if (!r) {
		at1.name = "recover-flags";
		r = ddss_allocate_ss(ctx, 8 * NFLAGS, &at1, &flags);
	}
	if (!r)
		r = test_board_open(ctx);
	if (r) {
		fprintf(stderr, "setup: %s\n", ddss_strerror(r));
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("lock recovery leaves live ranks alone (3 ranks)", NULL, NULL);
	CU_add_test(s, "a closer waits for live shared holders", test_drain_live);
	CU_add_test(s, "an agent is granted by a live holder and waiter", test_agent_live);
	CU_add_test(s, "agents under contention: counter exact", test_agents_under_contention);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	if (r)
		fprintf(stderr, "ddss_finalize: %s\n", ddss_strerror(r));
	return failed || r ? 1 : 0;
}
