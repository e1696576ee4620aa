/*
 * A peer whose host is a name that DNS never answers for: the connect is bounded by the
 * connect timeout, and the rank's refusal ends it at once. Before the fix the lookup
 * (getaddrinfo) ran with the connection's lock held (tcp: connect_mu; verbs: the outgoing
 * connection's mu) for the resolver's whole timeout (timeout:3 attempts:2 here, about 6 s),
 * and the refusal, which the heartbeat thread makes and which needs that lock, waited for it.
 *
 * The process moves into a mount namespace of its own (root), with a resolv.conf that names
 * 127.0.0.1 and a UDP socket there that reads nothing and answers nothing; over tcp into a
 * network namespace of its own too (over verbs the rxe device must stay in sight: run
 * under scripts/rdma-exec, --verbs). One transport runs as rank 1 of 3; ranks 2 and 3 are
 * names. Checked:
 *  1. a read of rank 2 fails with -ETIMEDOUT after the connect timeout (2 s), not after
 *     the resolver's 6 s;
 *  1b. a second read of rank 2, while its first lookup is still under way, waits for
 *     that lookup rather than starting one more (the connection's slot, net/resolve.c: at
 *     most one lookup thread per peer): every query for rank 2's name reaching the server
 *     comes from the first lookup's socket (its source port; the resolver keeps one
 *     socket for all its tries);
 *  2. a read of rank 3 whose lookup is under way (its query seen at the silent server)
 *     ends with -EHOSTDOWN soon after rank 3 is refused, and the refusal does not wait.
 *  3. rank 3, refused in 2 while its lookup goes on, is readmitted as a new process under
 *     the same name: the next read looks the name up afresh (a query from a new port),
 *     rather than joining the old process's lookup still in the connection's slot.
 * SKIP without root or namespaces, when a lookup of a name does not ask DNS here, or (verbs)
 * outside the rxe guest.
 */
#include "common/test_util.h"
#include "common/tp_reader.h"
#include "net/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#define POOL_LEN 65536
#define CONNECT_TIMEOUT_MS 2000
#define RESOLVER_MS 6000     /* resolv.conf below: timeout:3 attempts:2 */
#define RESULT_WAIT_MS 15000 /* far above both */
#define SLACK_MS 1000        /* for a loaded machine */

static struct ddss_tp *tp;
static int hole = -1; /* the DNS server that never answers */

/*
 * Our own mount namespace and resolv.conf, with @own_net a network namespace too (its
 * loopback brought up), and the silent server. 0, or 77 (SKIP) with the reason printed.
 */
static int isolate(bool own_net)
{
	static const char conf[] = "nameserver 127.0.0.1\noptions timeout:3 attempts:2\n";
	char path[] = "/tmp/ddss_resolv.XXXXXX";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ifreq ifr = { 0 };
	int fd, s, r = 0;

	if (geteuid() != 0) {
		printf("SKIP: needs root (namespaces of its own)\n");
		return 77;
	}
	if (unshare(CLONE_NEWNS | (own_net ? CLONE_NEWNET : 0)) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		printf("SKIP: no mount and network namespaces here: %s\n", strerror(errno));
		return 77;
	}
	fd = mkstemp(path);
	if (fd < 0 || write(fd, conf, sizeof(conf) - 1) != (ssize_t)(sizeof(conf) - 1) ||
	    mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL)) {
		printf("SKIP: cannot put a resolv.conf of our own in place: %s\n", strerror(errno));
		r = 77;
	}
	if (fd >= 0)
		close(fd);
	unlink(path); /* the bind mount keeps the file */
	if (r)
		return r;
	if (own_net) {
		s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
		if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) ||
		    (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr))) {
			printf("FAIL: cannot bring up the namespace's loopback: %s\n",
			       strerror(errno));
			return 1;
		}
		close(s);
	}
	hole = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (hole < 0 || bind(hole, (struct sockaddr *)&sa, sizeof(sa))) {
		/* In a network namespace of ours the port is free; elsewhere a real server
		 * may hold it, and would answer. */
		printf("%s: cannot bind the silent DNS server at 127.0.0.1:53: %s\n",
		       own_net ? "FAIL" : "SKIP", strerror(errno));
		return own_net ? 1 : 77;
	}
	return 0;
}

