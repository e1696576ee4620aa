/*
 * Every public call with every kind of bad argument: the documented -errno, and nothing
 * changed (a witness segment keeps its bytes, its lock stays free, nothing leaks). Runs as
 * one rank, in direct mode and in daemon mode (the checks are the same: a client must be
 * refused exactly as a rank is).
 *
 *   ddssrun -n 1 api_args            ddssrun -n 1 --daemon api_args
 */
#include "common/test_util.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WITNESS_LEN 256

static ddss_ctx_t *ctx;
static uint32_t me = 1;          /* for EXPECT_RC */
static ddss_key_t witness;       /* a live segment every check leaves alone */
static uint8_t witness_bytes[WITNESS_LEN];
static char long_name[DDSS_NAME_MAX + 8];

/* The witness still has its bytes and a free lock; nothing else was created. */
static void nothing_changed(void)
{
	uint8_t now[WITNESS_LEN];
	struct ddss_seg_info info;

	EXPECT_RC(ddss_get(ctx, witness, 0, now, WITNESS_LEN), 0);
	CU_ASSERT_EQUAL(memcmp(now, witness_bytes, WITNESS_LEN), 0);
	EXPECT_RC(ddss_stat_ss(ctx, witness, &info), 0);
	CU_ASSERT_EQUAL(info.size, WITNESS_LEN);
	EXPECT_RC(ddss_try_lock_ss(ctx, witness, DDSS_LOCK_EXCLUSIVE), 0);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), 0);
}

static void test_context(void)
{
	struct ddss_attr a;
	ddss_ctx_t *c = NULL;

	ddss_attr_init(NULL); /* harmless */
	EXPECT_RC(ddss_init(NULL, NULL), -EINVAL);
	ddss_attr_init(&a);
	a.completion = 9;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	ddss_attr_init(&a);
	a.mode = 7;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	ddss_attr_init(&a);
	a.lock_scheme = 42;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	ddss_attr_init(&a);
	a.lock_fair = 2;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	ddss_attr_init(&a);
	a.op_timeout_ms = -1;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	ddss_attr_init(&a);
	a.connect_timeout_ms = -5;
	EXPECT_RC(ddss_init(&a, &c), -EINVAL);
	CU_ASSERT_PTR_NULL(c);
	EXPECT_RC(ddss_finalize(NULL), -EINVAL);
	EXPECT_RC(ddss_barrier(NULL), -EINVAL);
	CU_ASSERT_EQUAL(ddss_rank(NULL), 0);
	CU_ASSERT_EQUAL(ddss_size(NULL), 0);
	CU_ASSERT_PTR_NOT_NULL(ddss_strerror(INT_MIN));
	CU_ASSERT_PTR_NOT_NULL(ddss_strerror(12345));
	CU_ASSERT_PTR_NOT_NULL(ddss_version_string());
	nothing_changed();
}

static void test_allocate(void)
{
	ddss_key_t k = 77;
	struct ddss_seg_attr a;

	EXPECT_RC(ddss_allocate_ss(NULL, 8, NULL, &k), -EINVAL);
	EXPECT_RC(ddss_allocate_ss(ctx, 8, NULL, NULL), -EINVAL);
	EXPECT_RC(ddss_allocate_ss(ctx, 0, NULL, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .placement = 9 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .placement = DDSS_PLACE_RANK, .rank = 0 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .placement = DDSS_PLACE_RANK, .rank = ddss_size(ctx) + 1 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .name = long_name };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -ENAMETOOLONG);
	a = (struct ddss_seg_attr){ .name = "" };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .coherence = 99 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .coherence = DDSS_COHERENCE_DELTA, .delta = 0 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .coherence = DDSS_COHERENCE_DELTA, .delta = DDSS_DELTA_MAX + 1 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .coherence = DDSS_COHERENCE_TEMPORAL, .temporal_ms = 0 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	a = (struct ddss_seg_attr){ .coherence = DDSS_COHERENCE_NULL, .delta = 3 };
	EXPECT_RC(ddss_allocate_ss(ctx, 8, &a, &k), -EINVAL);
	EXPECT_RC(ddss_allocate_ss(ctx, SIZE_MAX / 2, NULL, &k), -ENOMEM);
	CU_ASSERT_EQUAL(k, 77); /* untouched on every error */
	nothing_changed();
}

static void test_names(void)
{
	ddss_key_t k = 77;

	EXPECT_RC(ddss_lookup_ss(NULL, "x", &k), -EINVAL);
	EXPECT_RC(ddss_lookup_ss(ctx, NULL, &k), -EINVAL);
	EXPECT_RC(ddss_lookup_ss(ctx, "x", NULL), -EINVAL);
	EXPECT_RC(ddss_lookup_ss(ctx, long_name, &k), -ENAMETOOLONG);
	EXPECT_RC(ddss_lookup_ss(ctx, "no such segment", &k), -ENOENT);
	CU_ASSERT_EQUAL(k, 77);
	nothing_changed();
}

