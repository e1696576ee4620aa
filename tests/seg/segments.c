/*
 * Shared segments over a real group (ddssrun, 4+ ranks, any transport): placement, data
 * byte-exact across ranks at 1 B .. 1 MiB, no leak over 10,000 allocate/release cycles,
 * stale / forged / out-of-range keys, offsets and lengths refused without side effects,
 * concurrent named creation, 64 async gets in flight, 8 threads per rank at once.
 *
 * Ranks pass keys to each other through a named "board" segment: rank r writes at slot r.
 *
 *   ddssrun -n 4 segments [--completion=poll] [--threads-only] [--cycles N]
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "core/key.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEAK_CYCLES 10000 /* default; --cycles N */
#define ASYNC_N 64
#define THREADS 8
#define THREAD_ITERS 500

static ddss_ctx_t *ctx;
static uint32_t me, nranks;
static unsigned leak_cycles = LEAK_CYCLES;
static int init_bad_completion, init_small_pool, init_no_ctx; /* checked before the real init */

static void barrier(void)
{
	test_ctx_barrier_or_exit(ctx);
}

/* Publish @key as this rank's board slot @i; read rank @from's slot @i. */
static void publish(unsigned i, ddss_key_t key)
{
	test_board_put(i, key);
}

static ddss_key_t fetch(uint32_t from, unsigned i)
{
	return test_board_get(from, i);
}

/* ---- context ---- */

static void test_init_errors(void)
{
	CU_ASSERT_EQUAL(init_bad_completion, -EINVAL);
	CU_ASSERT_EQUAL(init_small_pool, -EINVAL);
	CU_ASSERT_EQUAL(init_no_ctx, -EINVAL);
	CU_ASSERT(me >= 1 && me <= nranks);
	CU_ASSERT_EQUAL(ddss_rank(NULL), 0);
	CU_ASSERT_EQUAL(ddss_barrier(NULL), -EINVAL);
	CU_ASSERT_EQUAL(ddss_finalize(NULL), -EINVAL);
}

/* ---- named segments ---- */

static void test_named_concurrent(void)
{
	for (unsigned round = 0; round < 20; round++) {
		char name[32];
		ddss_key_t key = 0, again = 0, found = 0;

		snprintf(name, sizeof(name), "race-%u", round);
		/* Every rank at once; the size differs per rank: the creator's wins. */
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 100 + me, &(struct ddss_seg_attr){
						       .name = name }, &key), 0);
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){ .name = name },
						 &again), 0);
		CU_ASSERT_EQUAL(again, key);
		CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, name, &found), 0);
		CU_ASSERT_EQUAL(found, key);
		publish(round, key);
	}
	barrier();
	for (unsigned round = 0; round < 20; round++) {
		ddss_key_t mine = fetch(me, round);

		for (uint32_t r = 1; r <= nranks; r++)
			CU_ASSERT_EQUAL(fetch(r, round), mine);
	}
	barrier();
}

static void test_named_errors(void)
{
	char longname[DDSS_NAME_MAX + 1];
	ddss_key_t key = 7;

	CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, "no-such-segment", &key), -ENOENT);
	memset(longname, 'x', DDSS_NAME_MAX);
	longname[DDSS_NAME_MAX] = 0;
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){ .name = longname },
					 &key), -ENAMETOOLONG);
	CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, longname, &key), -ENAMETOOLONG);
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){ .name = "" }, &key),
			-EINVAL);
	CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, NULL, &key), -EINVAL);
	CU_ASSERT_EQUAL(key, 7);
	barrier();
	/* A released named segment is gone by name too; the name can be created again. */
	if (me == 1) {
		ddss_key_t k1, k2, k3;

		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){ .name = "reuse" },
						 &k1), 0);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, k1), 0);
		CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, "reuse", &k2), -ENOENT);
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){ .name = "reuse" },
						 &k3), 0);
		CU_ASSERT_NOT_EQUAL(k3, k1);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, k3), 0);
	}
	barrier();
}

