/*
 * verbs provider, error paths a fabric produces (issue 27), in one process with two ranks
 * (run under scripts/rdma-exec, which gives the device's address in DDSS_RDMA_HOST):
 *  - the disconnect loop: rank 1 disconnects from rank 2 and reconnects, 500 times; every
 *    message sent each round arrives, and rank 2's posted receive buffers (SRQ, or without
 *    one, per-connection receive queues: DDSS_VERBS_DISABLE=srq) end where they started;
 *    Each round rank 2 also sends rank 1 a message on the liveness lane (the QP rank 1
 *    opened to it, backwards: net/verbs/verbs_liveness.c); rank 1's outgoing QP takes
 *    those from its SRQ, and rank 1's posted receives end where they started too. With an
 *    SRQ the lane must carry some of them; without one (rank 1 says it takes none) none;
 *    either way every one arrives;
 *  - DDSS_TRAFFIC_CLASS: out-of-range values refuse to open, a valid one works;
 *  - a reconnect behind a slow teardown of the broken QP gets its whole 3 s;
 *  - a handler that replies over a broken connection: the reconnect runs on the receive
 *    thread, and freeing the broken QP does not wait for that thread's own pass.
 * ROUNDS=N in the environment changes the number of rounds.
 */
#include "common/test_util.h"
#include "net/transport.h"
#include "net/verbs/verbs.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_LEN 65536
#define PER_ROUND 4

static char host[64];
static uint16_t base_port;
static unsigned received[2]; /* [rank - 1]: messages its handler saw */
static unsigned bad_payload;
static unsigned lane_received; /* rank 1: tag 8 from rank 2 (either path) */

#define TAG_ORDERED 7
#define TAG_LANE 8
#define TAG_PING 9 /* to rank 1: its handler sends the payload back to rank 2, ordered */

static struct ddss_tp *ping_tp; /* rank 1, for its handler's reply */
static int ping_reply_rc = 1;   /* the reply's ddss_tp_msg_send result... */
static unsigned ping_replied;   /* ...set before this is */

static void on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len)
{
	unsigned *count = arg;
	uint32_t seq;

	if (tag == TAG_PING) {
		if (count != &received[0] || from != 2 || len != sizeof(seq) || !ping_tp)
			__atomic_add_fetch(&bad_payload, 1, __ATOMIC_RELAXED);
		else { /* on rank 1's receive thread, as a reply from a message handler */
			ping_reply_rc = ddss_tp_msg_send(ping_tp, 2, TAG_ORDERED, buf, sizeof(seq));
			__atomic_add_fetch(&ping_replied, 1, __ATOMIC_RELEASE);
		}
		return;
	}
	if (tag == TAG_LANE) {
		if (count != &received[0] || from != 2 || len != sizeof(seq))
			__atomic_add_fetch(&bad_payload, 1, __ATOMIC_RELAXED);
		else
			__atomic_add_fetch(&lane_received, 1, __ATOMIC_RELEASE);
		return;
	}

	/* Messages arrive in order: each carries the sender's count so far. */
	if (from != 1 || tag != TAG_ORDERED || len != sizeof(seq)) {
		__atomic_add_fetch(&bad_payload, 1, __ATOMIC_RELAXED);
		return;
	}
	memcpy(&seq, buf, sizeof(seq));
	if (seq != __atomic_load_n(count, __ATOMIC_RELAXED))
		__atomic_add_fetch(&bad_payload, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(count, 1, __ATOMIC_RELEASE);
}

static struct ddss_tp *open_rank(struct ddss_tp_node *nodes, uint32_t rank, uint64_t *pool)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0x27, .nodes = nodes, .listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 10000,
		.connect_timeout_ms = 5000,
		.handlers = { .on_msg = on_msg, .arg = &received[rank - 1] },
	};
	struct ddss_tp_mr *mr;
	struct ddss_tp *tp = NULL;

	if (ddss_tp_open("verbs", &cfg, &tp))
		return NULL;
	if (ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr) || ddss_tp_start(tp)) {
		ddss_tp_close(tp);
		return NULL;
	}
	return tp;
}

