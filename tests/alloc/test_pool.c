/*
 * Unit tests of the registered pool allocator: placement, alignment and zeroing, running the
 * pool dry and recovering, no leaks over many cycles, bad input, two pools side by side,
 * threads, and jemalloc's metadata staying out of the pool.
 *
 * Random choices come from fixed seeds, so a failure repeats.
 */
#include "alloc/pool.h"
#include "common/test_util.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9E3779B97F4A7C15ull);

	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Log-uniform in [lo, hi]: as many small sizes as large ones. */
static size_t rng_size(uint64_t *s, size_t lo, size_t hi)
{
	unsigned lg_lo = 63 - (unsigned)__builtin_clzll(lo);
	unsigned lg_hi = 63 - (unsigned)__builtin_clzll(hi);
	unsigned lg = lg_lo + (unsigned)(rng_next(s) % (lg_hi - lg_lo + 1));
	size_t sz = ((size_t)1 << lg) + (size_t)(rng_next(s) % ((size_t)1 << lg));

	return sz < lo ? lo : sz > hi ? hi : sz;
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

static struct ddss_pool *pool_new(size_t len)
{
	struct ddss_pool *pool = NULL;

	CU_ASSERT_EQUAL_FATAL(ddss_pool_create(len, 0, &pool), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(pool);
	return pool;
}

static struct ddss_pool_stats stats_of(struct ddss_pool *pool)
{
	struct ddss_pool_stats st;

	memset(&st, 0xA5, sizeof(st));
	CU_ASSERT_EQUAL_FATAL(ddss_pool_stats(pool, &st), 0);
	return st;
}

static bool stats_equal(const struct ddss_pool_stats *a, const struct ddss_pool_stats *b)
{
	return a->allocated == b->allocated && a->mapped == b->mapped && a->live == b->live;
}

/* ---- 1. placement, alignment, zeroing, no overlap ---- */

struct piece {
	uint64_t off;
	size_t size;
};

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static void test_placement(void)
{
	static const size_t sizes[] = { 1, 7, 8, 24, 64, 100, 4095, 4096, 4097, 16384,
					65539, 300000, MiB };
	static const size_t aligns[] = { 8, 16, 64, 256, 4096 };
	enum { N = ARRAY_LEN(sizes) * ARRAY_LEN(aligns) };
	struct ddss_pool *pool = pool_new(64 * MiB);
	uint8_t *base = ddss_pool_base(pool);
	size_t len = ddss_pool_len(pool);
	struct piece p[N], sorted[N];
	size_t n = 0, reused = 0, bad_check = 0;

	CU_ASSERT_EQUAL(len, 64 * MiB);
	CU_ASSERT_EQUAL((uintptr_t)base % (2 * MiB), 0);

	for (int round = 0; round < 2; round++) {
		n = 0;
		for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
			for (size_t a = 0; a < ARRAY_LEN(aligns); a++, n++) {
				uint64_t off = UINT64_MAX;

				int r = ddss_pool_alloc(pool, sizes[s], aligns[a], &off);

				CU_ASSERT_EQUAL_FATAL(r, 0);
				CU_ASSERT_EQUAL(off % aligns[a], 0);
				CU_ASSERT_FATAL(off < len && sizes[s] <= len - off);
				/* The second round reuses memory the first one filled. */
				CU_ASSERT(all_zero(base + off, sizes[s]));
				if (round == 1)
					for (size_t i = 0; i < N; i++)
						if (off < sorted[i].off + sorted[i].size &&
						    sorted[i].off < off + sizes[s]) {
							reused++;
							break;
						}
				p[n].off = off;
				p[n].size = sizes[s];
				test_fill(base + off, sizes[s], 1000 * round + n);
			}
		}
		for (size_t i = 0; i < N; i++)
			if (test_check(base + p[i].off, p[i].size, 1000 * round + i) != SIZE_MAX)
				bad_check++;
		CU_ASSERT_EQUAL(bad_check, 0);

		memcpy(sorted, p, sizeof(p));
		qsort(sorted, N, sizeof(sorted[0]), piece_cmp);
		for (size_t i = 0; i + 1 < N; i++)
			CU_ASSERT(sorted[i].off + sorted[i].size <= sorted[i + 1].off);

		for (size_t i = 0; i < N; i++)
			CU_ASSERT_EQUAL(ddss_pool_free(pool, p[i].off), 0);
	}
	/* Otherwise the zero check of the second round proved nothing. */
	CU_ASSERT(reused > N / 2);
	printf("\n    %zu of %zu second-round pieces reuse first-round memory, mapped %zu KiB ",
	       reused, (size_t)N, stats_of(pool).mapped / KiB);
	ddss_pool_destroy(pool);
}

/* ---- 2. running the pool dry ---- */

static size_t fill_until_full(struct ddss_pool *pool, size_t size, uint64_t *offs, size_t cap)
{
	size_t n = 0;
	int r = 0;

	while (n < cap && (r = ddss_pool_alloc(pool, size, 8, &offs[n])) == 0)
		n++;
	CU_ASSERT_EQUAL(r, -ENOMEM);
	return n;
}

static void test_exhaustion(void)
{
	enum { CAP = 300000 };
	struct ddss_pool *pool = pool_new(8 * MiB);
	size_t len = ddss_pool_len(pool), big, small, again;
	uint64_t *offs = calloc(CAP, sizeof(*offs)), off;
	struct ddss_pool_stats st0 = stats_of(pool), st;

	CU_ASSERT_PTR_NOT_NULL_FATAL(offs);
	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, len + 1, 8, &off), -ENOMEM);
	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, SIZE_MAX, 8, &off), -ENOMEM);

	/* Large pieces until full; most of the pool is usable. */
	big = fill_until_full(pool, 64 * KiB, offs, CAP);
	st = stats_of(pool);
	printf("\n    64 KiB pieces: %zu fit in %zu KiB (mapped %zu KiB) ", big, len / KiB,
	       st.mapped / KiB);
	CU_ASSERT(big * 64 * KiB >= len * 3 / 4);
	CU_ASSERT(st.mapped <= len);
	CU_ASSERT(st.mapped >= len - 128 * KiB);
	CU_ASSERT_EQUAL(st.live, big);
	CU_ASSERT_EQUAL(st.allocated, big * 64 * KiB);

	/* Free every other one: exactly those holes can be filled again, and no more. */
	for (size_t i = 0; i < big; i += 2)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);
	for (size_t i = 0; i < big; i += 2)
		CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 64 * KiB, 8, &offs[i]), 0);
	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 64 * KiB, 8, &off), -ENOMEM);
	CU_ASSERT_EQUAL(stats_of(pool).allocated, big * 64 * KiB);

	/* Everything back: pieces of another size class can use (most of) the pool again. */
	for (size_t i = 0; i < big; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);
	st = stats_of(pool);
	CU_ASSERT_EQUAL(st.allocated, st0.allocated);
	CU_ASSERT_EQUAL(st.live, 0);
	small = fill_until_full(pool, 64, offs, CAP);
	printf("64 B pieces after freeing them: %zu (%zu KiB) ", small, small * 64 / KiB);
	CU_ASSERT(small * 64 >= len * 3 / 4);
	CU_ASSERT_EQUAL(stats_of(pool).allocated, small * 64);
	for (size_t i = 0; i < small; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);

	again = fill_until_full(pool, 64 * KiB, offs, CAP);
	CU_ASSERT(again >= big);
	for (size_t i = 0; i < again; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);

	st = stats_of(pool);
	CU_ASSERT_EQUAL(st.allocated, st0.allocated);
	CU_ASSERT_EQUAL(st.live, 0);
	CU_ASSERT(st.mapped <= len);
	free(offs);
	ddss_pool_destroy(pool);
}

