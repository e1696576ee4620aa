/*
 * ddss-tp-bench: latency of the transport's one-sided operations next to a raw TCP
 * ping-pong of the same size between the same two processes, measured in the same run.
 *
 *   ddssrun -n 2 ddss-tp-bench [--iters N] [--rounds R] [--size BYTES] [--ops LIST] [--no-pin]
 *                              [--csv]
 *
 * Each rank pins itself (all its threads) to CPU rank-1, so both the raw ping-pong and the
 * transport cross between the same two CPUs; unpinned, the scheduler sometimes runs one
 * pair on a single core and the comparison measures placement, not the transport.
 * Rank 1 measures, rank 2 is the target. Measurements are interleaved in blocks of 25
 * (raw, read, write, cas, fadd, raw, ...) so drift on a shared machine hits all alike.
 * --ops (comma-separated names from op_names, default all) measures only those: a single
 * op runs as one homogeneous loop, as perftest's tools do (scripts/bench-verbs.sh compares
 * each op with perftest that way). The completion mode comes from DDSS_COMPLETION (event |
 * poll). Prints median, p99 and mean in microseconds and each median's ratio to the raw
 * ping-pong median (0 when the ping-pong was not measured).
 *
 *   ddss-tp-bench --protect [--iters N] [--rounds R] [--no-pin] [--csv]
 *
 * The cost of DDSS_TCP_PROTECT (net/tcp/tcp_protect.h), without ddssrun: this process opens
 * three pairs of tcp ranks over loopback with one group secret, one pair per mode (off,
 * integrity, encrypt), rank 2 of each pinned to CPU 1 and rank 1 to CPU 0 (the measuring
 * thread), and measures blocking read (get) and write (put) of 64 B and 4 KiB on all three,
 * interleaved in blocks of BLOCK so drift hits every mode alike; then the throughput of
 * 64 KiB writes, PROTECT_WINDOW in flight. Prints each median's ratio to the off pair's.
 */
#include "net/net.h"
#include "net/auth.h"
#include "net/transport.h"

#include <arpa/inet.h>
#include "bench_util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG_PORT DDSS_MSG_USER_FIRST
#define POOL_LEN (1u << 20)
#define MAX_SIZE (POOL_LEN / 2)
/*
 * Operations take turns in blocks this long, so slow and fast spells of the machine (long
 * under emulation: the same loop can run at half speed for seconds) hit every operation.
 */
#define BLOCK 25

enum bench_op { B_RAW, B_READ, B_WRITE, B_CAS, B_FADD, B_COUNT };
static const char *const op_names[B_COUNT] = { "raw_tcp_pingpong", "read", "write", "cas", "fadd" };
static bool op_on[B_COUNT] = { true, true, true, true, true };

/* --ops LIST: 0, or -1 on an unknown name or an empty list. */
static int parse_ops(const char *list)
{
	char buf[128], *save = NULL;
	bool any = false;

	if (strlen(list) >= sizeof(buf))
		return -1;
	strcpy(buf, list);
	for (int k = 0; k < B_COUNT; k++)
		op_on[k] = false;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k = 0;

		while (k < B_COUNT && strcmp(t, op_names[k]))
			k++;
		if (k == B_COUNT)
			return -1;
		op_on[k] = any = true;
	}
	return any ? 0 : -1;
}

/* ---- the raw TCP ping-pong: rank 2 echoes, rank 1 measures ---- */

static pthread_mutex_t port_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t port_cv = PTHREAD_COND_INITIALIZER;
static uint16_t raw_port;

static void on_port(void *arg, uint32_t from, const void *buf, size_t len)
{
	uint16_t p;

	if (len != sizeof(p))
		return;
	memcpy(&p, buf, sizeof(p));
	pthread_mutex_lock(&port_mu);
	raw_port = p;
	pthread_cond_broadcast(&port_cv);
	pthread_mutex_unlock(&port_mu);
}

