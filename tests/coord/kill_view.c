/*
 * A rank killed in coordinator mode (4 ranks, under ddssrun --coordinator):
 *  1. rank 4 writes the time and kills itself (SIGKILL);
 *  2. every survivor sees it leave the view: the same view number everywhere, within a
 *     bound (its lease TTL plus etcd's expiry tick and slack); each prints the time it took;
 *  3. the survivors' locked increments of one counter carry on: the counter is exact.
 * The survivors leave without the collective finalize (a member is gone for good).
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 3000 /* the lease TTL too */
#define VIEW_BOUND_MS (PEER_TIMEOUT_MS + 2000)
#define NRANKS 4
#define VICTIM 4
#define INCREMENTS 200
#define WAIT_MS 30000

enum { W_KILL_NS = 0, W_VIEW = 1, W_DONE = 1 + NRANKS, W_READ = 1 + 2 * NRANKS,
       W_WORDS = 1 + 3 * NRANKS };

static ddss_ctx_t *ctx;
static uint32_t me;
static ddss_key_t results, counter;

static void setup(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "killview" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "killcount" };

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &c, &counter), 0);
	test_ctx_barrier_or_exit(ctx);
}

static int64_t mono_ns(void)
{
	return (int64_t)(test_now_ms() * 1e6);
}

static uint64_t wait_word(unsigned w)
{
	return test_wait_word(ctx, results, w, WAIT_MS);
}

static void test_kill(void)
{
	int64_t view = 0, when = 0, kill_ns;
	uint64_t v, first = 0;
	double t0 = test_now_ms();
	int r = -ENOENT;

	if (me == VICTIM) {
		kill_ns = mono_ns();
		CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * W_KILL_NS, &kill_ns, sizeof(kill_ns)), 0);
		fflush(stdout);
		raise(SIGKILL);
	}
	kill_ns = (int64_t)wait_word(W_KILL_NS);
	CU_ASSERT_FATAL(kill_ns != 0);
	while (test_now_ms() - t0 < WAIT_MS &&
	       (r = ddss_net_coord_left(ctx->net, VICTIM, &view, &when)) == -ENOENT)
		usleep(10000);
	CU_ASSERT_EQUAL_FATAL(r, 0);
	printf("rank %u: rank %u left the view %" PRId64 " %.0f ms after it was killed "
	       "(lease TTL %d ms)\n", me, VICTIM, view, (when - kill_ns) / 1e6, PEER_TIMEOUT_MS);
	CU_ASSERT((when - kill_ns) / 1e6 <= VIEW_BOUND_MS);
	v = (uint64_t)view;
	CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * (W_VIEW + me - 1), &v, sizeof(v)), 0);
	/* The same view number at every survivor. */
	for (uint32_t s = 1; s <= NRANKS; s++) {
		if (s == VICTIM)
			continue;
		v = wait_word(W_VIEW + s - 1);
		if (!first)
			first = v;
		CU_ASSERT_EQUAL(v, first);
	}
	CU_ASSERT_EQUAL(first, (uint64_t)view);
}

static void test_carry_on(void)
{
	uint64_t done = 1, total = 0;
	int r = 0;

	for (unsigned i = 0; i < INCREMENTS && !r; i++)
		r = test_locked_increment(ctx, counter);
	CU_ASSERT_EQUAL(r, 0);
	CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * (W_DONE + me - 1), &done, sizeof(done)), 0);
	for (uint32_t s = 1; s <= NRANKS; s++)
		if (s != VICTIM)
			CU_ASSERT_EQUAL(wait_word(W_DONE + s - 1), 1);
	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, &total, sizeof(total)), 0);
	if (me == 1)
		printf("counter %" PRIu64 ", expected %u\n", total, (NRANKS - 1) * INCREMENTS);
	CU_ASSERT_EQUAL(total, (NRANKS - 1) * INCREMENTS);
	/* Rank 1 is the home of both segments: it leaves after everyone has read. */
	test_put_farewell(ctx, me, results, W_READ + me - 1, done);
	for (uint32_t s = 1; me == 1 && s <= NRANKS; s++)
		if (s != VICTIM)
			CU_ASSERT_EQUAL(wait_word(W_READ + s - 1), 1);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	if (!getenv("DDSS_COORDINATOR") || !getenv("DDSS_RANK")) {
		printf("SKIP: run under ddssrun --coordinator\n");
		return TEST_SKIP_EXIT;
	}
	/* ddssrun --coordinator asks each rank for the slot of its index (DDSS_RANK). The
	 * victim is a child of its rank's process, so that ddssrun sees that rank end well. */
	test_fork_victim(VICTIM);
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
	suite = CU_add_suite("a rank killed in coordinator mode", NULL, NULL);
	CU_add_test(suite, "setup", setup);
	CU_add_test(suite, "killed: one view number for every survivor, within the bound",
		    test_kill);
	CU_add_test(suite, "the survivors' locked counter stays exact", test_carry_on);
	failed = test_run_all();
	CU_cleanup_registry();
	/* No collective finalize: a member is gone for good. */
	return failed ? 1 : 0;
}
