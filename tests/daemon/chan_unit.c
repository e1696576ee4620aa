/*
 * Unit tests of the client-daemon channel. The daemon end is a forked child that attaches
 * through the inherited fd, as ddssd does with the fd it receives, wherever the two ends
 * must run at once (round trips, growth, wake-ups, liveness); the one-step checks (full
 * rings, corrupt counters and headers, ranges, timeouts) attach in the same process.
 * The test maps the header itself to see and corrupt what a peer could.
 */
#include "daemon/chan.h"
#include "common/test_util.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ll
#define ROUNDS 100000
#define PIPELINED 20000
#define LAT_ROUNDS 20000

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* A failed check of a return code, reported at the caller's line; false when it failed. */
#define RC_OK(call, want) rc_ok((call), (want), #call, __LINE__)
static bool rc_ok(int rc, int want, const char *what, int line)
{
	if (rc != want)
		fprintf(stderr, "line %d: %s = %d, expected %d\n", line, what, rc, want);
	CU_assertImplementation(rc == want, line, what, __FILE__, "", CU_FALSE);
	return rc == want;
}

/* The test's own view of the header and slots of channel memfd @fd. */
static struct ddss_chan_hdr *hdr_map(int fd)
{
	void *p = mmap(NULL, DDSS_CHAN_DATA_OFF, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void hdr_unmap(struct ddss_chan_hdr *h)
{
	munmap(h, DDSS_CHAN_DATA_OFF);
}

/* Poll a waiters flag (set by a consumer just before it sleeps) for up to 10 s. */
static bool wait_flag(uint32_t *flag)
{
	int64_t end = now_ns() + 10000 * MS;

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		if (now_ns() > end)
			return false;
		sched_yield();
	}
	return true;
}

/*
 * The daemon end: a child process. Its function returns its exit code, 0 when all its own
 * checks passed; it never calls CUnit (a copy of the parent's registry).
 */
struct peer {
	pid_t pid;
	int status;
	bool exited;
	unsigned alive_calls;
};

typedef int (*peer_fn)(struct ddss_chan *d, void *arg);

static pid_t parent_pid;

#define PEER_CHECK(cond, ...)                                              \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "peer, line %d: ", __LINE__);      \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			return 1;                                          \
		}                                                          \
	} while (0)

static int parent_alive(void *arg)
{
	return getppid() == parent_pid ? 0 : -ESRCH;
}

static void peer_start(struct peer *p, struct ddss_chan *c, peer_fn fn, void *arg)
{
	memset(p, 0, sizeof(*p));
	parent_pid = getpid();
	fflush(NULL);
	p->pid = fork();
	CU_ASSERT_FATAL(p->pid >= 0);
	if (p->pid == 0) {
		struct ddss_chan *d;
		int rc;

		alarm(50); /* a stuck peer dies instead of hanging the suite */
		rc = ddss_chan_attach(ddss_chan_fd(c), &d);
		if (rc) {
			fprintf(stderr, "peer: attach: %d\n", rc);
			_exit(100);
		}
		rc = fn(d, arg);
		ddss_chan_destroy(d);
		_exit(rc);
	}
}

/* Liveness callback of the client: -ESRCH once the peer has exited. */
static int peer_alive(void *arg)
{
	struct peer *p = arg;

	p->alive_calls++;
	if (!p->exited && waitpid(p->pid, &p->status, WNOHANG) == p->pid)
		p->exited = true;
	return p->exited ? -ESRCH : 0;
}

/* The peer's exit code; -1 if it was killed. */
static int peer_join(struct peer *p)
{
	if (!p->exited && waitpid(p->pid, &p->status, 0) != p->pid)
		return -1;
	p->exited = true;
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	fprintf(stderr, "peer killed by signal %d\n", WTERMSIG(p->status));
	return -1;
}

/* Round-trip messages: a sequence number, a body derived from a seed, the body's checksum. */
struct rt_msg {
	uint64_t seq;
	uint64_t sum;
	uint8_t body[DDSS_CHAN_MSG - 16];
};
_Static_assert(sizeof(struct rt_msg) == DDSS_CHAN_MSG, "one message");

