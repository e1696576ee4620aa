/*
 * A group that starts below its maximum size and grows while it runs (coordinator mode,
 * docs/membership.md "Growth"): ddssrun --coordinator -n 2 --max-size 4.
 *  1. the two founders see 4 slots; slots 3 and 4 are free: an allocation placed there
 *     says -EHOSTDOWN, and round-robin placement skips them;
 *  2. the founders count on a locked counter;
 *  3. rank 2 starts slot 3 as a user would (ddssrun --coordinator --max-size 4 --slot 3);
 *     once it serves, rank 1 starts a process that asks for no slot (DDSS_RANK unset) and
 *     gets the first free one, 4;
 *  4. each newcomer finds the group's segments by name (the directory is in etcd), and
 *     serves a segment of its own that every rank reads;
 *  5. all four count on: the counter is exact (2 x INCREMENTS + 4 x INCREMENTS);
 *  6. all four finalize together: the barrier counts the newcomers, which count their
 *     barriers on from the founders' (who passed one more after the start).
 * Prints the time from each newcomer's start to its first served operation.
 */
#include "common/test_util.h"
#include "core/key.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 10000 /* the lease TTL too: no death here, so the default */
#define FOUNDERS 2
#define SLOTS 4
#define INCREMENTS 200
#define WAIT_MS 60000
#define VALUE(slot) (0x9a0000u + (slot))

/* Words of the results segment (homed at rank 1, named "growres"). */
enum { W_SEG = 0, W_DONE1 = SLOTS, W_DONE2 = 2 * SLOTS, W_WORDS = 3 * SLOTS };

static ddss_ctx_t *ctx;
static uint32_t me;
static bool newcomer;
static ddss_key_t results, counter;
static pid_t child = -1; /* the newcomer this founder started */
static const char *ddssrun;
static double t_start;

static uint64_t wait_word(unsigned w)
{
	return test_wait_word(ctx, results, w, WAIT_MS);
}

static void put_word(unsigned w, uint64_t v)
{
	CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * w, &v, sizeof(v)), 0);
}

static void increments(void)
{
	int r = 0;

	for (unsigned i = 0; i < INCREMENTS && !r; i++)
		r = test_locked_increment(ctx, counter);
	CU_ASSERT_EQUAL(r, 0);
}

/* Start a newcomer: by ddssrun --slot (@slot), or directly with no slot asked (0). */
static pid_t start_newcomer(uint32_t slot)
{
	char self[4096], num[16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;

	if (n <= 0)
		return -1;
	self[n] = 0;
	fflush(stdout);
	pid = fork();
	if (pid != 0)
		return pid;
	setenv("TEST_GROW_NEWCOMER", "1", 1);
	/* Our listening socket is ours: the newcomer serves on a port of its own. */
	if (getenv("DDSS_LISTEN_FD")) {
		close(atoi(getenv("DDSS_LISTEN_FD")));
		unsetenv("DDSS_LISTEN_FD");
	}
	test_listen_elsewhere();
	if (slot) {
		char *const run[] = { (char *)ddssrun, "--coordinator", "-n", "2", "--max-size", "4",
				      "--slot", num, "--timeout", "60", "--", self, NULL };

		snprintf(num, sizeof(num), "%u", slot);
		execv(ddssrun, run);
	} else {
		char *const run[] = { self, NULL };

		unsetenv("DDSS_RANK"); /* the first free slot */
		execv(self, run);
	}
	_exit(127);
}

static void setup(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "growres" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "growcount" };

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &c, &counter), 0);
	/* A barrier of the founders alone: the newcomers must count on from it (they ask
	 * rank 1), or the final barrier would wait for epochs that never match. */
	CU_ASSERT_EQUAL_FATAL(ddss_barrier(ctx), 0);
}

/* Slots 3 and 4 have no member yet. */
static void test_free_slots(void)
{
	struct ddss_seg_attr at = { .placement = DDSS_PLACE_RANK };
	struct ddss_seg_attr any = { .placement = DDSS_PLACE_ANY };
	ddss_key_t k = 0;
	int r;

	CU_ASSERT_EQUAL(ddss_size(ctx), SLOTS);
	for (uint32_t s = FOUNDERS + 1; s <= SLOTS; s++) {
		at.rank = s;
		r = ddss_allocate_ss(ctx, 64, &at, &k);
		printf("rank %u: allocate at free slot %u: %s\n", me, s, ddss_strerror(r));
		CU_ASSERT_EQUAL(r, -EHOSTDOWN);
	}
	for (unsigned i = 0; i < 2 * SLOTS; i++) {
		struct ddss_key_parts p;

		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 64, &any, &k), 0);
		CU_ASSERT_EQUAL(ddss_key_parse(k, &p), 0);
		CU_ASSERT(p.rank >= 1 && p.rank <= FOUNDERS);
		CU_ASSERT_EQUAL(ddss_release_ss(ctx, k), 0);
	}
	increments();
	put_word(W_DONE1 + me - 1, 1);
}