/* Keys no allocation made: zero, all ones, the witness with its generation or CRC bits
 * flipped (the bits a stale or forged key differs in). */
static const ddss_key_t *bad_keys(size_t *n_p)
{
	static ddss_key_t k[6];

	k[0] = 0;
	k[1] = ~(ddss_key_t)0;
	k[2] = witness ^ 1;
	k[3] = witness ^ (1ull << 20);
	k[4] = witness ^ (1ull << 40);
	k[5] = witness ^ (1ull << 63);
	*n_p = sizeof(k) / sizeof(k[0]);
	return k;
}

static void test_release_stat(void)
{
	struct ddss_seg_info info;
	size_t n;
	const ddss_key_t *bad = bad_keys(&n);
	ddss_key_t k;

	EXPECT_RC(ddss_release_ss(NULL, witness), -EINVAL);
	EXPECT_RC(ddss_stat_ss(NULL, witness, &info), -EINVAL);
	EXPECT_RC(ddss_stat_ss(ctx, witness, NULL), -EINVAL);
	for (size_t i = 0; i < n; i++) {
		int r = ddss_release_ss(ctx, bad[i]);

		if (r != -EINVAL && r != -ESTALE)
			fprintf(stderr, "release of bad key %zu (%#llx) = %d\n", i,
				(unsigned long long)bad[i], r);
		CU_ASSERT(r == -EINVAL || r == -ESTALE);
		r = ddss_stat_ss(ctx, bad[i], &info);
		CU_ASSERT(r == -EINVAL || r == -ESTALE);
	}
	/* A released key: -ESTALE for release and stat, twice. */
	EXPECT_RC(ddss_allocate_ss(ctx, 8, NULL, &k), 0);
	EXPECT_RC(ddss_release_ss(ctx, k), 0);
	EXPECT_RC(ddss_release_ss(ctx, k), -ESTALE);
	EXPECT_RC(ddss_stat_ss(ctx, k, &info), -ESTALE);
	nothing_changed();
}

/*
 * Longer than a daemon's channel carries (1 GiB) and past the end of the segment: the
 * range error, as in direct mode, as often as a caller likes, and the calls after it
 * work. (Daemon mode answered -EINVAL, and each such call cost the client a channel for
 * good: after 1024, every call that needed a new one failed with -ENOSPC.)
 */
#define TOO_LONG (((size_t)1 << 30) + 1)
#define TOO_LONG_CALLS 1100

static void too_long_calls(uint8_t *buf)
{
	unsigned wrong = 0;
	int r;

	for (unsigned i = 0; i < TOO_LONG_CALLS; i++) {
		r = i % 2 ? ddss_put(ctx, witness, 0, buf, TOO_LONG) :
			    ddss_get(ctx, witness, 0, buf, TOO_LONG);
		if (r != -ERANGE && wrong++ == 0)
			printf("call %u of %zu bytes: %d (%s), not -ERANGE\n", i, TOO_LONG, r,
			       ddss_strerror(r));
	}
	CU_ASSERT_EQUAL(wrong, 0);
	EXPECT_RC(ddss_get(ctx, witness, 0, buf, 8), 0);
}