static uint64_t fnv1a(const uint8_t *b, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void rt_fill(void *slot, uint64_t seq, uint64_t seed)
{
	struct rt_msg *m = slot;

	m->seq = seq;
	test_fill(m->body, sizeof(m->body), seed);
	m->sum = fnv1a(m->body, sizeof(m->body));
}

/* What is wrong with @m, or NULL. */
static const char *rt_bad(const struct rt_msg *m, uint64_t seq, uint64_t seed)
{
	if (m->seq != seq)
		return "sequence number";
	if (m->sum != fnv1a(m->body, sizeof(m->body)))
		return "checksum";
	if (test_check(m->body, sizeof(m->body), seed) != SIZE_MAX)
		return "body";
	return NULL;
}

/* Echo server: answers request n (checked unless @arg says fast) with response n. */
static int echo_peer(struct ddss_chan *d, void *arg)
{
	const bool check = *(const bool *)arg;
	const char *bad;
	const void *msg;
	struct rt_msg q;
	void *slot;
	int rc;

	for (uint64_t want = 0;; want++) {
		rc = ddss_chan_wait_req(d, 20000, parent_alive, NULL, &msg);
		if (rc == -EPIPE)
			return 0;
		PEER_CHECK(rc == 0, "wait_req: %d", rc);
		memcpy(&q, msg, sizeof(q));
		ddss_chan_req_done(d);
		PEER_CHECK(q.seq == want, "request %llu, expected %llu", (unsigned long long)q.seq,
			   (unsigned long long)want);
		bad = check ? rt_bad(&q, want, want) : NULL;
		PEER_CHECK(!bad, "request %llu: bad %s", (unsigned long long)want, bad);
		rc = ddss_chan_resp_slot(d, &slot);
		PEER_CHECK(rc == 0, "resp_slot: %d", rc);
		if (check)
			rt_fill(slot, want, ~want);
		else
			((struct rt_msg *)slot)->seq = want;
		ddss_chan_resp_post(d);
	}
}

/* Client side of one checked exchange for request @seq; false (reported) on failure. */
static bool client_recv(struct ddss_chan *c, struct peer *p, uint64_t seq, bool check)
{
	const void *msg;
	struct rt_msg a;
	const char *bad;

	if (!RC_OK(ddss_chan_wait_resp(c, 10000, peer_alive, p, &msg), 0))
		return false;
	memcpy(&a, msg, sizeof(a));
	ddss_chan_resp_done(c);
	bad = check ? rt_bad(&a, seq, ~seq) : (a.seq == seq ? NULL : "sequence number");
	if (bad) {
		fprintf(stderr, "response %llu: bad %s\n", (unsigned long long)seq, bad);
		CU_FAIL("bad response");
		return false;
	}
	return true;
}

static void test_roundtrip(void)
{
	struct ddss_chan *c;
	struct peer p;
	bool check = true;
	uint64_t sent, recvd;
	int64_t t0, t1;
	void *slot;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	peer_start(&p, c, echo_peer, &check);
	t0 = now_ns();
	for (sent = 0; sent < ROUNDS; sent++) {
		if (!RC_OK(ddss_chan_req_slot(c, &slot), 0))
			break;
		rt_fill(slot, sent, sent);
		ddss_chan_req_post(c);
		if (!client_recv(c, &p, sent, true))
			break;
	}
	t1 = now_ns();
	CU_ASSERT_EQUAL(sent, ROUNDS);
	printf("\n  %llu checked round trips, %.0f ns each on average (default spin)\n",
	       (unsigned long long)sent, (double)(t1 - t0) / (sent ? sent : 1));

	/* Pipelined: DEPTH requests unanswered, so both rings wrap and fill. */
	recvd = sent;
	while (sent >= ROUNDS && recvd < ROUNDS + PIPELINED) {
		bool ok = true;

		while (sent - recvd < DDSS_CHAN_DEPTH && sent < ROUNDS + PIPELINED) {
			if (!(ok = RC_OK(ddss_chan_req_slot(c, &slot), 0)))
				break;
			rt_fill(slot, sent, sent);
			ddss_chan_req_post(c);
			sent++;
		}
		if (!ok || !client_recv(c, &p, recvd, true))
			break;
		recvd++;
	}
	CU_ASSERT_EQUAL(recvd, ROUNDS + PIPELINED);
	ddss_chan_close(c);
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, 1000, peer_alive, &p, &(const void *){ NULL }),
			-EPIPE);
	CU_ASSERT_EQUAL(peer_join(&p), 0);
	ddss_chan_destroy(c);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Round trips of one message with spin time @spin (env value); prints the median. */
