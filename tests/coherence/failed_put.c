/*
 * A delta put whose copy was posted but whose completing fetch&add could not be
 * (src/coherence/coh_slots.c, finish_or_keep_mark).
 *
 *   ddssrun -n 2 --transport tcp coh_failed_put
 *
 * Rank 1 homes a delta segment (x = 2); rank 2 puts versions 1..3, then a fourth whose
 * fetch&add post fails (ddss_coh_complete_hook, as a transport would fail it). Its copy
 * has landed over version 1's bytes. The put must finish (a compare&swap completes the
 * version) and every version it reports must hold that version's bytes.
 *
 * (The put once took its mark back instead: the word said version 3 again, and a get of
 * 2 back returned the fourth put's bytes labelled version 1.)
 *
 * Then, on a second segment, the fourth put's post fails and the channel to the home is
 * closed under it, so its copy may or may not have landed: the mark must stay, the
 * versions that cannot have been touched are still served, the copy it was writing is
 * not, and the next put repairs the segment: the failed put settled its mark (it asked
 * the home on a new connection, so nothing of it can land any more), and the next put
 * rewrites that copy and completes the version (mark_writing), after which every version
 * holds its bytes. (Before, the mark stayed for good: every later put failed with -EIO.)
 * On a third, the channel is closed and the fetch&add posted all the same
 * (cut_then_posted).
 *
 * Then a write segment (one copy) left marked the same way: a put of part of it cannot
 * repair it (-EIO, the rest of the copy may hold the failed put's bytes); a put of the
 * whole segment does.
 *
 * Then landed_whole: the put's transfers land, but it hears they failed (a test hook turns
 * their completions into -ECONNRESET): it asks the home, finds its version complete, and
 * succeeds. (No test reached that path before 2026-12-07.)
 *
 * Last, handed_over: rank 1 queues for the lock of a delta segment while rank 2's put holds
 * it, and rank 2's channel is closed under the put's transfers in flight. The lock then
 * goes to rank 1 without a word to the home (a hand-over), so rank 2 must settle its mark
 * before it hands over (the release's fence): rank 1's put, in its hold, repairs the
 * segment at once.
 */
#include "common/test_util.h"
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "coherence/coherence.h"
#include "coherence/model.h"
#include "core/ctx.h"
#include "core/seg_cache.h"
#include "lock/lock_int.h"
#include "ddss/ddss.h"
#include "net/transport.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEG_LEN 64
#define X 2

static ddss_ctx_t *ctx;
static uint32_t me;
static unsigned hook_calls;
static bool hook_cut;  /* also close the channel to the home (its copy fails with it) */
static bool hook_post; /* ... and let the fetch&add be posted after all */

static int fail_completion(ddss_ctx_t *c, ddss_key_t key)
{
	hook_calls++;
	if (hook_cut)
		ddss_tp_peer_disconnect(c->tp, 1);
	return hook_post ? 0 : -ECONNRESET;
}

static unsigned char byte_of(uint64_t version)
{
	return (unsigned char)(0x10 * version + 0x01);
}

static int put_version(ddss_key_t key, uint64_t version)
{
	unsigned char v[SEG_LEN];

	memset(v, byte_of(version), sizeof(v));
	return ddss_put(ctx, key, 0, v, sizeof(v));
}

/* Versions 1, 2 and 3, each checked. */
static void put_first_versions(ddss_key_t key)
{
	for (uint64_t v = 1; v <= 3; v++)
		TEST_CHECK(2, put_version(key, v) == 0, "put of version %llu",
			   (unsigned long long)v);
}

/* A put of @version with the completion hook armed (fail_completion). */
static int put_failing(ddss_key_t key, uint64_t version)
{
	int r;

	ddss_coh_complete_hook = fail_completion;
	r = put_version(key, version);
	ddss_coh_complete_hook = NULL;
	return r;
}

/* A get @back versions back: 0, or -errno. Checks that it holds version @want's bytes. */
static int check_back(ddss_key_t key, unsigned back, uint64_t want)
{
	unsigned char buf[SEG_LEN];
	uint64_t version = 0;
	unsigned whole = 0;
	int r = ddss_get_versioned(ctx, key, 0, buf, sizeof(buf), back, &version);

	if (r)
		return r;
	for (unsigned i = 0; i < SEG_LEN; i++)
		whole += buf[i] == byte_of(version);
	printf("rank 2: %u back: version %llu, first byte %#x\n", back,
	       (unsigned long long)version, buf[0]);
	TEST_CHECK(2, version == want, "%u back: version %llu, expected %llu", back,
		   (unsigned long long)version, (unsigned long long)want);
	TEST_CHECK(2, whole == SEG_LEN, "%u back: version %llu holds byte %#x, not %#x", back,
		   (unsigned long long)version, buf[0], byte_of(version));
	return 0;
}