static void test_data(void)
{
	uint8_t buf[16] = { 0 };
	ddss_req_t *req = NULL;
	uint64_t v = 99;
	size_t n;
	const ddss_key_t *bad = bad_keys(&n);

	EXPECT_RC(ddss_get(NULL, witness, 0, buf, 8), -EINVAL);
	EXPECT_RC(ddss_put(NULL, witness, 0, buf, 8), -EINVAL);
	EXPECT_RC(ddss_get(ctx, witness, 0, NULL, 8), -EINVAL);
	EXPECT_RC(ddss_put(ctx, witness, 0, NULL, 8), -EINVAL);
	EXPECT_RC(ddss_get(ctx, witness, 0, buf, 0), -EINVAL);
	EXPECT_RC(ddss_put(ctx, witness, 0, buf, 0), -EINVAL);
	EXPECT_RC(ddss_get(ctx, witness, WITNESS_LEN - 4, buf, 8), -ERANGE);
	EXPECT_RC(ddss_put(ctx, witness, WITNESS_LEN - 4, buf, 8), -ERANGE);
	EXPECT_RC(ddss_put(ctx, witness, WITNESS_LEN, buf, 1), -ERANGE);
	EXPECT_RC(ddss_get(ctx, witness, SIZE_MAX - 2, buf, 8), -ERANGE); /* offset+len wraps */
	EXPECT_RC(ddss_put(ctx, witness, SIZE_MAX - 2, buf, 8), -ERANGE);
	too_long_calls(buf);
	for (size_t i = 0; i < n; i++) {
		int r = ddss_put(ctx, bad[i], 0, buf, 8);

		CU_ASSERT(r == -EINVAL || r == -ESTALE);
		r = ddss_get(ctx, bad[i], 0, buf, 8);
		CU_ASSERT(r == -EINVAL || r == -ESTALE);
	}
	/* versions: only a delta segment keeps versions back */
	EXPECT_RC(ddss_get_versioned(ctx, witness, 0, buf, 8, 1, &v), -EINVAL);
	EXPECT_RC(ddss_get_versioned(ctx, witness, 0, buf, 8, DDSS_DELTA_MAX + 1, &v), -EINVAL);
	/* async: the same checks, and no request is made on an error */
	EXPECT_RC(ddss_async_get(ctx, witness, 0, buf, 8, NULL), -EINVAL);
	EXPECT_RC(ddss_async_put(ctx, witness, 0, buf, 8, NULL), -EINVAL);
	EXPECT_RC(ddss_async_get(NULL, witness, 0, buf, 8, &req), -EINVAL);
	EXPECT_RC(ddss_async_get(ctx, witness, 0, NULL, 8, &req), -EINVAL);
	EXPECT_RC(ddss_async_put(ctx, witness, WITNESS_LEN, buf, 8, &req), -ERANGE);
	EXPECT_RC(ddss_async_get(ctx, 0, 0, buf, 8, &req), -EINVAL);
	CU_ASSERT_PTR_NULL(req);
	EXPECT_RC(ddss_wait_ss(NULL, req), -EINVAL);
	EXPECT_RC(ddss_wait_ss(ctx, NULL), -EINVAL);
	EXPECT_RC(ddss_test_ss(NULL, req), -EINVAL);
	EXPECT_RC(ddss_test_ss(ctx, NULL), -EINVAL);
	nothing_changed();
}

static void test_delta_versions(void)
{
	ddss_key_t d;
	uint64_t v = 0, buf = 5;

	EXPECT_RC(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){
		.coherence = DDSS_COHERENCE_DELTA, .delta = 2 }, &d), 0);
	EXPECT_RC(ddss_put(ctx, d, 0, &buf, 8), 0);
	EXPECT_RC(ddss_get_versioned(ctx, d, 0, &buf, 8, 3, &v), -EINVAL); /* x = 2 */
	EXPECT_RC(ddss_get_versioned(ctx, d, 0, &buf, 8, 2, &v), -ENOENT); /* one put made */
	EXPECT_RC(ddss_get_versioned(ctx, d, 0, &buf, 8, 0, &v), 0);
	CU_ASSERT_EQUAL(v, 1);
	EXPECT_RC(ddss_release_ss(ctx, d), 0);
	nothing_changed();
}

static void test_locks(void)
{
	size_t n;
	const ddss_key_t *bad = bad_keys(&n);
	ddss_key_t k;

	EXPECT_RC(ddss_acquire_lock_ss(NULL, witness, DDSS_LOCK_EXCLUSIVE), -EINVAL);
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, 0), -EINVAL);
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, 3), -EINVAL);
	EXPECT_RC(ddss_acquire_lock_timed_ss(ctx, witness, DDSS_LOCK_SHARED, -1), -EINVAL);
	EXPECT_RC(ddss_acquire_lock_timed_ss(NULL, witness, DDSS_LOCK_SHARED, 10), -EINVAL);
	EXPECT_RC(ddss_try_lock_ss(ctx, witness, 7), -EINVAL);
	EXPECT_RC(ddss_try_lock_ss(NULL, witness, DDSS_LOCK_SHARED), -EINVAL);
	EXPECT_RC(ddss_release_lock_ss(NULL, witness), -EINVAL);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), -EPERM); /* not held */
	for (size_t i = 0; i < n; i++) {
		int r = ddss_acquire_lock_ss(ctx, bad[i], DDSS_LOCK_EXCLUSIVE);

		CU_ASSERT(r == -EINVAL || r == -ESTALE);
		r = ddss_try_lock_ss(ctx, bad[i], DDSS_LOCK_SHARED);
		CU_ASSERT(r == -EINVAL || r == -ESTALE);
		r = ddss_release_lock_ss(ctx, bad[i]);
		CU_ASSERT(r == -EINVAL || r == -EPERM || r == -ESTALE);
	}
	/* double release, and a released segment */
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, DDSS_LOCK_SHARED), 0);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), 0);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), -EPERM);
	EXPECT_RC(ddss_allocate_ss(ctx, 8, NULL, &k), 0);
	EXPECT_RC(ddss_release_ss(ctx, k), 0);
	EXPECT_RC(ddss_acquire_lock_ss(ctx, k, DDSS_LOCK_EXCLUSIVE), -ESTALE);
	EXPECT_RC(ddss_try_lock_ss(ctx, k, DDSS_LOCK_EXCLUSIVE), -ESTALE);
	nothing_changed();
}