static void nodes_init(struct ddss_tp_node *nodes)
{
	for (uint32_t i = 0; i < 2; i++) {
		snprintf(nodes[i].host, sizeof(nodes[i].host), "%s", host);
		nodes[i].port = (uint16_t)(base_port + i);
	}
	base_port += 2;
}

/* Wait (bounded) until *@count reaches @want. */
static bool wait_count(unsigned *count, unsigned want)
{
	double until = test_now_ms() + 10000;

	while (__atomic_load_n(count, __ATOMIC_ACQUIRE) < want)
		if (test_now_ms() > until)
			return false;
		else
			usleep(50);
	return true;
}

/* Both ranks open; rank 1 connects to rank 2, and its first message (*@sent) arrives. */
static void first_message(struct ddss_tp *t1, struct ddss_tp *t2, unsigned *sent)
{
	CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t2);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_peer_connect(t1, 2), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_msg_send(t1, 2, TAG_ORDERED, sent, sizeof(*sent)), 0);
	(*sent)++;
	CU_ASSERT_TRUE_FATAL(wait_count(&received[1], *sent));
}

/* Rank 2's posted receive count once it stops moving (teardowns finish on its cm thread). */
static unsigned settled_posted(struct ddss_tp *tp, unsigned want, bool have_want)
{
	double until = test_now_ms() + 10000;
	unsigned prev = ddss_verbs_srq_posted(tp), cur;

	for (;;) {
		usleep(100000);
		cur = ddss_verbs_srq_posted(tp);
		if (have_want ? cur == want : cur == prev)
			return cur;
		if (test_now_ms() > until)
			return cur;
		prev = cur;
	}
}

static void test_disconnect_loop(void)
{
	const char *env = getenv("ROUNDS");
	unsigned rounds = env ? (unsigned)atoi(env) : 500, sent = 0, start, end;
	unsigned lane_sent = 0, start1, end1;
	bool srq = getenv("DDSS_VERBS_DISABLE") == NULL;
	struct ddss_tp_node nodes[2];
	uint64_t *p1 = test_alloc_pool(POOL_LEN), *p2 = test_alloc_pool(POOL_LEN);
	struct ddss_tp_peer_info info;
	struct ddss_tp *t1, *t2;
	double t0 = test_now_ms();

	nodes_init(nodes);
	received[1] = 0;
	bad_payload = 0;
	lane_received = 0;
	t1 = open_rank(nodes, 1, p1);
	t2 = open_rank(nodes, 2, p2);
	first_message(t1, t2, &sent);
	/* And one on the lane (without an SRQ it connects rank 2 to rank 1: counted at start). */
	CU_ASSERT_EQUAL_FATAL(ddss_tp_msg_send_unordered(t2, 1, TAG_LANE, &lane_sent,
							 sizeof(lane_sent)), 0);
	lane_sent++;
	CU_ASSERT_TRUE_FATAL(wait_count(&lane_received, lane_sent));
	start = settled_posted(t2, 0, false);
	start1 = settled_posted(t1, 0, false);
	printf("\n  posted receive buffers at rank 2: %u, at rank 1: %u at start\n", start,
	       start1);
	CU_ASSERT_TRUE(start > 0);
	for (unsigned round = 0; round < rounds; round++) {
		for (unsigned i = 0; i < PER_ROUND; i++, sent++)
			if (ddss_tp_msg_send(t1, 2, TAG_ORDERED, &sent, sizeof(sent))) {
				CU_FAIL("msg_send failed");
				goto out;
			}
		if (!wait_count(&received[1], sent)) {
			printf("  round %u: %u of %u messages received\n", round, received[1], sent);
			CU_FAIL("messages lost");
			goto out;
		}
		if (ddss_tp_msg_send_unordered(t2, 1, TAG_LANE, &lane_sent, sizeof(lane_sent))) {
			CU_FAIL("msg_send_unordered failed");
			goto out;
		}
		if (!wait_count(&lane_received, ++lane_sent)) {
			printf("  round %u: %u of %u lane messages received\n", round, lane_received,
			       lane_sent);
			CU_FAIL("lane messages lost");
			goto out;
		}
		if (ddss_tp_peer_disconnect(t1, 2) || ddss_tp_peer_connect(t1, 2)) {
			printf("  round %u: disconnect/connect failed\n", round);
			CU_FAIL("reconnect failed");
			goto out;
		}
	}
	end = settled_posted(t2, start, true);
	end1 = settled_posted(t1, start1, true);
	printf("  %u rounds, %u messages in %.1f s; posted at rank 2: %u, at rank 1: %u at the "
	       "end; %u of %u messages to rank 1 on the liveness lane (%s)\n", rounds, sent,
	       (test_now_ms() - t0) / 1000, end, end1, (unsigned)ddss_verbs_liveness_sent(t2),
	       lane_sent, srq ? "SRQ: some must" : "no SRQ: none may");
	CU_ASSERT_EQUAL(end, start);
	CU_ASSERT_EQUAL(end1, start1);
	CU_ASSERT_EQUAL(lane_received, lane_sent);
	if (srq) {
		CU_ASSERT_TRUE(ddss_verbs_liveness_sent(t2) > 0);
	} else {
		CU_ASSERT_EQUAL(ddss_verbs_liveness_sent(t2), 0);
	}
	CU_ASSERT_EQUAL(received[1], sent);
	CU_ASSERT_EQUAL(bad_payload, 0);
	CU_ASSERT_EQUAL(ddss_tp_peer_info(t1, 2, &info), 0);
	CU_ASSERT_EQUAL(info.state, DDSS_TP_PEER_UP);
out:
	ddss_tp_close(t1);
	ddss_tp_close(t2);
	free(p1);
	free(p2);
}