/*
 * Who may release (ddss_release_ss(3)): an unnamed segment only its allocator and its home;
 * anyone else gets -EPERM and the segment stays usable. A named one, any rank. Rank 2
 * allocates three unnamed segments at rank 3 (ranks 1 and 4 are bystanders).
 */
static void test_release_rights(void)
{
	enum { BOARD = 40 };
	ddss_key_t a, b, c, named;
	uint64_t v = 0;

	if (nranks < 4)
		return;
	if (me == 2) {
		struct ddss_seg_attr at = { .placement = DDSS_PLACE_RANK, .rank = 3 };

		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &at, &a), 0);
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &at, &b), 0);
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &at, &c), 0);
		v = 42;
		CU_ASSERT_EQUAL(ddss_put(ctx, a, 0, &v, 8), 0);
		publish(BOARD, a);
		publish(BOARD + 1, b);
		publish(BOARD + 2, c);
	}
	barrier();
	a = fetch(2, BOARD);
	b = fetch(2, BOARD + 1);
	c = fetch(2, BOARD + 2);
	if (me == 1 || me == 4) {
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, a), -EPERM);
		CU_ASSERT_EQUAL(ddss_get(ctx, a, 0, &v, 8), 0); /* still there, unchanged */
		CU_ASSERT_EQUAL(v, 42);
	}
	barrier();
	if (me == 2) /* the allocator */
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, a), 0);
	if (me == 3) /* the home */
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, b), 0);
	barrier();
	CU_ASSERT_EQUAL(ddss_get(ctx, a, 0, &v, 8), -ESTALE);
	CU_ASSERT_EQUAL(ddss_get(ctx, b, 0, &v, 8), -ESTALE);
	/* A name shares a segment with the group: anyone may release it. */
	if (me == 2)
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, &(struct ddss_seg_attr){
			.placement = DDSS_PLACE_RANK, .rank = 3, .name = "released-by-4" }, &named), 0);
	barrier();
	if (me == 4) {
		CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, "released-by-4", &named), 0);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, named), 0);
	}
	barrier();
	if (me == 2)
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, c), 0);
	barrier();
}

/* ---- placement ---- */

static uint32_t home_of(ddss_key_t key)
{
	struct ddss_seg_info info = { 0 };

	CU_ASSERT_EQUAL(ddss_stat_ss(ctx, key, &info), 0);
	return info.home;
}

static void test_placement(void)
{
	unsigned n = 3 * nranks, *count = calloc(nranks + 1, sizeof(*count));
	ddss_key_t *keys = calloc(n, sizeof(*keys)), key;
	uint32_t prev = 0;

	for (unsigned i = 0; i < n; i++) {
		uint32_t h;

		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 64, NULL, &keys[i]), 0);
		h = home_of(keys[i]);
		CU_ASSERT(h >= 1 && h <= nranks);
		if (h >= 1 && h <= nranks)
			count[h]++;
		if (prev) /* round robin: the next rank each time */
			CU_ASSERT_EQUAL(h, prev % nranks + 1);
		prev = h;
	}
	for (uint32_t r = 1; r <= nranks; r++)
		CU_ASSERT_EQUAL(count[r], 3);
	for (unsigned i = 0; i < n; i++)
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, keys[i]), 0);

	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
					 .placement = DDSS_PLACE_LOCAL }, &key), 0);
	CU_ASSERT_EQUAL(home_of(key), me);
	CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), 0);
	for (uint32_t r = 1; r <= nranks; r++) {
		CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
						 .placement = DDSS_PLACE_RANK, .rank = r }, &key), 0);
		CU_ASSERT_EQUAL(home_of(key), r);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), 0);
	}
	key = 5;
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
					 .placement = DDSS_PLACE_RANK, .rank = 0 }, &key), -EINVAL);
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
					 .placement = DDSS_PLACE_RANK, .rank = nranks + 1 }, &key), -EINVAL);
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){ .placement = 99 }, &key),
			-EINVAL);
	CU_ASSERT_EQUAL(key, 5);
	free(keys);
	free(count);
	barrier();
}

/* ---- data across ranks ---- */