static int64_t latency_run(const char *spin, unsigned rounds)
{
	static int64_t rtt[LAT_ROUNDS];
	struct ddss_chan *c;
	struct peer p;
	bool check = false;
	unsigned warm = rounds / 10, n = 0;
	void *slot;

	setenv("DDSS_CHAN_SPIN_NS", spin, 1);
	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	peer_start(&p, c, echo_peer, &check); /* reads the variable when it attaches */
	unsetenv("DDSS_CHAN_SPIN_NS");
	for (unsigned i = 0; i < warm + rounds; i++) {
		int64_t t = now_ns();

		if (!RC_OK(ddss_chan_req_slot(c, &slot), 0))
			break;
		((struct rt_msg *)slot)->seq = i;
		ddss_chan_req_post(c);
		if (!client_recv(c, &p, i, false))
			break;
		if (i >= warm)
			rtt[n++] = now_ns() - t;
	}
	CU_ASSERT_EQUAL(n, rounds);
	ddss_chan_close(c);
	CU_ASSERT_EQUAL(peer_join(&p), 0);
	ddss_chan_destroy(c);
	if (!n)
		return -1;
	qsort(rtt, n, sizeof(rtt[0]), cmp_i64);
	printf("\n  DDSS_CHAN_SPIN_NS=%s: round trip median %lld ns, p90 %lld ns, p99 %lld ns "
	       "(%u round trips); client liveness checks %u\n", spin, (long long)rtt[n / 2],
	       (long long)rtt[n * 9 / 10], (long long)rtt[n * 99 / 100], n, p.alive_calls);
	return p.alive_calls;
}

static void test_latency(void)
{
	/* 5 ms of spinning: both sides stay awake between messages. */
	latency_run("5000000", LAT_ROUNDS);
	latency_run("20000", LAT_ROUNDS);
}

/*
 * No spinning: every message goes through the waiters flag and the bell. A lost wake-up
 * would show as a 100 ms slice that ended in a liveness check although the peer answers.
 */
static void test_futex_only(void)
{
	int64_t quiet = latency_run("0", 3000);

	CU_ASSERT(quiet >= 0 && quiet <= 2);
}

static void test_full(void)
{
	struct ddss_chan *c, *d;
	const void *msg;
	void *slot, *again;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	for (unsigned i = 0; i < DDSS_CHAN_DEPTH; i++) {
		CU_ASSERT_FATAL(ddss_chan_req_slot(c, &slot) == 0);
		CU_ASSERT_EQUAL(ddss_chan_req_slot(c, &again), 0);
		CU_ASSERT_PTR_EQUAL(again, slot); /* the same slot until posted */
		rt_fill(slot, i, i);
		ddss_chan_req_post(c);
	}
	slot = (void *)1;
	CU_ASSERT_EQUAL(ddss_chan_req_slot(c, &slot), -EAGAIN);
	CU_ASSERT_PTR_EQUAL(slot, (void *)1); /* untouched on error */
	ddss_chan_req_post(c);                /* without a slot: nothing happens */

	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), 0);
	CU_ASSERT_PTR_NULL(rt_bad(msg, 0, 0));
	ddss_chan_req_done(d);
	CU_ASSERT_EQUAL(ddss_chan_req_slot(c, &slot), 0); /* one freed */
	rt_fill(slot, DDSS_CHAN_DEPTH, DDSS_CHAN_DEPTH);
	ddss_chan_req_post(c);
	CU_ASSERT_EQUAL(ddss_chan_req_slot(c, &slot), -EAGAIN);
	for (unsigned i = 1; i <= DDSS_CHAN_DEPTH; i++) {
		CU_ASSERT_EQUAL_FATAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), 0);
		CU_ASSERT_PTR_NULL(rt_bad(msg, i, i));
		ddss_chan_req_done(d);
	}
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), -ETIMEDOUT);

	/* Responses, the other way. */
	for (unsigned i = 0; i < DDSS_CHAN_DEPTH; i++) {
		CU_ASSERT_FATAL(ddss_chan_resp_slot(d, &slot) == 0);
		rt_fill(slot, i, ~(uint64_t)i);
		ddss_chan_resp_post(d);
	}
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(d, &slot), -EAGAIN);
	for (unsigned i = 0; i < DDSS_CHAN_DEPTH; i++) {
		CU_ASSERT_EQUAL_FATAL(ddss_chan_wait_resp(c, 0, NULL, NULL, &msg), 0);
		CU_ASSERT_PTR_NULL(rt_bad(msg, i, ~(uint64_t)i));
		ddss_chan_resp_done(c);
	}
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, 0, NULL, NULL, &msg), -ETIMEDOUT);

	/* Each end only plays its own part. */
	CU_ASSERT_EQUAL(ddss_chan_req_slot(d, &slot), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(c, &slot), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_wait_req(c, 0, NULL, NULL, &msg), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(d, 0, NULL, NULL, &msg), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data(d, 1, &slot), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(c, 0, 1, &slot), -EINVAL);
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

