/*
 * The tcp provider's connect to a rank whose host drops its SYNs (powered off, cut off):
 * bounded by the connect timeout, and ended by the rank's refusal; and its handshake with
 * a rank whose kernel accepts but which never answers (frozen), ended by the refusal too.
 *
 * One transport runs in this process as rank 1 of 3. "Rank 2" is a listening socket on
 * loopback with a backlog of 0 whose one place is taken and that never accepts: Linux
 * drops further SYNs to it, as a host that is gone would. "Rank 3" is a listening socket
 * that never accepts either, with room in its queue: the kernel completes our connect, and
 * nobody answers our hello, as for a frozen process. Checked:
 *  1. a read of rank 2 fails with -ETIMEDOUT after the connect timeout (3 s), not after
 *     the kernel's SYN retries (about 2 minutes: a blocking connect(2), with the
 *     channel's connect_mu held, before the fix);
 *  2. a read of rank 2 that waits in its connect ends with -EHOSTDOWN soon after rank 2
 *     is refused (as the heartbeat thread refuses a rank it declares dead), and the
 *     refusal itself does not wait for the connect;
 *  3. a read of rank 3 that waits in its handshake ends with -EHOSTDOWN soon after rank 3
 *     is refused, and the refusal does not wait for the handshake (before the fix both
 *     waited out the handshake's bound, the connect timeout here: 3 s).
 *  4. "Rank 4" is a second transport in this process, read once (so our channel to it was
 *     up) and then closed, its listening socket kept open by the test: a reconnect meets a
 *     handshake nobody answers, as with a rank that froze. While one thread waits in that
 *     handshake, a thread with a connect bound of its own (100 ms, as the daemon's lane
 *     sets) fails its read within about that bound instead of waiting for the other's
 *     attempt (before the fix: the handshake's bound, 4 s here).
 * SKIP when this kernel answers SYNs to a full listener.
 */
#include "common/test_util.h"
#include "common/tp_reader.h"
#include "net/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define POOL_LEN 65536
#define CONNECT_TIMEOUT_MS 3000
#define RESULT_WAIT_MS 15000 /* far below the SYN retries, far above the connect timeout */
#define OP_TIMEOUT_MS 4000   /* the handshake's bound for a rank that was up (case 4) */
#define THREAD_BOUND_MS 100  /* case 4's bounded thread, as the daemon's lane */
#define BOUNDED_WAIT_MS 1500 /* its read's limit: the bound, with slack for a loaded machine */

static struct ddss_tp *tp, *tp4;
static uint16_t rank4_port;
static uint16_t full_port;

static int loopback_socket(uint16_t *port_p, int backlog)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(*port_p),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	/* Rank 4's port is shared (case 4): *port_p 0 is any free port, else that one. */
	if (port_p == &rank4_port)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, backlog) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		close(fd);
		return -1;
	}
	*port_p = ntohs(sa.sin_port);
	return fd;
}

/*
 * Connect to the listener until a connect goes unanswered for 300 ms: each answered one
 * stays open and takes a place in its queue. False if every one of @max is answered.
 */
static bool fill_listener(int *fillers, unsigned max)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(full_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	for (unsigned i = 0; i < max; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (fd < 0)
			return false;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) && errno == EINPROGRESS &&
		    poll(&p, 1, 300) == 0) {
			close(fd);
			return true;
		}
		fillers[i] = fd;
	}
	return false;
}

/*
 * Whether /proc/net/tcp lists a socket in @state (1 established, 2 SYN_SENT) that goes to
 * loopback @port (@at_port false: ours, connecting to it) or sits at it (@at_port true:
 * the listener's side), with unread bytes queued if @rx (our hello, at a connection rank 3
 * never accepts).
 */
