/*
 * DDSS_TCP_PROTECT against an on-path attacker (issue 29 item 3, docs/security.md).
 *
 * Two tcp transports run in this process, rank 1 and rank 2 of a group with a secret, and
 * rank 1 reaches rank 2 through a relay thread: a socket proxy that forwards both
 * directions byte for byte, and on demand injects bytes into rank 2's side, flips one byte
 * at a given stream offset, or replays bytes it recorded. Every attack runs twice: with
 * protection the attack fails (the target memory is unchanged, the connection fails, an
 * operation whose reply was altered completes with -EBADMSG); with protection off the same
 * attack succeeds, which shows that the test can see it.
 *
 * The pools are this process's memory, so the tests look at them directly. The relay
 * counts what it forwarded and tests wait for those counts (or for the relay to see the
 * connection close) on a condition variable, with a deadline: no sleeps.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "net/auth.h"
#include "net/nodes.h"
#include "net/tcp/tcp_protect.h"
#include "net/tcp/tcp_wire.h"
#include "net/transport.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define POOL_LEN (4u << 20)
/* Larger than a receive buffer and than the frame buffer a connection keeps. */
#define BIG_LEN (1536u << 10)
#define GROUP 0x5eedu
#define WAIT_MS 5000
/* Handshake bytes with a secret, each way: HELLO + AUTH (HELLO_ACK + AUTH_ACK back). */
#define HANDSHAKE_LEN (2u * (TCP_WIRE_HDR_LEN + TCP_WIRE_HELLO_LEN))

static struct ddss_auth_key key;

/* ---- the relay ---- */

struct relay {
	int lfd, cfd, ufd, stop_fd;
	uint16_t port;        /* where rank 1 connects */
	uint16_t target_port; /* rank 2 */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t up, down;          /* bytes forwarded towards rank 2, towards rank 1 */
	int64_t flip_up, flip_down; /* stream offset of a byte to flip (-1: none) */
	uint64_t rec_from;          /* record up bytes [rec_from, rec_from + rec_len) */
	size_t rec_len, rec_got;
	unsigned char rec[256];
	bool closed;                /* either side hung up: both are shut down */
};

/* A listening socket on a free loopback port (test_util), its port in *port_p. */
static int listen_loopback(uint16_t *port_p)
{
	unsigned port;
	int fd = test_listen_loopback(&port);

	*port_p = (uint16_t)port;
	return fd;
}

static int send_all(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);

		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

