/*
 * Unit tests of the coherence layer's local parts: choosing a model and sizing its copies,
 * the home's segment table refusing bad models (what a peer's request is checked with), and
 * the cache of segment copies (hits, ranges, versions, ages, replacement, the byte bound,
 * LRU eviction, and threads hammering it with self-checking copies).
 */
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "coherence/coh_cache.h"
#include "coherence/coherence.h"
#include "core/ctx.h"
#include "common/test_util.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static void test_choose(void)
{
	struct coh_choice c;
	const struct {
		struct ddss_seg_attr attr;
		int want;
		uint32_t param;
	} cases[] = {
		{ { .coherence = DDSS_COHERENCE_NULL }, 0, 0 },
		{ { .coherence = DDSS_COHERENCE_STRICT }, 0, 0 },
		{ { .coherence = DDSS_COHERENCE_DELTA, .delta = 1 }, 0, 1 },
		{ { .coherence = DDSS_COHERENCE_DELTA, .delta = DDSS_DELTA_MAX }, 0, DDSS_DELTA_MAX },
		{ { .coherence = DDSS_COHERENCE_TEMPORAL, .temporal_ms = 7 }, 0, 7 },
		{ { .coherence = DDSS_COHERENCE_DELTA }, -EINVAL, 0 },
		{ { .coherence = DDSS_COHERENCE_DELTA, .delta = DDSS_DELTA_MAX + 1 }, -EINVAL, 0 },
		{ { .coherence = DDSS_COHERENCE_TEMPORAL }, -EINVAL, 0 },
		{ { .coherence = DDSS_COHERENCE_WRITE, .delta = 1 }, -EINVAL, 0 },
		{ { .coherence = DDSS_COHERENCE_VERSION, .temporal_ms = 1 }, -EINVAL, 0 },
		{ { .coherence = (enum ddss_coherence)7 }, -EINVAL, 0 },
		{ { .coherence = (enum ddss_coherence)-1 }, -EINVAL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&c, 0xee, sizeof(c));
		CU_ASSERT_EQUAL(ddss_coh_choose(&cases[i].attr, &c), cases[i].want);
		if (cases[i].want == 0) {
			CU_ASSERT_EQUAL(c.coherence, (uint32_t)cases[i].attr.coherence);
			CU_ASSERT_EQUAL(c.param, cases[i].param);
		}
	}
}

static void test_data_len(void)
{
	uint64_t len = 0;

	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_NULL, 0, 100, &len), 0);
	CU_ASSERT_EQUAL(len, 100);
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_WRITE, 0, 100, &len), 0);
	CU_ASSERT_EQUAL(len, 100);
	/* delta: x+1 copies, each starting on a 64-byte line */
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_DELTA, 3, 100, &len), 0);
	CU_ASSERT_EQUAL(len, 4 * 128);
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_DELTA, 1, 64, &len), 0);
	CU_ASSERT_EQUAL(len, 128);
	len = 42;
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_DELTA, 64, UINT64_MAX / 8, &len), -ENOMEM);
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_DELTA, 0, 100, &len), -EINVAL);
	CU_ASSERT_EQUAL(ddss_coh_data_len(99, 0, 100, &len), -EINVAL);
	CU_ASSERT_EQUAL(ddss_coh_data_len(DDSS_COHERENCE_NULL, 0, 0, &len), -EINVAL);
	CU_ASSERT_EQUAL(len, 42); /* untouched on error */
}