static void test_traffic_class(void)
{
	static const char *const bad[] = { "256", "-1", "abc", "12x" };
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config cfg = {
		.rank = 1, .size = 1, .group = 0x27, .nodes = nodes, .listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 10000,
		.connect_timeout_ms = 5000,
	};
	uint64_t *pool = test_alloc_pool(POOL_LEN);
	struct ddss_tp *tp = NULL;
	struct ddss_tp_mr *mr;
	uint64_t old = 0;

	nodes_init(nodes);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("DDSS_TRAFFIC_CLASS", bad[i], 1);
		CU_ASSERT_EQUAL(ddss_tp_open("verbs", &cfg, &tp), -EINVAL);
	}
	/* DSCP 26 (AF31), a usual lossless class. */
	setenv("DDSS_TRAFFIC_CLASS", "104", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("verbs", &cfg, &tp), 0);
	CU_ASSERT_EQUAL(ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr), 0);
	CU_ASSERT_EQUAL(ddss_tp_start(tp), 0);
	pool[0] = 3;
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, 1, 0, 1, &old), 0);
	CU_ASSERT_EQUAL(old, 3);
	ddss_tp_close(tp);
	unsetenv("DDSS_TRAFFIC_CLASS");
	free(pool);
}

/*
 * A reconnect behind a slow teardown of the broken QP (DDSS_VERBS_SLOW_TEARDOWN_MS, longer
 * than the 3 s a reconnect to a peer that was up has) still gets its attempt: the 3 s count
 * from when the old QP is freed. Before, they ran out during the teardown and the
 * reconnect failed with -ETIMEDOUT, though the peer was there to answer.
 */
#define SLOW_TEARDOWN_MS 3500

