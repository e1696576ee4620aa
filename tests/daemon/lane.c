/*
 * Daemon mode's fast lane (src/daemon/lane.h), through the daemons of ddssrun --daemon:
 *
 *   ddssrun --daemon -n 2 daemon_lane [--threads T] [--iters N]
 *
 * Checked:
 * - T threads per rank, each with null segments of its own (one homed on the next rank,
 *   one on its own): puts of varying length and offset read back byte-exact. Between them
 *   the same thread makes calls the lane leaves to the channel's worker (a lock and its
 *   release, a get of a strict segment, an out-of-range put): their results are direct
 *   mode's, and the thread's order holds across the hand-overs.
 * - With the lane on (DDSS_DAEMON_LANE unset or 1) and two threads or more, the daemon's
 *   lane answered calls (ddss_stats.lane_calls grew); with DDSS_DAEMON_LANE=0, none.
 * - A client killed while its threads' gets and puts stream through the lane: the daemon
 *   serves everyone else on, the lane included.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEG_LEN 4096
#define MAX_THREADS 32
#define CHILD_THREADS 4
#define CHILD_BOUND_MS 30000 /* the killed client's calls must show up within this */
#define CHILD_CALLS 200       /* its first thread's put + get pairs before it is killed */
#define KILLED_ROUNDS 8       /* rounds after the kill for the lane to answer some calls */

static ddss_ctx_t *ctx;
static uint32_t me, nranks;
static unsigned nthreads = 8, iters = 300;
static bool lane_on;

static void barrier(void)
{
	test_ctx_barrier_or_exit(ctx);
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static ddss_key_t named(const char *name, size_t len, uint32_t home,
			enum ddss_coherence coherence)
{
	ddss_key_t key = 0;
	int r = ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = home, .name = name,
		.coherence = coherence }, &key);

	if (r) {
		fprintf(stderr, "rank %u: allocate %s: %s\n", me, name, ddss_strerror(r));
		exit(1);
	}
	return key;
}

static uint64_t lane_calls(void)
{
	struct ddss_stats st;

	CU_ASSERT_EQUAL_FATAL(ddss_stats_get(ctx, &st), 0);
	return st.lane_calls;
}

/* ---- many threads through the lane, with the worker's calls in between ---- */

struct mix_arg {
	ddss_key_t far, near, strict;
	unsigned tid, iters, failures;
};

static struct mix_arg mix[MAX_THREADS];

static void fill(uint8_t *b, size_t len, unsigned tid, unsigned i)
{
	for (size_t k = 0; k < len; k++)
		b[k] = (uint8_t)(me * 131 + tid * 31 + i * 7 + k);
}

/* Put @len bytes at @off of @key and read them back. */
static void put_get(struct mix_arg *a, ddss_key_t key, unsigned i, size_t off, size_t len)
{
	uint8_t want[SEG_LEN], got[SEG_LEN];
	int r;

	fill(want, len, a->tid, i);
	r = ddss_put(ctx, key, off, want, len);
	if (r) {
		test_thread_fail(&a->failures, me, a->tid, "put %zu at %zu: %s", len, off,
				 ddss_strerror(r));
		return;
	}
	memset(got, 0xee, len);
	r = ddss_get(ctx, key, off, got, len);
	if (r)
		test_thread_fail(&a->failures, me, a->tid, "get %zu at %zu: %s", len, off,
				 ddss_strerror(r));
	else if (memcmp(got, want, len))
		test_thread_fail(&a->failures, me, a->tid, "call %u: %zu bytes at %zu differ", i,
				 len, off);
}