/* A peer's allocation request is checked by the home's table: bad models change nothing. */
static void test_segtab(void)
{
	struct ddss_pool *pool;
	struct ddss_segtab *tab;
	struct ddss_seg_loc loc;
	struct ddss_pool_stats st0, st1;

	CU_ASSERT_FATAL(ddss_pool_create(8 * MiB, 0, &pool) == 0);
	CU_ASSERT_FATAL(ddss_segtab_create(pool, 1, 4, &ddss_segtab_hooks, &tab) == 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st0), 0);
	CU_ASSERT_EQUAL(ddss_segtab_alloc(tab, 64, 99, 0, NULL, 2, &loc), -EINVAL);
	CU_ASSERT_EQUAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_DELTA, 0, NULL, 2, &loc), -EINVAL);
	CU_ASSERT_EQUAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_NULL, 5, NULL, 2, &loc), -EINVAL);
	CU_ASSERT_EQUAL(ddss_segtab_alloc(tab, 3 * MiB, DDSS_COHERENCE_DELTA, 3, NULL, 2, &loc),
			-ENOMEM);
	CU_ASSERT_EQUAL(ddss_segtab_count(tab), 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st1), 0);
	CU_ASSERT_EQUAL(st1.live, st0.live);

	CU_ASSERT_EQUAL(ddss_segtab_alloc(tab, 100, DDSS_COHERENCE_DELTA, 2, NULL, 2, &loc), 0);
	CU_ASSERT_EQUAL(loc.size, 100);
	CU_ASSERT_EQUAL(loc.coherence, DDSS_COHERENCE_DELTA);
	CU_ASSERT_EQUAL(loc.param, 2);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st1), 0);
	CU_ASSERT(st1.allocated - st0.allocated >= DDSS_SEG_HDR_LEN + 3 * 128);
	/* the header records the model for tools */
	CU_ASSERT_EQUAL(((uint8_t *)ddss_pool_base(pool))[loc.data_off - DDSS_SEG_HDR_LEN + 56],
			DDSS_COHERENCE_DELTA);
	ddss_segtab_destroy(tab);
	ddss_pool_destroy(pool);
}

/* A released segment whose lock words are in use keeps its memory until they are idle. */
static void test_segtab_draining(void)
{
	struct ddss_pool *pool;
	struct ddss_segtab *tab;
	struct ddss_seg_loc a, b;
	struct ddss_pool_stats st0, st1;
	char name[DDSS_NAME_MAX];
	uint8_t cachers[1];
	uint64_t *w;

	CU_ASSERT_FATAL(ddss_pool_create(8 * MiB, 0, &pool) == 0);
	CU_ASSERT_FATAL(ddss_segtab_create(pool, 1, 4, &ddss_segtab_hooks, &tab) == 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st0), 0);
	CU_ASSERT_FATAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_NULL, 0, NULL, 2, &a) == 0);
	/* An exclusive holder (waiter id 2:5) sits in the tail half of the lock word. */
	w = (uint64_t *)((uint8_t *)ddss_pool_base(pool) + a.data_off - DDSS_SEG_HDR_LEN);
	__atomic_store_n(w, (uint64_t)0x00020005u << 32, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_segtab_release_begin(tab, a.key, 1, name, cachers, 1), 0);
	CU_ASSERT_EQUAL(ddss_segtab_release_end(tab, a.key), 0);
	CU_ASSERT_EQUAL(ddss_segtab_count(tab), 0);
	CU_ASSERT_EQUAL(ddss_segtab_lookup(tab, a.key, 2, &b), -ESTALE);
	CU_ASSERT_EQUAL(ddss_segtab_draining(tab), 1);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st1), 0);
	CU_ASSERT_EQUAL(st1.live, st0.live + 1);
	/* A new segment never lands on the words still in use. */
	CU_ASSERT_FATAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_NULL, 0, NULL, 2, &b) == 0);
	CU_ASSERT(b.data_off != a.data_off);
	/* The holder released, but a shared arrival has not (S = 1, R = 0): still in use. */
	__atomic_store_n(w, 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_segtab_draining(tab), 1);
	/* Its release counted in D: idle, so the memory goes back to the pool. */
	__atomic_store_n(w + 4, 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_segtab_draining(tab), 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st1), 0);
	CU_ASSERT_EQUAL(st1.live, st0.live + 1); /* just b */
	ddss_segtab_destroy(tab);
	ddss_pool_destroy(pool);
}

struct seen {
	unsigned n;
	uint64_t keys[4];
	uint64_t hdr_offs[4];
};

static void note_segment(void *arg, const void *hdr, uint64_t hdr_off,
			 const struct ddss_seg_loc *loc)
{
	struct seen *s = arg;

	CU_ASSERT_EQUAL(loc->data_off, hdr_off + DDSS_SEG_HDR_LEN);
	CU_ASSERT_PTR_NOT_NULL(hdr);
	if (s->n < 4) {
		s->keys[s->n] = loc->key;
		s->hdr_offs[s->n] = hdr_off;
	}
	s->n++;
}

