/*
 * Daemon mode with several client processes per daemon (ddssrun --daemon --clients K):
 * the clients of one node and of different nodes against each other.
 *
 *   ddssrun --daemon --clients 3 -n 2 daemon_clients [--threads T] [--iters N]
 *
 * Checked: every client sees its node's rank; an exclusive counter incremented by every
 * thread of every client of every node ends exact; one client cannot release (or see as
 * its own, or get a fencing number for) another client's lock; payloads up to 8 MiB cross the channel byte-exact; a
 * client killed while holding a lock, and one killed while queued for it, are cleaned up:
 * the others get the lock within a bounded time (CRASH_BOUND_MS); null segments of the
 * client's own node are read from the daemon's pool directly, see every put made through
 * the daemon, and are never served once released.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "daemon/client.h"
#include "daemon/local.h"
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

#define CRASH_BOUND_MS 5000 /* the others must get a dead client's lock within this */

static ddss_ctx_t *ctx;
static uint32_t me, nranks, client, nclients;
static unsigned nthreads = 4, iters = 500;

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

static ddss_key_t named(const char *name, size_t len, uint32_t home)
{
	ddss_key_t key = 0;
	int r = ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = home, .name = name }, &key);

	if (r) {
		fprintf(stderr, "rank %u.%u: allocate %s: %s\n", me, client, name,
			ddss_strerror(r));
		exit(1);
	}
	return key;
}

static uint32_t env_u32(const char *name, uint32_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? (uint32_t)strtoul(s, NULL, 10) : dflt;
}

/* ---- attach ---- */

static void test_attach(void)
{
	CU_ASSERT_EQUAL(me, env_u32("DDSS_RANK", 0));
	CU_ASSERT(test_ctx_is_client(ctx));
	CU_ASSERT(client >= 1 && client <= nclients);
	barrier();
}

/* ---- an exact counter over every thread of every client ---- */

struct counter_arg {
	ddss_key_t key;
	unsigned tid, failures;
};

static void *count_worker(void *p)
{
	struct counter_arg *a = p;

	for (unsigned i = 0; i < iters; i++) {
		uint64_t v;
		int r = ddss_acquire_lock_ss(ctx, a->key, DDSS_LOCK_EXCLUSIVE);

		if (r) {
			test_thread_fail(&a->failures, me, a->tid, "lock: %s", ddss_strerror(r));
			continue;
		}
		r = ddss_get(ctx, a->key, 0, &v, 8);
		v++;
		if (!r)
			r = ddss_put(ctx, a->key, 0, &v, 8);
		if (r)
			test_thread_fail(&a->failures, me, a->tid, "get/put: %s", ddss_strerror(r));
		r = ddss_release_lock_ss(ctx, a->key);
		if (r)
			test_thread_fail(&a->failures, me, a->tid, "release: %s", ddss_strerror(r));
	}
	return NULL;
}

static void test_counter(void)
{
	ddss_key_t k = named("counter", 8, 1);
	struct counter_arg a[64];
	pthread_t th[64];
	unsigned failures = 0;
	uint64_t v = 0, want = (uint64_t)nranks * nclients * nthreads * iters;

	barrier();
	for (unsigned t = 0; t < nthreads; t++) {
		a[t] = (struct counter_arg){ .key = k, .tid = t };
		CU_ASSERT_FATAL(pthread_create(&th[t], NULL, count_worker, &a[t]) == 0);
	}
	for (unsigned t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		failures += a[t].failures;
	}
	EXPECT_EQ(failures, 0, "failed calls");
	barrier();
	EXPECT_RC(ddss_get(ctx, k, 0, &v, 8), 0);
	EXPECT_EQ(v, want, "counter");
	if (me == 1 && client == 1)
		printf("\n    %llu increments by %u ranks x %u clients x %u threads",
		       (unsigned long long)v, nranks, nclients, nthreads);
	barrier();
}

/* ---- one client's lock is not another's ---- */

