/*
 * Coordinator mode's readmission (src/net/readmit.c) against a death declared just before
 * it: the old incarnation is cut, the new one stays let in. One process, rank 1 of 3, with
 * incarnations as a joined member has them; ranks 2 and 3 never run (readmitting a rank
 * needs only its address).
 *
 * One view can remove a rank and let its new process in, while the heartbeat thread is in
 * the middle of a round: here the readmit handler for rank 2 declares rank 3 dead and asks
 * for rank 3's readmission, after that round's refusals. Checked: rank 3's new incarnation
 * is let in, and a later round does not refuse it. (Before the fix the death waited for the
 * next round's refusals, which then shut the new incarnation out for good.)
 *
 * Then a handler that says -EBUSY (the layers above are not ready: coherence settles the
 * old process's marks only once it is cut off, core/ctx.c): that readmission waits, the
 * rank stays refused, and the next round asks the handler again and lets it in.
 */
#include "common/test_util.h"
#include "net/net.h"
#include "net/nodes.h"
#include "net/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define POOL_LEN 65536
#define WAIT_MS 10000

static struct ddss_net *net;
static struct ddss_tp_node nodes[3];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned calls_for_2;
static bool refused_3_later;
static bool busy_next;       /* the next call for rank 2 says -EBUSY */
static bool refused_at_retry; /* rank 2 was still refused when the handler was asked again */

static int on_readmit(void *arg, uint32_t rank)
{
	int r = 0;

	(void)arg;
	if (rank != 2)
		return 0;
	pthread_mutex_lock(&mu);
	calls_for_2++;
	if (calls_for_2 == 4)
		refused_at_retry = ddss_tp_peer_refused(ddss_net_tp(net), 2);
	if (busy_next) {
		busy_next = false;
		r = -EBUSY;
	}
	if (calls_for_2 == 1) {
		/* The view that let rank 2 in also removed rank 3 and let its new process in. */
		ddss_net_declare_dead(net, 3);
		ddss_net_readmit(net, 3, &nodes[2], 2, 1);
	} else if (calls_for_2 == 2) {
		/* A later round: its refusals have run. */
		refused_3_later = ddss_tp_peer_refused(ddss_net_tp(net), 3);
	}
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return r;
}

static bool wait_calls(unsigned want)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&mu);
	while (calls_for_2 < want && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	pthread_mutex_unlock(&mu);
	return calls_for_2 >= want;
}

/* A loopback port nobody listens on (bound, then closed). */
static uint16_t free_port(int *listen_fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		printf("FAIL: loopback socket\n");
		exit(1);
	}
	if (listen_fd && !listen(fd, 16))
		*listen_fd = fd;
	else
		close(fd);
	return ntohs(sa.sin_port);
}

int main(void)
{
	uint64_t incarnations[4] = { 0, 1, 1, 1 };
	uint32_t generations[4] = { 0, 1, 1, 1 };
	struct ddss_net_env env = {
		.rank = 1, .size = 3, .nodes = nodes, .group = 0x77,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 2000,
		.connect_timeout_ms = 1000, .peer_timeout_ms = 400,
		.incarnations = incarnations, .generations = generations,
	};
	void *pool = test_alloc_pool(POOL_LEN);
	bool in;

	strcpy(env.transport, "tcp");
	for (unsigned i = 0; i < 3; i++)
		snprintf(nodes[i].host, sizeof(nodes[i].host), "127.0.0.1");
	nodes[0].port = free_port(&env.listen_fd);
	nodes[1].port = free_port(NULL);
	nodes[2].port = free_port(NULL);
	if (ddss_net_open(&env, &net) || ddss_net_start(net, pool, POOL_LEN)) {
		printf("FAIL: cannot start the net\n");
		return 1;
	}
	ddss_net_on_readmit(net, on_readmit, NULL);

	ddss_net_declare_dead(net, 2);
	TEST_CHECK(1, ddss_net_readmit(net, 2, &nodes[1], 2, 1) == 0, "readmit 2");
	TEST_CHECK(1, wait_calls(1), "rank 2 was not readmitted");
	/* Rank 3's readmission ran in the same round, after rank 2's. */
	for (double t0 = test_now_ms(); ddss_tp_peer_refused(ddss_net_tp(net), 3) &&
					test_now_ms() - t0 < WAIT_MS;)
		usleep(1000); /* a bounded poll of the door's state */
	in = !ddss_tp_peer_refused(ddss_net_tp(net), 3);
	TEST_CHECK(1, in, "rank 3's new incarnation was not let in");
	/* Rank 2 replaced once more makes later rounds, and its handler looks. */
	ddss_net_declare_dead(net, 2);
	TEST_CHECK(1, ddss_net_readmit(net, 2, &nodes[1], 3, 1) == 0, "readmit 2 again");
	TEST_CHECK(1, wait_calls(2), "no later round");
	printf("rank 3's new incarnation %s, and %s after a later round\n",
	       in ? "let in" : "not let in", refused_3_later ? "refused" : "still in");
	TEST_CHECK(1, !refused_3_later, "a later round refused rank 3's new incarnation");
	/* The handler says -EBUSY once: rank 2 waits for the next round, then comes in. */
	for (double t0 = test_now_ms(); ddss_tp_peer_refused(ddss_net_tp(net), 2) &&
					test_now_ms() - t0 < WAIT_MS;)
		usleep(1000); /* the last readmission's door, as above */
	pthread_mutex_lock(&mu);
	busy_next = true;
	pthread_mutex_unlock(&mu);
	ddss_net_declare_dead(net, 2);
	TEST_CHECK(1, ddss_net_readmit(net, 2, &nodes[1], 4, 1) == 0, "readmit 2, held back");
	TEST_CHECK(1, wait_calls(4), "the held-back readmission was never asked again");
	for (double t0 = test_now_ms(); ddss_tp_peer_refused(ddss_net_tp(net), 2) &&
					test_now_ms() - t0 < WAIT_MS;)
		usleep(1000);
	in = !ddss_tp_peer_refused(ddss_net_tp(net), 2);
	printf("a handler's -EBUSY: rank 2 %s when asked again, %s after\n",
	       refused_at_retry ? "still refused" : "already let in", in ? "let in" : "refused");
	TEST_CHECK(1, refused_at_retry, "rank 2 was let in although its handler said -EBUSY");
	TEST_CHECK(1, in, "rank 2 was not let in after its handler said yes");
	ddss_net_close(net);
	free(pool);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
