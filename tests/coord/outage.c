/*
 * With every etcd member gone, a coordinator-mode group keeps serving data and locks; when
 * etcd comes back, membership works again. 4 ranks under
 *   with_etcd.sh -- sh -c 'DDSS_COORDINATOR=etcd://$DDSS_TEST_ETCD/NAME ddssrun --coordinator ...'
 *  1. rank 1 has the (only) etcd member killed;
 *  2. every rank runs locked increments of one counter for three lease TTLs: every call
 *     must succeed (before the fix, each rank stopped acting about 2.4 s in: -ENOLINK);
 *  3. the counter is exactly the sum of the increments;
 *  4. rank 1 has etcd started again, and every rank sees its lease renewed within a bound.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "etcd_ctl.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 3000 /* the lease TTL too */
#define OUTAGE_MS (3 * PEER_TIMEOUT_MS)
#define NRANKS 4

static ddss_ctx_t *ctx;
static uint32_t me;
static ddss_key_t counter, results;

static void setup(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1 };

	if (me == 1) {
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &a, &counter), 0);
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8 * (NRANKS + 1), &a, &results), 0);
	}
	test_board_put(0, counter);
	test_board_put(1, results);
	test_ctx_barrier_or_exit(ctx);
	counter = test_board_get(1, 0);
	results = test_board_get(1, 1);
}

static void test_outage(void)
{
	uint64_t mine = 0, v, sum = 0, total = 0;
	double t0;
	int r = 0, first_err = 0;

	if (me == 1)
		CU_ASSERT_FATAL(etcd_ctl("stop", 1));
	test_ctx_barrier_or_exit(ctx);
	t0 = test_now_ms();
	while (test_now_ms() - t0 < OUTAGE_MS) {
		r = test_locked_increment(ctx, counter);
		if (r) {
			first_err = r;
			break;
		}
		mine++;
	}
	if (first_err)
		printf("rank %u: %s after %.0f ms of the outage\n", me, ddss_strerror(first_err),
		       test_now_ms() - t0);
	CU_ASSERT_EQUAL(first_err, 0);
	printf("rank %u: %llu increments during a %d ms etcd outage\n", me,
	       (unsigned long long)mine, OUTAGE_MS);
	CU_ASSERT(mine > 0);
	CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * me, &mine, sizeof(mine)), 0);
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, &total, sizeof(total)), 0);
		for (uint32_t i = 1; i <= NRANKS; i++) {
			CU_ASSERT_EQUAL(ddss_get(ctx, results, 8 * i, &v, sizeof(v)), 0);
			sum += v;
		}
		printf("counter %llu, increments %llu\n", (unsigned long long)total,
		       (unsigned long long)sum);
		CU_ASSERT_EQUAL(total, sum);
	}
}

static void test_back(void)
{
	double t0;
	int r = -EAGAIN;

	if (me == 1)
		CU_ASSERT_FATAL(etcd_ctl("start", 1));
	test_ctx_barrier_or_exit(ctx);
	/* Each rank's next renewals reach it again (they are retried every 250 ms). */
	t0 = test_now_ms();
	while (test_now_ms() - t0 < 15000 && (r = ddss_net_coord_state(ctx->net)) == -EAGAIN)
		usleep(50000);
	CU_ASSERT_EQUAL(r, 0);
	printf("rank %u: etcd answers again %.0f ms after its restart\n", me, test_now_ms() - t0);
	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, &(uint64_t){ 0 }, 8), 0);
	test_ctx_barrier_or_exit(ctx);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	if (!getenv("DDSS_COORDINATOR") || !getenv("DDSS_TEST_ETCD_CTL")) {
		printf("SKIP: run under with_etcd.sh and ddssrun --coordinator\n");
		return TEST_SKIP_EXIT;
	}
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	me = ddss_rank(ctx);
	if (ddss_size(ctx) != NRANKS || test_board_open(ctx)) {
		fprintf(stderr, "run with %u ranks\n", NRANKS);
		return 2;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("etcd outage", NULL, NULL);
	CU_add_test(suite, "setup", setup);
	CU_add_test(suite, "every etcd member gone: data and locks go on", test_outage);
	CU_add_test(suite, "etcd back: membership works again", test_back);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_finalize(ctx);
	return failed ? 1 : 0;
}
