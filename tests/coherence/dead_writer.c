/*
 * A write-model segment whose last writer died between its two steps (the version word
 * marked "writing", its copy half written; src/coherence/coh_slots.c): every later put
 * fails with -EIO and changes nothing, and no get returns the unfinished copy. Once the
 * mark is settled (known final, as the writer that failed records it when it can still
 * reach the home), a put of part of the segment still fails with -EIO, and a put of the
 * whole segment repairs it: the copy rewritten, the version completed.
 *
 *   ddssrun -n 3 --transport tcp coh_dead_writer
 *
 * Rank 1 homes the segment and plays the dead writer in its own pool. Rank 2 puts from one
 * thread while another gets, PUTS times; rank 1 then checks the word and the copy, and
 * settles the mark. Rank 2 puts half, then all of the segment and gets it back; rank 1
 * checks again.
 *
 * Then marks that name their writer (the word's top 16 bits, coh_slots.c), unsettled: one
 * named rank 3, alive, stays (-EIO: the home, asked, does not vouch for a live writer);
 * one named rank 2 is rank 2's own failed put, and its next put takes it over without
 * asking. Rank 3 only takes part in the barriers.
 *
 * (A put took the mark with a fetch&add of 1 and, finding it set, gave it back with a
 * second one. In between, one round trip, the word said "version v+1 complete", and a get
 * in that window returned the dead writer's half-written copy as that version.)
 */
#include "common/test_util.h"
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "core/ctx.h"
#include "core/seg_cache.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEG_LEN 64
#define PUTS 300
#define DONE_BYTE 0xa1 /* the last complete version */
#define TORN_BYTE 0xb2 /* what the dead writer got written of its copy */
#define PUT_BYTE 0xc3  /* what rank 2's puts carry */

static ddss_ctx_t *ctx;
static ddss_key_t key;
static uint32_t me;

/* Rank 1: the segment's version word, settled word and copy in our pool. */
static void find_home(uint64_t **word_p, uint64_t **settled_p, unsigned char **copy_p)
{
	const struct ddss_seg_desc *d;
	char *base = ddss_pool_base(ctx->pool);
	int r = ddss_ctx_desc(ctx, key, &d);

	if (r) {
		printf("rank 1: FAIL: descriptor: %s\n", ddss_strerror(r));
		exit(1);
	}
	*word_p = (uint64_t *)(base + d->data_off - DDSS_SEG_HDR_LEN + DDSS_SEG_HDR_VERSION);
	*settled_p = (uint64_t *)(base + d->data_off - DDSS_SEG_HDR_LEN + DDSS_SEG_HDR_SETTLED);
	*copy_p = (unsigned char *)base + d->data_off; /* the write model's one copy */
	ddss_seg_cache_put(d);
}

/* Rank 2's reader: gets until told to stop, counting those that returned data. */
static bool stop;
static unsigned got_data, got_other, gets;
static int other_rc;

static void *reader(void *arg)
{
	unsigned char buf[SEG_LEN];

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		int r = ddss_get(ctx, key, 0, buf, SEG_LEN);

		gets++;
		if (r == 0)
			got_data++;
		else if (r != -EIO && r != -ETIMEDOUT && !got_other++)
			other_rc = r;
	}
	return NULL;
}