/* The founders start the newcomers, one after the other (3 first, so 4 is the first free
 * slot when the second asks for none). */
static void test_grow(void)
{
	if (me == 2) {
		child = start_newcomer(3);
		CU_ASSERT_FATAL(child > 0);
	}
	CU_ASSERT_FATAL(wait_word(W_SEG + 2) != 0);
	if (me == 1) {
		child = start_newcomer(0);
		CU_ASSERT_FATAL(child > 0);
	}
	CU_ASSERT_FATAL(wait_word(W_SEG + 3) != 0);
}

/* A newcomer: the group's segments by name, and a segment of its own. */
static void test_newcomer(void)
{
	struct ddss_seg_attr local = { .placement = DDSS_PLACE_LOCAL };
	ddss_key_t mine;
	uint64_t v = VALUE(me);
	int r;

	CU_ASSERT_FATAL(me > FOUNDERS && me <= SLOTS);
	CU_ASSERT_EQUAL_FATAL(ddss_lookup_ss(ctx, "growres", &results), 0);
	r = ddss_get(ctx, results, 8 * W_DONE1, &v, sizeof(v));
	printf("rank %u (newcomer): first operation %s %.0f ms after the process started\n", me,
	       r ? ddss_strerror(r) : "served", test_now_ms() - t_start);
	CU_ASSERT_EQUAL_FATAL(r, 0);
	CU_ASSERT_EQUAL_FATAL(ddss_lookup_ss(ctx, "growcount", &counter), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 64, &local, &mine), 0);
	v = VALUE(me);
	CU_ASSERT_EQUAL_FATAL(ddss_put(ctx, mine, 0, &v, sizeof(v)), 0);
	put_word(W_SEG + me - 1, mine);
}

/* Every rank reads both newcomers' segments. */
static void test_read_newcomers(void)
{
	for (uint32_t s = FOUNDERS + 1; s <= SLOTS; s++) {
		uint64_t v = 0, k = wait_word(W_SEG + s - 1);

		CU_ASSERT_FATAL(k != 0);
		CU_ASSERT_EQUAL(ddss_get(ctx, k, 0, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(v, VALUE(s));
	}
}

static void test_counter(void)
{
	uint64_t total = 0, expect = FOUNDERS * INCREMENTS + SLOTS * INCREMENTS;

	for (uint32_t s = 1; s <= FOUNDERS; s++)
		CU_ASSERT_EQUAL(wait_word(W_DONE1 + s - 1), 1);
	increments();
	put_word(W_DONE2 + me - 1, 1);
	for (uint32_t s = 1; s <= SLOTS; s++)
		CU_ASSERT_EQUAL(wait_word(W_DONE2 + s - 1), 1);
	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, &total, sizeof(total)), 0);
	if (me == 1)
		printf("counter %" PRIu64 ", expected %" PRIu64 "\n", total, expect);
	CU_ASSERT_EQUAL(total, expect);
}

int main(int argc, char **argv)
{
	CU_pSuite suite;
	unsigned failed;
	int r, status;

	t_start = test_now_ms();
	if (argc == 3 && !strcmp(argv[1], "--ddssrun"))
		ddssrun = argv[2];
	newcomer = getenv("TEST_GROW_NEWCOMER") != NULL;
	if (!getenv("DDSS_COORDINATOR") || (!newcomer && !ddssrun)) {
		printf("SKIP: run under ddssrun --coordinator -n 2 --max-size 4 with --ddssrun PATH\n");
		return TEST_SKIP_EXIT;
	}
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	me = ddss_rank(ctx);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("a group that grows into its free slots", NULL, NULL);
	if (newcomer) {
		CU_add_test(suite, "a newcomer finds the group and serves", test_newcomer);
	} else {
		CU_add_test(suite, "setup", setup);
		CU_add_test(suite, "free slots are refused, and skipped", test_free_slots);
		CU_add_test(suite, "two newcomers join", test_grow);
	}
	CU_add_test(suite, "every rank reads the newcomers' segments", test_read_newcomers);
	CU_add_test(suite, "the locked counter stays exact", test_counter);
	failed = test_run_all();
	CU_cleanup_registry();
	/* Collective: the barrier counts the newcomers (they joined after the start's). */
	r = ddss_finalize(ctx);
	printf("rank %u: finalize: %s\n", me, ddss_strerror(r));
	if (child > 0 && (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
			  WEXITSTATUS(status))) {
		printf("rank %u: the newcomer it started failed (status %#x)\n", me, status);
		failed++;
	}
	return failed || r ? 1 : 0;
}