static void test_data_sizes(void)
{
	static const size_t sizes[] = { 1, 7, 64, 4096, 65536 + 3, 1 << 20 };
	const unsigned nsizes = sizeof(sizes) / sizeof(sizes[0]);
	unsigned char *buf = malloc(1 << 20);

	for (unsigned i = 0; i < nsizes; i++) {
		uint32_t writer = i % nranks + 1;
		size_t len = sizes[i];
		uint64_t seed = 1000 + i;
		ddss_key_t key = 0;

		if (me == writer) {
			/* Homes rotate with i (round robin) so every rank serves some sizes. */
			CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
					.placement = DDSS_PLACE_RANK, .rank = (i + 1) % nranks + 1 },
							       &key), 0);
			test_fill(buf, len, seed);
			CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, buf, len), 0);
			publish(0, key);
		}
		barrier();
		key = fetch(writer, 0);
		if (me != writer) {
			memset(buf, 0, len);
			CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, buf, len), 0);
			CU_ASSERT_EQUAL(test_check(buf, len, seed), SIZE_MAX);
			if (len > 2) {
				/* An inner range: bytes 1 .. len-2 of the same pattern. */
				memset(buf, 0, len);
				CU_ASSERT_EQUAL(ddss_get(ctx, key, 1, buf + 1, len - 2), 0);
				test_fill(buf, 1, seed);
				CU_ASSERT_EQUAL(test_check(buf, len - 1, seed), SIZE_MAX);
			}
		}
		barrier();
		if (me == writer)
			CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), 0);
		barrier();
	}
	free(buf);
}

/* A fresh segment reads as zeros, even where an earlier one was written. */
static void test_zeroed(void)
{
	unsigned char buf[256], zero[256] = { 0 };
	ddss_key_t key;

	for (int round = 0; round < 3; round++) {
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, sizeof(buf), NULL, &key), 0);
		CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, buf, sizeof(buf)), 0);
		CU_ASSERT_EQUAL(memcmp(buf, zero, sizeof(buf)), 0);
		memset(buf, 0xab, sizeof(buf));
		CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, buf, sizeof(buf)), 0);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), 0);
	}
	barrier();
}

/* ---- no leak ---- */

static void test_no_leak(void)
{
	struct ddss_pool_stats before, after;
	uint64_t segs_before, segs_after;
	unsigned failures = 0;

	/* The pool and the table are the daemon's in daemon mode: counted in direct mode. */
	bool count = !test_ctx_is_client(ctx);

	barrier();
	if (count) {
		CU_ASSERT_EQUAL_FATAL(ddss_pool_stats(ctx->pool, &before), 0);
		segs_before = ddss_segtab_count(ctx->segtab);
	}
	barrier();
	for (unsigned i = 0; i < leak_cycles; i++) {
		size_t len = 1 + (i * 37) % 3000;
		uint64_t v = i;
		ddss_key_t key;

		/* Every home in turn, so every rank's pool sees allocations from all ranks. */
		if (ddss_allocate_ss(ctx, len, NULL, &key) || ddss_put(ctx, key, 0, &v, 1) ||
		    ddss_release_ss(ctx, key))
			failures++;
	}
	CU_ASSERT_EQUAL(failures, 0);
	barrier();
	if (!count)
		return;
	CU_ASSERT_EQUAL_FATAL(ddss_pool_stats(ctx->pool, &after), 0);
	segs_after = ddss_segtab_count(ctx->segtab);
	printf("\n    pool: allocated %zu -> %zu bytes, live %llu -> %llu, mapped %zu -> %zu; "
	       "segments %llu -> %llu\n", before.allocated, after.allocated,
	       (unsigned long long)before.live, (unsigned long long)after.live, before.mapped,
	       after.mapped, (unsigned long long)segs_before, (unsigned long long)segs_after);
	CU_ASSERT_EQUAL(after.allocated, before.allocated);
	CU_ASSERT_EQUAL(after.live, before.live);
	CU_ASSERT_EQUAL(segs_after, segs_before);
	/* Reused, not grown: far less than 10,000 segments' worth was ever handed out. */
	CU_ASSERT(after.mapped - before.mapped < (size_t)leak_cycles * 64);
	barrier();
}