static int recv_all(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = recv(fd, (char *)buf + got, len - got, 0);

		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static void *echo_main(void *arg)
{
	int lfd = *(int *)arg, fd, one = 1;
	static char buf[MAX_SIZE];
	size_t size;

	fd = accept(lfd, NULL, NULL);
	close(lfd);
	if (fd < 0)
		return NULL;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (recv_all(fd, &size, sizeof(size)) == 0 && size <= sizeof(buf))
		while (recv_all(fd, buf, size) == 0 && send(fd, buf, size, 0) == (ssize_t)size)
			;
	close(fd);
	return NULL;
}

static int start_echo(struct ddss_net *net, pthread_t *th, int *lfd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	uint16_t port;

	*lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&a, sizeof(a)) || listen(*lfd, 1) ||
	    getsockname(*lfd, (struct sockaddr *)&a, &len))
		return -errno;
	port = ntohs(a.sin_port);
	if (pthread_create(th, NULL, echo_main, lfd))
		return -EAGAIN;
	return ddss_net_send(net, 1, TAG_PORT, &port, sizeof(port));
}

static int connect_raw(size_t size)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd, one = 1;

	pthread_mutex_lock(&port_mu);
	while (!raw_port)
		pthread_cond_wait(&port_cv, &port_mu);
	a.sin_port = htons(raw_port);
	pthread_mutex_unlock(&port_mu);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (send(fd, &size, sizeof(size), 0) != sizeof(size))
		return -1;
	return fd;
}

/* ---- measurement ---- */

static int one_op(struct ddss_tp *tp, enum bench_op op, int raw_fd, void *buf, size_t size)
{
	uint64_t old;

	switch (op) {
	case B_RAW:
		if (send(raw_fd, buf, size, 0) != (ssize_t)size)
			return -EIO;
		return recv_all(raw_fd, buf, size) ? -EIO : 0;
	case B_READ:
		return ddss_tp_read(tp, 2, 0, buf, size);
	case B_WRITE:
		return ddss_tp_write(tp, 2, 0, buf, size);
	case B_CAS:
		return ddss_tp_cas(tp, 2, 8, 0, 0, &old);
	case B_FADD:
		return ddss_tp_fadd(tp, 2, 16, 1, &old);
	default:
		return -EINVAL;
	}
}