/* ---- 3. no leak over many cycles ---- */

enum { CYCLES = 10000 };

/* Allocate and free at once: the same memory serves every cycle. */
static void test_no_leak(void)
{
	struct ddss_pool *pool = pool_new(64 * MiB);
	uint8_t *base = ddss_pool_base(pool);
	struct ddss_pool_stats st0 = stats_of(pool), st100 = st0, st;
	uint64_t seed = 42, off;
	size_t bad = 0;

	for (int c = 0; c < CYCLES; c++) {
		size_t size = rng_size(&seed, 64, MiB);

		CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(pool, size, 8, &off), 0);
		if (base[off] || base[off + size - 1])
			bad++;
		base[off] = base[off + size - 1] = 0xFF;
		CU_ASSERT_EQUAL(stats_of(pool).live, st0.live + 1);
		CU_ASSERT_EQUAL(ddss_pool_free(pool, off), 0);
		if (c == 99)
			st100 = stats_of(pool);
	}
	CU_ASSERT_EQUAL(bad, 0);
	st = stats_of(pool);
	printf("\n    allocated %zu -> %zu, live %llu -> %llu, mapped after 100 cycles %zu KiB, "
	       "after %d %zu KiB ", st0.allocated, st.allocated, (unsigned long long)st0.live,
	       (unsigned long long)st.live, st100.mapped / KiB, CYCLES, st.mapped / KiB);
	CU_ASSERT_EQUAL(st.allocated, st0.allocated);
	CU_ASSERT_EQUAL(st.live, st0.live);
	CU_ASSERT(st100.mapped > 0);
	CU_ASSERT_EQUAL(st.mapped, st100.mapped);
	ddss_pool_destroy(pool);
}