static void rank2(void)
{
	unsigned char v[SEG_LEN];
	unsigned not_eio = 0;
	int first_bad = 0;
	pthread_t th;

	memset(v, PUT_BYTE, sizeof(v));
	if (pthread_create(&th, NULL, reader, NULL)) {
		printf("rank 2: FAIL: pthread_create\n");
		exit(1);
	}
	for (unsigned i = 0; i < PUTS; i++) {
		int r = ddss_put(ctx, key, 0, v, sizeof(v));

		if (r != -EIO && !not_eio++)
			first_bad = r;
	}
	__atomic_store_n(&stop, true, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	printf("rank 2: %u puts, %u not -EIO; %u gets beside them, %u returned data, %u another "
	       "error\n", PUTS, not_eio, gets, got_data, got_other);
	TEST_CHECK(2, not_eio == 0, "a put on a dead writer's mark returned %d", first_bad);
	TEST_CHECK(2, got_data == 0, "%u gets returned the dead writer's unfinished copy",
		   got_data);
	TEST_CHECK(2, got_other == 0, "a get returned %d", other_rc);
	TEST_CHECK(2, gets > 0, "the reader never ran");
}

/* Rank 2, once rank 1 settled the mark: half the segment, then all of it. */
static void rank2_repair(void)
{
	unsigned char v[SEG_LEN], back[SEG_LEN];
	int r;

	memset(v, PUT_BYTE, sizeof(v));
	r = ddss_put(ctx, key, 0, v, SEG_LEN / 2);
	TEST_CHECK(2, r == -EIO, "a put of half the segment on a settled mark returned %d, not "
		   "-EIO", r);
	r = ddss_put(ctx, key, 0, v, sizeof(v));
	printf("rank 2: a put of the whole segment on the settled mark: %d\n", r);
	TEST_CHECK(2, r == 0, "a put of the whole segment on the settled mark returned %d (%s)",
		   r, ddss_strerror(r));
	memset(back, 0, sizeof(back));
	r = ddss_get(ctx, key, 0, back, sizeof(back));
	TEST_CHECK(2, r == 0 && memcmp(back, v, SEG_LEN) == 0,
		   "the get after the repair: %d, first byte %#x", r, back[0]);
}

/* Whether every byte of the copy is @byte. */
static bool copy_all(const unsigned char *copy, unsigned char byte)
{
	for (unsigned i = 0; i < SEG_LEN; i++)
		if (copy[i] != byte)
			return false;
	return true;
}

/* Rank 1: leave the word marked by hand, naming @writer, unsettled. */
static uint64_t mark_named(uint64_t *word, uint64_t *settled, uint32_t writer)
{
	uint64_t now = __atomic_load_n(word, __ATOMIC_SEQ_CST);
	uint64_t marked = now | 1 | (uint64_t)writer << 48;

	TEST_CHECK(1, !(now & 1), "the word %#llx is marked already", (unsigned long long)now);
	__atomic_store_n(settled, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(word, marked, __ATOMIC_SEQ_CST);
	return marked;
}

/* Rank 2: one put of the whole segment; its result. */
static int put_whole(void)
{
	unsigned char v[SEG_LEN];

	memset(v, PUT_BYTE, sizeof(v));
	return ddss_put(ctx, key, 0, v, sizeof(v));
}

static void named_marks(uint64_t *word, uint64_t *settled, unsigned char *copy)
{
	struct ddss_lock_recovery_stats before = { 0 }, after = { 0 };
	uint64_t marked = 0;
	int r = 0;

	if (me == 1) {
		marked = mark_named(word, settled, 3);
		ddss_lock_recovery_stats(ctx, &before);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		r = put_whole();
		printf("rank 2: a put on a mark named rank 3 (alive, unsettled): %d\n", r);
		TEST_CHECK(2, r == -EIO, "a put on a live writer's mark returned %d, not -EIO", r);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		ddss_lock_recovery_stats(ctx, &after);
		printf("rank 1: asked whether the writer is over: %llu times, said yes %llu\n",
		       (unsigned long long)(after.writers_asked - before.writers_asked),
		       (unsigned long long)(after.writers_vouched - before.writers_vouched));
		TEST_CHECK(1, after.writers_asked == before.writers_asked + 1 &&
				      after.writers_vouched == before.writers_vouched,
			   "the home was asked %llu times about the live writer and said yes %llu",
			   (unsigned long long)(after.writers_asked - before.writers_asked),
			   (unsigned long long)(after.writers_vouched - before.writers_vouched));
		TEST_CHECK(1, __atomic_load_n(word, __ATOMIC_SEQ_CST) == marked,
			   "a live writer's mark moved");
		/* As it was (the put failed before the copy), then rank 2's own mark, over a
		 * copy rank 2's failed put wrote in part. */
		__atomic_store_n(word, marked & ~(0xffffull << 48 | 1), __ATOMIC_SEQ_CST);
		marked = mark_named(word, settled, 2);
		memset(copy, TORN_BYTE, SEG_LEN / 2);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		r = put_whole();
		printf("rank 2: a put on a mark named rank 2 (its own, unsettled): %d\n", r);
		TEST_CHECK(2, r == 0, "a put on its own rank's mark returned %d (%s)", r,
			   ddss_strerror(r));
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		uint64_t now = __atomic_load_n(word, __ATOMIC_SEQ_CST);
		bool rewritten = copy_all(copy, PUT_BYTE);
		TEST_CHECK(1, now == (marked & ~(0xffffull << 48)) + 1, "after rank 2 took its "
			   "own mark over: the word %#llx, not %#llx", (unsigned long long)now,
			   (unsigned long long)((marked & ~(0xffffull << 48)) + 1));
		TEST_CHECK(1, rewritten, "its own mark taken over, the copy is not rank 2's");
		TEST_CHECK(1, __atomic_load_n(settled, __ATOMIC_SEQ_CST) == 0,
			   "the settled word moved");
	}
}

int main(void)
{
	unsigned char *copy = NULL;
	uint64_t *word = NULL, *settled = NULL, marked = 0;

	ctx = test_init_ranks_or_exit(3);
	me = ddss_rank(ctx);
	key = test_write_segment_v1(ctx, me, "dead-writer", SEG_LEN, DONE_BYTE);
	if (me == 1) {
		find_home(&word, &settled, &copy);
		/* The dead writer: marked the word, wrote half its copy, never finished. */
		marked = __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
		memset(copy, TORN_BYTE, SEG_LEN / 2);
		TEST_CHECK(1, marked & 1, "the word %#llx was not marked",
			   (unsigned long long)marked);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2)
		rank2();
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		uint64_t now = __atomic_load_n(word, __ATOMIC_SEQ_CST);
		bool copy_kept = true;

		for (unsigned i = 0; i < SEG_LEN; i++)
			copy_kept &= copy[i] == (i < SEG_LEN / 2 ? TORN_BYTE : DONE_BYTE);
		printf("rank 1: version word %#llx (the dead writer left %#llx)\n",
		       (unsigned long long)now, (unsigned long long)marked);
		TEST_CHECK(1, now == marked, "the version word moved");
		TEST_CHECK(1, copy_kept, "the copy changed");
		/* What the writer's settle would have recorded (coh_slots.c, settle). */
		__atomic_store_n(settled, marked, __ATOMIC_SEQ_CST);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2)
		rank2_repair();
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		uint64_t now = __atomic_load_n(word, __ATOMIC_SEQ_CST);
		bool rewritten = copy_all(copy, PUT_BYTE);
		printf("rank 1: after the repair: version word %#llx\n", (unsigned long long)now);
		TEST_CHECK(1, now == marked + 1, "the version word %#llx is not %#llx (the dead "
			   "writer's version, completed)", (unsigned long long)now,
			   (unsigned long long)(marked + 1));
		TEST_CHECK(1, rewritten, "the copy was not rewritten whole");
	}
	named_marks(word, settled, copy);
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
