/*
 * The tcp provider's ops table: lifecycle, memory, peers, and argument checking before
 * requests go to a channel. Operations on this rank's own pool run inline as CPU
 * operations: the progress thread serves remote atomics with CPU atomics too, so the two
 * are atomic with respect to each other (unlike verbs, where the NIC's atomics are not).
 * They also run at once in the weak test mode (DDSS_TCP_ORDER=weak, tcp_serve.c), which
 * weakens only what the progress thread serves for peers.
 */
#include "net/tcp/tcp.h"
#include "core/config.h"
#include "net/spin.h"
#include "core/log.h"
#include "core/tsan.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The pool handle is the provider itself; local buffers need no registration here. */
struct ddss_tp_mr {
	int unused;
};
static struct ddss_tp_mr tcp_local_mr;

void tcp_set_sock_opts(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

void tcp_set_rcvtimeo(int fd, int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (ms <= 0)
		tv = (struct timeval){ 0, 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

int tcp_recv_full(int fd, void *buf, size_t len, int64_t deadline_ns,
		  const struct ddss_tp *refused_of, uint32_t peer)
{
	size_t got = 0;

	while (got < len) {
		int64_t left_ms = (deadline_ns - ddss_now_ns() + 999999) / 1000000;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		/* A deadline for the whole message: a peer trickling bytes cannot extend it. */
		if (left_ms <= 0)
			return -ETIMEDOUT;
		if (refused_of) {
			if (ddss_tp_peer_refused(refused_of, peer))
				return -EHOSTDOWN;
			if (left_ms > TCP_REFUSAL_SLICE_MS)
				left_ms = TCP_REFUSAL_SLICE_MS;
		}
		n = poll(&pfd, 1, left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			return -ECONNRESET;
		else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
	}
	return 0;
}

void tcp_peer_set_state(struct tcp_tp *t, uint32_t rank, uint32_t gen,
			enum ddss_tp_peer_state state)
{
	/* A static group has generation 0 throughout: every event counts. */
	if (gen != ddss_tp_peer_generation(&t->base, rank))
		return;
	ddss_tp_peer_changed(&t->base, &t->peers[rank].state, rank, state);
}

void tcp_peer_set_pool_len(struct tcp_tp *t, uint32_t rank, uint64_t pool_len)
{
	__atomic_store_n(&t->peers[rank].pool_len, pool_len, __ATOMIC_RELEASE);
}

static int tcp_open(const struct ddss_tp_config *cfg, struct ddss_tp **tp_p);

static void tcp_close(struct ddss_tp *tp)
{
	struct tcp_tp *t = tcp_tp_of(tp);

	if (t->started)
		tcp_serve_stop(t);
	for (uint32_t r = 1; r <= tp->cfg.size; r++)
		tcp_chan_shutdown(&t->peers[r].chan, -ECANCELED);
	for (uint32_t r = 1; r <= tp->cfg.size; r++)
		tcp_chan_destroy(&t->peers[r].chan);
	close(t->epfd);
	pthread_mutex_destroy(&t->served_mu);
	pthread_mutex_destroy(&t->serve_state_mu);
	free(t->peers);
	ddss_tp_fini_common(tp);
	free(t);
}

static int tcp_start(struct ddss_tp *tp)
{
	struct tcp_tp *t = tcp_tp_of(tp);
	int r;

	if (t->started)
		return -EALREADY;
	if (!t->pool_registered) {
		DDSS_ERR("start: register the pool first");
		return -EINVAL;
	}
	r = tcp_serve_start(t);
	if (r == 0)
		t->started = true;
	return r;
}

static int tcp_mem_register(struct ddss_tp *tp, void *addr, size_t len, bool expose,
			    struct ddss_tp_mr **mr_p)
{
	struct tcp_tp *t = tcp_tp_of(tp);

	if (!addr || !len || !mr_p)
		return -EINVAL;
	if (!expose) {
		*mr_p = &tcp_local_mr;
		return 0;
	}
	/* Atomics need 8-byte-aligned words, so the pool must start aligned. */
	if (t->pool_registered || t->started || (uintptr_t)addr % 8)
		return -EINVAL;
	t->pool = addr;
	t->pool_len = len;
	t->pool_registered = true;
	*mr_p = (struct ddss_tp_mr *)t;
	return 0;
}

static int tcp_mem_deregister(struct ddss_tp *tp, struct ddss_tp_mr *mr)
{
	struct tcp_tp *t = tcp_tp_of(tp);

	if (mr == &tcp_local_mr)
		return 0;
	if (mr != (struct ddss_tp_mr *)t || t->started)
		return -EINVAL;
	t->pool_registered = false;
	t->pool = NULL;
	t->pool_len = 0;
	return 0;
}

static int tcp_peer_connect(struct ddss_tp *tp, uint32_t rank)
{
	if (!ddss_tp_valid_rank(tp, rank))
		return -EINVAL;
	return tcp_chan_ensure(&tcp_tp_of(tp)->peers[rank].chan);
}

static int tcp_peer_disconnect(struct ddss_tp *tp, uint32_t rank)
{
	if (!ddss_tp_valid_rank(tp, rank))
		return -EINVAL;
	/*
	 * A refused rank loses access to our memory first: shutting our channel down reports
	 * the peer down, and whoever sees that may already act on the refusal (the server also
	 * checks the flag before each request, for one it was reading right now).
	 */
	int r = 0;

	if (ddss_tp_peer_refused(tp, rank) && tcp_tp_of(tp)->started)
		r = tcp_serve_cut(tcp_tp_of(tp), rank);
	tcp_chan_shutdown(&tcp_tp_of(tp)->peers[rank].chan, -ECONNRESET);
	return r;
}

static int tcp_peer_readmit(struct ddss_tp *tp, uint32_t rank, const struct ddss_tp_node *node)
{
	struct tcp_tp *t = tcp_tp_of(tp);
	struct tcp_chan *ch = &t->peers[rank].chan;

	tcp_chan_shutdown(ch, -ECONNRESET); /* one a connect opened as the refusal came */
	pthread_mutex_lock(&ch->connect_mu);
	tp->nodes[rank - 1] = *node;
	ddss_lookup_drop(&ch->lookup); /* a new process: its name is looked up afresh */
	__atomic_store_n(&ch->ever_up, false, __ATOMIC_RELAXED);
	ch->readmitted = true; /* it may still be starting: wait for it as at a first start */
	pthread_mutex_unlock(&ch->connect_mu);
	/* Under serve_state_mu: a served connection's close or add that checked the
	 * generation just before the new one was stored (ddss_tp_peer_readmit) has set the
	 * state and pool length by then, not after; and the refusal is still in force for
	 * tcp_serve_add's last check. */
	pthread_mutex_lock(&t->serve_state_mu);
	tcp_peer_set_pool_len(t, rank, 0);
	__atomic_store_n(&t->peers[rank].state, DDSS_TP_PEER_UNKNOWN, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&t->serve_state_mu);
	return 0;
}

static int tcp_peer_info(struct ddss_tp *tp, uint32_t rank, struct ddss_tp_peer_info *info_p)
{
	struct tcp_tp *t = tcp_tp_of(tp);

	if (!ddss_tp_valid_rank(tp, rank) || !info_p)
		return -EINVAL;
	if (rank == tp->cfg.rank) {
		info_p->state = DDSS_TP_PEER_UP;
		info_p->pool_len = t->pool_len;
		info_p->served = false;
		return 0;
	}
	info_p->state = __atomic_load_n(&t->peers[rank].state, __ATOMIC_ACQUIRE);
	info_p->pool_len = __atomic_load_n(&t->peers[rank].pool_len, __ATOMIC_ACQUIRE);
	info_p->served = info_p->state == DDSS_TP_PEER_DOWN && tcp_serve_has(t, rank);
	return 0;
}

static void complete_now(struct ddss_tp_req *req, int status, uint64_t result)
{
	req->status = status;
	req->result = result;
	req->deadline_ns = INT64_MAX;
	__atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

/* An operation on our own pool, done inline (see the top of this file). */
static int local_op(struct tcp_tp *t, struct ddss_tp_req *req)
{
	unsigned char *at = t->pool + req->remote_off;
	uint64_t old = 0;

	switch (req->op) {
	case DDSS_TP_OP_READ:
		DDSS_POOL_ACCESS_BEGIN();
		memcpy(req->local, at, req->len);
		DDSS_POOL_ACCESS_END();
		break;
	case DDSS_TP_OP_WRITE:
		DDSS_POOL_ACCESS_BEGIN();
		if (req->len == 8 && !((uintptr_t)at & 7)) { /* one store, as tcp_serve.c does */
			uint64_t v;

			memcpy(&v, req->local, 8);
			__atomic_store_n((uint64_t *)at, v, __ATOMIC_RELEASE);
		} else {
			memcpy(at, req->local, req->len);
		}
		DDSS_POOL_ACCESS_END();
		break;
	case DDSS_TP_OP_CAS:
		old = req->operand[0];
		__atomic_compare_exchange_n((uint64_t *)at, &old, req->operand[1], false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		break;
	case DDSS_TP_OP_FADD:
		old = __atomic_fetch_add((uint64_t *)at, req->operand[0], __ATOMIC_SEQ_CST);
		break;
	}
	complete_now(req, 0, old);
	return 0;
}

/*
 * Common path of every one-sided post: check arguments and range (against the pool
 * length the peer announced), then run locally or send on the peer's channel. @flags:
 * DDSS_TP_MORE, DDSS_TP_WAITED and DDSS_TP_LATER may hold the frame (tcp_chan_post), DDSS_TP_FENCE
 * travels in the header (a local operation runs at once: nothing of ours is in flight to
 * our own pool).
 */
static int post(struct ddss_tp *tp, uint32_t peer, enum ddss_tp_op op, uint64_t off, void *local,
		size_t len, uint64_t a, uint64_t b, struct ddss_tp_req *req, unsigned flags)
{
	struct tcp_tp *t = tcp_tp_of(tp);
	struct tcp_chan *ch;
	struct tcp_wire_hdr h = { .off = off,
				  .flags = (flags & DDSS_TP_FENCE ? TCP_WIRE_F_FENCE : 0) |
					   (flags & DDSS_TP_BOUND ? TCP_WIRE_F_BOUND : 0) };
	uint64_t pool_len;
	int r;

	if (!req || !ddss_tp_valid_rank(tp, peer) || (len && !local) || len == 0 || len > UINT32_MAX)
		return -EINVAL;
	if ((op == DDSS_TP_OP_CAS || op == DDSS_TP_OP_FADD) && off % 8)
		return -EINVAL;
	req->op = op;
	req->peer = peer;
	req->remote_off = off;
	req->local = local;
	req->len = len;
	req->operand[0] = a;
	req->operand[1] = b;
	if (peer == tp->cfg.rank) {
		if (!tcp_wire_in_range(off, len, t->pool_len))
			return -ERANGE;
		return local_op(t, req);
	}
	ch = &t->peers[peer].chan;
	r = tcp_chan_ensure(ch);
	if (r)
		return r;
	pool_len = __atomic_load_n(&t->peers[peer].pool_len, __ATOMIC_ACQUIRE);
	if (!tcp_wire_in_range(off, len, pool_len))
		return -ERANGE;
	switch (op) {
	case DDSS_TP_OP_READ:
		h.kind = TCP_K_READ;
		h.a = len;
		return tcp_chan_post(ch, req, &h, NULL, 0, flags);
	case DDSS_TP_OP_WRITE:
		h.kind = TCP_K_WRITE;
		h.len = (uint32_t)len;
		return tcp_chan_post(ch, req, &h, local, len, flags);
	case DDSS_TP_OP_CAS:
		h.kind = TCP_K_CAS;
		h.a = a;
		h.b = b;
		return tcp_chan_post(ch, req, &h, NULL, 0, flags);
	case DDSS_TP_OP_FADD:
		h.kind = TCP_K_FADD;
		h.a = a;
		return tcp_chan_post(ch, req, &h, NULL, 0, flags);
	}
	return -EINVAL;
}

static int tcp_post_read(struct ddss_tp *tp, uint32_t peer, uint64_t off, void *local, size_t len,
			 struct ddss_tp_req *req)
{
	return post(tp, peer, DDSS_TP_OP_READ, off, local, len, 0, 0, req, 0);
}

static int tcp_post_write(struct ddss_tp *tp, uint32_t peer, uint64_t off, const void *local,
			  size_t len, struct ddss_tp_req *req)
{
	return post(tp, peer, DDSS_TP_OP_WRITE, off, (void *)local, len, 0, 0, req, 0);
}

/*
 * DDSS_TP_MORE: the frame goes out with this channel's next send (or at the poster's
 * wait). DDSS_TP_WAITED: it may wait a moment for other threads' frames (tcp_chan.c,
 * "Combined sends"). DDSS_TP_FENCE: a header flag; the home honours it in the weak test
 * mode (it executes each channel in order otherwise, which is stronger than any fence).
 */
static int tcp_post_ex(struct ddss_tp *tp, enum ddss_tp_op op, uint32_t peer, uint64_t off,
		       void *local, size_t len, uint64_t a, uint64_t b, unsigned flags,
		       struct ddss_tp_req *req)
{
	if (flags & ~(unsigned)DDSS_TP_POST_FLAGS)
		return -EINVAL;
	switch (op) {
	case DDSS_TP_OP_READ:
	case DDSS_TP_OP_WRITE:
		return post(tp, peer, op, off, local, len, 0, 0, req, flags);
	case DDSS_TP_OP_CAS:
	case DDSS_TP_OP_FADD:
		/* MORE holds the header-only frame like a read's; the result is req's. */
		if (!req)
			return -EINVAL;
		return post(tp, peer, op, off, &req->result, 8, a, op == DDSS_TP_OP_CAS ? b : 0, req,
			    flags);
	}
	return -EINVAL;
}

static int tcp_post_cas(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare,
			uint64_t swap, struct ddss_tp_req *req)
{
	return post(tp, peer, DDSS_TP_OP_CAS, off, &req->result, 8, compare, swap, req, 0);
}

static int tcp_post_fadd(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add,
			 struct ddss_tp_req *req)
{
	return post(tp, peer, DDSS_TP_OP_FADD, off, &req->result, 8, add, 0, req, 0);
}

static int send_oneway(struct ddss_tp *tp, uint32_t peer, const struct tcp_wire_hdr *h,
		       const void *buf, size_t len)
{
	struct tcp_chan *ch;
	int r;

	if (!ddss_tp_valid_rank(tp, peer))
		return -EINVAL;
	ch = &tcp_tp_of(tp)->peers[peer].chan;
	r = tcp_chan_ensure(ch);
	return r ? r : tcp_chan_send_oneway(ch, h, buf, len);
}

/* All n frames in one buffer, so one sendmsg carries them (and one recv reads them). */
static int tcp_notify_many(struct ddss_tp *tp, uint32_t peer, const uint32_t *values, unsigned n)
{
	unsigned char frames[DDSS_TP_NOTIFY_BATCH * TCP_WIRE_HDR_LEN];
	struct tcp_chan *ch;
	int r;

	if (!ddss_tp_notify_args_ok(tp, peer, values, n))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		struct tcp_wire_hdr h = { .kind = TCP_K_NOTIFY, .a = values[i] };

		tcp_wire_encode_hdr(&h, frames + (size_t)i * TCP_WIRE_HDR_LEN);
	}
	ch = &tcp_tp_of(tp)->peers[peer].chan;
	r = tcp_chan_ensure(ch);
	return r ? r : tcp_chan_send_frames(ch, frames, (size_t)n * TCP_WIRE_HDR_LEN);
}

static int tcp_msg_send(struct ddss_tp *tp, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	struct tcp_wire_hdr h = { .kind = TCP_K_MSG, .tag = tag, .len = (uint32_t)len };

	if (len > DDSS_TP_MSG_MAX || (len && !buf))
		return -EINVAL;
	return send_oneway(tp, peer, &h, buf, len);
}

static int tcp_test(struct ddss_tp *tp, struct ddss_tp_req *req)
{
	if (!req || !ddss_tp_valid_rank(tp, req->peer))
		return -EINVAL;
	if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return 0;
	return tcp_chan_test(&tcp_tp_of(tp)->peers[req->peer].chan, req);
}

static int tcp_wait(struct ddss_tp *tp, struct ddss_tp_req *req, int timeout_ms)
{
	if (!req || !ddss_tp_valid_rank(tp, req->peer))
		return -EINVAL;
	if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return 0;
	return tcp_chan_wait(&tcp_tp_of(tp)->peers[req->peer].chan, req, timeout_ms);
}

const struct ddss_tp_ops ddss_tcp_ops = {
	.name = "tcp",
	.open = tcp_open,
	.start = tcp_start,
	.close = tcp_close,
	.mem_register = tcp_mem_register,
	.mem_deregister = tcp_mem_deregister,
	.peer_connect = tcp_peer_connect,
	.peer_disconnect = tcp_peer_disconnect,
	.peer_info = tcp_peer_info,
	.peer_readmit = tcp_peer_readmit,
	.post_read = tcp_post_read,
	.post_write = tcp_post_write,
	.post_ex = tcp_post_ex,
	.post_cas = tcp_post_cas,
	.post_fadd = tcp_post_fadd,
	.notify_many = tcp_notify_many,
	.msg_send = tcp_msg_send,
	.test = tcp_test,
	.wait = tcp_wait,
};

/*
 * DDSS_TCP_ORDER: "strong" (default: each channel executed in order, READs sampled at
 * once) or "weak", the test mode that executes as late as InfiniBand RC allows
 * (tcp_serve.c, docs/transport.md). Anything else refuses to open.
 */
static int order_from_env(enum tcp_order *order_p)
{
	const char *s = getenv("DDSS_TCP_ORDER");

	if (!s || !*s || !strcmp(s, "strong")) {
		*order_p = TCP_ORDER_STRONG;
		return 0;
	}
	if (!strcmp(s, "weak")) {
		DDSS_WARN("DDSS_TCP_ORDER=weak: a test mode; this rank serves READs and atomic "
			  "replies as late as InfiniBand allows (slower, for finding missing "
			  "fences)");
		*order_p = TCP_ORDER_WEAK;
		return 0;
	}
	DDSS_ERR("DDSS_TCP_ORDER=%s: unknown ordering (strong or weak)", s);
	return -EINVAL;
}

/*
 * DDSS_HOME_SPIN_US (0..10000): how long this rank's progress thread polls for the next
 * request after serving some, before it sleeps in epoll_wait (tcp_serve.c). Unset, it
 * follows the completion mode, the home waiting the way its requesters do:
 *  - poll: TCP_HOME_SPIN_POLL_US;
 *  - adaptive: twice the spin bound (net/spin.h), at least TCP_HOME_SPIN_POLL_US (0 when
 *    DDSS_SPIN_US=0). The window must cover a requester's whole turn, its reply out and
 *    its next request in; with the poll only as long as the requester spins, a wake-up
 *    missed on either side made the other one miss too (docs/transport.md, "The home's
 *    wait");
 *  - event: 0, it sleeps at once.
 * The poll gives way to any other thread that wants its CPU (tcp_serve.c), so it spends
 * only a core nobody else was using.
 */
#define TCP_HOME_SPIN_POLL_US 50

static long home_spin_default_us(enum ddss_tp_completion completion)
{
	switch (completion) {
	case DDSS_TP_COMPLETION_POLL:
		return TCP_HOME_SPIN_POLL_US;
	case DDSS_TP_COMPLETION_ADAPTIVE: {
		long twice = (long)(2 * ddss_spin_ns() / 1000);

		if (twice == 0)
			return 0; /* DDSS_SPIN_US=0: adaptive behaves as event */
		return twice > TCP_HOME_SPIN_POLL_US ? twice : TCP_HOME_SPIN_POLL_US;
	}
	default:
		return 0;
	}
}

static int home_spin_from_env(enum ddss_tp_completion completion, int64_t *ns_p)
{
	long us;
	int r = ddss_env_long("DDSS_HOME_SPIN_US", 0, DDSS_SPIN_US_MAX,
			      home_spin_default_us(completion), &us);

	if (r)
		return r;
	*ns_p = (int64_t)us * 1000;
	return 0;
}

static int tcp_open(const struct ddss_tp_config *cfg, struct ddss_tp **tp_p)
{
	struct tcp_tp *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	r = order_from_env(&t->order);
	if (!r)
		r = home_spin_from_env(cfg->completion, &t->home_spin_ns);
	if (r)
		goto err_free;
	if (cfg->tcp_protect != DDSS_TP_PROTECT_OFF && !cfg->auth) {
		DDSS_ERR("DDSS_TCP_PROTECT=%s needs authentication: the frame keys come from the "
			 "handshake's proofs; set a group secret (DDSS_SECRET or DDSS_SECRET_FILE) "
			 "or a keys file (DDSS_KEYS_FILE)", tcp_protect_name(cfg->tcp_protect));
		r = -EINVAL;
		goto err_free;
	}
	t->protect = cfg->tcp_protect;
	r = ddss_tp_init_common(&t->base, &ddss_tcp_ops, cfg);
	if (r)
		goto err_free;
	t->base.fetch_by_fadd = true; /* the home's CPU atomic; a reply without payload */
	t->base.holds_later = true;   /* tcp_later.c */
	t->listen_fd = -1;
	t->stop_fd = -1;
	t->later_fd = -1;
	t->peers = calloc(cfg->size + 1, sizeof(*t->peers));
	if (!t->peers) {
		r = -ENOMEM;
		goto err_common;
	}
	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (t->epfd < 0) {
		r = -errno;
		goto err_peers;
	}
	pthread_mutex_init(&t->served_mu, NULL);
	pthread_mutex_init(&t->serve_state_mu, NULL);
	for (uint32_t rank = 1; rank <= cfg->size; rank++)
		tcp_chan_init(&t->peers[rank].chan, t, rank);
	*tp_p = &t->base;
	return 0;

err_peers:
	free(t->peers);
err_common:
	ddss_tp_fini_common(&t->base);
err_free:
	free(t);
	return r;
}