/*
 * Sixteen pieces live at a time, each cycle replacing a random one: every byte comes back
 * (allocated, live), and afterwards the freed memory has merged again, so one piece of
 * half the pool still fits.
 */
static void test_no_leak_window(void)
{
	enum { WINDOW = 16 };
	struct ddss_pool *pool = pool_new(256 * MiB);
	uint8_t *base = ddss_pool_base(pool);
	struct piece w[WINDOW] = { { 0 } };
	bool used[WINDOW] = { false };
	struct ddss_pool_stats st0 = stats_of(pool), st;
	size_t live_bytes = 0, peak = 0, bad = 0;
	uint64_t seed = 43;

	for (int c = 0; c < CYCLES; c++) {
		unsigned k = (unsigned)(rng_next(&seed) % WINDOW);
		size_t size = rng_size(&seed, 64, MiB);

		if (used[k]) {
			uint8_t *p = base + w[k].off;

			if (p[0] != (uint8_t)k || p[w[k].size - 1] != (uint8_t)~k)
				bad++;
			CU_ASSERT_EQUAL(ddss_pool_free(pool, w[k].off), 0);
			live_bytes -= w[k].size;
		}
		CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(pool, size, 8, &w[k].off), 0);
		w[k].size = size;
		used[k] = true;
		live_bytes += size;
		if (live_bytes > peak)
			peak = live_bytes;
		if (base[w[k].off] || base[w[k].off + size - 1])
			bad++;
		base[w[k].off] = (uint8_t)k;
		base[w[k].off + size - 1] = (uint8_t)~k;
	}
	CU_ASSERT_EQUAL(stats_of(pool).live, WINDOW);
	for (unsigned k = 0; k < WINDOW; k++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, w[k].off), 0);
	CU_ASSERT_EQUAL(bad, 0);

	st = stats_of(pool);
	printf("\n    allocated %zu -> %zu, live %llu -> %llu, peak of live bytes %zu KiB, "
	       "mapped %zu KiB ", st0.allocated, st.allocated, (unsigned long long)st0.live,
	       (unsigned long long)st.live, peak / KiB, st.mapped / KiB);
	CU_ASSERT_EQUAL(st.allocated, st0.allocated);
	CU_ASSERT_EQUAL(st.live, st0.live);
	CU_ASSERT(st.mapped <= ddss_pool_len(pool));
	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 128 * MiB, 8, &w[0].off), 0);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, w[0].off), 0);
	ddss_pool_destroy(pool);
}

/*
 * Fill the whole pool with small pieces, free them all, then ask for one piece of half the
 * pool. Without the priming in pool.c jemalloc kept the pool as many blocks from separate
 * hook calls that never merge, and this failed (a 1 GiB pool then served 128 MiB at most).
 */
static void test_large_after_fill(void)
{
	struct ddss_pool *pool = pool_new(64 * MiB);
	uint64_t *offs = calloc(64 * MiB / (64 * KiB), sizeof(*offs)), big;
	size_t n = 0;

	while (n < 64 * MiB / (64 * KiB) && ddss_pool_alloc(pool, 64 * KiB, 8, &offs[n]) == 0)
		n++;
	printf("\n    %zu pieces of 64 KiB filled the pool ", n);
	CU_ASSERT(n > 64 * MiB / (64 * KiB) / 2);
	for (size_t i = 0; i < n; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);
	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 32 * MiB, 8, &big), 0);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, big), 0);
	CU_ASSERT_EQUAL(stats_of(pool).live, 0);
	free(offs);
	ddss_pool_destroy(pool);
}