/* Data-area messages: the peer checks [off, off+len) against seed, then fills the reply. */
struct data_req {
	uint64_t off, len, seed;
	uint64_t rep_off, rep_len, rep_seed;
};
struct data_resp {
	int64_t rc;
	uint64_t bad; /* first wrong byte, or SIZE_MAX */
};

static int data_peer(struct ddss_chan *d, void *arg)
{
	struct data_resp a;
	struct data_req q;
	const void *msg;
	void *p, *slot;
	int rc;

	for (;;) {
		rc = ddss_chan_wait_req(d, 20000, parent_alive, NULL, &msg);
		if (rc == -EPIPE)
			return 0;
		PEER_CHECK(rc == 0, "wait_req: %d", rc);
		memcpy(&q, msg, sizeof(q));
		ddss_chan_req_done(d);
		a.bad = SIZE_MAX;
		a.rc = ddss_chan_data_peer(d, q.off, q.len, &p);
		if (!a.rc)
			a.bad = test_check(p, q.len, q.seed);
		if (!a.rc && q.rep_len) {
			a.rc = ddss_chan_data_peer(d, q.rep_off, q.rep_len, &p);
			if (!a.rc)
				test_fill(p, q.rep_len, q.rep_seed);
		}
		rc = ddss_chan_resp_slot(d, &slot);
		PEER_CHECK(rc == 0, "resp_slot: %d", rc);
		memcpy(slot, &a, sizeof(a));
		ddss_chan_resp_post(d);
	}
}

static bool data_call(struct ddss_chan *c, struct peer *p, const struct data_req *q,
		      struct data_resp *a)
{
	const void *msg;
	void *slot;

	if (!RC_OK(ddss_chan_req_slot(c, &slot), 0))
		return false;
	memcpy(slot, q, sizeof(*q));
	ddss_chan_req_post(c);
	if (!RC_OK(ddss_chan_wait_resp(c, 10000, peer_alive, p, &msg), 0))
		return false;
	memcpy(a, msg, sizeof(*a));
	ddss_chan_resp_done(c);
	return true;
}