/* Fencing numbers: refusals leave *fence alone; a hold's number is kept while it lasts. */
static void test_fence(void)
{
	const uint64_t poison = 0x5eed5eed5eed5eedull;
	size_t n;
	const ddss_key_t *bad = bad_keys(&n);
	uint64_t f = poison, f1 = 0, f2 = 0;
	ddss_key_t k;

	EXPECT_RC(ddss_lock_fence_ss(NULL, witness, &f), -EINVAL);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, NULL), -EINVAL);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f), -ENOLCK); /* not held */
	for (size_t i = 0; i < n; i++) {
		int r = ddss_lock_fence_ss(ctx, bad[i], &f);

		CU_ASSERT(r == -EINVAL || r == -ESTALE);
	}
	CU_ASSERT_EQUAL(f, poison);
	/* Held: NULL is still refused, and the hold is untouched (the same number after). */
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, DDSS_LOCK_EXCLUSIVE), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, NULL), -EINVAL);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f1), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f2), 0);
	CU_ASSERT(f1 > 0);
	CU_ASSERT_EQUAL(f1, f2);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f), -ENOLCK); /* released */
	CU_ASSERT_EQUAL(f, poison);
	/* a shared hold reads the last exclusive number; the next exclusive one is larger */
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, DDSS_LOCK_SHARED), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f2), 0);
	CU_ASSERT_EQUAL(f2, f1);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), 0);
	EXPECT_RC(ddss_acquire_lock_ss(ctx, witness, DDSS_LOCK_EXCLUSIVE), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, witness, &f2), 0);
	CU_ASSERT(f2 > f1);
	EXPECT_RC(ddss_release_lock_ss(ctx, witness), 0);
	/* a released segment, held or not: -ESTALE */
	EXPECT_RC(ddss_allocate_ss(ctx, 8, NULL, &k), 0);
	EXPECT_RC(ddss_acquire_lock_ss(ctx, k, DDSS_LOCK_EXCLUSIVE), 0);
	EXPECT_RC(ddss_release_ss(ctx, k), 0);
	EXPECT_RC(ddss_lock_fence_ss(ctx, k, &f), -ESTALE);
	EXPECT_RC(ddss_release_lock_ss(ctx, k), -ESTALE);
	EXPECT_RC(ddss_lock_fence_ss(ctx, k, &f), -ESTALE);
	CU_ASSERT_EQUAL(f, poison);
	nothing_changed();
}

int main(void)
{
	unsigned failed;
	CU_pSuite s;
	int r;

	memset(long_name, 'n', sizeof(long_name) - 1);
	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	for (unsigned i = 0; i < WITNESS_LEN; i++)
		witness_bytes[i] = (uint8_t)(i * 7 + 1);
	if (ddss_allocate_ss(ctx, WITNESS_LEN, NULL, &witness) ||
	    ddss_put(ctx, witness, 0, witness_bytes, WITNESS_LEN)) {
		fprintf(stderr, "cannot make the witness segment\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite(test_ctx_is_client(ctx) ? "public calls, bad arguments (daemon mode)" :
						    "public calls, bad arguments (direct mode)",
			 NULL, NULL);
	CU_add_test(s, "context: init, finalize, barrier, rank, size, strings", test_context);
	CU_add_test(s, "allocate: sizes, placements, names, models", test_allocate);
	CU_add_test(s, "names: lookup", test_names);
	CU_add_test(s, "release and stat: bad, forged and released keys", test_release_stat);
	CU_add_test(s, "data: get, put, versioned, async, wait, test", test_data);
	CU_add_test(s, "versions back on a delta segment", test_delta_versions);
	CU_add_test(s, "locks: modes, timeouts, keys, not held, released", test_locks);
	CU_add_test(s, "lock fence: NULLs, keys, not held, released; one number per hold",
		    test_fence);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_release_ss(ctx, witness);
	if (r)
		fprintf(stderr, "releasing the witness: %s\n", ddss_strerror(r));
	r = ddss_finalize(ctx) || r;
	return failed || r ? 1 : 0;
}