/* Calls the lane hands to the worker: a lock, a strict get, an error. */
static void worker_calls(struct mix_arg *a, unsigned i)
{
	uint64_t v = ((uint64_t)me << 48) | ((uint64_t)a->tid << 32) | i, back = 0;
	uint8_t byte = 1;
	int r;

	r = ddss_acquire_lock_ss(ctx, a->far, DDSS_LOCK_EXCLUSIVE);
	if (!r)
		r = ddss_release_lock_ss(ctx, a->far);
	if (r)
		test_thread_fail(&a->failures, me, a->tid, "lock + unlock: %s", ddss_strerror(r));
	r = ddss_put(ctx, a->strict, 0, &v, 8);
	if (!r)
		r = ddss_get(ctx, a->strict, 0, &back, 8);
	if (r || back != v)
		test_thread_fail(&a->failures, me, a->tid, "strict put/get: %s, %llx != %llx",
				 ddss_strerror(r), (unsigned long long)back,
				 (unsigned long long)v);
	r = ddss_put(ctx, a->far, SEG_LEN, &byte, 1);
	if (r != -ERANGE)
		test_thread_fail(&a->failures, me, a->tid, "put past the end: %s, not -ERANGE",
				 ddss_strerror(r));
}

static void *mix_thread(void *p)
{
	struct mix_arg *a = p;

	for (unsigned i = 0; i < a->iters; i++) {
		size_t len = 1 + (i * 97 + a->tid * 13) % SEG_LEN;
		size_t off = (i * 61) % (SEG_LEN - len + 1);

		put_get(a, i % 2 ? a->far : a->near, i, off, len);
		if (i % 16 == 7)
			worker_calls(a, i);
	}
	return NULL;
}

/* Each thread's segments, allocated once. */
static void mix_setup(void)
{
	char name[64];

	for (unsigned t = 0; t < nthreads; t++) {
		mix[t] = (struct mix_arg){ .tid = t };
		snprintf(name, sizeof(name), "lane-far-%u-%u", me, t);
		mix[t].far = named(name, SEG_LEN, me % nranks + 1, DDSS_COHERENCE_NULL);
		snprintf(name, sizeof(name), "lane-near-%u-%u", me, t);
		mix[t].near = named(name, SEG_LEN, me, DDSS_COHERENCE_NULL);
		snprintf(name, sizeof(name), "lane-strict-%u-%u", me, t);
		mix[t].strict = named(name, 8, me % nranks + 1, DDSS_COHERENCE_STRICT);
	}
}

/*
 * The threads, @n put + get pairs each, all checked; returns how many calls the daemon's
 * lane answered meanwhile. Asserts none with the lane off; with @need_lane, some with it
 * on and two threads or more (a lone stream of calls stays with its worker, server.c).
 */
static uint64_t run_mix(unsigned n, bool need_lane)
{
	pthread_t th[MAX_THREADS];
	unsigned failures = 0;
	uint64_t before = lane_calls(), after;

	for (unsigned t = 0; t < nthreads; t++) {
		mix[t].iters = n;
		mix[t].failures = 0;
		CU_ASSERT_FATAL(pthread_create(&th[t], NULL, mix_thread, &mix[t]) == 0);
	}
	for (unsigned t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		failures += mix[t].failures;
	}
	after = lane_calls();
	EXPECT_EQ(failures, 0, "failed or wrong calls");
	if (!lane_on) {
		EXPECT_EQ(after, 0, "calls in the lane with DDSS_DAEMON_LANE=0");
	} else if (nthreads > 1 && need_lane) {
		CU_ASSERT(after > before);
	}
	return after - before;
}

static void test_mix(void)
{
	uint64_t in_lane;

	mix_setup();
	barrier();
	in_lane = run_mix(iters, true);
	printf("\n    rank %u: %u threads x %u put+get pairs; the daemon's lane answered %llu calls",
	       me, nthreads, iters, (unsigned long long)in_lane);
	barrier();
}

/* ---- a client killed with calls in the lane ---- */

struct storm_arg {
	ddss_ctx_t *c;
	unsigned tid;
};

/* The child's threads: each counts its calls in its own word of the child's segment. */
static void *storm(void *p)
{
	struct storm_arg *a = p;
	uint64_t n = 0, back;
	ddss_key_t k;
	char name[64];

	snprintf(name, sizeof(name), "lane-child-%u", me);
	if (ddss_lookup_ss(a->c, name, &k))
		_exit(1);
	for (;;) {
		n++;
		if (ddss_put(a->c, k, a->tid * 8, &n, 8) || ddss_get(a->c, k, a->tid * 8, &back, 8) ||
		    back != n)
			_exit(1);
	}
	return NULL;
}

