#include "common/test_util.h"
#include "alloc/segtab.h"
#include "core/ctx.h"
#include "ddss/ddss.h"
#include "net/net.h"

#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static inline uint8_t pattern_byte(uint64_t seed, size_t i)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i >> 3) * 0xBF58476D1CE4E5B9ull;

	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 29;
	return (uint8_t)(x >> ((i & 7) * 8));
}

void test_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, i);
}

size_t test_check(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, i))
			return i;
	return SIZE_MAX;
}

unsigned test_run_all(void)
{
	unsigned failed;

	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
	printf("\n%u assertions failed\n", failed);
	fflush(stdout);
	return failed;
}

void test_thread_fail(unsigned *failures, uint32_t rank, unsigned tid, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	if ((*failures)++ >= 5)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "rank %u thread %u: %s\n", rank, tid, msg);
}

void *test_alloc_pool(size_t len)
{
	void *p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);

	if (!p) {
		fprintf(stderr, "cannot allocate %zu bytes\n", len);
		abort();
	}
	memset(p, 0, len);
	return p;
}

struct ddss_net *test_net_open_or_exit(void)
{
	struct ddss_net *net;
	int r = ddss_net_open(NULL, &net);

	if (r) {
		fprintf(stderr, "cannot open the transport: %s\n", strerror(-r));
		exit(1);
	}
	return net;
}

void test_barrier_or_exit(struct ddss_net *net, int timeout_ms)
{
	int r = ddss_net_barrier(net, timeout_ms);

	if (r) {
		fprintf(stderr, "rank %u: barrier failed: %s\n", ddss_net_rank(net), strerror(-r));
		exit(1);
	}
}

static ddss_ctx_t *board_ctx;
static ddss_key_t board_key;

int test_board_open(ddss_ctx_t *ctx)
{
	board_ctx = ctx;
	return ddss_allocate_ss(ctx, (size_t)ddss_size(ctx) * TEST_BOARD_SLOTS * 8,
				&(struct ddss_seg_attr){ .name = "board" }, &board_key);
}

static size_t board_at(uint32_t rank, unsigned i)
{
	return ((size_t)(rank - 1) * TEST_BOARD_SLOTS + i) * 8;
}

void test_board_put(unsigned i, uint64_t v)
{
	CU_ASSERT_EQUAL_FATAL(ddss_put(board_ctx, board_key, board_at(ddss_rank(board_ctx), i),
				       &v, 8), 0);
}

uint64_t test_board_get(uint32_t from, unsigned i)
{
	uint64_t v = 0;

	CU_ASSERT_EQUAL(ddss_get(board_ctx, board_key, board_at(from, i), &v, 8), 0);
	return v;
}

void test_ctx_barrier_or_exit(ddss_ctx_t *ctx)
{
	int r = ddss_barrier(ctx);

	if (r) {
		fprintf(stderr, "rank %u: barrier failed: %s\n", ddss_rank(ctx), ddss_strerror(r));
		exit(1);
	}
}

uint64_t test_segments_draining(struct ddss_ctx *ctx)
{
	return ddss_segtab_draining(ctx->segtab);
}

bool test_ctx_is_client(struct ddss_ctx *ctx)
{
	return ctx->client != NULL;
}

const char *test_ctx_transport(struct ddss_ctx *ctx)
{
	return ctx->client ? "daemon" : ddss_net_transport_name(ctx->net);
}

static struct ddss_net *ctrl_net;
static uint16_t ctrl_tag;
static pthread_mutex_t ctrl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctrl_cv = PTHREAD_COND_INITIALIZER;
static unsigned ctrl_count[TEST_CTRL_EVENTS];

static void on_ctrl(void *arg, uint32_t from, const void *buf, size_t len)
{
	uint32_t c;

	(void)arg;
	(void)from;
	if (len != sizeof(c))
		return;
	memcpy(&c, buf, sizeof(c));
	if (c >= TEST_CTRL_EVENTS)
		return;
	pthread_mutex_lock(&ctrl_mu);
	ctrl_count[c]++;
	pthread_cond_broadcast(&ctrl_cv);
	pthread_mutex_unlock(&ctrl_mu);
}