/* ---- 4. bad input changes nothing ---- */

static void test_bad_input(void)
{
	static const size_t bad_aligns[] = { 0, 1, 2, 4, 3, 12, 24, 4095, 8192, (size_t)1 << 40 };
	struct ddss_pool *pool = pool_new(4 * MiB);
	size_t len = ddss_pool_len(pool);
	struct ddss_pool_stats before, after;
	uint64_t off = 0x1234, keep;
	struct ddss_pool *none = (struct ddss_pool *)&off;

	CU_ASSERT_EQUAL(ddss_pool_create(0, 0, &none), -EINVAL);
	CU_ASSERT_PTR_EQUAL(none, (struct ddss_pool *)&off);
	ddss_pool_destroy(NULL);

	/* One live piece, so "inside the used part" and "past it" both exist. */
	CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(pool, 100, 8, &keep), 0);
	before = stats_of(pool);

	CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 0, 8, &off), -EINVAL);
	for (size_t i = 0; i < ARRAY_LEN(bad_aligns); i++)
		CU_ASSERT_EQUAL(ddss_pool_alloc(pool, 64, bad_aligns[i], &off), -EINVAL);
	CU_ASSERT_EQUAL(off, 0x1234);

	CU_ASSERT_EQUAL(ddss_pool_free(pool, len), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, len + 4096), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, UINT64_MAX), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, (uint64_t)len - 8), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, before.mapped), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, keep + 1), -EINVAL);

	after = stats_of(pool);
	CU_ASSERT(stats_equal(&before, &after));
	CU_ASSERT_EQUAL(after.live, 1);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, keep), 0);
	CU_ASSERT_EQUAL(stats_of(pool).live, 0);
	ddss_pool_destroy(pool);
}

/* ---- 4b. a reserved head: never handed out, not freeable ---- */

static void test_reserve(void)
{
	enum { N = 1024 };
	struct ddss_pool *pool = NULL, *none = NULL;
	uint8_t *base;
	uint64_t offs[N];
	size_t n;

	CU_ASSERT_EQUAL(ddss_pool_create(4 * MiB, 2 * MiB + 1, &none), -EINVAL);
	CU_ASSERT_PTR_NULL(none);
	CU_ASSERT_EQUAL_FATAL(ddss_pool_create(4 * MiB, 100000, &pool), 0);
	base = ddss_pool_base(pool);
	memset(base, 0x5A, 100000); /* the owner's bytes: allocations must not reach them */
	n = fill_until_full(pool, 8 * KiB, offs, N);
	CU_ASSERT(n > 100);
	for (size_t i = 0; i < n; i++) {
		CU_ASSERT(offs[i] >= 102400); /* 100000 rounded up to 4 KiB */
		CU_ASSERT(all_zero(base + offs[i], 8 * KiB));
	}
	for (size_t i = 0; i < 100000; i++)
		if (base[i] != 0x5A) {
			CU_FAIL("reserved byte changed");
			break;
		}
	CU_ASSERT_EQUAL(ddss_pool_free(pool, 0), -EINVAL);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, 4096), -EINVAL);
	for (size_t i = 0; i < n; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(pool, offs[i]), 0);
	CU_ASSERT_EQUAL(stats_of(pool).live, 0);
	ddss_pool_destroy(pool);
}

/* ---- 5. two pools at once ---- */