/* Forward one chunk from @from to @to, tampering as asked; false at the end. */
static bool relay_pass(struct relay *r, int from, int to, bool upward)
{
	unsigned char buf[16384];
	ssize_t n = recv(from, buf, sizeof(buf), 0);
	uint64_t *at = upward ? &r->up : &r->down;
	int64_t *flip = upward ? &r->flip_up : &r->flip_down;
	bool ok;

	if (n <= 0)
		return false;
	pthread_mutex_lock(&r->mu);
	if (*flip >= 0 && (uint64_t)*flip >= *at && (uint64_t)*flip < *at + (uint64_t)n) {
		buf[*flip - (int64_t)*at] ^= 0x01;
		*flip = -1;
	}
	if (upward && r->rec_len) {
		for (ssize_t i = 0; i < n; i++) {
			uint64_t off = *at + (uint64_t)i;

			if (off >= r->rec_from && off < r->rec_from + r->rec_len)
				r->rec[r->rec_got++] = buf[i];
		}
	}
	ok = !send_all(to, buf, (size_t)n);
	*at += (uint64_t)n;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(r->target_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd pfd[3] = { { .fd = r->lfd, .events = POLLIN },
				 { .fd = r->stop_fd, .events = POLLIN } };

	/* One connection only: after it, rank 1 finds nobody listening here. */
	if (poll(pfd, 2, WAIT_MS * 4) <= 0 || !pfd[0].revents)
		goto out;
	r->cfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
	close(r->lfd);
	r->lfd = -1;
	r->ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->cfd < 0 || r->ufd < 0 || connect(r->ufd, (struct sockaddr *)&sa, sizeof(sa)))
		goto out;
	pfd[0] = (struct pollfd){ .fd = r->cfd, .events = POLLIN };
	pfd[2] = (struct pollfd){ .fd = r->ufd, .events = POLLIN };
	for (;;) {
		if (poll(pfd, 3, -1) < 0)
			break;
		if (pfd[1].revents)
			break;
		if (pfd[0].revents && !relay_pass(r, r->cfd, r->ufd, true))
			break;
		if (pfd[2].revents && !relay_pass(r, r->ufd, r->cfd, false))
			break;
	}
out:
	pthread_mutex_lock(&r->mu);
	if (r->cfd >= 0)
		shutdown(r->cfd, SHUT_RDWR);
	if (r->ufd >= 0)
		shutdown(r->ufd, SHUT_RDWR);
	r->closed = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

static int relay_start(struct relay *r, uint16_t target_port)
{
	memset(r, 0, sizeof(*r));
	r->cfd = r->ufd = -1;
	r->flip_up = r->flip_down = -1;
	r->target_port = target_port;
	r->lfd = listen_loopback(&r->port);
	r->stop_fd = eventfd(0, EFD_CLOEXEC);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (r->lfd < 0 || r->stop_fd < 0)
		return -1;
	return pthread_create(&r->thread, NULL, relay_main, r) ? -1 : 0;
}

static void relay_stop(struct relay *r)
{
	eventfd_write(r->stop_fd, 1);
	pthread_join(r->thread, NULL);
	if (r->lfd >= 0)
		close(r->lfd);
	if (r->cfd >= 0)
		close(r->cfd);
	if (r->ufd >= 0)
		close(r->ufd);
	close(r->stop_fd);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}

/* Send @len bytes to rank 2 as if rank 1 had sent them (between two of its frames). */
static int relay_inject(struct relay *r, const void *buf, size_t len)
{
	int ret;

	pthread_mutex_lock(&r->mu);
	ret = r->closed ? -1 : send_all(r->ufd, buf, len);
	pthread_mutex_unlock(&r->mu);
	return ret;
}

/*
 * Wait until the relay has forwarded at least @down bytes towards rank 1 (@closed false) or
 * has seen the connection end (@closed true). True if it happened within WAIT_MS.
 */
static bool relay_wait(struct relay *r, uint64_t down, bool closed)
{
	struct timespec ts;
	bool done;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		done = closed ? r->closed : r->down >= down;
		if (done || pthread_cond_timedwait(&r->cv, &r->mu, &ts))
			break;
	}
	done = closed ? r->closed : r->down >= down;
	pthread_mutex_unlock(&r->mu);
	return done;
}

/* ---- two ranks, rank 1 going through the relay ---- */

struct pair {
	struct ddss_tp *tp[3];
	unsigned char *pool[3];
	struct relay relay;
	bool relayed;
};

static int open_rank(struct pair *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd,
		     enum ddss_tp_protect mode, const struct ddss_auth_key *auth)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = GROUP, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 1000, .auth = auth, .tcp_protect = mode,
	};
	struct ddss_tp_mr *mr;
	int r;

	p->pool[rank] = aligned_alloc(4096, POOL_LEN);
	if (!p->pool[rank])
		return -ENOMEM;
	memset(p->pool[rank], 0, POOL_LEN);
	r = ddss_tp_open("tcp", &cfg, &p->tp[rank]);
	if (r) {
		close(lfd);
		p->tp[rank] = NULL;
		return r;
	}
	r = ddss_tp_mem_register(p->tp[rank], p->pool[rank], POOL_LEN, true, &mr);
	return r ? r : ddss_tp_start(p->tp[rank]);
}

