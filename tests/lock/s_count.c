/*
 * The lock word's shared count S near its reset point (src/lock/lock_int.h, LOCK_S_RESET),
 * one rank, N-CoSED: the words are preset in this rank's pool as if 2^31 shared holds had
 * come and gone, and no exclusive request since.
 *
 *   ddssrun -n 1 --transport tcp lock_s_count
 *
 * Checked:
 * 1. A shared try-lock that finds S at the reset point resets the word on its release, as
 *    a blocking shared acquire does. (Before the fix only the blocking path did: a load
 *    of shared try-locks alone carried S from 2^32 - 1 to 0, and the next exclusive
 *    request was granted beside the shared holder, the word broken for good.)
 * 2. A thread that holds the lock shared twice and releases twice: both releases return,
 *    and the word is reset after the last. (Before the fix the first release ran the reset,
 *    an exclusive acquire that waited for the thread's own second hold: forever.)
 */
#include "common/test_util.h"
#include "alloc/pool.h"
#include "core/ctx.h"
#include "core/seg_cache.h"
#include "ddss/ddss.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define RELEASE_BOUND_MS 10000

static ddss_ctx_t *ctx;
static ddss_key_t key;
static uint64_t *w_word, *d_word;

/* Point w_word and d_word at the segment's lock words in our pool. */
static int find_words(void)
{
	const struct ddss_seg_desc *d;
	uint64_t hdr;
	char *base = ddss_pool_base(ctx->pool);
	int r = ddss_ctx_desc(ctx, key, &d);

	if (r)
		return r;
	hdr = d->data_off - DDSS_SEG_HDR_LEN;
	ddss_seg_cache_put(d);
	w_word = (uint64_t *)(base + hdr + LOCK_W);
	d_word = (uint64_t *)(base + hdr + LOCK_D);
	return 0;
}

/* As if LOCK_S_RESET shared holds had come and gone: no holder, no exclusive request. */
static void preset(void)
{
	__atomic_store_n(w_word, LOCK_WORD(0, LOCK_S_RESET), __ATOMIC_SEQ_CST);
	__atomic_store_n(d_word, LOCK_WORD(0, LOCK_S_RESET), __ATOMIC_SEQ_CST);
}

static void check_reset(const char *what)
{
	uint64_t w = __atomic_load_n(w_word, __ATOMIC_SEQ_CST);
	uint64_t d = __atomic_load_n(d_word, __ATOMIC_SEQ_CST);

	printf("%s: W = %#llx, D = %#llx\n", what, (unsigned long long)w, (unsigned long long)d);
	TEST_CHECK(1, w == 0 && d == 0, "%s: the word was not reset", what);
}

/* 2, on a thread of its own so that a release that never returns is seen. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool twice_done;
static int twice_rc[4];

static void *hold_twice(void *arg)
{
	int r[4];

	(void)arg;
	r[0] = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_SHARED);
	r[1] = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_SHARED);
	r[2] = ddss_release_lock_ss(ctx, key);
	r[3] = ddss_release_lock_ss(ctx, key);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < 4; i++)
		twice_rc[i] = r[i];
	twice_done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

static void held_twice(void)
{
	struct timespec until;
	pthread_t th;

	preset();
	if (pthread_create(&th, NULL, hold_twice, NULL)) {
		printf("FAIL: pthread_create\n");
		exit(1);
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += RELEASE_BOUND_MS / 1000;
	pthread_mutex_lock(&mu);
	while (!twice_done && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	pthread_mutex_unlock(&mu);
	if (!twice_done) {
		printf("FAIL: held shared twice, the releases had not returned after %d ms\n",
		       RELEASE_BOUND_MS);
		fflush(stdout);
		_exit(1);
	}
	pthread_join(th, NULL);
	for (int i = 0; i < 4; i++)
		TEST_CHECK(1, twice_rc[i] == 0, "held twice: call %d returned %d", i, twice_rc[i]);
	check_reset("2. held shared twice, released twice");
}

int main(void)
{
	int r = ddss_init(NULL, &ctx);

	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	if (ddss_size(ctx) != 1) {
		fprintf(stderr, "run with 1 rank\n");
		return 1;
	}
	r = ddss_allocate_ss(ctx, 64, NULL, &key);
	if (!r)
		r = find_words();
	if (r) {
		fprintf(stderr, "segment: %s\n", ddss_strerror(r));
		return 1;
	}

	/* 1 */
	preset();
	r = ddss_try_lock_ss(ctx, key, DDSS_LOCK_SHARED);
	TEST_CHECK(1, r == 0, "shared try-lock: %d", r);
	TEST_CHECK(1, LOCK_COUNT(__atomic_load_n(w_word, __ATOMIC_SEQ_CST)) == LOCK_S_RESET + 1,
		   "the try-lock was not counted in S");
	r = ddss_release_lock_ss(ctx, key);
	TEST_CHECK(1, r == 0, "release: %d", r);
	check_reset("1. shared try-lock at the reset point, released");

	/* 2 */
	held_twice();

	/* The lock works as before. */
	TEST_CHECK(1, ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE) == 0, "exclusive");
	TEST_CHECK(1, ddss_release_lock_ss(ctx, key) == 0, "exclusive release");
	ddss_finalize(ctx);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
