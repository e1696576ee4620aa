/*
 * tcp: the late close of a readmitted rank's old connection must not set the new process
 * down (docs/membership.md "Replacement").
 *
 * Three in-process tcp transports of a group of 2 with incarnations, as coordinator mode
 * runs them, on loopback: rank 1 (A), rank 2's old process (incarnation 10, generation 1)
 * and its new one (incarnation 11, generation 2). Steps:
 *  1. the old process connects to A and sends it a message whose handler holds A's
 *     progress thread, the thread that closes the connections A serves;
 *  2. A refuses rank 2 (the old connection is shut down but, the thread being held, not
 *     closed yet), readmits it as the new process and connects to it: rank 2 reads up;
 *  3. the hold ends, and A's progress thread closes the old process's connection.
 * Checked: rank 2 still reads up at A, A's handler heard no "down" for it after the
 * readmission, and A reads the new process's memory. Before the fix the old connection's
 * close found no other served connection of rank 2 and set it down: A's heartbeats
 * stopped going to the new process, and its locks took it for dead.
 */
#include "common/test_util.h"
#include "common/tp_hold.h"
#include "common/tp_pair.h"
#include "net/tcp/tcp.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_HOLD 41
#define WAIT_MS TP_HOLD_MS
#define MARK 0x6e6577ull /* what the new process keeps in its pool */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned downs_of_2; /* A's "rank 2 is down" reports, counted once readmitted */
static bool counting;

static void on_peer(void *arg, uint32_t rank, enum ddss_tp_peer_state state)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	if (counting && rank == 2 && state == DDSS_TP_PEER_DOWN)
		downs_of_2++;
	pthread_mutex_unlock(&mu);
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd,
		      const uint64_t *incarnations, const uint32_t *generations, bool handlers)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0x5ca1e, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 3000, .incarnations = incarnations,
		.generations = generations,
	};

	if (handlers)
		cfg.handlers = (struct ddss_tp_handlers){ .on_msg = tp_hold_on_msg,
							  .on_peer = on_peer };
	tp_proc_open(p, &cfg);
}

static enum ddss_tp_peer_state state_of_2(struct ddss_tp *tp)
{
	struct ddss_tp_peer_info info = { 0 };

	return ddss_tp_peer_info(tp, 2, &info) ? DDSS_TP_PEER_UNKNOWN : info.state;
}

/* Whether A still serves a connection from rank 2; read under the locks the close takes,
 * so a false means the close, and the state it decided, are done. */
static bool serves_rank_2(struct ddss_tp *tp)
{
	struct tcp_tp *t = (struct tcp_tp *)tp; /* base first: tcp.h */
	bool found = false;

	pthread_mutex_lock(&t->serve_state_mu);
	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s; s = s->next)
		found |= s->peer == 2;
	pthread_mutex_unlock(&t->served_mu);
	pthread_mutex_unlock(&t->serve_state_mu);
	return found;
}

int main(void)
{
	struct ddss_tp_node all[3], nodes_old[2], nodes_new[2]; /* A, old rank 2, new rank 2 */
	const uint64_t inc_old[3] = { 0, 1, 10 }, inc_new[3] = { 0, 1, 11 };
	const uint32_t gen_old[3] = { 0, 1, 1 }, gen_new[3] = { 0, 1, 2 };
	struct tp_proc a, old2, new2;
	int lfd[3], r;
	int64_t give_up;
	uint64_t v = 0;

	tp_pair_listen(all, lfd, 3);
	nodes_old[0] = nodes_new[0] = all[0];
	nodes_old[1] = all[1];
	nodes_new[1] = all[2];
	open_proc(&a, 1, nodes_old, lfd[0], inc_old, gen_old, true);
	open_proc(&old2, 2, nodes_old, lfd[1], inc_old, gen_old, false);
	open_proc(&new2, 2, nodes_new, lfd[2], inc_new, gen_new, false);
	new2.pool[0] = MARK;

	/* 1: the old process connects and parks A's progress thread. */
	tp_hold_on(2, TAG_HOLD);
	r = tp_hold_park(old2.tp, 1);
	TEST_CHECK(1, r == 0, "parking A's progress thread (the old process's message sent, "
		   "its handler holding): %d (%s)", r, ddss_strerror(r));
	TEST_CHECK(1, state_of_2(a.tp) == DDSS_TP_PEER_UP, "rank 2 is not up at A: %d",
		   state_of_2(a.tp));
	if (test_failures)
		return 1;

	/* 2: refused, readmitted as the new process, connected to. */
	ddss_tp_peer_refuse(a.tp, 2);
	r = ddss_tp_peer_readmit(a.tp, 2, &nodes_new[1], 11, 2);
	TEST_CHECK(1, r == 0, "readmit: %d", r);
	pthread_mutex_lock(&mu);
	counting = true;
	pthread_mutex_unlock(&mu);
	r = ddss_tp_peer_connect(a.tp, 2);
	TEST_CHECK(1, r == 0, "connect to the new process: %d (%s)", r, ddss_strerror(r));
	TEST_CHECK(1, state_of_2(a.tp) == DDSS_TP_PEER_UP, "rank 2 not up after the connect: %d",
		   state_of_2(a.tp));
	TEST_CHECK(1, serves_rank_2(a.tp), "the old connection closed while A was held");

	/* 3: the hold ends; the old connection is closed. */
	tp_hold_let_go();
	give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	while (serves_rank_2(a.tp) && ddss_now_ns() < give_up)
		usleep(1000); /* a bounded poll of A's list of connections */
	TEST_CHECK(1, !serves_rank_2(a.tp), "A never closed the old process's connection");
	printf("after the old connection's close: rank 2 is %s at A, %u down report(s)\n",
	       state_of_2(a.tp) == DDSS_TP_PEER_UP ? "up" : "not up", downs_of_2);
	TEST_CHECK(1, state_of_2(a.tp) == DDSS_TP_PEER_UP,
		   "the old connection's close set the new process down (state %d)",
		   state_of_2(a.tp));
	TEST_CHECK(1, downs_of_2 == 0, "%u down report(s) for rank 2 after its readmission",
		   downs_of_2);
	r = ddss_tp_read(a.tp, 2, 0, &v, sizeof(v));
	TEST_CHECK(1, r == 0 && v == MARK, "read of the new process: %d, %#llx", r,
		   (unsigned long long)v);

	tp_proc_close(&old2);
	tp_proc_close(&new2);
	tp_proc_close(&a);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
