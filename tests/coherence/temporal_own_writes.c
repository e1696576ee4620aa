/*
 * Temporal coherence keeps its promise that a rank reads its own writes while other
 * threads of the rank keep getting (src/coherence/coh_temporal.c).
 *
 *   ddssrun -n 2 --transport tcp coh_temporal_own_writes [--rounds N]
 *
 * Rank 2 homes a temporal segment of 512 KiB (t = 60 s: a cached copy would serve every get
 * of the run). On rank 1 a reader thread gets all of it without pause (each transfer long
 * enough for a put to finish meanwhile) while the main thread puts 1, 2, ... in its first
 * 8 bytes and gets them 8 times after each put: it must read what it just put.
 *
 * (A get whose transfer was under way when a put of the same rank finished cached the
 * bytes from before the put after the put had dropped the cache: the rank read its old
 * value for up to t.)
 */
#include "common/test_util.h"
#include "ddss/ddss.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned rounds = 3000; /* --rounds: rxe in the guest is several times slower */
#define T_MS 60000
#define SEG_LEN (512u << 10) /* under the default cache's largest copy, 1 MiB */
#define GETS_AFTER 8

static ddss_ctx_t *ctx;
static ddss_key_t key;
static bool stop;
static unsigned reader_gets, reader_errors;

static void *reader(void *arg)
{
	void *all = malloc(SEG_LEN);

	(void)arg;
	while (all && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		reader_errors += ddss_get(ctx, key, 0, all, SEG_LEN) != 0;
		reader_gets++;
	}
	free(all);
	return NULL;
}

static void rank1(void)
{
	unsigned stale = 0, errors = 0;
	uint64_t first_stale = 0, read_then = 0;
	pthread_t th;

	if (pthread_create(&th, NULL, reader, NULL)) {
		printf("rank 1: FAIL: pthread_create\n");
		exit(1);
	}
	for (uint64_t i = 1; i <= rounds; i++) {
		uint64_t v = 0;

		errors += ddss_put(ctx, key, 0, &i, sizeof(i)) != 0;
		for (unsigned k = 0; k < GETS_AFTER; k++) {
			errors += ddss_get(ctx, key, 0, &v, sizeof(v)) != 0;
			if (v != i && !stale++) {
				first_stale = i;
				read_then = v;
			}
		}
	}
	__atomic_store_n(&stop, true, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	printf("rank 1: %u rounds of a put and %u gets: %u read an older value (first: put %llu, read "
	       "%llu); the reader's gets beside them: %u\n", rounds, GETS_AFTER, stale,
	       (unsigned long long)first_stale, (unsigned long long)read_then, reader_gets);
	TEST_CHECK(1, stale == 0, "%u gets after a put of this rank read an older value",
		   stale);
	TEST_CHECK(1, errors == 0 && reader_errors == 0, "%u calls failed",
		   errors + reader_errors);
	TEST_CHECK(1, reader_gets > 0, "the reader never ran");
}

int main(int argc, char **argv)
{
	struct ddss_seg_attr attr = { .placement = DDSS_PLACE_RANK, .rank = 2,
				      .name = "temporal-own-writes",
				      .coherence = DDSS_COHERENCE_TEMPORAL, .temporal_ms = T_MS };
	uint32_t me;
	int r;

	if (argc == 3 && !strcmp(argv[1], "--rounds") && atoi(argv[2]) > 0) {
		rounds = (unsigned)atoi(argv[2]);
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
		return 2;
	}
	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	r = ddss_allocate_ss(ctx, SEG_LEN, &attr, &key);
	if (r) {
		fprintf(stderr, "rank %u: segment: %s\n", me, ddss_strerror(r));
		return 1;
	}
	if (me == 1)
		rank1();
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