/* ddss_segtab_each lists the segments not yet freed; while held, a released segment's
 * memory stays (coh_readmit.c posts to headers it found after the table's lock is gone). */
static void test_segtab_hold(void)
{
	struct ddss_pool *pool;
	struct ddss_segtab *tab;
	struct ddss_seg_loc a, b, c;
	struct ddss_pool_stats st0, st1;
	struct seen seen = { 0 };
	char name[DDSS_NAME_MAX];
	uint8_t cachers[1];

	CU_ASSERT_FATAL(ddss_pool_create(8 * MiB, 0, &pool) == 0);
	CU_ASSERT_FATAL(ddss_segtab_create(pool, 1, 4, &ddss_segtab_hooks, &tab) == 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st0), 0);
	CU_ASSERT_FATAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_NULL, 0, NULL, 2, &a) == 0);
	CU_ASSERT_FATAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_WRITE, 0, NULL, 2, &b) == 0);
	ddss_segtab_each(tab, note_segment, &seen);
	CU_ASSERT_EQUAL_FATAL(seen.n, 2);
	CU_ASSERT(seen.keys[0] == a.key && seen.keys[1] == b.key);
	CU_ASSERT_EQUAL(seen.hdr_offs[1], b.data_off - DDSS_SEG_HDR_LEN);
	/* Held: b released (its lock words idle) keeps its memory, and a new segment does
	 * not land on it. */
	ddss_segtab_hold(tab);
	CU_ASSERT_EQUAL(ddss_segtab_release_begin(tab, b.key, 1, name, cachers, 1), 0);
	CU_ASSERT_EQUAL(ddss_segtab_release_end(tab, b.key), 0);
	CU_ASSERT_EQUAL(ddss_segtab_draining(tab), 1);
	CU_ASSERT_FATAL(ddss_segtab_alloc(tab, 64, DDSS_COHERENCE_NULL, 0, NULL, 2, &c) == 0);
	CU_ASSERT(c.data_off != b.data_off);
	seen.n = 0;
	ddss_segtab_each(tab, note_segment, &seen);
	CU_ASSERT_EQUAL(seen.n, 2); /* a and c: b's slot is free */
	/* Unheld: its memory goes back to the pool at once. */
	ddss_segtab_unhold(tab);
	CU_ASSERT_EQUAL(ddss_segtab_draining(tab), 0);
	CU_ASSERT_EQUAL(ddss_pool_stats(pool, &st1), 0);
	CU_ASSERT_EQUAL(st1.live, st0.live + 2); /* a and c */
	ddss_segtab_destroy(tab);
	ddss_pool_destroy(pool);
}

/* ---- the cache ---- */

static const struct coh_want any = { .fetched_after = INT64_MIN };

static struct coh_want want_version(uint64_t v)
{
	return (struct coh_want){ .by_version = true, .version = v };
}

static void test_cache_basics(void)
{
	struct coh_cache *c;
	uint8_t data[256], out[256];
	uint64_t v = 0;
	struct coh_want w;

	test_fill(data, sizeof(data), 1);
	CU_ASSERT_FATAL(coh_cache_create(16 * 4096, &c) == 0);
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 0, 8, out, &any, &v));
	coh_cache_put(c, 7, 100, 256, data, 3, 1000);
	CU_ASSERT_EQUAL(coh_cache_bytes(c), 256);
	/* covered ranges hit, with the copy's version */
	w = want_version(3);
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 100, 256, out, &w, &v));
	CU_ASSERT_EQUAL(v, 3);
	CU_ASSERT(memcmp(out, data, 256) == 0);
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 150, 10, out, &w, &v));
	CU_ASSERT(memcmp(out, data + 50, 10) == 0);
	/* anything outside, or another version, misses and copies nothing */
	memset(out, 0xaa, sizeof(out));
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 99, 2, out, &w, &v));
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 300, 57, out, &w, &v));
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 0, 1, out, &w, &v));
	w = want_version(4);
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 100, 8, out, &w, &v));
	CU_ASSERT_FALSE(coh_cache_get(c, 8, 100, 8, out, &any, &v));
	CU_ASSERT_EQUAL(out[0], 0xaa);
	/* ages: fetched at 1000 */
	w = (struct coh_want){ .fetched_after = 1000 };
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 100, 8, out, &w, &v));
	w.fetched_after = 1001;
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 100, 8, out, &w, &v));
	/* an older copy of the same range does not replace a newer one; a newer one does */
	test_fill(data, sizeof(data), 2);
	coh_cache_put(c, 7, 100, 256, data, 2, 5000);
	w = want_version(3);
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 100, 8, out, &w, &v));
	coh_cache_put(c, 7, 100, 256, data, 4, 5000);
	w = want_version(4);
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 100, 256, out, &w, &v));
	CU_ASSERT(memcmp(out, data, 256) == 0);
	/* another range replaces it (one copy per segment) */
	coh_cache_put(c, 7, 0, 16, data, 1, 0);
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 100, 8, out, &any, &v));
	CU_ASSERT_EQUAL(coh_cache_bytes(c), 16);
	coh_cache_forget(c, 7);
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 0, 8, out, &any, &v));
	CU_ASSERT_EQUAL(coh_cache_bytes(c), 0);
	coh_cache_forget(c, 7); /* forgetting nothing is fine */
	coh_cache_destroy(c);
}