static void test_ownership(void)
{
	ddss_key_t k = named("owned", 8, nranks);
	bool holder = me == 1 && client == 1;
	uint64_t f = 0, hf = 0;

	barrier();
	if (holder) {
		EXPECT_RC(ddss_acquire_lock_ss(ctx, k, DDSS_LOCK_EXCLUSIVE), 0);
		/* The holder's fencing number, kept in the segment for the others. */
		EXPECT_RC(ddss_lock_fence_ss(ctx, k, &hf), 0);
		CU_ASSERT(hf > 0);
		EXPECT_RC(ddss_put(ctx, k, 0, &hf, 8), 0);
	}
	barrier();
	if (!holder) {
		/* Rank 1's daemon holds it, but for another client: not ours to release. */
		EXPECT_RC(ddss_release_lock_ss(ctx, k), -EPERM);
		EXPECT_RC(ddss_lock_fence_ss(ctx, k, &f), -ENOLCK);
		EXPECT_RC(ddss_try_lock_ss(ctx, k, DDSS_LOCK_SHARED), -EBUSY);
		EXPECT_RC(ddss_acquire_lock_timed_ss(ctx, k, DDSS_LOCK_EXCLUSIVE, 50), -ETIMEDOUT);
	}
	barrier();
	if (holder)
		EXPECT_RC(ddss_release_lock_ss(ctx, k), 0);
	barrier();
	EXPECT_RC(ddss_release_lock_ss(ctx, k), -EPERM);
	/* Timed-out requests may still be finishing in the background: wait, not try. */
	EXPECT_RC(ddss_acquire_lock_timed_ss(ctx, k, DDSS_LOCK_SHARED, 10000), 0);
	/* A shared holder reads the generation: at least the last exclusive holder's. */
	EXPECT_RC(ddss_get(ctx, k, 0, &hf, 8), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, k, &f), 0);
	CU_ASSERT(hf > 0 && f >= hf);
	EXPECT_RC(ddss_release_lock_ss(ctx, k), 0);
	barrier();
}

/* ---- payloads through the channel's data area ---- */

static void test_payloads(void)
{
	static const size_t sizes[] = { 1, 4096, 65536, 65537, 1 << 20, 8 << 20 };
	ddss_key_t k;
	char name[32];
	uint8_t *buf = malloc(8 << 20);

	CU_ASSERT_FATAL(buf != NULL);
	snprintf(name, sizeof(name), "payload-%u-%u", me, client);
	k = named(name, 8 << 20, me % nranks + 1);
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t seed = ((uint64_t)me << 40) | ((uint64_t)client << 32) | i;
		size_t off = sizes[i] == (8u << 20) ? 0 : 123;

		test_fill(buf, sizes[i], seed);
		EXPECT_RC(ddss_put(ctx, k, off, buf, sizes[i]), 0);
		memset(buf, 0, sizes[i]);
		EXPECT_RC(ddss_get(ctx, k, off, buf, sizes[i]), 0);
		EXPECT_EQ(test_check(buf, sizes[i], seed), SIZE_MAX, "first wrong byte");
	}
	/* Errors come back as in direct mode. */
	EXPECT_RC(ddss_get(ctx, k, (8 << 20) - 4, buf, 8), -ERANGE);
	EXPECT_RC(ddss_get(ctx, k, 0, NULL, 8), -EINVAL);
	EXPECT_RC(ddss_release_ss(ctx, k), 0);
	EXPECT_RC(ddss_get(ctx, k, 0, buf, 8), -ESTALE);
	free(buf);
	barrier();
}

/* ---- local reads: null segments of this node straight from the daemon's pool ---- */

static uint64_t local_reads(void)
{
	struct ddss_local *lv = ddss_client_local(ctx->client);

	return lv ? ddss_local_reads(lv) : 0;
}

/* Two gets of @k; returns how many were served from the pool. */
static uint64_t get_twice(ddss_key_t k, uint64_t *v_p)
{
	uint64_t before = local_reads();

	EXPECT_RC(ddss_get(ctx, k, 0, v_p, 8), 0);
	EXPECT_RC(ddss_get(ctx, k, 0, v_p, 8), 0);
	return local_reads() - before;
}