static void test_slow_teardown(void)
{
	struct ddss_tp_node nodes[2];
	uint64_t *p1 = test_alloc_pool(POOL_LEN), *p2 = test_alloc_pool(POOL_LEN);
	struct ddss_tp *t1, *t2;
	unsigned sent = 0;
	double t0, took;
	char ms[16];
	int r;

	nodes_init(nodes);
	received[1] = 0;
	bad_payload = 0;
	/* Read at open: a value out of range refuses to open. */
	setenv("DDSS_VERBS_SLOW_TEARDOWN_MS", "60001", 1);
	CU_ASSERT_PTR_NULL(open_rank(nodes, 1, p1));
	snprintf(ms, sizeof(ms), "%d", SLOW_TEARDOWN_MS);
	setenv("DDSS_VERBS_SLOW_TEARDOWN_MS", ms, 1);
	t1 = open_rank(nodes, 1, p1);
	unsetenv("DDSS_VERBS_SLOW_TEARDOWN_MS");
	t2 = open_rank(nodes, 2, p2);
	first_message(t1, t2, &sent);

	CU_ASSERT_EQUAL(ddss_tp_peer_disconnect(t1, 2), 0);
	t0 = test_now_ms();
	r = ddss_tp_peer_connect(t1, 2);
	took = test_now_ms() - t0;
	printf("\n  reconnect behind a %d ms teardown: %d (%s) after %.1f s\n", SLOW_TEARDOWN_MS,
	       r, ddss_strerror(r), took / 1000);
	CU_ASSERT_EQUAL(r, 0);
	CU_ASSERT_TRUE(took >= SLOW_TEARDOWN_MS); /* the teardown was that slow */
	/* And the new connection carries messages, in order after the first. */
	CU_ASSERT_EQUAL(ddss_tp_msg_send(t1, 2, TAG_ORDERED, &sent, sizeof(sent)), 0);
	sent++;
	CU_ASSERT_TRUE(wait_count(&received[1], sent));
	CU_ASSERT_EQUAL(received[1], sent);
	CU_ASSERT_EQUAL(bad_payload, 0);
	ddss_tp_close(t1);
	ddss_tp_close(t2);
	free(p1);
	free(p2);
}

/*
 * A message handler replies over a connection that broke: the reply reconnects on the
 * receive thread, and the broken QP is freed first. Its messages (it took liveness ones,
 * with an SRQ) are polled by the receive thread, which is busy running this handler: a
 * teardown that waited for that pass waited for itself (1 s, a stall, a warning) and held
 * every message to this rank meanwhile. Without an SRQ the outgoing QP takes none, and
 * nothing is waited for either way.
 */
static void test_handler_reply(void)
{
	struct ddss_tp_node nodes[2];
	uint64_t *p1 = test_alloc_pool(POOL_LEN), *p2 = test_alloc_pool(POOL_LEN);
	struct ddss_tp *t1, *t2;
	unsigned sent = 0;

	nodes_init(nodes);
	received[1] = 0;
	bad_payload = 0;
	t1 = open_rank(nodes, 1, p1);
	t2 = open_rank(nodes, 2, p2);
	first_message(t1, t2, &sent);
	ping_tp = t1;
	ping_reply_rc = 1;
	ping_replied = 0;

	CU_ASSERT_EQUAL(ddss_tp_peer_disconnect(t1, 2), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_msg_send(t2, 1, TAG_PING, &sent, sizeof(sent)), 0);
	sent++;
	CU_ASSERT_TRUE(wait_count(&received[1], sent));
	/* The reply may land before its send returns on rank 1's receive thread. */
	CU_ASSERT_TRUE(wait_count(&ping_replied, 1));
	printf("\n  reply from rank 1's handler: %d; teardown stalls at rank 1: %lu\n",
	       ping_reply_rc, ddss_verbs_teardown_stalls(t1));
	CU_ASSERT_EQUAL(ping_reply_rc, 0);
	CU_ASSERT_EQUAL(ddss_verbs_teardown_stalls(t1), 0);
	/* The receive thread serves on: one more ordered message, in order. */
	CU_ASSERT_EQUAL(ddss_tp_msg_send(t1, 2, TAG_ORDERED, &sent, sizeof(sent)), 0);
	sent++;
	CU_ASSERT_TRUE(wait_count(&received[1], sent));
	CU_ASSERT_EQUAL(received[1], sent);
	CU_ASSERT_EQUAL(bad_payload, 0);
	ping_tp = NULL;
	ddss_tp_close(t1);
	ddss_tp_close(t2);
	free(p1);
	free(p2);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	test_rdma_host_or_skip(host, sizeof(host));
	base_port = (uint16_t)(30000 + (getpid() % 5000) * 4);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("verbs fabric errors", NULL, NULL);
	CU_add_test(suite, "DDSS_TRAFFIC_CLASS", test_traffic_class);
	CU_add_test(suite, "disconnect loop keeps every receive buffer", test_disconnect_loop);
	CU_add_test(suite, "a reconnect behind a slow teardown", test_slow_teardown);
	CU_add_test(suite, "a handler's reply over a broken connection", test_handler_reply);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
