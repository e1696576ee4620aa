/*
 * ddss_stats_get against a known workload, on 2 ranks: every counter must come out exactly
 * as the calls below make it (issue 28). Direct mode checks every counter; daemon mode
 * (ddssrun --daemon) the process's own ones (ops, bytes, errors), since locks, timeouts
 * and the cache are the daemon's, shared by its clients.
 *
 * Rank 1 holds the lock of a segment homed at itself while rank 2 queues for it: rank 1
 * reads its own copy of the lock word until rank 2's request has changed it, so rank 2's
 * acquisition is contended for sure, and without any sleep.
 */
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "common/test_util.h"
#include "core/ctx.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddss_ctx_t *ctx;
static uint32_t me;
static bool direct;

static ddss_key_t alloc_at(const char *name, size_t len, uint32_t home, enum ddss_coherence m)
{
	ddss_key_t key = 0;

	EXPECT_RC(ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = home, .name = name, .coherence = m }, &key), 0);
	return key;
}

/* @key's lock word in this rank's pool (the key is homed here). */
static uint64_t lock_word(ddss_key_t key)
{
	const struct ddss_seg_desc *d;
	uint64_t w;

	if (ddss_ctx_desc(ctx, key, &d))
		return 0;
	w = __atomic_load_n((const uint64_t *)((const uint8_t *)ddss_pool_base(ctx->pool) +
					       d->data_off - DDSS_SEG_HDR_LEN + DDSS_SEG_HDR_LOCK),
			    __ATOMIC_ACQUIRE);
	ddss_seg_cache_put(d);
	return w;
}

/*
 * Wait until @key's lock word differs from @held, its value while this rank held the lock
 * alone: then the other rank's request is in it. @held is read right after the acquire,
 * before the other rank knows the key (a try that finds the lock taken does not change the
 * word), so a request that lands before this wait starts is seen too.
 */
static bool wait_queued(ddss_key_t key, uint64_t held, int timeout_ms)
{
	double end = test_now_ms() + timeout_ms;

	while (test_now_ms() < end)
		if (lock_word(key) != held)
			return true;
	return false;
}