/* A second client of this rank's daemon (its own attachment), calling until killed. */
static pid_t spawn_storm(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		static struct storm_arg a[CHILD_THREADS];
		pthread_t th;
		ddss_ctx_t *c;

		if (ddss_init(NULL, &c))
			_exit(1);
		for (unsigned t = 0; t < CHILD_THREADS; t++) {
			a[t] = (struct storm_arg){ .c = c, .tid = t };
			if (pthread_create(&th, NULL, storm, &a[t]))
				_exit(1);
		}
		for (;;)
			pause();
	}
	return pid;
}

static void test_killed_client(void)
{
	uint64_t before, seen, in_lane = 0;
	ddss_key_t k;
	char name[64];
	double t0;
	pid_t pid;
	int st;

	snprintf(name, sizeof(name), "lane-child-%u", me);
	k = named(name, 8 * CHILD_THREADS, me % nranks + 1, DDSS_COHERENCE_NULL);
	barrier();
	before = lane_calls();
	pid = spawn_storm();
	CU_ASSERT_FATAL(pid > 0);
	/* Wait until the child's threads have made many calls each (in the lane when on). */
	t0 = now_ms();
	do {
		CU_ASSERT_EQUAL_FATAL(ddss_get(ctx, k, 0, &seen, 8), 0);
		if (waitpid(pid, &st, WNOHANG) == pid) {
			CU_FAIL("the calling client died by itself");
			pid = -1;
			break;
		}
	} while (seen < CHILD_CALLS && now_ms() - t0 < CHILD_BOUND_MS);
	printf("\n    rank %u: the other client made %llu put + get pairs (thread 1) in %.0f ms",
	       me, (unsigned long long)seen, now_ms() - t0);
	EXPECT_EQ(seen >= CHILD_CALLS, 1, "the child's calls");
	if (lane_on)
		CU_ASSERT(lane_calls() > before);
	if (pid > 0) {
		CU_ASSERT_EQUAL(kill(pid, SIGKILL), 0);
		CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	}
	/*
	 * The daemon serves on: this client's threads, byte-exact, the lane included. A short
	 * round may pass without two calls ever in the daemon at once (the lane takes a channel
	 * only then: 0 of 128 calls once under ThreadSanitizer), so up to KILLED_ROUNDS rounds
	 * until the lane has answered some.
	 */
	for (unsigned round = 0; round < KILLED_ROUNDS && !in_lane; round++)
		in_lane = run_mix(iters / 4 < 16 ? 16 : iters / 4, false);
	if (lane_on && nthreads > 1)
		EXPECT_EQ(in_lane > 0, 1, "lane calls after the kill (KILLED_ROUNDS rounds)");
	barrier();
}

int main(int argc, char **argv)
{
	const char *env = getenv("DDSS_DAEMON_LANE");
	unsigned failed;
	CU_pSuite s;
	char suite_name[128];
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			nthreads = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--threads T] [--iters N]\n", argv[0]);
			return 2;
		}
	}
	if (nthreads < 1 || nthreads > MAX_THREADS || iters < 16) {
		fprintf(stderr, "--threads 1..%d, --iters 16 or more\n", MAX_THREADS);
		return 2;
	}
	lane_on = !env || strcmp(env, "0");
	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	nranks = ddss_size(ctx);
	if (!test_ctx_is_client(ctx) || nranks < 2) {
		printf("SKIP: needs daemon mode and 2+ ranks (ddssrun --daemon)\n");
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	snprintf(suite_name, sizeof(suite_name), "daemon lane %s(%u ranks x %u threads)",
		 lane_on ? "" : "off ", nranks, nthreads);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite(suite_name, NULL, NULL);
	CU_add_test(s, "gets and puts of many threads byte-exact, worker calls in between",
		    test_mix);
	CU_add_test(s, "a client killed with calls in the lane: the daemon serves on",
		    test_killed_client);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	return failed || r ? 1 : 0;
}