/* ---- bad keys, offsets, lengths ---- */

static void check_unchanged(ddss_key_t key, size_t len, uint64_t seed)
{
	unsigned char *buf = malloc(len);

	CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, buf, len), 0);
	CU_ASSERT_EQUAL(test_check(buf, len, seed), SIZE_MAX);
	free(buf);
}

static void test_bad_input(void)
{
	const size_t len = 256;
	unsigned char buf[512];
	struct ddss_key_parts k;
	ddss_key_t key, stale, forged;
	ddss_req_t *req = (ddss_req_t *)&req;
	struct ddss_seg_info info;

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, len, NULL, &key), 0);
	test_fill(buf, len, 77);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, buf, len), 0);

	/* Out of range: nothing written, nothing read. */
	CU_ASSERT_EQUAL(ddss_put(ctx, key, len, buf, 1), -ERANGE);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, buf, len + 1), -ERANGE);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, 1, buf, len), -ERANGE);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, SIZE_MAX, buf, 2), -ERANGE);
	CU_ASSERT_EQUAL(ddss_get(ctx, key, len - 1, buf, 2), -ERANGE);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, buf, 0), -EINVAL);
	CU_ASSERT_EQUAL(ddss_put(ctx, key, 0, NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(ddss_async_put(ctx, key, len, buf, 1, &req), -ERANGE);
	CU_ASSERT_EQUAL(ddss_async_get(ctx, key, 0, buf, 0, &req), -EINVAL);
	CU_ASSERT_EQUAL(req, (ddss_req_t *)&req);
	check_unchanged(key, len, 77);

	/* Forged and corrupt keys: refused before anything is sent. */
	CU_ASSERT_EQUAL(ddss_key_parse(key, &k), 0);
	for (int bit = 0; bit < 64; bit++) {
		forged = key ^ (1ull << bit);
		CU_ASSERT_EQUAL(ddss_put(ctx, forged, 0, buf, 1), -EINVAL);
		CU_ASSERT_EQUAL(ddss_get(ctx, forged, 0, buf, 1), -EINVAL);
	}
	CU_ASSERT_EQUAL(ddss_get(ctx, 0, 0, buf, 1), -EINVAL);
	CU_ASSERT_EQUAL(ddss_get(ctx, ~0ull, 0, buf, 1), -EINVAL);
	/* Well-formed but wrong: a rank outside the group, a slot never used, a generation
	 * that is not the live one. */
	CU_ASSERT_EQUAL(ddss_get(ctx, ddss_key_make(nranks + 1, k.slot, k.gen), 0, buf, 1), -EINVAL);
	CU_ASSERT_EQUAL(ddss_get(ctx, ddss_key_make(k.rank, DDSS_KEY_MAX_SLOT, 1), 0, buf, 1),
			-EINVAL);
	CU_ASSERT_EQUAL(ddss_put(ctx, ddss_key_make(k.rank, k.slot, ddss_key_next_gen(k.gen)), 0,
				 buf, 1), -ESTALE);
	CU_ASSERT_EQUAL(ddss_release_ss(ctx, key ^ 1), -EINVAL);
	check_unchanged(key, len, 77);

	/* Bad allocation requests. */
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 0, NULL, &forged), -EINVAL);
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, 8, NULL, NULL), -EINVAL);
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, (size_t)1 << 40, NULL, &forged), -ENOMEM);

	/* Stale: released by the rank that made it, seen by every rank (cached or not). */
	publish(0, key);
	barrier();
	stale = fetch(nranks - (me - 1) % nranks, 0); /* someone else's */
	CU_ASSERT_EQUAL(ddss_get(ctx, stale, 0, buf, 8), 0); /* now cached here */
	barrier();
	CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), 0);
	barrier();
	for (uint32_t r = 1; r <= nranks; r++) {
		stale = fetch(r, 0);
		CU_ASSERT_EQUAL(ddss_get(ctx, stale, 0, buf, 8), -ESTALE);
		CU_ASSERT_EQUAL(ddss_put(ctx, stale, 0, buf, 8), -ESTALE);
		CU_ASSERT_EQUAL(ddss_async_get(ctx, stale, 0, buf, 8, &req), -ESTALE);
		CU_ASSERT_EQUAL(ddss_stat_ss(ctx, stale, &info), -ESTALE);
	}
	CU_ASSERT_EQUAL(ddss_release_ss(ctx, key), -ESTALE);
	/* The slot is reused by a new segment: the old key still does not reach it. */
	CU_ASSERT_EQUAL(ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
					 .placement = DDSS_PLACE_RANK, .rank = k.rank }, &forged), 0);
	CU_ASSERT_EQUAL(ddss_get(ctx, key, 0, buf, 8), -ESTALE);
	CU_ASSERT_EQUAL(ddss_release_ss(ctx, forged), 0);
	barrier();
}