/*
 * A copy whose transfer began before a forget of its key is not kept (temporal: the
 * forget is a put of this context, and the copy may hold the bytes from before it).
 */
static void test_cache_put_since(void)
{
	struct coh_cache *c;
	uint8_t data[64], out[64];
	uint64_t v, since;

	test_fill(data, sizeof(data), 3);
	CU_ASSERT_FATAL(coh_cache_create(16 * 4096, &c) == 0);
	since = coh_cache_forgets(c, 7);
	coh_cache_put_since(c, 7, 0, 64, data, 0, 10, since); /* nothing forgotten: kept */
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 0, 64, out, &any, &v));
	since = coh_cache_forgets(c, 7);
	coh_cache_forget(c, 7); /* a put, while the next transfer was under way */
	coh_cache_put_since(c, 7, 0, 64, data, 0, 20, since);
	CU_ASSERT_FALSE(coh_cache_get(c, 7, 0, 64, out, &any, &v));
	CU_ASSERT_EQUAL(coh_cache_bytes(c), 0);
	/* read after the forget: kept */
	since = coh_cache_forgets(c, 7);
	coh_cache_put_since(c, 7, 0, 64, data, 0, 30, since);
	CU_ASSERT_TRUE(coh_cache_get(c, 7, 0, 64, out, &any, &v));
	CU_ASSERT(memcmp(out, data, sizeof(out)) == 0);
	coh_cache_destroy(c);
}

static void test_cache_bound(void)
{
	const size_t cap = 16 * 8192, len = 3000; /* 8 KiB per shard: two copies each */
	struct coh_cache *c;
	uint8_t data[3000], out[3000];
	unsigned hits = 0;
	uint64_t v;

	CU_ASSERT_FATAL(coh_cache_create(cap, &c) == 0);
	for (uint64_t key = 1; key <= 1000; key++) {
		test_fill(data, len, key);
		coh_cache_put(c, key, 0, len, data, key, 0);
		CU_ASSERT(coh_cache_bytes(c) <= cap);
	}
	/* the last key is always kept; whatever is kept is intact */
	CU_ASSERT_TRUE(coh_cache_get(c, 1000, 0, len, out, &any, &v));
	for (uint64_t key = 1; key <= 1000; key++) {
		if (!coh_cache_get(c, key, 0, len, out, &any, &v))
			continue;
		hits++;
		CU_ASSERT_EQUAL(v, key);
		CU_ASSERT_EQUAL(test_check(out, len, key), SIZE_MAX);
	}
	CU_ASSERT(hits >= 16 && hits <= 32);
	/* a copy larger than a shard's share is never kept */
	coh_cache_put(c, 5000, 0, sizeof(data) * 3, data, 1, 0);
	CU_ASSERT_FALSE(coh_cache_get(c, 5000, 0, 8, out, &any, &v));
	coh_cache_destroy(c);

	/* capacity 0: a cache that keeps nothing (DDSS_CACHE_SIZE=0) */
	CU_ASSERT_FATAL(coh_cache_create(0, &c) == 0);
	coh_cache_put(c, 1, 0, 8, data, 1, 0);
	CU_ASSERT_FALSE(coh_cache_get(c, 1, 0, 8, out, &any, &v));
	coh_cache_destroy(c);
}