static void test_known_workload(void)
{
	enum { PUTS = 5, GETS = 7, AGETS = 3, APUTS = 2 };
	static uint8_t buf[4096];
	struct ddss_stats before, st, want;
	ddss_key_t data, ver, lk;
	ddss_req_t *req;
	uint64_t v = 42, held = 0;

	EXPECT_RC(ddss_stats_get(ctx, &before), 0);
	for (unsigned i = 0; i < DDSS_STAT_NOPS; i++)
		EXPECT_EQ(before.ops[i] + before.bytes[i], 0, "a counter before any call");
	memset(&want, 0, sizeof(want));
	if (me == 1) {
		data = alloc_at("st-data", 4096, 2, DDSS_COHERENCE_STRICT);
		ver = alloc_at("st-version", 64, 2, DDSS_COHERENCE_VERSION);
		lk = alloc_at("st-lock", 64, 1, DDSS_COHERENCE_NULL);
		want.ops[DDSS_STAT_ALLOCATE] = 3;
		EXPECT_RC(ddss_put(ctx, ver, 0, &v, 8), 0);
		for (unsigned i = 0; i < PUTS; i++)
			EXPECT_RC(ddss_put(ctx, data, i * 64, buf, 64), 0);
		for (unsigned i = 0; i < GETS; i++)
			EXPECT_RC(ddss_get(ctx, data, i * 100, buf, 100), 0);
		for (unsigned i = 0; i < AGETS; i++) {
			EXPECT_RC(ddss_async_get(ctx, data, 0, buf, 10, &req), 0);
			EXPECT_RC(ddss_wait_ss(ctx, req), 0);
		}
		for (unsigned i = 0; i < APUTS; i++) {
			EXPECT_RC(ddss_async_put(ctx, data, 0, buf, 20, &req), 0);
			EXPECT_RC(ddss_wait_ss(ctx, req), 0);
		}
		want.ops[DDSS_STAT_PUT] = PUTS + 1;
		want.bytes[DDSS_STAT_PUT] = PUTS * 64 + 8;
		want.ops[DDSS_STAT_GET] = GETS;
		want.bytes[DDSS_STAT_GET] = GETS * 100;
		want.ops[DDSS_STAT_ASYNC_GET] = AGETS;
		want.bytes[DDSS_STAT_ASYNC_GET] = AGETS * 10;
		want.ops[DDSS_STAT_ASYNC_PUT] = APUTS;
		want.bytes[DDSS_STAT_ASYNC_PUT] = APUTS * 20;
		/* Failures: counted by errno, nothing in ops or bytes. */
		EXPECT_RC(ddss_get(ctx, data, 4090, buf, 100), -ERANGE);
		EXPECT_RC(ddss_put(ctx, data, 4096, buf, 1), -ERANGE);
		EXPECT_RC(ddss_get(ctx, data, 0, NULL, 8), -EINVAL);
		want.errors[ERANGE] = 2;
		want.errors[EINVAL] = 1;
		EXPECT_RC(ddss_acquire_lock_ss(ctx, lk, DDSS_LOCK_EXCLUSIVE), 0);
		if (direct)
			held = lock_word(lk);
		want.ops[DDSS_STAT_LOCK] = 1;
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	if (me == 2) {
		EXPECT_RC(ddss_lookup_ss(ctx, "st-data", &data), 0);
		EXPECT_RC(ddss_lookup_ss(ctx, "st-version", &ver), 0);
		EXPECT_RC(ddss_lookup_ss(ctx, "st-lock", &lk), 0);
		EXPECT_RC(ddss_lookup_ss(ctx, "st-none", &v), -ENOENT);
		want.ops[DDSS_STAT_LOOKUP] = 3;
		want.errors[ENOENT] = 1;
		/* version model: the first get fetches (a miss), the second is served from the
		 * cache (a hit): nothing was put in between. */
		EXPECT_RC(ddss_get(ctx, ver, 0, &v, 8), 0);
		EXPECT_EQ(v, 42, "the version segment's value");
		EXPECT_RC(ddss_get(ctx, ver, 0, &v, 8), 0);
		want.ops[DDSS_STAT_GET] = 2;
		want.bytes[DDSS_STAT_GET] = 16;
		want.cache_misses = 1;
		want.cache_hits = 1;
		EXPECT_RC(ddss_try_lock_ss(ctx, lk, DDSS_LOCK_EXCLUSIVE), -EBUSY);
		want.errors[EBUSY] = 1;
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	if (me == 1) {
		/* Rank 2 is queueing now, or soon: let it in once its request is in the word. */
		if (direct)
			CU_ASSERT(wait_queued(lk, held, 30000));
		EXPECT_RC(ddss_release_lock_ss(ctx, lk), 0);
		want.ops[DDSS_STAT_UNLOCK] = 1;
	} else {
		EXPECT_RC(ddss_acquire_lock_ss(ctx, lk, DDSS_LOCK_EXCLUSIVE), 0);
		EXPECT_RC(ddss_release_lock_ss(ctx, lk), 0);
		want.ops[DDSS_STAT_LOCK] = 1;
		want.ops[DDSS_STAT_UNLOCK] = 1;
		want.lock_contended = 1;
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	want.ops[DDSS_STAT_BARRIER] = 3;
	EXPECT_RC(ddss_stats_get(ctx, &st), 0);
	for (unsigned i = 0; i < DDSS_STAT_NOPS; i++) {
		char what[64];

		snprintf(what, sizeof(what), "ops[%s]", ddss_stat_op_name((int)i));
		EXPECT_EQ(st.ops[i], want.ops[i], what);
		snprintf(what, sizeof(what), "bytes[%s]", ddss_stat_op_name((int)i));
		EXPECT_EQ(st.bytes[i], want.bytes[i], what);
	}
	for (unsigned e = 0; e < DDSS_STAT_NERRNO; e++) {
		char what[64];

		snprintf(what, sizeof(what), "errors[%s]", e ? strerror((int)e) : "other");
		EXPECT_EQ(st.errors[e], want.errors[e], what);
	}
	if (direct) {
		EXPECT_EQ(st.lock_contended, want.lock_contended, "lock_contended");
		EXPECT_EQ(st.lock_recovered, 0, "lock_recovered");
		EXPECT_EQ(st.retries, 0, "retries");
		EXPECT_EQ(st.timeouts, 0, "timeouts");
		EXPECT_EQ(st.cache_hits, want.cache_hits, "cache_hits");
		EXPECT_EQ(st.cache_misses, want.cache_misses, "cache_misses");
	}
	for (unsigned i = 0; i < sizeof(st.reserved) / sizeof(st.reserved[0]); i++)
		EXPECT_EQ(st.reserved[i], 0, "reserved");
	printf("rank %u: get %llu (%llu B), put %llu (%llu B), lock %llu, contended %llu, "
	       "cache %llu hits / %llu misses, errors EBUSY %llu ERANGE %llu\n", me,
	       (unsigned long long)st.ops[DDSS_STAT_GET], (unsigned long long)st.bytes[DDSS_STAT_GET],
	       (unsigned long long)st.ops[DDSS_STAT_PUT], (unsigned long long)st.bytes[DDSS_STAT_PUT],
	       (unsigned long long)st.ops[DDSS_STAT_LOCK], (unsigned long long)st.lock_contended,
	       (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
	       (unsigned long long)st.errors[EBUSY], (unsigned long long)st.errors[ERANGE]);
	EXPECT_RC(ddss_barrier(ctx), 0);
	if (me == 1) {
		EXPECT_RC(ddss_release_ss(ctx, data), 0);
		EXPECT_RC(ddss_release_ss(ctx, ver), 0);
		EXPECT_RC(ddss_release_ss(ctx, lk), 0);
	}
}

static void test_bad_arguments(void)
{
	struct ddss_stats st;

	EXPECT_RC(ddss_stats_get(NULL, &st), -EINVAL);
	EXPECT_RC(ddss_stats_get(ctx, NULL), -EINVAL);
	CU_ASSERT_STRING_EQUAL(ddss_stat_op_name(DDSS_STAT_GET), "get");
	CU_ASSERT_STRING_EQUAL(ddss_stat_op_name(DDSS_STAT_BARRIER), "barrier");
	CU_ASSERT_STRING_EQUAL(ddss_stat_op_name(-1), "?");
	CU_ASSERT_STRING_EQUAL(ddss_stat_op_name(DDSS_STAT_NOPS), "?");
}

int main(void)
{
	unsigned failed;
	CU_pSuite s;
	int r = ddss_init(NULL, &ctx);

	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	direct = !test_ctx_is_client(ctx);
	if (ddss_size(ctx) != 2) {
		printf("SKIP: the statistics test needs 2 ranks, not %u\n", ddss_size(ctx));
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite(direct ? "stats (direct)" : "stats (daemon mode)", NULL, NULL);
	CU_add_test(s, "every counter matches a known workload", test_known_workload);
	CU_add_test(s, "bad arguments, op names", test_bad_arguments);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	return failed || r ? 1 : 0;
}
