/*
 * A writer killed in the middle of a put, for real: its mark is settled for it, and the
 * next put repairs the segment (docs/coherence.md, "A dead writer's mark").
 *
 *   ddssrun -n 3 --transport tcp coh_dead_writer_killed
 *
 * Rank 1 homes a write-model segment and puts version 1. Rank 3, the victim, puts the whole
 * segment and is killed (SIGKILL) right after its compare&swap marked the version word
 * (naming rank 3), before its copy: the word stays marked, with the lock held by a dead
 * rank. Rank 2 then puts the whole segment, retrying for up to REPAIR_MS: its lock is
 * recovered past the victim (src/lock/lock_agent.c), it finds the mark, asks the home
 * whether rank 3 is cut off, and repairs. Rank 1 checks its pool: version 2 complete (the
 * writer's name taken off), rank 2's bytes, nothing settled.
 *
 * Before marks named their writer (2026-12-07) nothing settled a dead writer's mark, and
 * every put after it returned -EIO for good: this test failed at REPAIR_MS.
 *
 * The victim is a child of its rank process, which only waits and reports the planned
 * SIGKILL as success (test_fork_victim).
 */
#include "common/test_util.h"
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "coherence/coherence.h"
#include "core/ctx.h"
#include "core/seg_cache.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VICTIM 3u
#define SEG_LEN 64
#define PEER_TIMEOUT_MS 1000
#define REPAIR_MS 20000 /* the peer timeout, a recovery census, the cut: a few seconds */
#define WAIT_MS 60000
#define DONE_BYTE 0xa1   /* version 1, rank 1's */
#define VICTIM_BYTE 0xb2 /* what the victim meant to write */
#define PUT_BYTE 0xc3    /* rank 2's repair */
/* Words of the flags segment (at rank 1). */
#define F_MARKED 0   /* the victim has marked the word: it dies now */
#define F_REPAIRED 1 /* rank 2's put succeeded */

static ddss_ctx_t *ctx;
static ddss_key_t key, flags;
static uint32_t me;

/* The victim, inside its put: its mark has landed (a compare&swap it waited for). Tell
 * rank 2, then die. */
static void die_here(ddss_ctx_t *c, ddss_key_t k)
{
	if (c != ctx || k != key)
		return;
	test_put_word(ctx, me, flags, F_MARKED, 1);
	fflush(stdout);
	raise(SIGKILL);
}

static void victim(void)
{
	unsigned char v[SEG_LEN];
	int r;

	memset(v, VICTIM_BYTE, sizeof(v));
	ddss_coh_marked_hook = die_here;
	r = ddss_put(ctx, key, 0, v, sizeof(v));
	printf("rank %u: FAIL: the put returned %d instead of dying in it\n", me, r);
	_exit(1);
}

static void repairer(void)
{
	unsigned char v[SEG_LEN], back[SEG_LEN];
	struct test_put_tally t;
	int r;

	TEST_CHECK(2, test_wait_word(ctx, flags, F_MARKED, WAIT_MS) == 1,
		   "the victim never marked the word");
	memset(v, PUT_BYTE, sizeof(v));
	r = test_put_retrying(ctx, key, v, sizeof(v), REPAIR_MS, &t);
	printf("rank 2: the put on the dead writer's mark returned %d after %.0f ms (%u -EIO, "
	       "%u other errors, the last %d before it)\n", r, t.ms, t.eio, t.other,
	       t.last_other);
	TEST_CHECK(2, r == 0, "no put repaired the dead writer's mark within %d ms: %d (%s)",
		   REPAIR_MS, r, ddss_strerror(r));
	memset(back, 0, sizeof(back));
	r = ddss_get(ctx, key, 0, back, sizeof(back));
	TEST_CHECK(2, r == 0 && memcmp(back, v, SEG_LEN) == 0,
		   "the get after the repair: %d, first byte %#x", r, back[0]);
	test_put_farewell(ctx, me, flags, F_REPAIRED, 1); /* rank 1 leaves once it has it */
}

/* Rank 1: the segment's words and copy, as the repair left them. */
static void check_home(void)
{
	struct ddss_lock_recovery_stats st;
	const struct ddss_seg_desc *d;
	char *base = ddss_pool_base(ctx->pool);
	uint64_t word, settled;
	unsigned char *copy;
	bool rewritten = true;

	TEST_CHECK(1, test_wait_word(ctx, flags, F_REPAIRED, WAIT_MS) == 1,
		   "rank 2 never reported its repair");
	if (ddss_ctx_desc(ctx, key, &d)) {
		printf("rank 1: FAIL: no descriptor\n");
		test_failures++;
		return;
	}
	word = __atomic_load_n((uint64_t *)(base + d->data_off - DDSS_SEG_HDR_LEN +
					    DDSS_SEG_HDR_VERSION), __ATOMIC_SEQ_CST);
	settled = __atomic_load_n((uint64_t *)(base + d->data_off - DDSS_SEG_HDR_LEN +
					       DDSS_SEG_HDR_SETTLED), __ATOMIC_SEQ_CST);
	copy = (unsigned char *)base + d->data_off;
	for (unsigned i = 0; i < SEG_LEN; i++)
		rewritten &= copy[i] == PUT_BYTE;
	ddss_seg_cache_put(d);
	printf("rank 1: version word %#llx, settled word %#llx\n", (unsigned long long)word,
	       (unsigned long long)settled);
	TEST_CHECK(1, word == 4, "the version word %#llx is not 0x4 (version 2, the victim's, "
		   "completed by the repair)", (unsigned long long)word);
	TEST_CHECK(1, settled == 0, "the settled word %#llx is not 0: nobody settled the mark",
		   (unsigned long long)settled);
	TEST_CHECK(1, rewritten, "the copy is not rank 2's whole");
	ddss_lock_recovery_stats(ctx, &st);
	printf("rank 1: asked whether a writer is over %llu times, vouched %llu\n",
	       (unsigned long long)st.writers_asked, (unsigned long long)st.writers_vouched);
	TEST_CHECK(1, st.writers_vouched >= 1, "the home never vouched for the dead writer");
}

int main(void)
{
	if (!getenv("DDSS_SIZE") || atoi(getenv("DDSS_SIZE")) != (int)VICTIM ||
	    !getenv("DDSS_RANK")) {
		fprintf(stderr, "run under ddssrun with %u ranks\n", VICTIM);
		return 2;
	}
	me = (uint32_t)atoi(getenv("DDSS_RANK"));
	test_fork_victim(VICTIM);
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	flags = test_segment_at(ctx, me, "dead-writer-flags", 1, 64);
	key = test_write_segment_v1(ctx, me, "dead-writer-killed", SEG_LEN, DONE_BYTE);
	test_ctx_barrier_or_exit(ctx);
	if (me == VICTIM)
		victim();
	else if (me == 2)
		repairer();
	else
		check_home();
	/* Survivors leave without the collective finalize: one member is gone for good. */
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