static void test_data_growth(void)
{
	static const uint64_t asked[] = { 65536, 100000, 131072, 300000, 1 << 20, 8 << 20 };
	static const uint64_t area[] = { 65536, 131072, 131072, 524288, 1 << 20, 8 << 20 };
	struct ddss_chan_hdr *h;
	struct ddss_chan *c;
	struct data_resp a;
	struct data_req q;
	struct peer p;
	uint8_t *data;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL((h = hdr_map(ddss_chan_fd(c))) != NULL);
	CU_ASSERT_EQUAL(h->data_len, DDSS_CHAN_DATA_MIN);
	peer_start(&p, c, data_peer, NULL);
	for (unsigned i = 0; i < sizeof(asked) / sizeof(asked[0]); i++) {
		uint64_t len = asked[i], half = len / 2;

		if (!RC_OK(ddss_chan_data(c, len, (void **)&data), 0))
			break;
		CU_ASSERT_EQUAL(__atomic_load_n(&h->data_len, __ATOMIC_ACQUIRE), area[i]);
		/* What the last round left in the lower half survived the growth. */
		if (i)
			CU_ASSERT_EQUAL(test_check(data, asked[i - 1] / 2, i - 1), SIZE_MAX);
		test_fill(data, len, i);
		q = (struct data_req){ .off = 0, .len = len, .seed = i,
				       .rep_off = half, .rep_len = len - half, .rep_seed = 1000 + i };
		if (!data_call(c, &p, &q, &a))
			break;
		CU_ASSERT_EQUAL(a.rc, 0);
		CU_ASSERT_EQUAL(a.bad, SIZE_MAX);
		CU_ASSERT_EQUAL(test_check(data + half, len - half, 1000 + i), SIZE_MAX);
	}
	/* The peer's remapped view refuses what lies beyond the recorded length. */
	q = (struct data_req){ .off = 8 << 20, .len = 1, .seed = 0 };
	if (data_call(c, &p, &q, &a))
		CU_ASSERT_EQUAL(a.rc, -EINVAL);
	q = (struct data_req){ .off = (8 << 20) - 4096, .len = 4097, .seed = 0 };
	if (data_call(c, &p, &q, &a))
		CU_ASSERT_EQUAL(a.rc, -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data(c, DDSS_CHAN_DATA_MAX + 1, (void **)&data), -EINVAL);
	ddss_chan_close(c);
	CU_ASSERT_EQUAL(peer_join(&p), 0);
	hdr_unmap(h);
	ddss_chan_destroy(c);
}

static void test_data_bounds(void)
{
	struct ddss_chan_hdr *h;
	struct ddss_chan *c, *d;
	uint8_t *cp, *dp;
	void *p = NULL;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	CU_ASSERT_FATAL((h = hdr_map(ddss_chan_fd(c))) != NULL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 0, DDSS_CHAN_DATA_MIN, &p), 0);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, DDSS_CHAN_DATA_MIN, 0, &p), 0);
	p = NULL;
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, DDSS_CHAN_DATA_MIN, 1, &p), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 0, DDSS_CHAN_DATA_MIN + 1, &p), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, UINT64_MAX, 2, &p), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 1, UINT64_MAX, &p), -EINVAL);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, DDSS_CHAN_DATA_MAX, DDSS_CHAN_DATA_MAX, &p), -EINVAL);
	CU_ASSERT_PTR_NULL(p); /* untouched on error */

	/* Growth seen through the header; both views share the bytes. */
	CU_ASSERT_FATAL(ddss_chan_data(c, 1 << 20, (void **)&cp) == 0);
	cp[(1 << 20) - 1] = 0x5a;
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, (1 << 20) - 1, 1, (void **)&dp), 0);
	CU_ASSERT_EQUAL(*dp, 0x5a);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 1 << 20, 1, (void **)&dp), -EINVAL);

	/* A recorded length the memfd does not back, or beyond the maximum: -EPROTO. */
	__atomic_store_n(&h->data_len, 4 << 20, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 2 << 20, 1, (void **)&dp), -EPROTO);
	__atomic_store_n(&h->data_len, (uint64_t)1 << 40, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, 2 << 20, 1, (void **)&dp), -EPROTO);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, DDSS_CHAN_DATA_MAX, 1, (void **)&dp), -EINVAL);
	/* A recorded length below the mapping changes nothing: the memfd cannot shrink. */
	__atomic_store_n(&h->data_len, 4096, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_data_peer(d, (1 << 20) - 1, 1, (void **)&dp), 0);
	CU_ASSERT_EQUAL(*dp, 0x5a);
	CU_ASSERT_NOT_EQUAL(ftruncate(ddss_chan_fd(c), 4096), 0); /* sealed */
	hdr_unmap(h);
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