static int measure(struct ddss_net *net, const struct bench_opts *o)
{
	struct ddss_tp *tp = ddss_net_tp(net);
	size_t n = (size_t)o->iters * o->rounds;
	double *lat[B_COUNT], med[B_COUNT], p99[B_COUNT], mean[B_COUNT];
	char *buf = calloc(1, o->size);
	int64_t ns0;
	uint64_t tick0;
	double us_per_tick;
	int raw_fd = op_on[B_RAW] ? connect_raw(o->size) : -1;

	if ((op_on[B_RAW] && raw_fd < 0) || !buf) {
		fprintf(stderr, "cannot connect the raw ping-pong\n");
		return 1;
	}
	for (int k = 0; k < B_COUNT; k++)
		lat[k] = calloc(n, sizeof(double));
	/* Warm up every path (connections, caches) before timing. */
	for (int k = 0; k < B_COUNT; k++)
		for (unsigned i = 0; op_on[k] && i < 200; i++)
			if (one_op(tp, (enum bench_op)k, raw_fd, buf, o->size)) {
				fprintf(stderr, "%s failed during warm-up\n", op_names[k]);
				return 1;
			}
	ns0 = ddss_now_ns();
	tick0 = bench_ticks();
	for (unsigned r = 0; r < o->rounds; r++) {
		for (unsigned b = 0; b < o->iters; b += BLOCK) {
			for (int k = 0; k < B_COUNT; k++) {
				for (unsigned i = b; op_on[k] && i < o->iters && i < b + BLOCK; i++) {
					uint64_t t0 = bench_ticks();
					int err = one_op(tp, (enum bench_op)k, raw_fd, buf, o->size);

					if (err) {
						fprintf(stderr, "%s failed: %s\n", op_names[k], strerror(-err));
						return 1;
					}
					lat[k][(size_t)r * o->iters + i] = (double)(bench_ticks() - t0);
				}
			}
		}
	}
	us_per_tick = (double)(ddss_now_ns() - ns0) / 1000.0 / (double)(bench_ticks() - tick0);
	if (raw_fd >= 0)
		close(raw_fd);
	for (int k = 0; k < B_COUNT; k++) {
		double sum = 0;

		if (!op_on[k])
			continue;
		for (size_t i = 0; i < n; i++)
			lat[k][i] *= us_per_tick;

		qsort(lat[k], n, sizeof(double), bench_cmp_double);
		for (size_t i = 0; i < n; i++)
			sum += lat[k][i];
		med[k] = lat[k][n / 2];
		p99[k] = lat[k][n * 99 / 100];
		mean[k] = sum / (double)n;
	}
	if (o->csv)
		printf("transport,completion,op,size,median_us,p99_us,mean_us,ratio_to_raw\n");
	else
		printf("transport=%s completion=%s size=%zu samples=%zu per op, %s\n%-18s %10s %10s %10s %8s\n",
		       ddss_net_transport_name(net), getenv("DDSS_COMPLETION") ? getenv("DDSS_COMPLETION") : "adaptive",
		       o->size, n, o->pin ? "ranks pinned to CPUs 0 and 1" : "unpinned",
		       "op", "median_us", "p99_us", "mean_us", "x_raw");
	for (int k = 0; k < B_COUNT; k++) {
		const char *comp = getenv("DDSS_COMPLETION") ? getenv("DDSS_COMPLETION") : "adaptive";
		double ratio;

		if (!op_on[k]) {
			free(lat[k]);
			continue;
		}
		ratio = op_on[B_RAW] ? med[k] / med[B_RAW] : 0;
		if (o->csv)
			printf("%s,%s,%s,%zu,%.2f,%.2f,%.2f,%.3f\n", ddss_net_transport_name(net), comp,
			       op_names[k], o->size, med[k], p99[k], mean[k], ratio);
		else
			printf("%-18s %10.2f %10.2f %10.2f %8.3f\n", op_names[k], med[k], p99[k], mean[k],
			       ratio);
		free(lat[k]);
	}
	free(buf);
	return 0;
}

/* ---- --protect: the cost of DDSS_TCP_PROTECT ---- */

#define PROTECT_MODES 3
#define PROTECT_SIZES 2
#define PROTECT_WINDOW 8
#define PROTECT_TPUT_SIZE 65536u
static const size_t protect_sizes[PROTECT_SIZES] = { 64, 4096 };

struct protect_pair {
	struct ddss_tp *tp[3];
	void *pool[3];
};

static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

static int listen_any(uint16_t *port_p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port_p = ntohs(sa.sin_port);
	return fd;
}

/* DDSS_COMPLETION (event, poll; else adaptive), as for the ranks ddssrun starts. */
static enum ddss_tp_completion protect_completion(void)
{
	const char *s = getenv("DDSS_COMPLETION");

	return !s ? DDSS_TP_COMPLETION_ADAPTIVE : !strcmp(s, "event") ? DDSS_TP_COMPLETION_EVENT :
	       !strcmp(s, "poll") ? DDSS_TP_COMPLETION_POLL : DDSS_TP_COMPLETION_ADAPTIVE;
}