/* Whether a query naming @label (a DNS label, e.g. "node3") reaches the silent server
 * within @ms. Earlier queries for other names are read and dropped. */
static bool query_seen(const char *label, int ms)
{
	int64_t until = ddss_now_ns() + (int64_t)ms * 1000000;
	struct pollfd p = { .fd = hole, .events = POLLIN };
	char buf[512];

	for (;;) {
		int64_t left = (until - ddss_now_ns()) / 1000000;
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = recv(hole, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0 && memmem(buf, (size_t)n, label, strlen(label)))
			return true;
	}
}

/* Read every query waiting at the silent server; note the source ports of those naming
 * @label in @ports (up to @max, each once). How many of those came from a port not in
 * @ports already when @add is false; with @add, how many ports were added. */
static unsigned drain_ports(const char *label, uint16_t *ports, unsigned *n, unsigned max,
			    bool add)
{
	unsigned found = 0;
	char buf[512];

	for (;;) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t got = recvfrom(hole, buf, sizeof(buf), MSG_DONTWAIT,
				       (struct sockaddr *)&from, &len);
		bool known = false;

		if (got < 0)
			return found;
		if (!memmem(buf, (size_t)got, label, strlen(label)))
			continue;
		for (unsigned i = 0; i < *n; i++)
			known |= ports[i] == ntohs(from.sin_port);
		if (known)
			continue;
		found++;
		if (add && *n < max)
			ports[(*n)++] = ntohs(from.sin_port);
	}
}

/* Wait up to @ms for a query naming @label; note its source port in @ports. */
static bool ports_seen(const char *label, uint16_t *ports, unsigned *n, int ms)
{
	struct pollfd p = { .fd = hole, .events = POLLIN };

	for (double t0 = test_now_ms(); !*n && test_now_ms() - t0 < ms;)
		if (poll(&p, 1, 100) > 0)
			drain_ports(label, ports, n, 8, true);
	return *n > 0;
}

static void *probe_lookup(void *arg)
{
	struct addrinfo *res;

	if (!getaddrinfo(arg, "7", NULL, &res))
		freeaddrinfo(res);
	return NULL;
}

/* tcp: rank 1 listens on loopback, here. 0, or 1 with FAIL printed. */
static int tcp_listener(struct ddss_tp_config *cfg, struct ddss_tp_node *me)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 128) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len)) {
		printf("FAIL: a listening socket on loopback: %s\n", strerror(errno));
		return 1;
	}
	snprintf(me->host, sizeof(me->host), "127.0.0.1");
	me->port = ntohs(sa.sin_port);
	cfg->listen_fd = lfd;
	return 0;
}