/* ---- async ---- */

static void test_async(void)
{
	ddss_key_t keys[ASYNC_N];
	ddss_req_t *reqs[ASYNC_N];
	unsigned char *bufs = malloc((size_t)ASYNC_N * 4096);

	for (unsigned i = 0; i < ASYNC_N; i++)
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 4096, NULL, &keys[i]), 0);
	/* 64 puts in flight (homes spread round robin), then 64 gets. */
	for (unsigned i = 0; i < ASYNC_N; i++) {
		test_fill(bufs + i * 4096, 4096, me * 1000 + i);
		CU_ASSERT_EQUAL_FATAL(ddss_async_put(ctx, keys[i], 0, bufs + i * 4096, 4096,
						     &reqs[i]), 0);
	}
	for (unsigned i = 0; i < ASYNC_N; i++)
		CU_ASSERT_EQUAL(ddss_wait_ss(ctx, reqs[i]), 0);
	memset(bufs, 0, (size_t)ASYNC_N * 4096);
	for (unsigned i = 0; i < ASYNC_N; i++)
		CU_ASSERT_EQUAL_FATAL(ddss_async_get(ctx, keys[i], 0, bufs + i * 4096, 4096,
						     &reqs[i]), 0);
	/* Finish half by polling, half by waiting, in reverse order. */
	for (unsigned i = ASYNC_N; i-- > 0;) {
		int r;

		if (i % 2) {
			while ((r = ddss_test_ss(ctx, reqs[i])) == -EAGAIN)
				;
		} else {
			r = ddss_wait_ss(ctx, reqs[i]);
		}
		CU_ASSERT_EQUAL(r, 0);
		CU_ASSERT_EQUAL(test_check(bufs + i * 4096, 4096, me * 1000 + i), SIZE_MAX);
	}
	for (unsigned i = 0; i < ASYNC_N; i++)
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, keys[i]), 0);
	free(bufs);
	barrier();
}

/* ---- threads ---- */

struct worker {
	pthread_t th;
	unsigned id;
	ddss_key_t shared;  /* one segment all threads of all ranks use */
	unsigned failures;
};

/* Block b of the shared segment always holds the pattern of seed b (self-checking). */
#define SHARED_BLOCK 512
#define SHARED_BLOCKS 32

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned char buf[SHARED_BLOCK], mine[1024];
	ddss_key_t own;

	for (unsigned i = 0; i < THREAD_ITERS; i++) {
		unsigned b = (w->id * 7 + i) % SHARED_BLOCKS;
		uint64_t seed = ((uint64_t)me << 32) | (w->id << 16) | i;

		/* Rewrite one shared block with its fixed pattern, read another back. */
		test_fill(buf, SHARED_BLOCK, b);
		if (ddss_put(ctx, w->shared, b * SHARED_BLOCK, buf, SHARED_BLOCK))
			w->failures++;
		b = (b + 13) % SHARED_BLOCKS;
		if (ddss_get(ctx, w->shared, b * SHARED_BLOCK, buf, SHARED_BLOCK) ||
		    test_check(buf, SHARED_BLOCK, b) != SIZE_MAX)
			w->failures++;
		/* A private segment now and then: allocate, write, read back, release. */
		if (i % 25 == 0) {
			if (ddss_allocate_ss(ctx, sizeof(mine), NULL, &own)) {
				w->failures++;
				continue;
			}
			test_fill(mine, sizeof(mine), seed);
			if (ddss_put(ctx, own, 0, mine, sizeof(mine)))
				w->failures++;
			memset(mine, 0, sizeof(mine));
			if (ddss_get(ctx, own, 0, mine, sizeof(mine)) ||
			    test_check(mine, sizeof(mine), seed) != SIZE_MAX)
				w->failures++;
			if (ddss_release_ss(ctx, own))
				w->failures++;
		}
	}
	return NULL;
}