/* Rank 2 (pinned to CPU 1 unless !@pin), then rank 1 (CPU 0), connected. */
static int protect_pair_open(struct protect_pair *p, enum ddss_tp_protect mode,
			     const struct ddss_auth_key *key, uint64_t group, bool pin)
{
	static struct ddss_tp_node nodes[PROTECT_MODES][2];
	struct ddss_tp_node *n = nodes[mode];
	int lfd[3];

	for (uint32_t rank = 1; rank <= 2; rank++) {
		snprintf(n[rank - 1].host, sizeof(n[rank - 1].host), "127.0.0.1");
		lfd[rank] = listen_any(&n[rank - 1].port);
		if (lfd[rank] < 0)
			return -EADDRNOTAVAIL;
	}
	for (uint32_t rank = 2; rank >= 1; rank--) {
		struct ddss_tp_config cfg = {
			.rank = rank, .size = 2, .group = group, .nodes = n, .listen_fd = lfd[rank],
			.completion = protect_completion(), .op_timeout_ms = 30000,
			.connect_timeout_ms = 5000, .auth = key, .tcp_protect = mode,
		};
		struct ddss_tp_mr *mr;
		int r;

		if (pin && (r = pin_to(rank == 2 ? 1 : 0)))
			return r;
		p->pool[rank] = aligned_alloc(4096, POOL_LEN);
		if (!p->pool[rank])
			return -ENOMEM;
		memset(p->pool[rank], 0, POOL_LEN);
		r = ddss_tp_open("tcp", &cfg, &p->tp[rank]);
		if (!r)
			r = ddss_tp_mem_register(p->tp[rank], p->pool[rank], POOL_LEN, true, &mr);
		if (!r)
			r = ddss_tp_start(p->tp[rank]);
		if (r)
			return r;
	}
	return ddss_tp_peer_connect(p->tp[1], 2);
}

/* MB/s of PROTECT_TPUT_SIZE writes, PROTECT_WINDOW in flight, for about @total bytes. */
static double protect_tput(struct ddss_tp *tp, void *buf, size_t total)
{
	struct ddss_tp_req req[PROTECT_WINDOW];
	size_t n = total / PROTECT_TPUT_SIZE;
	int64_t t0 = ddss_now_ns();

	for (size_t i = 0; i < n; i++) {
		struct ddss_tp_req *q = &req[i % PROTECT_WINDOW];

		if (i >= PROTECT_WINDOW && (ddss_tp_wait(tp, q, -1) || q->status))
			return -1;
		if (ddss_tp_post_write(tp, 2, (i % PROTECT_WINDOW) * PROTECT_TPUT_SIZE, buf,
				       PROTECT_TPUT_SIZE, q))
			return -1;
	}
	for (size_t i = n > PROTECT_WINDOW ? n - PROTECT_WINDOW : 0; i < n; i++)
		if (ddss_tp_wait(tp, &req[i % PROTECT_WINDOW], -1) || req[i % PROTECT_WINDOW].status)
			return -1;
	return (double)(n * PROTECT_TPUT_SIZE) / 1e6 / ((double)(ddss_now_ns() - t0) / 1e9);
}

