/*
 * The home's poll (tcp, DDSS_HOME_SPIN_US; docs/transport.md "The home's wait"), on 2
 * ranks in poll completion mode: rank 1 gets a segment homed at rank 2 GETS times, then
 * rank 2 reads its own counters (ddss_stats home_polled, home_poll_yields).
 *
 *   --expect polled   the mode's default: after serving, the home polls for the next
 *                     request, so it either caught one while polling or gave way to
 *                     another thread: polled + yields > 0;
 *   --expect yields   both ranks pinned to one CPU: the requester spins on that CPU too,
 *                     so each poll's yield runs it, the poll must give way (yields > 0)
 *                     instead of taking the CPU the requester needs;
 *   --expect none     DDSS_HOME_SPIN_US=0 set by the test: the home never polls.
 *
 * Every get must return the value rank 2 wrote: served from the poll or after a wake-up,
 * a request gets the same answer.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GETS 300
#define LEN 64

enum expect { EXPECT_POLLED, EXPECT_YIELDS, EXPECT_NONE };

static ddss_ctx_t *ctx;
static uint32_t me;
static enum expect expect;

static void test_home_poll(void)
{
	uint8_t buf[LEN], want[LEN];
	ddss_key_t key = 0;
	struct ddss_stats st;
	unsigned bad = 0;

	test_fill(want, LEN, 0x5eed);
	if (me == 2) {
		EXPECT_RC(ddss_allocate_ss(ctx, LEN, &(struct ddss_seg_attr){
			.placement = DDSS_PLACE_RANK, .rank = 2, .name = "home-poll" }, &key), 0);
		EXPECT_RC(ddss_put(ctx, key, 0, want, LEN), 0);
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	if (me == 1) {
		EXPECT_RC(ddss_lookup_ss(ctx, "home-poll", &key), 0);
		for (unsigned i = 0; i < GETS; i++) {
			memset(buf, 0, LEN);
			if (ddss_get(ctx, key, 0, buf, LEN) || memcmp(buf, want, LEN))
				bad++;
		}
		EXPECT_EQ(bad, 0, "gets that failed or returned other bytes");
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	if (me == 2) {
		EXPECT_RC(ddss_stats_get(ctx, &st), 0);
		printf("rank 2 (home): polled %llu, yields %llu after %u gets\n",
		       (unsigned long long)st.home_polled, (unsigned long long)st.home_poll_yields,
		       GETS);
		switch (expect) {
		case EXPECT_POLLED:
			CU_ASSERT(st.home_polled + st.home_poll_yields > 0);
			break;
		case EXPECT_YIELDS:
			CU_ASSERT(st.home_poll_yields > 0);
			break;
		case EXPECT_NONE:
			EXPECT_EQ(st.home_polled, 0, "home_polled");
			EXPECT_EQ(st.home_poll_yields, 0, "home_poll_yields");
			break;
		}
		EXPECT_RC(ddss_release_ss(ctx, key), 0);
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
}

/* Both ranks on the lowest CPU this process may use; before ddss_init, so that the
 * library's threads inherit it. */
static int pin_to_one_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return -errno;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (CPU_ISSET(c, &set)) {
			CPU_ZERO(&set);
			CPU_SET(c, &set);
			return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
		}
	}
	return -ENODEV;
}

int main(int argc, char **argv)
{
	struct ddss_attr attr = { .completion = DDSS_COMPLETION_POLL };
	unsigned failed;
	CU_pSuite s;
	int r;

	if (argc != 3 || strcmp(argv[1], "--expect")) {
		fprintf(stderr, "usage: ddssrun -n 2 %s --expect polled|yields|none\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[2], "polled")) {
		expect = EXPECT_POLLED;
	} else if (!strcmp(argv[2], "yields")) {
		expect = EXPECT_YIELDS;
	} else if (!strcmp(argv[2], "none")) {
		expect = EXPECT_NONE;
		setenv("DDSS_HOME_SPIN_US", "0", 1);
	} else {
		fprintf(stderr, "--expect: polled, yields or none, not %s\n", argv[2]);
		return 2;
	}
	if (expect == EXPECT_YIELDS && (r = pin_to_one_cpu())) {
		fprintf(stderr, "sched_setaffinity: %s\n", strerror(-r));
		return 1;
	}
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	if (ddss_size(ctx) != 2) {
		printf("SKIP: the home's poll test needs 2 ranks, not %u\n", ddss_size(ctx));
		ddss_finalize(ctx);
		return TEST_SKIP_EXIT;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("the home's poll", NULL, NULL);
	CU_add_test(s, argv[2], test_home_poll);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	return failed || r ? 1 : 0;
}