static void finished(ddss_key_t key)
{
	int r;

	put_first_versions(key);
	r = put_failing(key, 4);
	printf("rank 2: the put whose fetch&add failed returned %d\n", r);
	TEST_CHECK(2, hook_calls == 1, "the hook ran %u times", hook_calls);
	TEST_CHECK(2, r == 0, "the put whose copy landed returned %d (%s)", r, ddss_strerror(r));
	for (unsigned back = 0; back <= X; back++) {
		r = check_back(key, back, 4 - back);
		TEST_CHECK(2, r == 0, "%u back: %s", back, ddss_strerror(r));
	}
	/* And the segment goes on. */
	TEST_CHECK(2, put_version(key, 5) == 0, "the put after it");
	TEST_CHECK(2, check_back(key, X, 3) == 0, "%u back after the next put", X);
}

/* The put after a failed one left its mark (versions 1..3 complete): it rewrites the copy
 * and completes version 4, and every version back holds its own bytes again. */
static void repaired(ddss_key_t key)
{
	int r = put_version(key, 4);

	printf("rank 2: the put on the kept mark returned %d\n", r);
	TEST_CHECK(2, r == 0, "the put on the kept mark returned %d (%s)", r, ddss_strerror(r));
	for (unsigned back = 0; back <= X; back++)
		TEST_CHECK(2, check_back(key, back, 4 - back) == 0, "%u back after the repair",
			   back);
	TEST_CHECK(2, put_version(key, 5) == 0, "the put after the repair");
	TEST_CHECK(2, check_back(key, X, 3) == 0, "%u back after the next put", X);
}

static void kept_mark(ddss_key_t key)
{
	int r;

	put_first_versions(key);
	hook_calls = 0;
	hook_cut = true;
	r = put_failing(key, 4);
	printf("rank 2: the put whose copy failed with its channel returned %d\n", r);
	TEST_CHECK(2, hook_calls == 1, "the hook ran %u times", hook_calls);
	TEST_CHECK(2, r != 0, "a put whose copy failed returned 0");
	/* Versions 3 and 2 live in copies the failed put did not write. */
	TEST_CHECK(2, check_back(key, 0, 3) == 0, "the newest complete version");
	TEST_CHECK(2, check_back(key, 1, 2) == 0, "1 back");
	/* Version 1's copy is the one the failed put wrote: never served as version 1. */
	r = check_back(key, X, 1);
	printf("rank 2: %u back on the kept mark: %d\n", X, r);
	TEST_CHECK(2, r == -EIO || r == -ETIMEDOUT, "%u back returned %d", X, r);
	/* A repair that fails the same way unsettled the mark as it started, and settles it
	 * again for the next put. */
	r = put_failing(key, 4);
	printf("rank 2: the repair that failed too returned %d\n", r);
	TEST_CHECK(2, hook_calls == 2, "the hook ran %u times", hook_calls);
	TEST_CHECK(2, r != 0, "a repair whose copy failed returned 0");
	repaired(key);
}

/*
 * The channel closed between the copy's post and the fetch&add's, which is then posted:
 * the fetch&add must not go out on a new connection without the copy (tcp dropped the
 * held copy with the old one). Either both land (verbs: the held write goes with the
 * atomic) and the put succeeds, or the put fails and keeps its mark; no get may ever
 * report a version whose copy holds other bytes. (Before the fix, on tcp, the fetch&add
 * reconnected and completed version 4 over version 1's bytes.)
 */
static void cut_then_posted(ddss_key_t key)
{
	int r;

	put_first_versions(key);
	hook_calls = 0;
	hook_cut = hook_post = true;
	r = put_failing(key, 4);
	printf("rank 2: the put whose channel closed before its fetch&add returned %d\n", r);
	TEST_CHECK(2, hook_calls == 1, "the hook ran %u times", hook_calls);
	if (r == 0) {
		for (unsigned back = 0; back <= X; back++)
			TEST_CHECK(2, check_back(key, back, 4 - back) == 0, "%u back", back);
	} else {
		TEST_CHECK(2, check_back(key, 0, 3) == 0, "the newest complete version");
		TEST_CHECK(2, check_back(key, 1, 2) == 0, "1 back");
		repaired(key);
	}
}

