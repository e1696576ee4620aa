/*
 * Quotas at a home (issue 29): what one rank may hold at another rank's home, set there by
 * DDSS_QUOTA_SEGMENTS, DDSS_QUOTA_BYTES and DDSS_QUOTA_NAMES (the CMake entry sets 3,
 * 1 MiB and 2). Past a quota an allocation fails with -EDQUOT and changes nothing; a
 * release gives the room back; one rank's use does not count against another's.
 * 2 ranks: rank 2 is the hostile one, rank 1 the home (and checks its own table).
 */
#include "alloc/names.h"
#include "alloc/segtab.h"
#include "common/test_util.h"
#include "core/ctx.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUOTA_SEGMENTS 3
#define QUOTA_BYTES (1u << 20)
#define QUOTA_NAMES 2

static ddss_ctx_t *ctx;
static uint32_t me;

static int alloc_at(uint32_t home, size_t len, const char *name, ddss_key_t *key)
{
	return ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = home, .name = name }, key);
}

static void test_segments_and_bytes(void)
{
	ddss_key_t k[QUOTA_SEGMENTS + 1], big, other[QUOTA_SEGMENTS];
	uint64_t before;

	if (me == 2) {
		for (unsigned i = 0; i < QUOTA_SEGMENTS; i++)
			EXPECT_RC(alloc_at(1, 64, NULL, &k[i]), 0);
		EXPECT_RC(alloc_at(1, 64, NULL, &k[QUOTA_SEGMENTS]), -EDQUOT);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		/* Rank 2's refused call took nothing here; our own quota is whole. */
		before = ddss_segtab_count(ctx->segtab);
		EXPECT_EQ(before, QUOTA_SEGMENTS, "segments at rank 1");
		for (unsigned i = 0; i < QUOTA_SEGMENTS - 1; i++)
			EXPECT_RC(alloc_at(1, 64, NULL, &other[i]), 0);
		for (unsigned i = 0; i < QUOTA_SEGMENTS - 1; i++)
			EXPECT_RC(ddss_release_ss(ctx, other[i]), 0);
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		/* A release gives the room back. */
		EXPECT_RC(ddss_release_ss(ctx, k[0]), 0);
		EXPECT_RC(alloc_at(1, 64, NULL, &k[0]), 0);
		for (unsigned i = 0; i < QUOTA_SEGMENTS; i++)
			EXPECT_RC(ddss_release_ss(ctx, k[i]), 0);
		/* Bytes: one segment larger than the quota, then two that fit only alone. */
		EXPECT_RC(alloc_at(1, 2 * QUOTA_BYTES, NULL, &big), -EDQUOT);
		EXPECT_RC(alloc_at(1, QUOTA_BYTES / 2, NULL, &k[0]), 0);
		EXPECT_RC(alloc_at(1, QUOTA_BYTES / 2, NULL, &k[1]), -EDQUOT);
		EXPECT_RC(ddss_release_ss(ctx, k[0]), 0);
		EXPECT_RC(alloc_at(1, QUOTA_BYTES / 2, NULL, &k[1]), 0);
		EXPECT_RC(ddss_release_ss(ctx, k[1]), 0);
	}
	test_ctx_barrier_or_exit(ctx);
}

/* The first @n names of the form q-name-N whose directory is rank @dir. */
static void names_at(uint32_t dir, unsigned n, char names[][32])
{
	for (unsigned i = 0, found = 0; found < n; i++) {
		snprintf(names[found], 32, "q-name-%u", i);
		if (ddss_name_home(names[found], ddss_size(ctx)) == dir)
			found++;
	}
}

static void test_names(void)
{
	char names[QUOTA_NAMES + 1][32];
	ddss_key_t k[QUOTA_NAMES + 1], found;

	names_at(1, QUOTA_NAMES + 1, names);
	if (me == 2) {
		/* Homed at rank 2 itself: only the names' quota at directory rank 1 binds. */
		for (unsigned i = 0; i < QUOTA_NAMES; i++)
			EXPECT_RC(alloc_at(2, 64, names[i], &k[i]), 0);
		EXPECT_RC(alloc_at(2, 64, names[QUOTA_NAMES], &k[QUOTA_NAMES]), -EDQUOT);
		/* The refused name was not left pending or bound. */
		EXPECT_RC(ddss_lookup_ss(ctx, names[QUOTA_NAMES], &found), -ENOENT);
		/* Looking names up costs no quota. */
		EXPECT_RC(ddss_lookup_ss(ctx, names[0], &found), 0);
		CU_ASSERT_EQUAL(found, k[0]);
		EXPECT_RC(ddss_release_ss(ctx, k[0]), 0);
		EXPECT_RC(alloc_at(2, 64, names[QUOTA_NAMES], &k[QUOTA_NAMES]), 0);
		EXPECT_RC(ddss_release_ss(ctx, k[1]), 0);
		EXPECT_RC(ddss_release_ss(ctx, k[QUOTA_NAMES]), 0);
	}
	test_ctx_barrier_or_exit(ctx);
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
	if (ddss_size(ctx) != 2 || test_ctx_is_client(ctx)) {
		printf("SKIP: the quota test needs 2 ranks in direct mode\n");
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("quotas at a home", NULL, NULL);
	CU_add_test(s, "segments and bytes per rank: -EDQUOT, released room comes back",
		    test_segments_and_bytes);
	CU_add_test(s, "names per rank at a directory: -EDQUOT, nothing left pending",
		    test_names);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	return failed || r ? 1 : 0;
}