/* Ranks 1 (@m1) and 2 (@m2); with @relayed, rank 1 reaches rank 2 through the relay. */
static int pair_open(struct pair *p, enum ddss_tp_protect m1, enum ddss_tp_protect m2,
		     bool relayed)
{
	struct ddss_tp_node nodes2[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_tp_node nodes1[2];
	int l1, l2, r;

	memset(p, 0, sizeof(*p));
	l1 = listen_loopback(&nodes2[0].port);
	l2 = listen_loopback(&nodes2[1].port);
	if (l1 < 0 || l2 < 0)
		return -EADDRNOTAVAIL;
	memcpy(nodes1, nodes2, sizeof(nodes1));
	p->relayed = relayed;
	if (relayed) {
		if (relay_start(&p->relay, nodes2[1].port))
			return -EAGAIN;
		nodes1[1].port = p->relay.port;
	}
	r = open_rank(p, 2, nodes2, l2, m2, &key);
	if (!r)
		r = open_rank(p, 1, nodes1, l1, m1, &key);
	return r;
}

static void pair_close(struct pair *p)
{
	for (uint32_t rank = 1; rank <= 2; rank++) {
		if (p->tp[rank])
			ddss_tp_close(p->tp[rank]);
		free(p->pool[rank]);
	}
	if (p->relayed)
		relay_stop(&p->relay);
}

static uint64_t word(const struct pair *p, uint32_t rank, uint64_t off)
{
	uint64_t v;

	memcpy(&v, p->pool[rank] + off, sizeof(v));
	return v;
}

/* Rank 1 writes @v at @off of rank 2's pool; the completion status. */
static int write_word(struct pair *p, uint64_t off, uint64_t v)
{
	struct ddss_tp_req req;
	int r = ddss_tp_post_write(p->tp[1], 2, off, &v, sizeof(v), &req);

	if (r)
		return r;
	r = ddss_tp_wait(p->tp[1], &req, WAIT_MS * 2);
	return r ? r : req.status;
}

/* Bytes one frame with @len payload bytes takes on the wire. */
static size_t frame_len(enum ddss_tp_protect mode, size_t len)
{
	return mode ? tcp_protect_frame_len(len) : TCP_WIRE_HDR_LEN + len;
}

static const enum ddss_tp_protect modes[] = { DDSS_TP_PROTECT_OFF, DDSS_TP_PROTECT_INTEGRITY,
					      DDSS_TP_PROTECT_ENCRYPT };

/* ---- the attacks ---- */

/*
 * After the handshake and one write, the relay injects a WRITE frame of its own. It knows
 * the format and the next sequence number, but not the keys: its tag is made up.
 */
static void test_injection(void)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		enum ddss_tp_protect m = modes[i];
		struct tcp_wire_hdr h = { .kind = TCP_K_WRITE, .len = 8, .seq = 2, .off = 128 };
		unsigned char forged[TCP_WIRE_HDR_LEN + 8 + TCP_PROTECT_TAG_LEN];
		uint64_t evil = 0xbadbadbadbadbad0ull;
		struct pair p;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, m, m, true), 0);
		CU_ASSERT_EQUAL(write_word(&p, 64, 7), 0);
		CU_ASSERT_EQUAL(word(&p, 2, 64), 7);
		tcp_wire_encode_hdr(&h, forged);
		memcpy(forged + TCP_WIRE_HDR_LEN, &evil, 8);
		memset(forged + TCP_WIRE_HDR_LEN + 8, 0x5a, TCP_PROTECT_TAG_LEN);
		CU_ASSERT_EQUAL(relay_inject(&p.relay, forged, frame_len(m, 8)), 0);
		if (m == DDSS_TP_PROTECT_OFF) {
			/* Rank 2 served it: its reply came back (and the bytes landed before). */
			CU_ASSERT(relay_wait(&p.relay, HANDSHAKE_LEN + 2 * frame_len(m, 0), false));
			CU_ASSERT_EQUAL(word(&p, 2, 128), evil);
		} else {
			/* Rank 2 closed the connection without using the frame. */
			CU_ASSERT(relay_wait(&p.relay, 0, true));
			CU_ASSERT_EQUAL(word(&p, 2, 128), 0);
			CU_ASSERT_EQUAL(p.relay.down, HANDSHAKE_LEN + frame_len(m, 0));
			/* Rank 1's next operation fails; nothing more lands. */
			CU_ASSERT_NOT_EQUAL(write_word(&p, 64, 8), 0);
			CU_ASSERT_EQUAL(word(&p, 2, 64), 7);
		}
		pair_close(&p);
	}
}