static void test_corrupt_counters(void)
{
	struct ddss_chan_hdr *h;
	struct ddss_chan *c, *d;
	const void *msg;
	void *slot;
	uint32_t v;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	CU_ASSERT_FATAL((h = hdr_map(ddss_chan_fd(c))) != NULL);
	CU_ASSERT_FATAL(ddss_chan_req_slot(c, &slot) == 0);
	rt_fill(slot, 7, 7);
	ddss_chan_req_post(c);

	/* A request tail claiming more than DEPTH messages, or fewer than none. */
	v = __atomic_load_n(&h->req.tail, __ATOMIC_RELAXED);
	__atomic_store_n(&h->req.tail, v + DDSS_CHAN_DEPTH + 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), -EPROTO);
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 50, NULL, NULL, &msg), -EPROTO);
	__atomic_store_n(&h->req.tail, v - 2, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), -EPROTO);
	__atomic_store_n(&h->req.tail, v + DDSS_CHAN_DEPTH - 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), 0); /* plausible: taken */
	ddss_chan_req_done(d);
	__atomic_store_n(&h->req.tail, v, __ATOMIC_RELEASE);

	/* A response head (the client's) claiming more than DEPTH outstanding. */
	v = __atomic_load_n(&h->resp.head, __ATOMIC_RELAXED);
	__atomic_store_n(&h->resp.head, v - DDSS_CHAN_DEPTH - 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(d, &slot), -EPROTO);
	__atomic_store_n(&h->resp.head, v + 1, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(d, &slot), -EPROTO);
	__atomic_store_n(&h->resp.head, v, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(d, &slot), 0);

	/* The client checks the daemon's tail too. */
	v = __atomic_load_n(&h->resp.tail, __ATOMIC_RELAXED);
	__atomic_store_n(&h->resp.tail, v + 1000, __ATOMIC_RELEASE);
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, 0, NULL, NULL, &msg), -EPROTO);
	hdr_unmap(h);
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