/* A write segment: one copy, which the failed put may have written in part. */
static void write_model(ddss_key_t key)
{
	unsigned char part[SEG_LEN / 2];
	int r;

	TEST_CHECK(2, put_version(key, 1) == 0, "put of version 1");
	hook_calls = 0;
	hook_cut = true;
	hook_post = false;
	r = put_failing(key, 2);
	printf("rank 2: write model: the put whose copy failed with its channel returned %d\n", r);
	TEST_CHECK(2, hook_calls == 1, "the hook ran %u times", hook_calls);
	TEST_CHECK(2, r != 0, "a put whose copy failed returned 0");
	memset(part, byte_of(2), sizeof(part));
	r = ddss_put(ctx, key, 0, part, sizeof(part));
	TEST_CHECK(2, r == -EIO, "a put of half the segment on the mark returned %d, not -EIO",
		   r);
	r = check_back(key, 0, 1);
	TEST_CHECK(2, r == -EIO || r == -ETIMEDOUT, "a get on the mark returned %d", r);
	r = put_version(key, 2);
	printf("rank 2: write model: a put of the whole segment on the mark returned %d\n", r);
	TEST_CHECK(2, r == 0, "a put of the whole segment on the mark returned %d (%s)", r,
		   ddss_strerror(r));
	TEST_CHECK(2, check_back(key, 0, 2) == 0, "the get after the repair");
}

/* ---- handed_over ---- */

#define HAND_OVER_MS 10000

static unsigned waited_calls;

/* The put's transfers completed: report them failed, as a connection that broke after they
 * landed and before their completions came back would. */
static int lose_completions(int status)
{
	waited_calls++;
	return status ? status : -ECONNRESET;
}

static uint64_t header_of(ddss_key_t key);

/*
 * The put's copy and fetch&add landed, but the put hears that its transfers failed: it
 * asks the home (settle), finds the version it was writing complete, and succeeds. Nothing
 * is settled (the settled word stays 0), and the next put goes on as usual.
 */
static void landed_whole(ddss_key_t key)
{
	uint64_t hdr = header_of(key), word = 0, settled = 1;
	int r;

	put_first_versions(key);
	waited_calls = 0;
	ddss_coh_waited_hook = lose_completions;
	r = put_version(key, 4);
	ddss_coh_waited_hook = NULL;
	printf("rank 2: the put that landed but heard it failed returned %d\n", r);
	TEST_CHECK(2, waited_calls == 1, "the hook ran %u times", waited_calls);
	TEST_CHECK(2, r == 0, "the put that landed whole returned %d (%s)", r, ddss_strerror(r));
	TEST_CHECK(2, ddss_tp_read(ctx->tp, 1, hdr + DDSS_SEG_HDR_VERSION, &word, 8) == 0 &&
			      word == 8,
		   "the version word is %#llx, expected 0x8 (version 4 complete)",
		   (unsigned long long)word);
	TEST_CHECK(2, ddss_tp_read(ctx->tp, 1, hdr + DDSS_SEG_HDR_SETTLED, &settled, 8) == 0 &&
			      settled == 0,
		   "the settled word is %#llx, expected 0: nothing failed",
		   (unsigned long long)settled);
	for (unsigned back = 0; back <= X; back++)
		TEST_CHECK(2, check_back(key, back, 4 - back) == 0, "%u back", back);
	TEST_CHECK(2, put_version(key, 5) == 0, "the put after it");
	TEST_CHECK(2, check_back(key, X, 3) == 0, "%u back after the next put", X);
}

/* The segment's header: its offset in the home's pool. */
static uint64_t header_of(ddss_key_t key)
{
	const struct ddss_seg_desc *d;
	uint64_t hdr;

	if (ddss_ctx_desc(ctx, key, &d)) {
		printf("rank %u: FAIL: no descriptor\n", me);
		exit(1);
	}
	hdr = d->data_off - DDSS_SEG_HDR_LEN;
	ddss_seg_cache_put(d);
	return hdr;
}

static ddss_key_t hand_key;
static bool waiter_queued;

/* Rank 2, holding the lock as its put starts: wait for rank 1 to queue behind it (the lock
 * word's tail names a request of rank 1), reading it at the home before anything of the
 * put is posted. */