/* The relay flips a bit of the payload of rank 1's first write. */
static void test_altered_request(void)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		enum ddss_tp_protect m = modes[i];
		struct pair p;
		int st;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, m, m, true), 0);
		CU_ASSERT_EQUAL_FATAL(ddss_tp_peer_connect(p.tp[1], 2), 0);
		pthread_mutex_lock(&p.relay.mu);
		p.relay.flip_up = HANDSHAKE_LEN + TCP_WIRE_HDR_LEN;
		pthread_mutex_unlock(&p.relay.mu);
		st = write_word(&p, 64, 0x10);
		if (m == DDSS_TP_PROTECT_OFF) {
			CU_ASSERT_EQUAL(st, 0);
			CU_ASSERT_EQUAL(word(&p, 2, 64), 0x11); /* the altered value landed */
		} else {
			CU_ASSERT_NOT_EQUAL(st, 0);
			CU_ASSERT(relay_wait(&p.relay, 0, true));
			CU_ASSERT_EQUAL(word(&p, 2, 64), 0);
		}
		pair_close(&p);
	}
}

/* The relay flips a bit of the data of a read's reply: the read fails with -EBADMSG. */
static void test_altered_reply(void)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		enum ddss_tp_protect m = modes[i];
		uint64_t got = 0, v = 0x1234;
		struct ddss_tp_req req;
		struct pair p;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, m, m, true), 0);
		memcpy(p.pool[2] + 256, &v, sizeof(v));
		CU_ASSERT_EQUAL_FATAL(ddss_tp_peer_connect(p.tp[1], 2), 0);
		pthread_mutex_lock(&p.relay.mu);
		p.relay.flip_down = HANDSHAKE_LEN + TCP_WIRE_HDR_LEN;
		pthread_mutex_unlock(&p.relay.mu);
		CU_ASSERT_EQUAL_FATAL(ddss_tp_post_read(p.tp[1], 2, 256, &got, 8, &req), 0);
		CU_ASSERT_EQUAL(ddss_tp_wait(p.tp[1], &req, WAIT_MS * 2), 0);
		if (m == DDSS_TP_PROTECT_OFF) {
			CU_ASSERT_EQUAL(req.status, 0);
			CU_ASSERT_EQUAL(got, 0x1235);
		} else {
			CU_ASSERT_EQUAL(req.status, -EBADMSG);
		}
		pair_close(&p);
	}
}

/* The relay records rank 1's first write (1 at 64) and replays it after the second (2). */
static void test_replay(void)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		enum ddss_tp_protect m = modes[i];
		struct pair p;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, m, m, true), 0);
		pthread_mutex_lock(&p.relay.mu);
		p.relay.rec_from = HANDSHAKE_LEN;
		p.relay.rec_len = frame_len(m, 8);
		pthread_mutex_unlock(&p.relay.mu);
		CU_ASSERT_EQUAL(write_word(&p, 64, 1), 0);
		CU_ASSERT_EQUAL(write_word(&p, 64, 2), 0);
		CU_ASSERT_EQUAL_FATAL(p.relay.rec_got, p.relay.rec_len);
		CU_ASSERT_EQUAL(relay_inject(&p.relay, p.relay.rec, p.relay.rec_len), 0);
		if (m == DDSS_TP_PROTECT_OFF) {
			CU_ASSERT(relay_wait(&p.relay, HANDSHAKE_LEN + 3 * frame_len(m, 0), false));
			CU_ASSERT_EQUAL(word(&p, 2, 64), 1); /* the old value is back */
		} else {
			CU_ASSERT(relay_wait(&p.relay, 0, true));
			CU_ASSERT_EQUAL(word(&p, 2, 64), 2);
		}
		pair_close(&p);
	}
}

