/*
 * etcd stalled, not gone: its only member frozen (SIGSTOP) while the group runs. 3 ranks,
 * TTL 10 s (the default), under
 *   with_etcd.sh -- sh -c 'DDSS_COORDINATOR=etcd://$DDSS_TEST_ETCD/NAME ddssrun --coordinator ...'
 * A stalled etcd still has its leader, which expires leases on its own clock when it runs
 * again (no election, so no fresh TTL): a rank that served on past its deadline could be
 * declared dead, and its locks given away, while it still acts. So the outage rule (serve
 * on while etcd is gone for a majority) must not apply: renewals that time out say "no
 * answer", not "no leader".
 *  1. rank 1 has etcd frozen;
 *  2. every rank runs locked increments on a counter of its own (so that what stops it is
 *     its own deadline, not another rank's): each must stop with -ENOLINK (or -EHOSTDOWN)
 *     by its lease deadline, read when the freeze began (before the fix, the ranks took
 *     the timeouts for an outage and served on through the whole freeze);
 *  3. rank 1 thaws etcd once the freeze has lasted FREEZE_MS; a stopped rank stays
 *     stopped.
 * No finalize: the ranks have stopped acting.
 */
#include "common/test_util.h"
#include "coord/member.h"
#include "core/ctx.h"
#include "etcd_ctl.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 10000 /* the lease TTL too: the default */
#define FREEZE_MS (3 * PEER_TIMEOUT_MS / 2)
#define LATE_MS 500 /* an operation under way when the deadline came */
#define NRANKS 3

static ddss_ctx_t *ctx;
static uint32_t me;
static ddss_key_t counter;

static void setup(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_LOCAL };

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &a, &counter), 0);
	test_ctx_barrier_or_exit(ctx);
}

static void test_stall(void)
{
	struct ddss_member *m = ddss_net_member(ctx->net);
	double t0, deadline_ms, stopped_ms = -1;
	unsigned long n = 0;
	int r = 0;

	CU_ASSERT_FATAL(m != NULL);
	if (me == 1)
		CU_ASSERT_FATAL(etcd_ctl("freeze", 1));
	test_ctx_barrier_or_exit(ctx);
	t0 = test_now_ms();
	deadline_ms = (double)ddss_member_time_left(m) / 1e6;
	while (test_now_ms() - t0 < FREEZE_MS) {
		r = test_locked_increment(ctx, counter);
		if (r) {
			stopped_ms = test_now_ms() - t0;
			break;
		}
		n++;
	}
	printf("rank %u: %lu increments, then %s %.0f ms into the freeze (deadline %.0f ms)\n",
	       me, n, r ? ddss_strerror(r) : "nothing", r ? stopped_ms : FREEZE_MS, deadline_ms);
	CU_ASSERT(r == -ENOLINK || r == -EHOSTDOWN);
	CU_ASSERT(stopped_ms >= 0 && stopped_ms <= deadline_ms + LATE_MS);
	CU_ASSERT(deadline_ms < PEER_TIMEOUT_MS);
	if (me == 1) { /* the fault's length, then etcd runs again (whatever happened) */
		double left = FREEZE_MS - (test_now_ms() - t0);
		struct timespec ts = { (time_t)(left / 1000), (long)((left - (time_t)(left / 1000) * 1000) * 1e6) };

		if (left > 0)
			nanosleep(&ts, NULL);
		CU_ASSERT(etcd_ctl("thaw", 1));
	}
}

static void test_stays_stopped(void)
{
	uint64_t v;
	int r = ddss_get(ctx, counter, 0, &v, sizeof(v));

	printf("rank %u: a get after the thaw: %s\n", me, ddss_strerror(r));
	CU_ASSERT(r == -ENOLINK || r == -EHOSTDOWN);
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
	if (ddss_size(ctx) != NRANKS) {
		fprintf(stderr, "run with %u ranks\n", NRANKS);
		return 2;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("etcd stalled", NULL, NULL);
	CU_add_test(suite, "setup", setup);
	CU_add_test(suite, "etcd frozen: every rank stops by its deadline", test_stall);
	CU_add_test(suite, "etcd thawed: a stopped rank stays stopped", test_stays_stopped);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