static void wait_for_waiter(ddss_ctx_t *c, ddss_key_t key, bool is_put, bool enter)
{
	int64_t give_up = ddss_now_ns() + (int64_t)HAND_OVER_MS * 1000000;
	uint64_t hdr, w = 0;

	if (key != hand_key || !is_put || !enter)
		return;
	hdr = header_of(key);
	for (;;) {
		if (ddss_tp_read(c->tp, 1, hdr + DDSS_SEG_HDR_LOCK, &w, 8))
			return;
		waiter_queued = LOCK_ID_RANK(LOCK_TAIL(w)) == 1;
		if (waiter_queued || ddss_now_ns() > give_up)
			return;
		usleep(1000); /* a bounded poll of the lock word */
	}
}

/* Rank 2, with the copy and the fetch&add posted: the channel goes. */
static void cut_posted(ddss_ctx_t *c, ddss_key_t key)
{
	if (key == hand_key)
		ddss_tp_peer_disconnect(c->tp, 1);
}

static void handed_over(ddss_key_t key)
{
	unsigned char v[SEG_LEN];
	uint64_t top = 4;
	int r = 0;

	hand_key = key;
	if (me == 2)
		put_first_versions(key);
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		ddss_coh_inside_hook = wait_for_waiter;
		ddss_coh_posted_hook = cut_posted;
		r = put_version(key, 4);
		ddss_coh_inside_hook = NULL;
		ddss_coh_posted_hook = NULL;
		printf("rank 2: the put cut with a waiter queued returned %d\n", r);
		TEST_CHECK(2, waiter_queued, "rank 1 never queued for the lock");
		/* 0: its transfers had left (verbs posts at once) and landed. */
		top = r == 0 ? 5 : 4;
	} else {
		char *hdr = (char *)ddss_pool_base(ctx->pool) + header_of(key);
		uint64_t *word = (uint64_t *)(hdr + DDSS_SEG_HDR_LOCK);
		uint64_t *version = (uint64_t *)(hdr + DDSS_SEG_HDR_VERSION);
		int64_t give_up = ddss_now_ns() + (int64_t)HAND_OVER_MS * 1000000;

		/* Rank 2's put holds the lock (its word is ours): queue behind it. */
		while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == 0 && ddss_now_ns() < give_up)
			sched_yield(); /* a bounded poll of our own pool */
		r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
		TEST_CHECK(1, r == 0, "the waiter's lock: %d (%s)", r, ddss_strerror(r));
		if (!r) {
			/* Version 4 repaired, or version 5 after a put that landed. */
			uint64_t next = ((__atomic_load_n(version, __ATOMIC_ACQUIRE) &
					  ~COH_WRITER_MASK) >> 1) + 1;

			memset(v, byte_of(next), sizeof(v));
			r = ddss_put(ctx, key, 0, v, sizeof(v));
			printf("rank 1: the put in the handed-over hold returned %d\n", r);
			TEST_CHECK(1, r == 0, "the put after the hand-over returned %d (%s): the "
				   "failed put was not settled before it handed the lock on", r,
				   ddss_strerror(r));
			TEST_CHECK(1, ddss_release_lock_ss(ctx, key) == 0, "the waiter's release");
		}
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2)
		for (unsigned back = 0; back <= X; back++)
			TEST_CHECK(2, check_back(key, back, top - back) == 0, "%u back", back);
}

int main(void)
{
	struct ddss_seg_attr attr = { .placement = DDSS_PLACE_RANK, .rank = 1,
				      .coherence = DDSS_COHERENCE_DELTA, .delta = X };
	ddss_key_t key_a, key_b, key_c, key_d, key_e, key_f;
	int r;

	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	attr.name = "failed-put-a";
	r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_a);
	attr.name = "failed-put-b";
	if (!r)
		r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_b);
	attr.name = "failed-put-c";
	if (!r)
		r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_c);
	attr.name = "failed-put-d";
	attr.coherence = DDSS_COHERENCE_WRITE;
	attr.delta = 0;
	if (!r)
		r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_d);
	attr.name = "failed-put-e";
	attr.coherence = DDSS_COHERENCE_DELTA;
	attr.delta = X;
	if (!r)
		r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_e);
	attr.name = "failed-put-f";
	if (!r)
		r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key_f);
	if (r) {
		fprintf(stderr, "rank %u: segment: %s\n", me, ddss_strerror(r));
		return 1;
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		finished(key_a);
		kept_mark(key_b);
		cut_then_posted(key_c);
		write_model(key_d);
		landed_whole(key_f);
	}
	test_ctx_barrier_or_exit(ctx);
	handed_over(key_e);
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