/*
 * The relay alters what the handshake carries outside the proofs: the target's pool length
 * in AUTH_ACK. Off, rank 1 believes it; protected, the keys differ and nothing works.
 */
static void test_altered_handshake(void)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		enum ddss_tp_protect m = modes[i];
		struct ddss_tp_peer_info info;
		struct pair p;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, m, m, true), 0);
		pthread_mutex_lock(&p.relay.mu);
		/* AUTH_ACK's hello, its pool_len (offset 32), third byte: 0x40 -> 0x41. */
		p.relay.flip_down = HANDSHAKE_LEN / 2 + TCP_WIRE_HDR_LEN + 32 + 2;
		pthread_mutex_unlock(&p.relay.mu);
		CU_ASSERT_EQUAL_FATAL(ddss_tp_peer_connect(p.tp[1], 2), 0);
		CU_ASSERT_EQUAL(ddss_tp_peer_info(p.tp[1], 2, &info), 0);
		CU_ASSERT_EQUAL(info.pool_len, POOL_LEN + (1u << 16));
		if (m == DDSS_TP_PROTECT_OFF) {
			CU_ASSERT_EQUAL(write_word(&p, 64, 5), 0);
			CU_ASSERT_EQUAL(word(&p, 2, 64), 5);
		} else {
			CU_ASSERT_NOT_EQUAL(write_word(&p, 64, 5), 0);
			CU_ASSERT(relay_wait(&p.relay, 0, true));
			CU_ASSERT_EQUAL(word(&p, 2, 64), 0);
		}
		pair_close(&p);
	}
}

/* Without an attacker, frames of every size go through whole in every mode. */
static void test_large_frames(void)
{
	unsigned char *out = malloc(BIG_LEN), *in = malloc(BIG_LEN);

	CU_ASSERT_FATAL(out && in);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct ddss_tp_req req;
		struct pair p;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, modes[i], modes[i], true), 0);
		for (size_t len = 1; len <= BIG_LEN; len = len * 7 + 3) {
			test_fill(out, len, len + i);
			memset(in, 0, len);
			CU_ASSERT_EQUAL(ddss_tp_post_write(p.tp[1], 2, 4096, out, len, &req), 0);
			CU_ASSERT_EQUAL(ddss_tp_wait(p.tp[1], &req, WAIT_MS * 2), 0);
			CU_ASSERT_EQUAL(req.status, 0);
			CU_ASSERT_EQUAL(test_check(p.pool[2] + 4096, len, len + i), SIZE_MAX);
			CU_ASSERT_EQUAL(ddss_tp_post_read(p.tp[1], 2, 4096, in, len, &req), 0);
			CU_ASSERT_EQUAL(ddss_tp_wait(p.tp[1], &req, WAIT_MS * 2), 0);
			CU_ASSERT_EQUAL(req.status, 0);
			CU_ASSERT_EQUAL(test_check(in, len, len + i), SIZE_MAX);
		}
		pair_close(&p);
	}
	free(out);
	free(in);
}

/* ---- configuration ---- */

