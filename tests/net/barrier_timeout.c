/*
 * A barrier that times out says whom it waited for. At the waiting rank, a rank that is
 * only slow (its work between two barriers outlasts the timeout) and a message that never
 * came look alike; the coordinator (rank 1) knows which ranks have not arrived. 3 ranks:
 *  1. rank 2 enters a barrier alone: -ETIMEDOUT, and its log says rank 1 did not release
 *     it;
 *  2. then rank 1 enters the same barrier, which rank 2 has reached and rank 3 has not:
 *     -ETIMEDOUT, and its log names rank 3, and neither rank 1 nor rank 2;
 *  3. rank 1 lets the others go and enters one more barrier, which ends when rank 3 closes
 *     and exits: -EHOSTDOWN, and its log names ranks 2 and 3 as not arrived; rank 2 says
 *     goodbye before rank 1 closes.
 * The barriers of the group are out of step after step 1, so this program runs no other.
 */
#include "common/test_util.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_LEN 4096
#define TAG_CTRL DDSS_MSG_USER_FIRST
#define WAIT_MS 30000
#define SHORT_MS 300
#define NRANKS 3u

enum ctrl { CTRL_GO = 1, CTRL_DONE = 2, CTRL_BYE = 3 }; /* test_ctrl_* events */

static struct ddss_net *net;
static uint32_t me;
static uint64_t *pool;

/*
 * A barrier of @ms with this process's stderr (where the log goes) caught in @out
 * (NUL-terminated; echoed to the real stderr afterwards). Returns the barrier's result.
 */
static int barrier_logged(int ms, char *out, size_t cap)
{
	FILE *f = tmpfile();
	int saved, r;
	size_t n = 0;

	CU_ASSERT_FATAL(f != NULL);
	saved = dup(2);
	CU_ASSERT_FATAL(saved >= 0);
	fflush(stderr);
	CU_ASSERT_FATAL(dup2(fileno(f), 2) == 2);
	r = ddss_net_barrier(net, ms);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(f);
	n = fread(out, 1, cap - 1, f);
	out[n] = '\0';
	fclose(f);
	fputs(out, stderr);
	return r;
}

static void test_connect_all(void)
{
	CU_ASSERT_EQUAL_FATAL(ddss_net_size(net), NRANKS);
	test_barrier_or_exit(net, WAIT_MS);
}

static void test_timeout_names_the_missing(void)
{
	char log[4096], expect[128];

	/* Steps 1 and 2: a barrier times out at a waiting rank, then at rank 1. */
	if (me == 2) {
		/* Alone: rank 1 never completes it. */
		CU_ASSERT_EQUAL(barrier_logged(SHORT_MS, log, sizeof(log)), -ETIMEDOUT);
		snprintf(expect, sizeof(expect), "not released by rank 1 within %d ms", SHORT_MS);
		CU_ASSERT_PTR_NOT_NULL(strstr(log, expect));
		CU_ASSERT_EQUAL(test_ctrl_send(1, CTRL_GO), 0);
	} else if (me == 1) {
		/* Rank 2 has arrived at this barrier (above), rank 3 never will. */
		CU_ASSERT_FATAL(test_ctrl_wait(CTRL_GO, 1, WAIT_MS));
		CU_ASSERT_EQUAL(barrier_logged(SHORT_MS, log, sizeof(log)), -ETIMEDOUT);
		snprintf(expect, sizeof(expect), "rank(s) 3 had not arrived within %d ms", SHORT_MS);
		CU_ASSERT_PTR_NOT_NULL(strstr(log, expect));
	}
	/* Step 3: a barrier that a rank leaves by going down. */
	if (me == 1) {
		CU_ASSERT_EQUAL(test_ctrl_send(2, CTRL_DONE), 0);
		CU_ASSERT_EQUAL(test_ctrl_send(3, CTRL_DONE), 0);
		/* Nobody else enters this one; it ends when rank 3 goes (static mode). */
		CU_ASSERT_EQUAL(barrier_logged(WAIT_MS, log, sizeof(log)), -EHOSTDOWN);
		CU_ASSERT_PTR_NOT_NULL(strstr(log, "rank(s) 2, 3 had not arrived when a rank "
						   "went down"));
		CU_ASSERT(test_ctrl_wait(CTRL_BYE, 1, WAIT_MS));
	} else {
		/* Rank 3 then returns, closes and exits: rank 1's last barrier sees it go. */
		CU_ASSERT(test_ctrl_wait(CTRL_DONE, 1, WAIT_MS));
		if (me == 2)
			CU_ASSERT_EQUAL(test_ctrl_send(1, CTRL_BYE), 0);
	}
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	net = test_net_open_or_exit();
	me = ddss_net_rank(net);
	pool = test_alloc_pool(POOL_LEN);
	if (test_ctrl_register(net, TAG_CTRL) || ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("barrier_timeout", NULL, NULL);
	CU_add_test(suite, "everyone connected", test_connect_all);
	CU_add_test(suite, "a timed-out barrier names whom it waited for",
		    test_timeout_names_the_missing);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