static void test_local_reads(void)
{
	ddss_key_t mine, remote, strict, shared;
	uint64_t v = 0, want, before;
	bool writer = client == 1, releaser = client == nclients;
	char name[32];

	snprintf(name, sizeof(name), "local-shared-%u", me); /* one per node */
	shared = named(name, 64, me);

	CU_ASSERT_FATAL(ddss_client_local(ctx->client) != NULL);
	/* A null segment of this node: the second get (at the latest) comes from the pool. */
	EXPECT_RC(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_LOCAL }, &mine), 0);
	want = 0x1000u * me + client;
	EXPECT_RC(ddss_put(ctx, mine, 0, &want, 8), 0);
	/* Nobody of this node releases a segment meanwhile (a release would send gets back
	 * to the daemon until the descriptor is learnt again, which is the point of it). */
	barrier();
	CU_ASSERT(get_twice(mine, &v) >= 1);
	EXPECT_EQ(v, want, "local read");
	barrier();
	/* Elsewhere, or under a model with locks: always through the daemon. */
	EXPECT_RC(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = me % nranks + 1 }, &remote), 0);
	EXPECT_RC(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_LOCAL, .coherence = DDSS_COHERENCE_STRICT }, &strict), 0);
	EXPECT_EQ(get_twice(remote, &v), 0, "local reads of a remote segment");
	EXPECT_EQ(get_twice(strict, &v), 0, "local reads of a strict segment");
	/* Out of range: the daemon says so, as in direct mode. */
	EXPECT_RC(ddss_get(ctx, mine, 60, &v, 8), -ERANGE);
	/* Released: never served from the pool again, even once its memory is reused. */
	EXPECT_RC(ddss_release_ss(ctx, mine), 0);
	before = local_reads();
	EXPECT_RC(ddss_get(ctx, mine, 0, &v, 8), -ESTALE);
	EXPECT_RC(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_LOCAL }, &mine), 0);
	EXPECT_EQ(local_reads(), before, "local reads of a released segment");

	/* Between the clients of one node: a put through the daemon is seen by the others'
	 * local reads; another client's release makes them -ESTALE. */
	barrier();
	if (writer) {
		want = 0xabc0u + me;
		EXPECT_RC(ddss_put(ctx, shared, 0, &want, 8), 0);
	}
	barrier();
	want = 0xabc0u + me;
	get_twice(shared, &v);
	EXPECT_EQ(v, want, "the node's writer's value");
	barrier();
	if (writer) {
		want = 0xdef0u + me;
		EXPECT_RC(ddss_put(ctx, shared, 0, &want, 8), 0);
	}
	barrier();
	want = 0xdef0u + me;
	before = local_reads();
	EXPECT_RC(ddss_get(ctx, shared, 0, &v, 8), 0);
	EXPECT_EQ(v, want, "the node's writer's second value");
	EXPECT_EQ(local_reads() - before, 1, "local reads of the shared segment");
	barrier();
	if (releaser)
		EXPECT_RC(ddss_release_ss(ctx, shared), 0);
	barrier();
	if (!releaser)
		EXPECT_RC(ddss_get(ctx, shared, 0, &v, 8), -ESTALE);
	EXPECT_RC(ddss_release_ss(ctx, mine), 0);
	EXPECT_RC(ddss_release_ss(ctx, remote), 0);
	EXPECT_RC(ddss_release_ss(ctx, strict), 0);
	barrier();
}

/* ---- a client that dies holding (or waiting for) a lock ---- */

/*
 * A child process attaches as a client of its own, writes @mark into @f, takes @k's lock
 * (a second child queues for it behind the first) and waits to be killed. The child uses
 * nothing of the parent's attachment: it makes its own.
 */