static void test_two_pools(void)
{
	enum { CAP = 1024 };
	struct ddss_pool *a = pool_new(4 * MiB), *b = pool_new(6 * MiB);
	uint8_t *base_a = ddss_pool_base(a), *base_b = ddss_pool_base(b);
	uint64_t offs_a[CAP], offs_b[32], off;
	struct ddss_pool_stats sb, sb2, sa;
	size_t na;

	CU_ASSERT_EQUAL(ddss_pool_len(b), 6 * MiB);
	CU_ASSERT(base_a + ddss_pool_len(a) <= base_b || base_b + ddss_pool_len(b) <= base_a);

	/* Interleaved: each pool's pieces lie in that pool and keep their own contents. */
	for (unsigned i = 0; i < 32; i++) {
		CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(a, 4000, 64, &offs_a[i]), 0);
		CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(b, 4000, 64, &offs_b[i]), 0);
		CU_ASSERT(offs_a[i] + 4000 <= ddss_pool_len(a));
		CU_ASSERT(offs_b[i] + 4000 <= ddss_pool_len(b));
		test_fill(base_a + offs_a[i], 4000, i);
		test_fill(base_b + offs_b[i], 4000, 100 + i);
	}
	for (unsigned i = 0; i < 32; i++) {
		CU_ASSERT_EQUAL(test_check(base_a + offs_a[i], 4000, i), SIZE_MAX);
		CU_ASSERT_EQUAL(test_check(base_b + offs_b[i], 4000, 100 + i), SIZE_MAX);
	}
	sb = stats_of(b);
	CU_ASSERT_EQUAL(sb.live, 32);
	CU_ASSERT_EQUAL(stats_of(a).live, 32);

	/* Run a dry: b neither changes nor stops working. */
	na = 32 + fill_until_full(a, 32 * KiB, offs_a + 32, CAP - 32);
	sa = stats_of(a);
	CU_ASSERT(sa.mapped >= ddss_pool_len(a) - 128 * KiB);
	sb2 = stats_of(b);
	CU_ASSERT(stats_equal(&sb, &sb2));
	CU_ASSERT_EQUAL(ddss_pool_alloc(b, MiB, 4096, &off), 0);
	CU_ASSERT(off + MiB <= ddss_pool_len(b));
	CU_ASSERT(all_zero(base_b + off, MiB));
	CU_ASSERT_EQUAL(ddss_pool_free(b, off), 0);
	CU_ASSERT_EQUAL(ddss_pool_alloc(a, 32 * KiB, 8, &off), -ENOMEM);

	for (unsigned i = 0; i < 32; i++)
		CU_ASSERT_EQUAL(test_check(base_b + offs_b[i], 4000, 100 + i), SIZE_MAX);
	for (size_t i = 0; i < na; i++)
		CU_ASSERT_EQUAL(ddss_pool_free(a, offs_a[i]), 0);
	CU_ASSERT_EQUAL(stats_of(a).allocated, 0);
	CU_ASSERT_EQUAL(stats_of(b).live, 32);
	CU_ASSERT_EQUAL(stats_of(b).allocated, sb.allocated);

	/* Destroying one leaves the other whole. */
	ddss_pool_destroy(a);
	for (unsigned i = 0; i < 32; i++) {
		CU_ASSERT_EQUAL(test_check(base_b + offs_b[i], 4000, 100 + i), SIZE_MAX);
		CU_ASSERT_EQUAL(ddss_pool_free(b, offs_b[i]), 0);
	}
	CU_ASSERT_EQUAL(stats_of(b).allocated, 0);
	ddss_pool_destroy(b);
}

/* ---- 6. threads ---- */

enum { THREADS = 4, THREAD_OPS = 2000, THREAD_SLOTS = 8, SWAP_CAP = 64 };

struct held {
	uint64_t off;
	size_t size;
	uint64_t seed;
};

/* Pieces handed from one thread to another, which checks and frees them. */
static struct {
	pthread_mutex_t mu;
	struct held items[SWAP_CAP];
	unsigned n;
} swap = { .mu = PTHREAD_MUTEX_INITIALIZER };

struct worker {
	struct ddss_pool *pool;
	unsigned id;
	unsigned errors; /* CUnit's asserts are not thread-safe: count, check in main */
	unsigned handed, taken;
};

static void held_release(struct worker *w, struct held *h)
{
	uint8_t *base = ddss_pool_base(w->pool);

	if (test_check(base + h->off, h->size, h->seed) != SIZE_MAX)
		w->errors++;
	if (ddss_pool_free(w->pool, h->off))
		w->errors++;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *base = ddss_pool_base(w->pool);
	struct held mine[THREAD_SLOTS] = { { 0 } };
	bool used[THREAD_SLOTS] = { false };
	uint64_t seed = 7 + w->id;

	for (unsigned op = 0; op < THREAD_OPS; op++) {
		unsigned k = (unsigned)(rng_next(&seed) % THREAD_SLOTS);
		unsigned how = (unsigned)(rng_next(&seed) % 4);
		struct held h;

		if (used[k]) {
			bool handed = false;

			if (how == 0) {
				pthread_mutex_lock(&swap.mu);
				if (swap.n < SWAP_CAP) {
					swap.items[swap.n++] = mine[k];
					handed = true;
				}
				pthread_mutex_unlock(&swap.mu);
			}
			if (handed)
				w->handed++;
			else
				held_release(w, &mine[k]);
			used[k] = false;
			continue;
		}
		if (how == 1) {
			bool got = false;

			pthread_mutex_lock(&swap.mu);
			if (swap.n) {
				h = swap.items[--swap.n];
				got = true;
			}
			pthread_mutex_unlock(&swap.mu);
			if (got) {
				held_release(w, &h);
				w->taken++;
			}
		}
		h.size = rng_size(&seed, 8, 256 * KiB);
		h.seed = ((uint64_t)w->id << 32) | op;
		if (ddss_pool_alloc(w->pool, h.size, (size_t)8 << (rng_next(&seed) % 10), &h.off)) {
			w->errors++;
			continue;
		}
		if (!all_zero(base + h.off, h.size))
			w->errors++;
		test_fill(base + h.off, h.size, h.seed);
		mine[k] = h;
		used[k] = true;
	}
	for (unsigned k = 0; k < THREAD_SLOTS; k++)
		if (used[k])
			held_release(w, &mine[k]);
	return NULL;
}