static bool socket_seen(uint16_t port, bool at_port, unsigned state, bool rx)
{
	char line[256], want[16];
	unsigned st, tx, rxq;
	bool seen = false;
	FILE *f = fopen("/proc/net/tcp", "r");

	if (!f)
		return false;
	snprintf(want, sizeof(want), "0100007F:%04X", port);
	while (!seen && fgets(line, sizeof(line), f)) {
		char local[32], remote[32];

		if (sscanf(line, " %*u: %31s %31s %x %x:%x", local, remote, &st, &tx, &rxq) == 5)
			seen = st == state && (!rx || rxq > 0) &&
			       !strcmp(at_port ? local : remote, want);
	}
	fclose(f);
	return seen;
}

int main(void)
{
	struct ddss_tp_node nodes[4] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 },
					 { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_tp_config cfg = {
		.rank = 1, .size = 4, .group = 0x77, .nodes = nodes,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = OP_TIMEOUT_MS,
		.connect_timeout_ms = CONNECT_TIMEOUT_MS,
	};
	struct ddss_tp_config cfg4;
	int fillers[8], full, lfd, silent, l4, l4_again;
	void *pool = test_alloc_pool(POOL_LEN), *pool4 = test_alloc_pool(POOL_LEN);
	struct ddss_tp_mr *mr, *mr4;
	uint64_t v;
	int64_t t0, refuse_ns;
	int64_t read_ns;
	int r;

	full = loopback_socket(&full_port, 0);
	lfd = loopback_socket(&nodes[0].port, 128);
	silent = loopback_socket(&nodes[2].port, 128);
	l4 = loopback_socket(&rank4_port, 128);
	nodes[3].port = rank4_port;
	if (full < 0 || lfd < 0 || silent < 0 || l4 < 0) {
		printf("FAIL: loopback sockets\n");
		return 1;
	}
	nodes[1].port = full_port;
	if (!fill_listener(fillers, 8)) {
		printf("SKIP: this kernel answers SYNs to a full listener\n");
		return 77;
	}
	cfg.listen_fd = lfd;
	if (ddss_tp_open("tcp", &cfg, &tp) || ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr) ||
	    ddss_tp_start(tp)) {
		printf("FAIL: cannot start the transport\n");
		return 1;
	}

	/* 1: the connect timeout ends it. */
	tp_reader_start(tp, 2);
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("1. the read of a rank that drops SYNs: %d (%s) after %lld ms\n", r,
	       ddss_strerror(r), (long long)(read_ns / 1000000));
	TEST_CHECK(1, r == -ETIMEDOUT, "read: %d, not -ETIMEDOUT", r);
	TEST_CHECK(1, read_ns >= (CONNECT_TIMEOUT_MS - 100) * 1000000ll, "ended early");

	/* 2: the refusal ends it. */
	tp_reader_start(tp, 2);
	t0 = ddss_now_ns();
	while (!socket_seen(full_port, false, 2, false) && ddss_now_ns() - t0 < 2000000000ll)
		usleep(1000); /* a bounded poll of the kernel's socket table */
	TEST_CHECK(1, socket_seen(full_port, false, 2, false), "no connect to rank 2 under way");
	t0 = ddss_now_ns();
	ddss_tp_peer_refuse(tp, 2);
	refuse_ns = ddss_now_ns() - t0;
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("2. refused while connecting: the refusal took %lld ms, the read ended with %d "
	       "(%s) %lld ms after it\n", (long long)(refuse_ns / 1000000), r, ddss_strerror(r),
	       (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(1, r == -EHOSTDOWN, "read: %d, not -EHOSTDOWN", r);
	TEST_CHECK(1, refuse_ns < 1000000000ll, "the refusal waited for the connect");
	TEST_CHECK(1, ddss_now_ns() - t0 < 1000000000ll, "the read outlived the refusal");

	/* 3: the refusal ends a handshake nobody answers. */
	tp_reader_start(tp, 3);
	t0 = ddss_now_ns();
	while (!socket_seen(nodes[2].port, true, 1, true) && ddss_now_ns() - t0 < 2000000000ll)
		usleep(1000); /* a bounded poll of the kernel's socket table */
	TEST_CHECK(1, socket_seen(nodes[2].port, true, 1, true), "no hello waiting at rank 3");
	t0 = ddss_now_ns();
	ddss_tp_peer_refuse(tp, 3);
	refuse_ns = ddss_now_ns() - t0;
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("3. refused while in the handshake: the refusal took %lld ms, the read ended with "
	       "%d (%s) %lld ms after it\n", (long long)(refuse_ns / 1000000), r,
	       ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(1, r == -EHOSTDOWN, "read: %d, not -EHOSTDOWN", r);
	TEST_CHECK(1, refuse_ns < 1000000000ll, "the refusal waited for the handshake");
	TEST_CHECK(1, ddss_now_ns() - t0 < 1000000000ll, "the read outlived the refusal");

	/* 4: a thread with its own bound does not wait for another's reconnect. */
	cfg4 = cfg;
	cfg4.rank = 4;
	cfg4.listen_fd = l4;
	if (ddss_tp_open("tcp", &cfg4, &tp4) ||
	    ddss_tp_mem_register(tp4, pool4, POOL_LEN, true, &mr4) || ddss_tp_start(tp4)) {
		printf("FAIL: cannot start rank 4\n");
		return 1;
	}
	r = ddss_tp_read(tp, 4, 0, &v, sizeof(v));
	TEST_CHECK(1, r == 0, "the first read of rank 4: %d", r);
	/* A second listener on its port (SO_REUSEPORT) that accepts and never answers; once
	 * rank 4 has closed its own, every connection to the port comes to it. */
	l4_again = loopback_socket(&rank4_port, 128);
	TEST_CHECK(1, l4_again >= 0, "cannot listen at rank 4's port too");
	ddss_tp_close(tp4); /* its connections and its listening socket close */
	/* Our connection to it may still read up: a read with a short bound finds it gone
	 * (or makes a reconnect of its own, cut at the bound). */
	ddss_tp_set_thread_connect_bound(THREAD_BOUND_MS);
	r = ddss_tp_read(tp, 4, 0, &v, sizeof(v));
	ddss_tp_set_thread_connect_bound(0);
	TEST_CHECK(1, r != 0, "a read of the closed rank 4 succeeded");
	tp_reader_start(tp, 4);
	t0 = ddss_now_ns();
	while (!socket_seen(nodes[3].port, true, 1, true) && ddss_now_ns() - t0 < 3000000000ll)
		usleep(1000); /* a bounded poll of the kernel's socket table */
	TEST_CHECK(1, socket_seen(nodes[3].port, true, 1, true), "no hello waiting at rank 4");
	ddss_tp_set_thread_connect_bound(THREAD_BOUND_MS);
	t0 = ddss_now_ns();
	r = ddss_tp_read(tp, 4, 0, &v, sizeof(v));
	refuse_ns = ddss_now_ns() - t0;
	ddss_tp_set_thread_connect_bound(0);
	printf("4. a read with a %d ms bound while another thread reconnects: %d (%s) after "
	       "%lld ms\n", THREAD_BOUND_MS, r, ddss_strerror(r), (long long)(refuse_ns / 1000000));
	TEST_CHECK(1, r != 0, "the bounded read of a rank that does not answer succeeded");
	TEST_CHECK(1, refuse_ns < BOUNDED_WAIT_MS * 1000000ll,
		   "the bounded read waited %lld ms for the other thread's reconnect",
		   (long long)(refuse_ns / 1000000));
	ddss_tp_peer_refuse(tp, 4); /* ends the other thread's handshake */
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("   the unbounded read ended with %d (%s)\n", r, ddss_strerror(r));
	TEST_CHECK(1, r != 0, "the unbounded read of a rank that does not answer succeeded");

	ddss_tp_close(tp);
	if (l4_again >= 0)
		close(l4_again);
	free(pool4);
	close(silent);
	close(full);
	free(pool);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