int test_ctrl_register(struct ddss_net *net, uint16_t tag)
{
	ctrl_net = net;
	ctrl_tag = tag;
	return ddss_net_on_msg(net, tag, on_ctrl, NULL);
}

int test_ctrl_send(uint32_t to, uint32_t c)
{
	return ddss_net_send(ctrl_net, to, ctrl_tag, &c, sizeof(c));
}

bool test_ctrl_wait(uint32_t c, unsigned want, int timeout_ms)
{
	struct timespec ts;
	bool ok;

	if (c >= TEST_CTRL_EVENTS)
		return false;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&ctrl_mu);
	while (ctrl_count[c] < want && pthread_cond_timedwait(&ctrl_cv, &ctrl_mu, &ts) == 0)
		;
	ok = ctrl_count[c] >= want;
	pthread_mutex_unlock(&ctrl_mu);
	return ok;
}

double test_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int test_peer_timeout_args(int argc, char **argv, unsigned nranks, int *timeout_ms)
{
	const char *size_env = getenv("DDSS_SIZE");
	char buf[32];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			*timeout_ms = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: %s [--timeout-ms N]\n", argv[0]);
			return 2;
		}
	}
	if (!size_env || atoi(size_env) != (int)nranks) {
		fprintf(stderr, "run under ddssrun with %u ranks\n", nranks);
		return 2;
	}
	if (getenv("DDSS_PEER_TIMEOUT_MS")) {
		*timeout_ms = atoi(getenv("DDSS_PEER_TIMEOUT_MS"));
	} else {
		snprintf(buf, sizeof(buf), "%d", *timeout_ms);
		setenv("DDSS_PEER_TIMEOUT_MS", buf, 1);
	}
	return 0;
}

int test_locked_increment(struct ddss_ctx *ctx, uint64_t key)
{
	uint64_t v = 0;
	int rr, r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);

	if (r)
		return r;
	r = ddss_get(ctx, key, 0, &v, sizeof(v));
	v++;
	if (!r)
		r = ddss_put(ctx, key, 0, &v, sizeof(v));
	/* Released even after a failed get or put: the lock must not stay held. */
	rr = ddss_release_lock_ss(ctx, key);
	return r ? r : rr;
}

uint64_t test_wait_word(struct ddss_ctx *ctx, uint64_t key, unsigned w, int timeout_ms)
{
	uint64_t v = 0;
	double t0 = test_now_ms();

	while (!v && test_now_ms() - t0 < timeout_ms) {
		if (ddss_get(ctx, key, 8 * w, &v, sizeof(v)))
			return 0;
		if (!v)
			usleep(10000); /* a bounded poll of a word another rank writes */
	}
	return v;
}

int test_listen_loopback(unsigned *port_p)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0)
		return -1;
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 16) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) < 0) {
		close(s);
		return -1;
	}
	*port_p = ntohs(a.sin_port);
	return s;
}

char *test_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return strdup("");
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, n > 0 ? (size_t)n + 1 : 1);
	if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)
		buf[0] = 0;
	fclose(f);
	return buf;
}

void test_rdma_host_or_skip(char *host, size_t len)
{
	const char *h = getenv("DDSS_RDMA_HOST");

	if (!h || !*h) {
		printf("SKIP: DDSS_RDMA_HOST is not set (run under scripts/rdma-exec)\n");
		exit(TEST_SKIP_EXIT);
	}
	snprintf(host, len, "%.*s", (int)strcspn(h, ","), h);
}