int main(int argc, char **argv)
{
	bool verbs = argc > 1 && !strcmp(argv[1], "--verbs");
	struct ddss_tp_node nodes[3] = { { "", 0 }, { "node2.ddss.test", 7 },
					 { "node3.ddss.test", 7 } };
	static const uint64_t incarnations[4] = { 0, 1, 1, 1 };
	static const uint32_t generations[4] = { 0, 1, 1, 1 };
	struct ddss_tp_config cfg = {
		.rank = 1, .size = 3, .group = 0x78, .nodes = nodes, .listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 4000,
		.connect_timeout_ms = CONNECT_TIMEOUT_MS, .incarnations = incarnations,
		.generations = generations,
	};
	void *pool;
	struct ddss_tp_mr *mr;
	int64_t t0, refuse_ns;
	pthread_t th;
	int64_t read_ns;
	uint16_t ports3[8];
	unsigned n3 = 0;
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (verbs) {
		test_rdma_host_or_skip(nodes[0].host, sizeof(nodes[0].host));
		/* rdma_cm ports are their own space; one per process id keeps runs apart. */
		nodes[0].port = (uint16_t)(30000 + (getpid() % 10000) * 2);
	}
	r = isolate(!verbs); /* first: unshare wants a process of one thread */
	if (r)
		return r;
	/* The premise: a lookup of a name asks DNS here (nsswitch "hosts: ... dns"). */
	if (pthread_create(&th, NULL, probe_lookup, "probe.ddss.test") || pthread_detach(th)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	if (!query_seen("probe", 3000)) {
		printf("SKIP: a lookup of a name does not ask the DNS server in resolv.conf here\n");
		return 77;
	}
	if (!verbs && tcp_listener(&cfg, &nodes[0]))
		return 1;
	pool = test_alloc_pool(POOL_LEN);
	if (ddss_tp_open(verbs ? "verbs" : "tcp", &cfg, &tp) || ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr) ||
	    ddss_tp_start(tp)) {
		printf("FAIL: cannot start the transport\n");
		return 1;
	}

	/* 1: the connect timeout ends the lookup's wait. */
	tp_reader_start(tp, 2);
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("1. %s: the read of a rank whose name DNS never answers for: %d (%s) after %lld ms "
	       "(connect timeout %d ms, the resolver's %d ms)\n", verbs ? "verbs" : "tcp", r,
	       ddss_strerror(r),
	       (long long)(read_ns / 1000000), CONNECT_TIMEOUT_MS, RESOLVER_MS);
	TEST_CHECK(1, r == -ETIMEDOUT, "read: %d, not -ETIMEDOUT", r);
	TEST_CHECK(1, read_ns < (CONNECT_TIMEOUT_MS + SLACK_MS) * 1000000ll,
		   "the read waited %lld ms, past the connect timeout",
		   (long long)(read_ns / 1000000));

	/* 1b: a second read while the first lookup goes on joins it. */
	{
		uint16_t ports[8];
		unsigned n = 0, strangers;

		drain_ports("node2", ports, &n, 8, true);
		tp_reader_start(tp, 2);
		r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
		strangers = drain_ports("node2", ports, &n, 8, false);
		printf("1b. a second read of rank 2 during its lookup: %d (%s) after %lld ms; "
		       "queries for its name from %u port(s) before, from %u other port(s) "
		       "during it\n", r, ddss_strerror(r), (long long)(read_ns / 1000000), n,
		       strangers);
		TEST_CHECK(1, n >= 1, "the first lookup's query never reached the server");
		TEST_CHECK(1, r == -ETIMEDOUT, "read: %d, not -ETIMEDOUT", r);
		TEST_CHECK(1, strangers == 0, "the second read started a lookup of its own");
	}

	/* 2: the refusal ends it, and does not wait for it. The lookup's port is kept for 3. */
	tp_reader_start(tp, 3);
	TEST_CHECK(1, ports_seen("node3", ports3, &n3, 3000), "no lookup of rank 3's name under way");
	t0 = ddss_now_ns();
	ddss_tp_peer_refuse(tp, 3);
	refuse_ns = ddss_now_ns() - t0;
	r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
	printf("2. refused while its name was looked up: the refusal took %lld ms, the read "
	       "ended with %d (%s) %lld ms after it\n", (long long)(refuse_ns / 1000000), r,
	       ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(1, r == -EHOSTDOWN, "read: %d, not -EHOSTDOWN", r);
	TEST_CHECK(1, refuse_ns < SLACK_MS * 1000000ll, "the refusal waited for the lookup");
	TEST_CHECK(1, ddss_now_ns() - t0 < SLACK_MS * 1000000ll, "the read outlived the refusal");

	/* 3: rank 3, its lookup from 2 still under way, readmitted: looked up afresh. */
	{
		unsigned strangers = 0;
		struct pollfd p = { .fd = hole, .events = POLLIN };

		r = ddss_tp_peer_readmit(tp, 3, &nodes[2], 2, 2);
		TEST_CHECK(1, r == 0, "readmitting rank 3: %d (%s)", r, ddss_strerror(r));
		tp_reader_start(tp, 3);
		for (double t1 = test_now_ms(); !strangers && test_now_ms() - t1 < 3000;)
			if (poll(&p, 1, 100) > 0)
				strangers = drain_ports("node3", ports3, &n3, 8, false);
		r = tp_reader_result(RESULT_WAIT_MS, &read_ns);
		printf("3. rank 3 readmitted under the same name during its old lookup (%u port(s)): "
		       "queries from %u new port(s); the read %d (%s) after %lld ms\n", n3,
		       strangers, r, ddss_strerror(r), (long long)(read_ns / 1000000));
		TEST_CHECK(1, strangers >= 1, "the readmitted rank's name was not looked up afresh");
		TEST_CHECK(1, r == -ETIMEDOUT, "read: %d, not -ETIMEDOUT", r);
	}

	/* Closed with lookups still under way: they end on their own. */
	ddss_tp_close(tp);
	free(pool);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
