/*
 * Group-secret authentication (net/auth.h), 3 ranks: ranks 1 and 2 know the secret, rank 3
 * was given a wrong one (an impostor that knows the group's addresses, id and size).
 *  1. rank 3 tries to read, write and fetch&add on ranks 1 and 2: every call fails with
 *     -EACCES, it never sees them UP and learns no pool length;
 *  2. ranks 1 and 2 see rank 3's attempts turned away (their handshake-failure counters),
 *     and their own attempts to reach rank 3 fail with -EACCES too (rank 3 cannot prove
 *     the secret, so they never send it their pool length or a request);
 *  3. the group carries on: ranks 1 and 2 fetch&add and write into each other's pools and
 *     read the values back; the canary words rank 3 aimed at are unchanged;
 *  4. rank 3 waits until both members have tried it (its own counter), so their step 2 ran
 *     against a live impostor, not a closed port.
 * Nothing here waits on a clock except as a bound: every wait is for a counter or a word.
 */
#include "common/test_util.h"
#include "net/net.h"

#include <ddss/ddss.h>

#include <CUnit/CUnit.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_LEN 65536
#define IMPOSTOR 3u
#define WAIT_MS 30000
#define CANARY 0x5eed5eed5eed5eedull
/* Pool words: the canary, then one "arrived" and one "done" word per rank. */
#define OFF_CANARY 0
#define OFF_ARRIVED(r) (64 + 8 * (uint64_t)(r))
#define OFF_DONE(r) (128 + 8 * (uint64_t)(r))
#define OFF_DATA 4096

static struct ddss_net *net;
static struct ddss_tp *tp;
static uint32_t me;
static uint64_t *pool;

static uint64_t local_word(uint64_t off)
{
	return __atomic_load_n(&pool[off / 8], __ATOMIC_ACQUIRE);
}

/* Wait until @pred holds, at most WAIT_MS; whether it did. */
static bool wait_until(bool (*pred)(uint64_t), uint64_t arg)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;

	while (!pred(arg)) {
		if (ddss_now_ns() > give_up)
			return false;
		sched_yield();
	}
	return true;
}

static bool failed_at_least(uint64_t n) { return ddss_tp_handshakes_failed(tp) >= n; }
static bool word_nonzero(uint64_t off) { return local_word(off) != 0; }

static void test_impostor_refused(void)
{
	uint64_t v = 0, old = 0;
	struct ddss_tp_peer_info info;

	if (me != IMPOSTOR)
		return;
	for (uint32_t peer = 1; peer < IMPOSTOR; peer++) {
		EXPECT_RC(ddss_tp_read(tp, peer, OFF_CANARY, &v, 8), -EACCES);
		v = 1;
		EXPECT_RC(ddss_tp_write(tp, peer, OFF_CANARY, &v, 8), -EACCES);
		EXPECT_RC(ddss_tp_fadd(tp, peer, OFF_CANARY, 1, &old), -EACCES);
		EXPECT_RC(ddss_tp_msg_send(tp, peer, DDSS_MSG_USER_FIRST, &v, 8), -EACCES);
		EXPECT_RC(ddss_tp_peer_info(tp, peer, &info), 0);
		CU_ASSERT_NOT_EQUAL(info.state, DDSS_TP_PEER_UP);
		EXPECT_EQ(info.pool_len, 0, "pool length learned by the impostor");
	}
	/* Stay up until both members have tried us and been turned away. */
	CU_ASSERT(wait_until(failed_at_least, IMPOSTOR - 1));
	printf("\n    impostor: %lu handshakes from members turned away",
	       ddss_tp_handshakes_failed(tp));
}

static void test_members_carry_on(void)
{
	uint32_t other = me == 1 ? 2 : 1;
	unsigned char out[256], in[256];
	struct ddss_tp_peer_info info;
	uint64_t v = 0, old = 0;

	if (me == IMPOSTOR)
		return;
	/* The impostor's attempt on us was turned away... */
	CU_ASSERT(wait_until(failed_at_least, 1));
	/* ...and it cannot prove the secret to us either. */
	EXPECT_RC(ddss_tp_read(tp, IMPOSTOR, OFF_CANARY, &v, 8), -EACCES);
	EXPECT_RC(ddss_tp_peer_info(tp, IMPOSTOR, &info), 0);
	CU_ASSERT_NOT_EQUAL(info.state, DDSS_TP_PEER_UP);
	EXPECT_EQ(info.pool_len, 0, "pool length learned from the impostor");

	/* The members work on: announce, exchange data, read it back. */
	EXPECT_RC(ddss_tp_fadd(tp, other, OFF_ARRIVED(me), 1, &old), 0);
	EXPECT_EQ(old, 0, "arrival word before our fetch&add");
	CU_ASSERT(wait_until(word_nonzero, OFF_ARRIVED(other)));
	test_fill(out, sizeof(out), 100 + me);
	EXPECT_RC(ddss_tp_write(tp, other, OFF_DATA + 256 * me, out, sizeof(out)), 0);
	EXPECT_RC(ddss_tp_read(tp, other, OFF_DATA + 256 * me, in, sizeof(in)), 0);
	CU_ASSERT_EQUAL(test_check(in, sizeof(in), 100 + me), SIZE_MAX);
	EXPECT_RC(ddss_tp_read(tp, other, OFF_CANARY, &v, 8), 0);
	EXPECT_EQ(v, CANARY, "the other member's canary");
	EXPECT_EQ(local_word(OFF_CANARY), CANARY, "our canary");
	/* Do not leave while the other may still read our pool. */
	EXPECT_RC(ddss_tp_fadd(tp, other, OFF_DONE(me), 1, &old), 0);
	CU_ASSERT(wait_until(word_nonzero, OFF_DONE(other)));
	CU_ASSERT_EQUAL(test_check((unsigned char *)pool + OFF_DATA + 256 * other, 256,
				   100 + other), SIZE_MAX);
}

int main(void)
{
	const char *rank = getenv("DDSS_RANK");
	unsigned failed;
	CU_pSuite suite;

	/* The impostor knows everything about the group but the secret. */
	setenv("DDSS_SECRET", rank && atoi(rank) == (int)IMPOSTOR ? "not the secret"
								   : "correct horse battery staple", 1);
	unsetenv("DDSS_SECRET_FILE");
	unsetenv("DDSS_KEYS_FILE"); /* ddssrun's keys: this test is about a group secret */
	net = test_net_open_or_exit();
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	if (ddss_net_size(net) != IMPOSTOR) {
		fprintf(stderr, "run with %u ranks\n", IMPOSTOR);
		return 2;
	}
	pool = test_alloc_pool(POOL_LEN);
	pool[OFF_CANARY / 8] = CANARY;
	if (ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite(ddss_net_transport_name(net), NULL, NULL);
	CU_add_test(suite, "a rank with the wrong secret is refused", test_impostor_refused);
	CU_add_test(suite, "the members carry on", test_members_carry_on);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