static void test_threads(void)
{
	struct ddss_pool *pool = pool_new(64 * MiB);
	struct worker w[THREADS];
	pthread_t tid[THREADS];
	struct ddss_pool_stats st0 = stats_of(pool), st;
	unsigned errors = 0, handed = 0, taken = 0;

	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .pool = pool, .id = i };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(tid[i], NULL);
		errors += w[i].errors;
		handed += w[i].handed;
		taken += w[i].taken;
	}
	/* What was handed over and not taken is freed here, by yet another thread. */
	for (unsigned i = 0; i < swap.n; i++) {
		struct worker main_w = { .pool = pool };

		held_release(&main_w, &swap.items[i]);
		errors += main_w.errors;
	}
	swap.n = 0;

	st = stats_of(pool);
	printf("\n    %u pieces changed threads (%u taken by workers), mapped %zu KiB ", handed,
	       taken, st.mapped / KiB);
	CU_ASSERT_EQUAL(errors, 0);
	CU_ASSERT(taken > 0);
	CU_ASSERT_EQUAL(st.allocated, st0.allocated);
	CU_ASSERT_EQUAL(st.live, st0.live);
	ddss_pool_destroy(pool);
}

/* ---- 7. jemalloc's metadata stays out of the pool ---- */

static void test_metadata_outside(void)
{
	struct ddss_pool *pool = pool_new(4 * MiB);
	struct ddss_pool_stats st = stats_of(pool);
	uint64_t off;

	/* Making the arena allocated its metadata, and none of it came from the pool. */
	CU_ASSERT_EQUAL(st.mapped, 0);
	CU_ASSERT_EQUAL(st.allocated, 0);
	CU_ASSERT_EQUAL(st.live, 0);

	CU_ASSERT_EQUAL_FATAL(ddss_pool_alloc(pool, 64, 8, &off), 0);
	st = stats_of(pool);
	CU_ASSERT(st.mapped > 0);
	CU_ASSERT(off + 64 <= st.mapped);
	CU_ASSERT_EQUAL(st.allocated, 64);
	CU_ASSERT_EQUAL(st.live, 1);
	CU_ASSERT_EQUAL(ddss_pool_free(pool, off), 0);
	ddss_pool_destroy(pool);

	/* A fresh pool (which may reuse the arena's index) starts clean again. */
	pool = pool_new(4 * MiB);
	st = stats_of(pool);
	CU_ASSERT_EQUAL(st.mapped, 0);
	CU_ASSERT_EQUAL(st.allocated, 0);
	CU_ASSERT_EQUAL(st.live, 0);
	ddss_pool_destroy(pool);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;

	s = CU_add_suite("pool", NULL, NULL);
	CU_add_test(s, "metadata stays out of the pool", test_metadata_outside);
	CU_add_test(s, "placement, alignment, zeroing", test_placement);
	CU_add_test(s, "exhaustion and recovery", test_exhaustion);
	CU_add_test(s, "no leak over 10,000 cycles", test_no_leak);
	CU_add_test(s, "no leak, 16 live pieces", test_no_leak_window);
	CU_add_test(s, "one large piece after filling with small ones", test_large_after_fill);
	CU_add_test(s, "bad input", test_bad_input);
	CU_add_test(s, "reserved head", test_reserve);
	CU_add_test(s, "two pools", test_two_pools);
	CU_add_test(s, "threads", test_threads);

	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