static pid_t spawn_client(ddss_key_t k, ddss_key_t f, uint64_t mark)
{
	pid_t pid = fork();

	if (pid == 0) {
		ddss_ctx_t *c;

		if (ddss_init(NULL, &c))
			_exit(1);
		if (mark == 2 && ddss_put(c, f, 0, &mark, 8))
			_exit(1);
		if (ddss_acquire_lock_ss(c, k, DDSS_LOCK_EXCLUSIVE))
			_exit(1);
		if (mark == 1 && ddss_put(c, f, 0, &mark, 8))
			_exit(1);
		for (;;)
			pause();
	}
	return pid;
}

static void wait_flag(ddss_key_t f, uint64_t want)
{
	double t0 = now_ms();
	uint64_t v = 0;

	while (v != want && now_ms() - t0 < 10000)
		CU_ASSERT_EQUAL_FATAL(ddss_get(ctx, f, 0, &v, 8), 0);
	EXPECT_EQ(v, want, "the child's flag");
}

static void test_crash(void)
{
	ddss_key_t k = named("crash-lock", 8, nranks), f = named("crash-flag", 8, 1);
	bool killer = me == nranks && client == 1;
	pid_t holder = -1, waiter = -1;
	double t0 = 0, waited;
	int st, r;

	barrier();
	if (killer) {
		holder = spawn_client(k, f, 1);
		CU_ASSERT_FATAL(holder > 0);
		wait_flag(f, 1);
		waiter = spawn_client(k, f, 2);
		CU_ASSERT_FATAL(waiter > 0);
		wait_flag(f, 2);
	}
	barrier();
	/* Held by the child: nobody gets it now. */
	EXPECT_RC(ddss_try_lock_ss(ctx, k, DDSS_LOCK_EXCLUSIVE), -EBUSY);
	barrier();
	if (killer) {
		t0 = now_ms();
		CU_ASSERT_EQUAL(kill(holder, SIGKILL), 0);
		CU_ASSERT_EQUAL(kill(waiter, SIGKILL), 0);
		CU_ASSERT_EQUAL(waitpid(holder, &st, 0), holder);
		CU_ASSERT_EQUAL(waitpid(waiter, &st, 0), waiter);
	}
	/* Everyone queues: the dead clients' hold and request must go for anyone to pass. */
	if (!killer)
		t0 = now_ms();
	r = ddss_acquire_lock_timed_ss(ctx, k, DDSS_LOCK_EXCLUSIVE, 30000);
	waited = now_ms() - t0;
	EXPECT_RC(r, 0);
	if (!r)
		EXPECT_RC(ddss_release_lock_ss(ctx, k), 0);
	if (killer) {
		printf("\n    lock of a killed client (and a killed waiter) passed on after %.1f ms",
		       waited);
		CU_ASSERT(waited < CRASH_BOUND_MS);
	}
	barrier();
}

int main(int argc, char **argv)
{
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
	if (nthreads < 1 || nthreads > 64)
		nthreads = 4;
	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	nranks = ddss_size(ctx);
	client = env_u32("DDSS_CLIENT", 1);
	nclients = env_u32("DDSS_CLIENTS", 1);
	if (!test_ctx_is_client(ctx) || nranks < 2) {
		printf("SKIP: needs daemon mode and 2+ ranks (ddssrun --daemon --clients K)\n");
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	snprintf(suite_name, sizeof(suite_name), "daemon clients(%u ranks x %u clients x %u threads)",
		 nranks, nclients, nthreads);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite(suite_name, NULL, NULL);
	CU_add_test(s, "attach: each client is its node's rank", test_attach);
	CU_add_test(s, "exclusive counter over all threads of all clients", test_counter);
	CU_add_test(s, "a client cannot release another client's lock", test_ownership);
	CU_add_test(s, "payloads 1 B .. 8 MiB byte-exact; errors as in direct mode", test_payloads);
	CU_add_test(s, "local reads: straight from the pool, fresh, never after release",
		    test_local_reads);
	CU_add_test(s, "a client killed holding a lock: the others get it", test_crash);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	return failed || r ? 1 : 0;
}