static void test_attach_bad(void)
{
	struct ddss_chan_hdr *h;
	struct ddss_chan *c, *d = NULL;
	int fd;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL((h = hdr_map(ddss_chan_fd(c))) != NULL);
	h->magic ^= 1;
	CU_ASSERT_EQUAL(ddss_chan_attach(ddss_chan_fd(c), &d), -EPROTO);
	CU_ASSERT_PTR_NULL(d);
	h->magic ^= 1;
	h->version++;
	CU_ASSERT_EQUAL(ddss_chan_attach(ddss_chan_fd(c), &d), -EPROTO);
	h->version--;
	h->data_len = 2 * DDSS_CHAN_DATA_MIN; /* more than the memfd holds */
	CU_ASSERT_EQUAL(ddss_chan_attach(ddss_chan_fd(c), &d), -EPROTO);
	h->data_len = DDSS_CHAN_DATA_MIN / 2;
	CU_ASSERT_EQUAL(ddss_chan_attach(ddss_chan_fd(c), &d), -EPROTO);
	h->data_len = DDSS_CHAN_DATA_MIN;
	CU_ASSERT_EQUAL(ddss_chan_attach(ddss_chan_fd(c), &d), 0);
	CU_ASSERT_PTR_NOT_NULL(d);
	ddss_chan_destroy(d);

	/* The same bytes in a memfd that may shrink: refused. */
	fd = memfd_create("not-sealed", MFD_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(ftruncate(fd, DDSS_CHAN_DATA_OFF + DDSS_CHAN_DATA_MIN), 0);
	CU_ASSERT_EQUAL(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
	CU_ASSERT_EQUAL(ddss_chan_attach(fd, &d), -EPROTO);
	close(fd);
	/* Sealed but too short for a header. */
	fd = memfd_create("short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(ftruncate(fd, 100), 0);
	CU_ASSERT_EQUAL(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	CU_ASSERT_EQUAL(ddss_chan_attach(fd, &d), -EPROTO);
	close(fd);
	/* Not a memfd at all, or not a file descriptor. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	CU_ASSERT_EQUAL(ddss_chan_attach(fd, &d), -EPROTO);
	close(fd);
	CU_ASSERT_EQUAL(ddss_chan_attach(-1, &d), -EBADF);
	hdr_unmap(h);
	ddss_chan_destroy(c);
}

/* What a woken peer reports through a pipe: its wait's result and when it returned. */
struct note {
	int rc;
	int64_t t;
};

static int sleeper_peer(struct ddss_chan *d, void *arg)
{
	struct note n;
	const void *msg;

	n.rc = ddss_chan_wait_req(d, 20000, NULL, NULL, &msg);
	n.t = now_ns();
	return write(*(int *)arg, &n, sizeof(n)) == sizeof(n) ? 0 : 1;
}

static int closer_peer(struct ddss_chan *d, void *arg)
{
	struct ddss_chan_hdr *h = hdr_map(ddss_chan_fd(d));
	struct note n = { 0 };

	PEER_CHECK(h, "mapping the header");
	PEER_CHECK(wait_flag(&h->resp.waiters), "the client never slept");
	n.t = now_ns();
	ddss_chan_close(d);
	hdr_unmap(h);
	return write(*(int *)arg, &n, sizeof(n)) == sizeof(n) ? 0 : 1;
}

static void test_close_wakes(void)
{
	struct ddss_chan_hdr *h;
	struct ddss_chan *c, *d;
	const void *msg;
	struct peer p;
	struct note n;
	int64_t t;
	void *slot;
	int pfd[2];

	/* The client closes while the daemon sleeps. */
	CU_ASSERT_FATAL(pipe(pfd) == 0);
	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL((h = hdr_map(ddss_chan_fd(c))) != NULL);
	peer_start(&p, c, sleeper_peer, &pfd[1]);
	CU_ASSERT(wait_flag(&h->req.waiters));
	t = now_ns();
	ddss_chan_close(c);
	CU_ASSERT(ddss_chan_closed(c));
	CU_ASSERT_EQUAL(read(pfd[0], &n, sizeof(n)), (ssize_t)sizeof(n));
	CU_ASSERT_EQUAL(n.rc, -EPIPE);
	printf("\n  daemon woken %lld us after the client closed", (long long)(n.t - t) / 1000);
	CU_ASSERT(n.t - t < 50 * MS); /* not by the end of a 100 ms slice */
	CU_ASSERT_EQUAL(peer_join(&p), 0);
	hdr_unmap(h);
	ddss_chan_destroy(c);

	/* The daemon closes while the client sleeps. */
	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	peer_start(&p, c, closer_peer, &pfd[1]);
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, 20000, peer_alive, &p, &msg), -EPIPE);
	t = now_ns();
	CU_ASSERT_EQUAL(read(pfd[0], &n, sizeof(n)), (ssize_t)sizeof(n));
	printf("\n  client woken %lld us after the daemon closed\n", (long long)(t - n.t) / 1000);
	CU_ASSERT(t - n.t < 50 * MS);
	CU_ASSERT_EQUAL(peer_join(&p), 0);
	ddss_chan_destroy(c);
	close(pfd[0]);
	close(pfd[1]);

	/* Messages posted before the close are still delivered; then -EPIPE. */
	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	for (unsigned i = 0; i < 2; i++) {
		CU_ASSERT_FATAL(ddss_chan_req_slot(c, &slot) == 0);
		rt_fill(slot, i, i);
		ddss_chan_req_post(c);
	}
	ddss_chan_close(c);
	CU_ASSERT(ddss_chan_closed(d));
	CU_ASSERT_EQUAL(ddss_chan_req_slot(c, &slot), -EPIPE);
	CU_ASSERT_EQUAL(ddss_chan_resp_slot(d, &slot), -EPIPE);
	for (unsigned i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL_FATAL(ddss_chan_wait_req(d, 1000, NULL, NULL, &msg), 0);
		CU_ASSERT_PTR_NULL(rt_bad(msg, i, i));
		ddss_chan_req_done(d);
	}
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 1000, NULL, NULL, &msg), -EPIPE);
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, -1, NULL, NULL, &msg), -EPIPE);
	ddss_chan_close(d); /* idempotent */
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