static void test_threads(void)
{
	struct worker w[THREADS];
	unsigned char buf[SHARED_BLOCK];
	ddss_key_t shared;

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, SHARED_BLOCK * SHARED_BLOCKS,
					       &(struct ddss_seg_attr){ .name = "threads" }, &shared), 0);
	if (me == 1)
		for (unsigned b = 0; b < SHARED_BLOCKS; b++) {
			test_fill(buf, SHARED_BLOCK, b);
			CU_ASSERT_EQUAL(ddss_put(ctx, shared, b * SHARED_BLOCK, buf, SHARED_BLOCK), 0);
		}
	barrier();
	for (unsigned t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .id = t, .shared = shared };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&w[t].th, NULL, worker_main, &w[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++) {
		pthread_join(w[t].th, NULL);
		CU_ASSERT_EQUAL(w[t].failures, 0);
	}
	barrier();
	if (me == 1)
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, shared), 0);
	barrier();
}

int main(int argc, char **argv)
{
	struct ddss_attr attr;
	bool threads_only = false;
	char suite_name[64];
	CU_pSuite s;
	unsigned failed;
	int r;

	ddss_attr_init(&attr);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--completion=poll")) {
			attr.completion = DDSS_COMPLETION_POLL;
		} else if (!strcmp(argv[i], "--threads-only")) {
			threads_only = true;
		} else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
			leak_cycles = (unsigned)strtoul(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--completion=poll] [--threads-only] [--cycles N]\n", argv[0]);
			return 2;
		}
	}
	{
		/* Refused before anything is opened (so no collective step is half done). */
		struct ddss_attr bad = attr;

		bad.completion = 7;
		init_bad_completion = ddss_init(&bad, &ctx);
		bad = attr;
		bad.pool_size = 4096;
		init_small_pool = getenv("DDSS_POOL_SIZE") ? -EINVAL : ddss_init(&bad, &ctx);
		init_no_ctx = ddss_init(&attr, NULL);
	}
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	nranks = ddss_size(ctx);
	r = test_board_open(ctx);
	if (r) {
		fprintf(stderr, "board: %s\n", ddss_strerror(r));
		return 1;
	}
	snprintf(suite_name, sizeof(suite_name), "segments(%s, %u ranks)",
		 test_ctx_transport(ctx), nranks);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite(suite_name, NULL, NULL);
	CU_add_test(s, "ddss_init refuses bad attributes", test_init_errors);
	if (!threads_only) {
		CU_add_test(s, "named segments: concurrent creation, one key", test_named_concurrent);
		CU_add_test(s, "named segments: errors, reuse after release", test_named_errors);
		CU_add_test(s, "release: unnamed by its allocator or home only (-EPERM)",
			    test_release_rights);
		CU_add_test(s, "placement: round robin, local, rank", test_placement);
		CU_add_test(s, "data: 1 B .. 1 MiB byte-exact on every rank", test_data_sizes);
		CU_add_test(s, "new segments read as zeros", test_zeroed);
		CU_add_test(s, "bad keys, offsets, lengths: refused, nothing changed", test_bad_input);
		CU_add_test(s, "64 async puts and gets in flight", test_async);
		CU_add_test(s, "allocate/release cycles (10,000 by default): no leak", test_no_leak);
	}
	CU_add_test(s, "8 threads per rank at once", test_threads);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	if (r)
		fprintf(stderr, "ddss_finalize: %s\n", ddss_strerror(r));
	return failed || r ? 1 : 0;
}