static void test_cache_lru(void)
{
	/*
	 * Room for two copies per shard. Key 1 is read after every new key is stored, so it
	 * is never the least recently used: it must survive 1,000 keys passing through its
	 * shard (first-in-first-out would have dropped it long before).
	 */
	const size_t len = 4096;
	struct coh_cache *c;
	uint8_t data[4096], out[8];
	unsigned lost = 0;
	uint64_t v;

	CU_ASSERT_FATAL(coh_cache_create(16 * 2 * len, &c) == 0);
	memset(data, 1, sizeof(data));
	coh_cache_put(c, 1, 0, len, data, 1, 0);
	for (uint64_t k = 2; k <= 1000; k++) {
		coh_cache_put(c, k, 0, len, data, 1, 0);
		lost += !coh_cache_get(c, 1, 0, 8, out, &any, &v);
	}
	CU_ASSERT_EQUAL(lost, 0);
	/* and the others were evicted: at most 2 per shard are left */
	CU_ASSERT(coh_cache_bytes(c) <= 16 * 2 * len);
	coh_cache_destroy(c);
}

struct hammer {
	struct coh_cache *c;
	unsigned tid;
	unsigned bad, hits;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	uint8_t data[8192], out[8192];
	uint64_t s = h->tid + 1, v;

	for (unsigned i = 0; i < 20000; i++) {
		uint64_t key, ver;
		size_t len;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		key = (s >> 33) % 64 + 1;
		ver = (s >> 20) % 16;
		/* A quarter of the keys copy out unlocked (coh_cache.c, COPY_UNLOCKED_MIN). */
		len = key % 4 ? 64 + (size_t)(key * 17 % 1984) : 4096 + (size_t)(key * 61 % 4096);
		if ((s >> 40) % 3 == 0) {
			test_fill(data, len, key * 100 + ver);
			coh_cache_put(h->c, key, 0, len, data, ver, (int64_t)ver);
		} else if ((s >> 40) % 16 == 1) {
			/* Drops an entry other threads may be copying out of (unlocked). */
			coh_cache_forget(h->c, key);
		} else if (coh_cache_get(h->c, key, 0, len, out, &any, &v)) {
			h->hits++;
			if (test_check(out, len, key * 100 + v) != SIZE_MAX)
				h->bad++;
		}
	}
	return NULL;
}

static void test_cache_threads(void)
{
	struct hammer h[4];
	pthread_t th[4];
	struct coh_cache *c;
	unsigned bad = 0, hits = 0;

	CU_ASSERT_FATAL(coh_cache_create(256 * 1024, &c) == 0);
	for (unsigned t = 0; t < 4; t++) {
		h[t] = (struct hammer){ .c = c, .tid = t };
		CU_ASSERT_FATAL(pthread_create(&th[t], NULL, hammer_main, &h[t]) == 0);
	}
	for (unsigned t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		bad += h[t].bad;
		hits += h[t].hits;
	}
	printf("  %u hits, %u copies not what their version says\n", hits, bad);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT(hits > 1000);
	CU_ASSERT(coh_cache_bytes(c) <= 256 * 1024);
	coh_cache_destroy(c);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("coherence (local parts)", NULL, NULL);
	CU_add_test(s, "choosing a model: parameters checked", test_choose);
	CU_add_test(s, "pool bytes per model; overflow", test_data_len);
	CU_add_test(s, "the home's table refuses bad models, sizes delta copies", test_segtab);
	CU_add_test(s, "a released segment with its lock in use keeps its memory until idle",
		    test_segtab_draining);
	CU_add_test(s, "the home's table lists its segments; held, it frees no memory",
		    test_segtab_hold);
	CU_add_test(s, "cache: ranges, versions, ages, replacement, forget", test_cache_basics);
	CU_add_test(s, "cache: a copy forgotten while in transfer is not kept",
		    test_cache_put_since);
	CU_add_test(s, "cache: byte bound, oversize copies, capacity 0", test_cache_bound);
	CU_add_test(s, "cache: least recently used goes first", test_cache_lru);
	CU_add_test(s, "cache: 4 threads, self-checking copies, puts and forgets beside copies",
		    test_cache_threads);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