/* Ranks configured with different modes do not talk; the same mode does. */
static void test_mode_mismatch(void)
{
	static const struct {
		enum ddss_tp_protect m1, m2;
		int want;
	} cases[] = {
		{ DDSS_TP_PROTECT_INTEGRITY, DDSS_TP_PROTECT_ENCRYPT, -EACCES },
		{ DDSS_TP_PROTECT_ENCRYPT, DDSS_TP_PROTECT_INTEGRITY, -EACCES },
		{ DDSS_TP_PROTECT_OFF, DDSS_TP_PROTECT_INTEGRITY, -EACCES },
		{ DDSS_TP_PROTECT_ENCRYPT, DDSS_TP_PROTECT_OFF, -EACCES },
		{ DDSS_TP_PROTECT_ENCRYPT, DDSS_TP_PROTECT_ENCRYPT, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pair p;
		int r;

		CU_ASSERT_EQUAL_FATAL(pair_open(&p, cases[i].m1, cases[i].m2, false), 0);
		r = ddss_tp_peer_connect(p.tp[1], 2);
		if (r != cases[i].want)
			fprintf(stderr, "  %s -> %s: %d, expected %d\n",
				tcp_protect_name(cases[i].m1), tcp_protect_name(cases[i].m2), r,
				cases[i].want);
		CU_ASSERT_EQUAL(r, cases[i].want);
		if (!r)
			CU_ASSERT_EQUAL(write_word(&p, 8, 99), 0);
		CU_ASSERT_EQUAL(word(&p, 2, 8), r ? 0 : 99);
		pair_close(&p);
	}
}

/* Protection without authentication cannot open; a bad DDSS_TCP_PROTECT fails ddss_init. */
static void test_config_refused(void)
{
	struct ddss_tp_node nodes[1] = { { "127.0.0.1", 0 } };
	struct ddss_tp_config cfg = { .rank = 1, .size = 1, .group = GROUP, .nodes = nodes,
				      .listen_fd = -1, .op_timeout_ms = WAIT_MS,
				      .connect_timeout_ms = 1000 };
	static const struct {
		const char *value;
		int want;
		enum ddss_tp_protect mode;
	} env[] = {
		{ "bogus", -EINVAL, 0 },
		{ "INTEGRITY", -EINVAL, 0 },
		{ "integrity ", -EINVAL, 0 },
		{ "off", 0, DDSS_TP_PROTECT_OFF },
		{ "", 0, DDSS_TP_PROTECT_OFF },
		{ "integrity", 0, DDSS_TP_PROTECT_INTEGRITY },
		{ "encrypt", 0, DDSS_TP_PROTECT_ENCRYPT },
	};
	struct ddss_tp *tp = NULL;
	ddss_ctx_t *ctx = NULL;

	for (enum ddss_tp_protect m = DDSS_TP_PROTECT_INTEGRITY; m <= DDSS_TP_PROTECT_ENCRYPT; m++) {
		cfg.tcp_protect = m;
		CU_ASSERT_EQUAL(ddss_tp_open("tcp", &cfg, &tp), -EINVAL);
	}
	setenv("DDSS_NODES", "127.0.0.1:1", 1);
	setenv("DDSS_RANK", "1", 1);
	for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
		struct ddss_net_env e;
		int r;

		setenv("DDSS_TCP_PROTECT", env[i].value, 1);
		r = ddss_net_env_load(&e);
		CU_ASSERT_EQUAL(r, env[i].want);
		if (!r) {
			CU_ASSERT_EQUAL(e.tcp_protect, env[i].mode);
			ddss_net_env_free(&e);
		}
	}
	/* The public call fails at once, before it listens or looks for peers. */
	setenv("DDSS_TCP_PROTECT", "bogus", 1);
	CU_ASSERT_EQUAL(ddss_init(NULL, &ctx), -EINVAL);
	CU_ASSERT_PTR_NULL(ctx);
	unsetenv("DDSS_TCP_PROTECT");
	unsetenv("DDSS_NODES");
	unsetenv("DDSS_RANK");
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	if (ddss_auth_key_load("tcp protect test secret", &key) || !key.on)
		return 1;
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("tcp frame protection against an on-path relay", NULL, NULL);
	CU_add_test(suite, "an on-path frame injection is rejected with protection on",
		    test_injection);
	CU_add_test(suite, "an altered request is rejected", test_altered_request);
	CU_add_test(suite, "an altered reply fails its operation with -EBADMSG",
		    test_altered_reply);
	CU_add_test(suite, "a replayed frame is rejected", test_replay);
	CU_add_test(suite, "an altered handshake leaves a connection that carries nothing",
		    test_altered_handshake);
	CU_add_test(suite, "frames of every size, intact", test_large_frames);
	CU_add_test(suite, "mode mismatch refused", test_mode_mismatch);
	CU_add_test(suite, "protection without a secret, and bad values, refused",
		    test_config_refused);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_auth_key_clear(&key);
	return failed ? 1 : 0;
}