void test_listen_elsewhere(void)
{
	char listen[96];
	const char *cur = getenv("DDSS_LISTEN");
	char *colon;

	snprintf(listen, sizeof(listen), "%s", cur ? cur : "127.0.0.1:0");
	colon = strrchr(listen, ':');
	if (colon)
		snprintf(colon, sizeof(listen) - (size_t)(colon - listen), ":0");
	setenv("DDSS_LISTEN", listen, 1);
}

int test_failures;

struct ddss_ctx *test_init_ranks_or_exit(uint32_t size)
{
	ddss_ctx_t *ctx;
	int r = ddss_init(NULL, &ctx);

	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		exit(1);
	}
	if (ddss_size(ctx) != size) {
		fprintf(stderr, "run with %u rank(s), not %u\n", size, ddss_size(ctx));
		exit(1);
	}
	return ctx;
}

void test_fork_victim(uint32_t victim)
{
	const char *rank = getenv("DDSS_RANK");
	int status;
	pid_t pid;

	if (!rank || (uint32_t)atoi(rank) != victim)
		return;
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0)
		return;
	if (waitpid(pid, &status, 0) != pid)
		exit(1);
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
		printf("rank %u: the victim was killed, as planned\n", victim);
		exit(0);
	}
	printf("rank %u: FAIL: the victim ended otherwise (status %#x)\n", victim, status);
	exit(1);
}

struct ddss_ctx *test_init_peer_timeout(int peer_timeout_ms)
{
	struct ddss_attr attr;
	ddss_ctx_t *ctx;
	int r;

	ddss_attr_init(&attr);
	attr.peer_timeout_ms = peer_timeout_ms;
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return NULL;
	}
	return ctx;
}

bool test_wait_stopped(int pid, int timeout_ms)
{
	char path[64], line[512], *close_paren;
	double t0 = test_now_ms();
	bool stopped = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	while (!stopped && test_now_ms() - t0 < timeout_ms) {
		f = fopen(path, "r");
		if (!f)
			return false;
		close_paren = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		fclose(f);
		stopped = close_paren && close_paren[1] == ' ' && close_paren[2] == 'T';
		if (!stopped)
			usleep(1000); /* a bounded poll of another process's state */
	}
	return stopped;
}

