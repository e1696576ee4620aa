/*
 * tcp: a channel's socket is watched for its far end closing only while the peer has no
 * connection to us (tcp_chan.c, tcp_chan_watch_close), and a peer that dies in that state
 * is still seen down without a send.
 *
 * Two in-process tcp transports of a group of 2 on loopback, rank 1 (A) and rank 2 (B),
 * no peer timeout (so no heartbeat speaks for B). Steps:
 *  1. A reads B's memory and B reads A's: each has a channel to the other and serves the
 *     other's. Checked: neither channel's socket is in the progress thread's epoll set
 *     (a watched socket costs every reply the epoll callback; before, it always was);
 *  2. B gives up its channel to A, as an operation timeout of B's would. Checked: A still
 *     reads B up, A's channel to B is watched now, and A still reads B's memory;
 *  3. B's transport closes, as its process would die. Checked: A hears "rank 2 down" within
 *     a few seconds, with nothing sent to B. Without the watch nothing would tell it.
 */
#include "common/test_util.h"
#include "common/tp_pair.h"
#include "net/tcp/tcp.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 5000
#define MARK_A 0x41ull
#define MARK_B 0x42ull

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned downs_of_2; /* A's "rank 2 is down" reports */

static void on_peer(void *arg, uint32_t rank, enum ddss_tp_peer_state state)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	if (rank == 2 && state == DDSS_TP_PEER_DOWN) {
		downs_of_2++;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
}

static unsigned downs(void)
{
	unsigned n;

	pthread_mutex_lock(&mu);
	n = downs_of_2;
	pthread_mutex_unlock(&mu);
	return n;
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd,
		      bool handlers)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0xc105e, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 3000,
	};

	if (handlers)
		cfg.handlers = (struct ddss_tp_handlers){ .on_peer = on_peer };
	tp_proc_open(p, &cfg);
}

static struct tcp_chan *chan_to(struct ddss_tp *tp, uint32_t peer)
{
	return &((struct tcp_tp *)tp)->peers[peer].chan; /* base first: tcp.h */
}

/* The events the channel's socket is registered for, read under the lock that writes them. */
static uint32_t watched(struct tcp_chan *ch)
{
	uint32_t mask;

	pthread_mutex_lock(&ch->send_mu);
	mask = ch->ev_mask;
	pthread_mutex_unlock(&ch->send_mu);
	return mask;
}

/* Whether @tp serves a connection from @rank; read under the locks its close takes, so a
 * false means the close, and what it decided, are done. */
static bool serves(struct ddss_tp *tp, uint32_t rank)
{
	struct tcp_tp *t = (struct tcp_tp *)tp;
	bool found = false;

	pthread_mutex_lock(&t->serve_state_mu);
	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s; s = s->next)
		found |= s->peer == rank;
	pthread_mutex_unlock(&t->served_mu);
	pthread_mutex_unlock(&t->serve_state_mu);
	return found;
}

static enum ddss_tp_peer_state state_of_2(struct ddss_tp *tp)
{
	struct ddss_tp_peer_info info = { 0 };

	return ddss_tp_peer_info(tp, 2, &info) ? DDSS_TP_PEER_UNKNOWN : info.state;
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct timespec until;
	struct tp_proc a, b;
	int lfd[2], r;
	int64_t give_up, t0;
	uint64_t v = 0;

	tp_pair_listen(nodes, lfd, 2);
	open_proc(&a, 1, nodes, lfd[0], true);
	open_proc(&b, 2, nodes, lfd[1], false);
	a.pool[0] = MARK_A;
	b.pool[0] = MARK_B;

	/* 1: connected both ways; no socket watched. */
	r = ddss_tp_read(a.tp, 2, 0, &v, sizeof(v));
	TEST_CHECK(1, r == 0 && v == MARK_B, "A's read of B: %d, %#llx", r, (unsigned long long)v);
	r = ddss_tp_read(b.tp, 1, 0, &v, sizeof(v));
	TEST_CHECK(1, r == 0 && v == MARK_A, "B's read of A: %d, %#llx", r, (unsigned long long)v);
	printf("connected both ways: A's channel to B watched for %#x, B's to A for %#x\n",
	       watched(chan_to(a.tp, 2)), watched(chan_to(b.tp, 1)));
	TEST_CHECK(1, watched(chan_to(a.tp, 2)) == 0,
		   "A's channel to B is in the epoll set (%#x) while B is connected to A",
		   watched(chan_to(a.tp, 2)));
	TEST_CHECK(1, watched(chan_to(b.tp, 1)) == 0,
		   "B's channel to A is in the epoll set (%#x) while A is connected to B",
		   watched(chan_to(b.tp, 1)));
	if (test_failures)
		return 1;

	/* 2: B gives up its channel to A; A's served connection closes, A's channel stays. */
	tcp_chan_shutdown(chan_to(b.tp, 1), -ETIMEDOUT);
	give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	while (serves(a.tp, 2) && ddss_now_ns() < give_up)
		usleep(1000); /* a bounded poll of A's list of connections */
	TEST_CHECK(2, !serves(a.tp, 2), "A never closed B's connection");
	printf("B's connection to A closed: rank 2 is %s at A, A's channel watched for %#x\n",
	       state_of_2(a.tp) == DDSS_TP_PEER_UP ? "up" : "not up", watched(chan_to(a.tp, 2)));
	TEST_CHECK(2, state_of_2(a.tp) == DDSS_TP_PEER_UP, "B's cut set it down at A (state %d)",
		   state_of_2(a.tp));
	TEST_CHECK(2, watched(chan_to(a.tp, 2)) & EPOLLRDHUP,
		   "A's channel to B is not watched for its close (%#x)", watched(chan_to(a.tp, 2)));
	v = 0;
	r = ddss_tp_read(a.tp, 2, 0, &v, sizeof(v));
	TEST_CHECK(2, r == 0 && v == MARK_B, "A's read of B after the cut: %d, %#llx", r,
		   (unsigned long long)v);
	TEST_CHECK(2, downs() == 0, "%u down report(s) for rank 2 while it lived", downs());

	/* 3: B dies; A sends nothing and must hear of it. */
	t0 = ddss_now_ns();
	ddss_tp_close(b.tp);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&mu);
	while (!downs_of_2 && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	r = (int)downs_of_2;
	pthread_mutex_unlock(&mu);
	printf("B closed: A heard %d down report(s) for it, %.1f ms later\n", r,
	       (double)(ddss_now_ns() - t0) / 1e6);
	TEST_CHECK(3, r > 0, "A did not hear of B's death in %d ms (state %d)", WAIT_MS,
		   state_of_2(a.tp));

	tp_proc_close(&a);
	free(b.pool); /* its transport was closed above, as its death */
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