static int dead_peer(struct ddss_chan *d, void *arg)
{
	return 0; /* attached, then gone without a word */
}

struct countdown {
	unsigned calls, fail_at;
};

static int alive_countdown(void *arg)
{
	struct countdown *cd = arg;

	return ++cd->calls >= cd->fail_at ? -ECONNRESET : 0;
}

static void test_liveness(void)
{
	struct countdown cd = { .fail_at = 3 };
	struct ddss_chan *c, *d;
	const void *msg;
	struct peer p;
	int64_t t;
	void *slot;

	/* The client waits for a daemon that died: its error within 100-300 ms. */
	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	peer_start(&p, c, dead_peer, NULL);
	CU_ASSERT_FATAL(ddss_chan_req_slot(c, &slot) == 0);
	rt_fill(slot, 0, 0);
	ddss_chan_req_post(c);
	t = now_ns();
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, -1, peer_alive, &p, &msg), -ESRCH);
	t = now_ns() - t;
	printf("\n  dead daemon noticed after %lld ms, %u liveness checks", (long long)(t / MS),
	       p.alive_calls);
	CU_ASSERT(t >= 95 * MS && t <= 350 * MS);
	CU_ASSERT(p.exited);
	CU_ASSERT_EQUAL(peer_join(&p), 0);

	/* The daemon side: a silent client, the callback's error after its third slice. */
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	ddss_chan_req_done(d); /* nothing validated yet: a no-op */
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), 0); /* the request above */
	ddss_chan_req_done(d);
	t = now_ns();
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, -1, alive_countdown, &cd, &msg), -ECONNRESET);
	t = now_ns() - t;
	printf(", silent client noticed after %lld ms\n", (long long)(t / MS));
	CU_ASSERT_EQUAL(cd.calls, 3);
	CU_ASSERT(t >= 295 * MS && t <= 600 * MS);
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

static void test_timeout(void)
{
	struct ddss_chan *c, *d;
	const void *msg = NULL;
	int64_t t;

	CU_ASSERT_FATAL(ddss_chan_create(&c) == 0);
	CU_ASSERT_FATAL(ddss_chan_attach(ddss_chan_fd(c), &d) == 0);
	t = now_ns();
	CU_ASSERT_EQUAL(ddss_chan_wait_resp(c, 50, NULL, NULL, &msg), -ETIMEDOUT);
	t = now_ns() - t;
	CU_ASSERT(t >= 50 * MS && t < 250 * MS);
	printf("\n  50 ms timeouts after %lld ms", (long long)(t / MS));
	t = now_ns();
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 50, NULL, NULL, &msg), -ETIMEDOUT);
	t = now_ns() - t;
	CU_ASSERT(t >= 50 * MS && t < 250 * MS);
	printf(" and %lld ms\n", (long long)(t / MS));
	CU_ASSERT_EQUAL(ddss_chan_wait_req(d, 0, NULL, NULL, &msg), -ETIMEDOUT);
	CU_ASSERT_PTR_NULL(msg); /* untouched on error */
	ddss_chan_destroy(d);
	ddss_chan_destroy(c);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("daemon channel", NULL, NULL);
	CU_add_test(s, "100000 checked round trips, then DEPTH in flight", test_roundtrip);
	CU_add_test(s, "round-trip time of one message (printed)", test_latency);
	CU_add_test(s, "no spinning: every wake-up through the futex, none lost", test_futex_only);
	CU_add_test(s, "full rings, slots, roles", test_full);
	CU_add_test(s, "data area grows 64 KiB -> 8 MiB, checked on the other side",
		    test_data_growth);
	CU_add_test(s, "data ranges: out of range -EINVAL, unbacked length -EPROTO",
		    test_data_bounds);
	CU_add_test(s, "corrupt head/tail: -EPROTO", test_corrupt_counters);
	CU_add_test(s, "attach refuses bad magic, version, sizes, seals", test_attach_bad);
	CU_add_test(s, "close wakes a sleeper with -EPIPE, after the last message",
		    test_close_wakes);
	CU_add_test(s, "liveness callback ends a wait for a silent peer", test_liveness);
	CU_add_test(s, "timeouts", test_timeout);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