void test_stop_process(uint32_t me, int pid)
{
	if (pid <= 1) {
		printf("rank %u: FAIL: no pid to freeze (%d)\n", me, pid);
		exit(1); /* never kill(0) or kill(-1): it would stop us all */
	}
	TEST_CHECK(me, kill(pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	TEST_CHECK(me, test_wait_stopped(pid, 10000), "the other rank did not stop");
}

ddss_key_t test_freeze_rank2(struct ddss_ctx *ctx, uint32_t me, const char *name, uint64_t magic,
			     int *pid_p)
{
	ddss_key_t key = test_segment_at(ctx, me, name, 2, 64);
	uint64_t pid = 0;

	if (me == 2) {
		test_put_word(ctx, me, key, 0, magic);
		test_put_word(ctx, me, key, 1, (uint64_t)getpid());
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		TEST_CHECK(1, ddss_get(ctx, key, 8, &pid, 8) == 0, "rank 2's pid");
		test_stop_process(1, (int)pid);
	}
	*pid_p = (int)pid;
	return key;
}

void test_wake_rank2(struct ddss_ctx *ctx, int pid, ddss_key_t key, uint64_t magic, int tries)
{
	uint64_t v = 0;
	int r = -EINVAL;

	TEST_CHECK(1, kill(pid, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
	for (int i = 0; i < tries; i++) {
		r = ddss_get(ctx, key, 0, &v, 8);
		printf("rank 1: woken: get %d: %d (%s), value %#llx\n", i + 1, r, ddss_strerror(r),
		       (unsigned long long)v);
		if (!r)
			break;
	}
	TEST_CHECK(1, r == 0 && v == magic, "the get after the wake-up: %d, %#llx", r,
		   (unsigned long long)v);
}

void test_cut_by_timeout(struct ddss_ctx *ctx, uint32_t me, int pid, ddss_key_t at_it)
{
	uint64_t v;
	double t0;
	int r;

	test_stop_process(me, pid);
	t0 = test_now_ms();
	r = ddss_get(ctx, at_it, 0, &v, 8);
	TEST_CHECK(me, kill(pid, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
	printf("rank %u: a get at the frozen rank: %d (%s) after %.0f ms\n", me, r,
	       ddss_strerror(r), test_now_ms() - t0);
	TEST_CHECK(me, r == -ETIMEDOUT, "the get at the frozen rank: %d, not -ETIMEDOUT", r);
}

ddss_key_t test_segment_at(struct ddss_ctx *ctx, uint32_t me, const char *name, uint32_t home,
			   size_t len)
{
	struct ddss_seg_attr attr = { .placement = DDSS_PLACE_RANK, .rank = home, .name = name };
	ddss_key_t key;
	int r = ddss_allocate_ss(ctx, len, &attr, &key);

	if (r) {
		printf("rank %u: FAIL: segment %s: %s\n", me, name, ddss_strerror(r));
		exit(1);
	}
	return key;
}

ddss_key_t test_write_segment_v1(struct ddss_ctx *ctx, uint32_t me, const char *name, size_t len,
				 unsigned char byte)
{
	struct ddss_seg_attr attr = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = name,
				      .coherence = DDSS_COHERENCE_WRITE };
	unsigned char *v;
	ddss_key_t key;
	int r = ddss_allocate_ss(ctx, len, &attr, &key);

	if (r) {
		printf("rank %u: FAIL: segment %s: %s\n", me, name, ddss_strerror(r));
		exit(1);
	}
	if (me != 1)
		return key;
	v = malloc(len);
	if (!v) {
		printf("rank 1: FAIL: out of memory\n");
		exit(1);
	}
	memset(v, byte, len);
	r = ddss_put(ctx, key, 0, v, len);
	free(v);
	TEST_CHECK(1, r == 0, "the first put of %s: %s", name, ddss_strerror(r));
	return key;
}

void test_put_word(struct ddss_ctx *ctx, uint32_t me, ddss_key_t key, unsigned w, uint64_t v)
{
	int r = ddss_put(ctx, key, 8 * w, &v, 8);

	TEST_CHECK(me, r == 0, "put of word %u: %s", w, ddss_strerror(r));
}

void test_put_farewell(struct ddss_ctx *ctx, uint32_t me, ddss_key_t key, unsigned w, uint64_t v)
{
	int r = ddss_put(ctx, key, 8 * w, &v, 8);

	if (r)
		printf("rank %u: the farewell put of word %u: %s (the home may have left on seeing "
		       "it)\n", me, w, ddss_strerror(r));
}

int test_try_lock_until(struct ddss_ctx *ctx, ddss_key_t key, int timeout_ms, unsigned *tries_p,
			unsigned *busy_p, double *ms_p)
{
	double t0 = test_now_ms();
	int r;

	*tries_p = *busy_p = 0;
	do {
		r = ddss_try_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
		++*tries_p;
		*busy_p += r == -EBUSY;
		if (r == -EBUSY)
			usleep(10000);
	} while (r == -EBUSY && test_now_ms() - t0 < timeout_ms);
	*ms_p = test_now_ms() - t0;
	return r;
}

int test_put_retrying(struct ddss_ctx *ctx, ddss_key_t key, const void *v, size_t len,
		      int timeout_ms, struct test_put_tally *tally)
{
	double t0 = test_now_ms();
	int r = -ETIMEDOUT;

	*tally = (struct test_put_tally){ 0 };
	while (test_now_ms() - t0 < timeout_ms) {
		r = ddss_put(ctx, key, 0, v, len);
		if (r == 0)
			break;
		if (r == -EIO)
			tally->eio++;
		else
			tally->other++, tally->last_other = r;
	}
	tally->ms = test_now_ms() - t0;
	return r;
}