static int protect_main(const struct bench_opts *o)
{
	struct protect_pair pair[PROTECT_MODES] = { 0 };
	struct ddss_auth_key key;
	size_t n = (size_t)o->iters * o->rounds;
	/* [mode][size][0 = read (get), 1 = write (put)] */
	double *lat[PROTECT_MODES][PROTECT_SIZES][2], med[PROTECT_MODES][PROTECT_SIZES][2];
	double p99[PROTECT_MODES][PROTECT_SIZES][2], mean[PROTECT_MODES][PROTECT_SIZES][2];
	double tput[PROTECT_MODES] = { 0 };
	static const char *const names[PROTECT_MODES] = { "off", "integrity", "encrypt" };
	unsigned char secret[32];
	char hex[65];
	char *buf = calloc(1, PROTECT_TPUT_SIZE);
	int64_t ns0;
	uint64_t tick0;
	double us_per_tick;
	int r, rc = 0;

	ddss_auth_nonce(secret);
	ddss_auth_nonce(secret + DDSS_AUTH_NONCE_LEN);
	for (size_t i = 0; i < sizeof(secret); i++)
		snprintf(hex + 2 * i, 3, "%02x", secret[i]);
	r = ddss_auth_key_load(hex, &key);
	if (r || !buf) {
		fprintf(stderr, "cannot load a group key: %s\n", strerror(r ? -r : ENOMEM));
		return 1;
	}
	for (int m = 0; m < PROTECT_MODES; m++) {
		r = protect_pair_open(&pair[m], (enum ddss_tp_protect)m, &key, 0xbe0c0000u + (unsigned)m,
				      o->pin);
		if (r) {
			fprintf(stderr, "cannot open the %s pair: %s\n", names[m], strerror(-r));
			return 1;
		}
		for (int s = 0; s < PROTECT_SIZES; s++)
			for (int w = 0; w < 2; w++)
				lat[m][s][w] = calloc(n, sizeof(double));
	}
	/* Warm up every path before timing. */
	for (int m = 0; m < PROTECT_MODES; m++)
		for (unsigned i = 0; i < 200; i++)
			for (int s = 0; s < PROTECT_SIZES; s++)
				if (ddss_tp_read(pair[m].tp[1], 2, 0, buf, protect_sizes[s]) ||
				    ddss_tp_write(pair[m].tp[1], 2, 0, buf, protect_sizes[s])) {
					fprintf(stderr, "%s: warm-up failed\n", names[m]);
					return 1;
				}
	ns0 = ddss_now_ns();
	tick0 = bench_ticks();
	for (unsigned rd = 0; rd < o->rounds; rd++)
		for (unsigned b = 0; b < o->iters; b += BLOCK)
			for (int m = 0; m < PROTECT_MODES; m++)
				for (int s = 0; s < PROTECT_SIZES; s++)
					for (int w = 0; w < 2; w++)
						for (unsigned i = b; i < o->iters && i < b + BLOCK; i++) {
							struct ddss_tp *tp = pair[m].tp[1];
							uint64_t t0 = bench_ticks();

							r = w ? ddss_tp_write(tp, 2, 0, buf, protect_sizes[s]) :
								ddss_tp_read(tp, 2, 0, buf, protect_sizes[s]);
							if (r) {
								fprintf(stderr, "%s failed: %s\n", names[m],
									strerror(-r));
								return 1;
							}
							lat[m][s][w][(size_t)rd * o->iters + i] =
								(double)(bench_ticks() - t0);
						}
	us_per_tick = (double)(ddss_now_ns() - ns0) / 1000.0 / (double)(bench_ticks() - tick0);
	for (unsigned rd = 0; rd < o->rounds; rd++)
		for (int m = 0; m < PROTECT_MODES; m++) {
			double t = protect_tput(pair[m].tp[1], buf, 64u << 20);

			if (t < 0) {
				fprintf(stderr, "%s: throughput run failed\n", names[m]);
				return 1;
			}
			tput[m] += t / o->rounds;
		}
	for (int m = 0; m < PROTECT_MODES; m++)
		for (int s = 0; s < PROTECT_SIZES; s++)
			for (int w = 0; w < 2; w++) {
				for (size_t i = 0; i < n; i++)
					lat[m][s][w][i] *= us_per_tick;
				bench_summarize(lat[m][s][w], n, &med[m][s][w], &p99[m][s][w],
						&mean[m][s][w]);
				free(lat[m][s][w]);
			}
	if (o->csv)
		printf("protect,op,size,median_us,p99_us,mean_us,ratio_to_off\n");
	else
		printf("tcp over loopback, completion=%s, samples=%zu per line, %s\n"
		       "%-10s %-6s %6s %10s %10s %10s %7s\n",
		       getenv("DDSS_COMPLETION") ? getenv("DDSS_COMPLETION") : "adaptive", n,
		       o->pin ? "rank 1 on CPU 0, rank 2 on CPU 1" : "unpinned",
		       "protect", "op", "size", "median_us", "p99_us", "mean_us", "x_off");
	for (int s = 0; s < PROTECT_SIZES; s++)
		for (int w = 0; w < 2; w++)
			for (int m = 0; m < PROTECT_MODES; m++) {
				const char *op = w ? "put" : "get";
				double x = med[m][s][w] / med[0][s][w];

				if (o->csv)
					printf("%s,%s,%zu,%.2f,%.2f,%.2f,%.3f\n", names[m], op,
					       protect_sizes[s], med[m][s][w], p99[m][s][w],
					       mean[m][s][w], x);
				else
					printf("%-10s %-6s %6zu %10.2f %10.2f %10.2f %7.3f\n", names[m], op,
					       protect_sizes[s], med[m][s][w], p99[m][s][w],
					       mean[m][s][w], x);
			}
	for (int m = 0; m < PROTECT_MODES; m++) {
		if (o->csv)
			printf("%s,put_throughput_MBps,%u,%.1f,,,%.3f\n", names[m], PROTECT_TPUT_SIZE,
			       tput[m], tput[m] / tput[0]);
		else
			printf("%-10s put %u B x%d in flight: %8.1f MB/s (x_off %.3f)\n", names[m],
			       PROTECT_TPUT_SIZE, PROTECT_WINDOW, tput[m], tput[m] / tput[0]);
	}
	for (int m = 0; m < PROTECT_MODES; m++)
		for (uint32_t rank = 1; rank <= 2; rank++)
			if (pair[m].tp[rank])
				ddss_tp_close(pair[m].tp[rank]);
	for (int m = 0; m < PROTECT_MODES; m++)
		for (uint32_t rank = 1; rank <= 2; rank++)
			free(pair[m].pool[rank]);
	ddss_auth_key_clear(&key);
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	struct ddss_net *net;
	struct bench_opts o;
	pthread_t echo;
	void *pool;
	int lfd = -1, r, rc = 0;

	bool protect = false;

	/* --ops and --protect are ours alone: take them out before the common parser. */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--protect")) {
			protect = true;
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(*argv));
			argc--;
			i--;
		} else if (!strcmp(argv[i], "--ops")) {
			if (i + 1 >= argc || parse_ops(argv[i + 1])) {
				fprintf(stderr, "--ops takes a comma-separated list of: raw_tcp_pingpong read write cas fadd\n");
				return 2;
			}
			memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 1) * sizeof(*argv));
			argc -= 2;
			i--;
		}
	if (bench_parse(argc, argv, "--size", 1, MAX_SIZE, &o)) {
		fprintf(stderr, "usage: ddssrun -n 2 %s [--iters N] [--rounds R] [--size B<=%u] [--ops LIST] [--no-pin] [--csv]\n"
				"       %s --protect [--iters N] [--rounds R] [--no-pin] [--csv]\n",
			argv[0], MAX_SIZE, argv[0]);
		return 2;
	}
	if (protect)
		return protect_main(&o);
	if (o.pin)
		bench_pin_rank();
	r = ddss_net_open(NULL, &net);
	if (r) {
		fprintf(stderr, "cannot open the transport: %s\n", strerror(-r));
		return 1;
	}
	if (ddss_net_size(net) != 2) {
		fprintf(stderr, "run with exactly 2 ranks (ddssrun -n 2)\n");
		return 2;
	}
	pool = aligned_alloc(4096, POOL_LEN);
	memset(pool, 0, POOL_LEN);
	ddss_net_on_msg(net, TAG_PORT, on_port, NULL);
	r = ddss_net_start(net, pool, POOL_LEN);
	if (!r)
		r = ddss_net_barrier(net, -1);
	if (!r && ddss_net_rank(net) == 2 && op_on[B_RAW])
		r = start_echo(net, &echo, &lfd);
	if (r) {
		fprintf(stderr, "set-up failed: %s\n", strerror(-r));
		return 1;
	}
	if (ddss_net_rank(net) == 1)
		rc = measure(net, &o);
	r = ddss_net_barrier(net, -1);
	if (ddss_net_rank(net) == 2 && op_on[B_RAW])
		pthread_join(echo, NULL);
	ddss_net_close(net);
	free(pool);
	return rc ? rc : (r ? 1 : 0);
}
