/*
 * tcp, coordinator mode: once a rank was cut off and readmitted as a new process, nothing
 * its old process sent is served, not even what still sat unread in the home's socket
 * (src/net/tcp/tcp_serve.c, request_may_act; docs/transport.md, "A rank taken over by a
 * new process").
 *
 * Two in-process tcp transports on loopback with incarnations: rank 1 (A, the home) and
 * rank 2 (B, the old process). Steps:
 *  1. B sends A a message whose handler holds A's progress thread, the only thread that
 *     serves requests;
 *  2. B sends a second such message, then posts a plain write of OLD_VALUE to word 0 of
 *     A's pool and a fetch&add of 1 to word 1; the test waits until all of it sits in
 *     A's socket;
 *  3. the first hold ends: A's progress thread reads the three in one go and holds again
 *     in the second message's handler, the write and the fetch&add read but not served;
 *  4. A declares rank 2 dead (the cut shuts B's connection down) and readmits it as a
 *     new incarnation, generation 2: the refusal is cleared;
 *  5. the second hold ends: A's progress thread goes on with what it had read.
 * Checked: neither request lands in A's pool, and B learns that they failed. Before the
 * check of the connection's generation (2026-12-07) both landed: a home could serve a
 * dead writer's late copy over a mark it had just settled for it (coherence/
 * coh_readmit.c).
 */
#include "common/test_util.h"
#include "common/tp_hold.h"
#include "common/tp_pair.h"
#include "net/tcp/tcp.h"
#include "net/tcp/tcp_wire.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define TAG_HOLD 42
#define WAIT_MS TP_HOLD_MS
#define FIRST_VALUE 0x1111111111111111ull
#define OLD_VALUE 0x0bad0bad0bad0badull

static const uint64_t incarnations[3] = { 0, 1, 1 };
static const uint32_t generations[3] = { 0, 1, 1 };

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0x7ead, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 3000, .incarnations = incarnations,
		.generations = generations,
	};

	if (rank == 1)
		cfg.handlers = (struct ddss_tp_handlers){ .on_msg = tp_hold_on_msg };
	tp_proc_open(p, &cfg);
}

/* Bytes A has not read yet from its connection of rank 2. */
static int unread_of_2(struct ddss_tp *tp)
{
	struct tcp_tp *t = (struct tcp_tp *)tp; /* base first: tcp.h */
	int n = -1;

	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s; s = s->next)
		if (s->peer == 2 && ioctl(s->fd, FIONREAD, &n) < 0)
			n = -1;
	pthread_mutex_unlock(&t->served_mu);
	return n;
}

/* A bounded poll until A's socket holds at least @bytes of rank 2's. */
static bool wait_unread(struct ddss_tp *tp, int bytes)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;

	while (unread_of_2(tp) < bytes && ddss_now_ns() < give_up)
		usleep(1000);
	return unread_of_2(tp) >= bytes;
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	uint64_t old_value = OLD_VALUE;
	struct ddss_tp_req write_req, fadd_req;
	struct tp_proc a, b;
	int lfd[2], r;

	tp_pair_listen(nodes, lfd, 2);
	open_proc(&a, 1, nodes, lfd[0]);
	open_proc(&b, 2, nodes, lfd[1]);
	a.pool[0] = FIRST_VALUE;
	tp_hold_on(2, TAG_HOLD);

	/* 1: B connects and parks A's progress thread. */
	r = tp_hold_park(b.tp, 1);
	TEST_CHECK(2, r == 0, "parking A's progress thread (the hold message sent, its handler "
		   "holding): %d (%s)", r, ddss_strerror(r));
	/* 2: a second hold, and plain requests behind it, all in A's socket. */
	if (!test_failures) {
		r = ddss_tp_msg_send(b.tp, 1, TAG_HOLD, "h", 1);
		TEST_CHECK(2, r == 0, "the second hold message: %d", r);
		r = ddss_tp_post_write(b.tp, 1, 0, &old_value, sizeof(old_value), &write_req);
		TEST_CHECK(2, r == 0, "posting the write: %d", r);
		r = ddss_tp_post_fadd(b.tp, 1, 8, 1, &fadd_req);
		TEST_CHECK(2, r == 0, "posting the fetch&add: %d", r);
		TEST_CHECK(1, wait_unread(a.tp, 3 * (int)TCP_WIRE_HDR_LEN),
			   "B's messages never reached A's socket (%d bytes)", unread_of_2(a.tp));
	}
	if (test_failures) {
		tp_hold_let_go();
		return 1;
	}
	/* 3: A reads them all and holds again in the second message's handler. */
	tp_hold_let_go();
	TEST_CHECK(1, tp_hold_wait_held(), "A's handler never got the second message");
	TEST_CHECK(1, unread_of_2(a.tp) == 0, "A left %d bytes of B's unread",
		   unread_of_2(a.tp));
	/* 4: A cuts the old process off and lets a new one of rank 2 in (its address is
	 * B's, but nobody connects: only the door's state matters here). */
	ddss_tp_peer_refuse(a.tp, 2);
	TEST_CHECK(1, ddss_tp_peer_cut(a.tp, 2), "rank 2 is not cut off after its refusal");
	r = ddss_tp_peer_readmit(a.tp, 2, &nodes[1], 2, 2);
	TEST_CHECK(1, r == 0, "readmitting rank 2: %d (%s)", r, ddss_strerror(r));
	TEST_CHECK(1, !ddss_tp_peer_refused(a.tp, 2), "rank 2 is still refused");

	/* 5: the second hold ends; B's requests end, whatever A did with them. */
	tp_hold_let_go();
	r = ddss_tp_wait(b.tp, &write_req, WAIT_MS);
	printf("rank 2: the old process's write: %d (status %d, %s)\n", r, write_req.status,
	       ddss_strerror(write_req.status));
	r = ddss_tp_wait(b.tp, &fadd_req, WAIT_MS);
	printf("rank 2: the old process's fetch&add: %d (status %d, %s)\n", r, fadd_req.status,
	       ddss_strerror(fadd_req.status));
	printf("rank 1: word 0 %#llx, word 1 %#llx\n",
	       (unsigned long long)__atomic_load_n(&a.pool[0], __ATOMIC_SEQ_CST),
	       (unsigned long long)__atomic_load_n(&a.pool[1], __ATOMIC_SEQ_CST));
	TEST_CHECK(1, __atomic_load_n(&a.pool[0], __ATOMIC_SEQ_CST) == FIRST_VALUE,
		   "the old process's write landed after rank 2 was readmitted");
	TEST_CHECK(1, __atomic_load_n(&a.pool[1], __ATOMIC_SEQ_CST) == 0,
		   "the old process's fetch&add landed after rank 2 was readmitted");
	TEST_CHECK(2, write_req.status != 0 && fadd_req.status != 0,
		   "the old process was told its requests succeeded (%d, %d)", write_req.status,
		   fadd_req.status);

	tp_proc_close(&b);
	tp_proc_close(&a);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
