/*
 * The serving side of the tcp provider.
 *
 * The acceptor thread (tcp_accept.c) takes incoming connections and runs their handshake;
 * only a peer that proves it belongs to this group learns our pool length and is handed
 * here (tcp_serve_add). The progress thread then serves each
 * connection's requests on our pool with non-blocking I/O over epoll, in order: when a
 * reply does not fit in the socket, it stops reading that connection until the reply is
 * out, which is the back-pressure that bounds memory whatever the initiator posts.
 *
 * Reply batches. The replies to the requests of one read from a connection go out in one
 * sendmsg, after the last of them is served (served_steps), instead of one each: a busy
 * initiator sends several requests at once (tcp_chan.c, "Combined sends"), and on loopback
 * each send also runs the receiver's TCP input on this CPU. Delaying a reply until its
 * batch is served is what any network may do to it; the order of execution and of replies
 * is unchanged. Protected connections and the weak test mode reply one by one.
 *
 * Superseded connections. A rank opens a new connection only once it gave the old one up
 * and failed what was outstanding on it (tcp_chan.c); the old one's requests posted bound
 * (TCP_WIRE_F_BOUND: a put's copy and version word) that are still unread here, or read
 * but not served, must then never land. Two sockets are not ordered: the old one's backlog
 * (a large write ahead of them, a busy progress thread) could otherwise land after
 * requests the rank sent on the new one, and overwrite a version word or copy that the
 * rank, having confirmed its failed put on the new one, left for the next writer to
 * repair (docs/coherence.md, "Errors and failures"). tcp_serve_add marks the old
 * connections superseded before the new one is watched; the progress thread, the only one
 * that serves, checks the mark before each bound request acts on the pool, so every one
 * of the old connection's that lands at all lands before the new one's first request is
 * served. Everything else of the old connection (a lock hand-over's write, notifications,
 * messages) is still served, as before, until its end is read.
 *
 * Weak order (DDSS_TCP_ORDER=weak, a test mode). InfiniBand RC executes a QP's requests in
 * order with one latitude: a READ may sample memory, and an atomic may return its result,
 * after later requests of the QP have executed; only a request posted with a fence waits
 * for them (net/transport.h). Serving each connection strictly in order hides every
 * missing fence, so this mode does, per connection, the latest the spec allows:
 *  - a READ is not sampled in its turn: its reply is held (struct tcp_held) while the
 *    requests behind it go on executing (writes land, atomics run, notifications and
 *    messages are delivered);
 *  - an atomic executes in its turn, but its reply is held the same way;
 *  - replies stay in order (the initiator matches them by sequence number): a reply
 *    behind a held one waits behind it;
 *  - a request with the fence flag (TCP_WIRE_F_FENCE) first releases everything held on
 *    its connection (READs sampled), before any of its own bytes land or it executes;
 *  - otherwise held replies are released at the end of a progress round, once one more
 *    whole round has served every ready connection; a READ that a later request of its
 *    connection has overtaken (executed, or, a READ, sampled first) is held on until
 *    TCP_WEAK_HOLD_NS after that. Released READs sample the pool newest first: an earlier
 *    READ samples after a later one, which an unfenced READ may pass;
 *  - an aligned 8-byte write lands one byte at a time (store_word).
 * Why overtaken READs wait so long: a missing fence shows only if a third party acts on
 * what overtook the READ before the READ samples. A lock's release CAS or message not
 * fenced behind a get's READ frees the lock; another rank must take it (an atomic's reply,
 * one round here) and land its put (a round trip or two, tens of microseconds each) in
 * that window, and the suites then see a torn or too new copy. A READ nothing overtook
 * (a blocking read) and an atomic's reply come back after one round, so the suites keep
 * their pace and their contention. Operations of a rank on its own pool run inline on its
 * CPU (tcp_provider.c), at once: they are not weakened.
 */
#include "net/tcp/tcp.h"
#include "core/log.h"
#include "core/tsan.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netdb.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* Large write payloads bypass the receive buffer and land in the pool directly. */
#define SERVE_DIRECT_MIN 4096u

/* A reply held back in weak order (see the top). */
struct tcp_held {
	struct tcp_held *next;
	struct tcp_held *rev;    /* weak_release's batch, newest first */
	struct tcp_wire_hdr rep; /* the reply; a READ's rep.len bytes go in data once sampled */
	uint64_t off;            /* READ: where in the pool */
	bool late;               /* a READ or atomic not released yet */
	bool read;               /* a READ: sampled when released */
	uint64_t round;          /* t->round when held */
	int64_t due_ns;          /* a READ overtaken: not released before (0: not overtaken) */
	unsigned char data[];
};

static bool weak(const struct tcp_tp *t)
{
	return t->order == TCP_ORDER_WEAK;
}

static int ev_set(struct tcp_tp *t, struct tcp_served *s, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	return epoll_ctl(t->epfd, op, s->fd, &ev) ? -errno : 0;
}

/*
 * Watch for what the connection can go on with: a reply to send out (nothing is read
 * meanwhile: back-pressure), else requests, unless too many replies are held (weak order:
 * then nothing until round ends release some; hang-ups are reported all the same).
 */
static int served_watch(struct tcp_tp *t, struct tcp_served *s)
{
	uint32_t ev = s->out_blocked ? EPOLLOUT : s->nheld >= TCP_WEAK_MAX_HELD ? 0 : EPOLLIN;
	int r;

	if (ev == s->watching)
		return 0;
	r = ev_set(t, s, ev, EPOLL_CTL_MOD);
	if (!r)
		s->watching = ev;
	return r;
}

static void weak_unlink(struct tcp_tp *t, struct tcp_served *s)
{
	if (!s->weak_listed)
		return;
	for (struct tcp_served **pp = &t->weak_list; *pp; pp = &(*pp)->weak_next) {
		if (*pp == s) {
			*pp = s->weak_next;
			break;
		}
	}
	s->weak_listed = false;
}

static void served_free(struct tcp_served *s)
{
	struct tcp_held *h;

	while ((h = s->held_head)) {
		s->held_head = h->next;
		free(h);
	}
	free(s->batch);
	tcp_protect_clear(&s->prot);
	tcp_pframe_free(&s->prx);
	if (s->ptx)
		sodium_memzero(s->ptx, s->ptx_cap);
	free(s->ptx);
	free(s);
}

/* serve_state_mu held: take @s off the list; whether its rank has another connection of
 * the same process (one of a process readmitted since speaks for nobody: tcp.h). */
static bool served_unlink(struct tcp_tp *t, struct tcp_served *s)
{
	bool others = false;

	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served **pp = &t->served; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	for (struct tcp_served *o = t->served; o; o = o->next)
		others |= o->peer == s->peer && o->gen == s->gen;
	pthread_mutex_unlock(&t->served_mu);
	return others;
}

static void served_close(struct tcp_tp *t, struct tcp_served *s, const char *why)
{
	bool others;

	DDSS_INFO("closing connection from rank %u: %s", s->peer, why);
	weak_unlink(t, s);
	epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	pthread_mutex_lock(&t->serve_state_mu);
	others = served_unlink(t, s);
	close(s->fd); /* only once unlinked: tcp_serve_cut must never see a reused number */
	/* Down only with our own connection to it gone too (tcp_chan_event says why); while
	 * that works, its close is the news to watch for (tcp_chan_watch_close). */
	if (!others && !tcp_chan_up(&t->peers[s->peer].chan, s->gen))
		tcp_peer_set_state(t, s->peer, s->gen, DDSS_TP_PEER_DOWN);
	else if (!others)
		tcp_chan_watch_close(&t->peers[s->peer].chan, true);
	pthread_mutex_unlock(&t->serve_state_mu);
	served_free(s);
}

/* Send the pending reply; 0 when all out, -EAGAIN when the socket is full, else failure. */
static int served_flush(struct tcp_served *s)
{
	while (s->out_iovcnt) {
		struct msghdr mh = { .msg_iov = s->out_iov, .msg_iovlen = (size_t)s->out_iovcnt };
		ssize_t n;

		DDSS_POOL_ACCESS_BEGIN(); /* a read reply's data is pool bytes */
		n = sendmsg(s->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		DDSS_POOL_ACCESS_END();
		size_t left;
		int i = 0;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -ECONNRESET;
		}
		left = (size_t)n;
		while (i < s->out_iovcnt && left >= s->out_iov[i].iov_len)
			left -= s->out_iov[i++].iov_len;
		if (i < s->out_iovcnt) {
			s->out_iov[i].iov_base = (char *)s->out_iov[i].iov_base + left;
			s->out_iov[i].iov_len -= left;
		}
		memmove(s->out_iov, s->out_iov + i, sizeof(s->out_iov[0]) * (size_t)(s->out_iovcnt - i));
		s->out_iovcnt -= i;
	}
	return 0;
}

/*
 * Make @rep, with @len bytes of @data, the reply going out (out_iov): the header and the
 * data where they are, or on a protected connection the frame sealed into s->ptx. 0 or
 * -errno.
 */
static int served_set_out(struct tcp_served *s, const struct tcp_wire_hdr *rep, const void *data,
			  size_t len)
{
	tcp_wire_encode_hdr(rep, s->out_hdr);
	if (s->protect) {
		size_t n = tcp_protect_frame_len(len);
		int r;

		/* The last reply is out: a buffer grown for a large one need not stay. */
		if (s->ptx_cap > TCP_PFRAME_KEEP && n <= TCP_PFRAME_KEEP) {
			free(s->ptx);
			s->ptx = NULL;
			s->ptx_cap = 0;
		}
		r = tcp_buf_reserve(&s->ptx, &s->ptx_cap, n);

		if (r)
			return r;
		DDSS_POOL_ACCESS_BEGIN(); /* a read reply's data is pool bytes */
		r = tcp_protect_seal(&s->prot, s->out_hdr, data, len, s->ptx);
		DDSS_POOL_ACCESS_END();
		if (r)
			return r;
		s->out_iov[0] = (struct iovec){ s->ptx, n };
		s->out_iovcnt = 1;
		return 0;
	}
	s->out_iov[0] = (struct iovec){ s->out_hdr, TCP_WIRE_HDR_LEN };
	s->out_iov[1] = (struct iovec){ (void *)data, len };
	s->out_iovcnt = len ? 2 : 1;
	return 0;
}

/*
 * Send the batch with @data (@len bytes, a reply's that was not copied) after it: 0 when
 * all out, else -EAGAIN turned into back-pressure (the batch stays until served_event has
 * sent it) or the failure.
 */
static int batch_send(struct tcp_tp *t, struct tcp_served *s, const void *data, size_t len)
{
	int r;

	if (!s->batch_len)
		return 0;
	if (s->batch_n > 1)
		__atomic_add_fetch(&t->base.replies_batched, s->batch_n - 1, __ATOMIC_RELAXED);
	s->batch_n = 0;
	s->out_iov[0] = (struct iovec){ s->batch, s->batch_len };
	s->out_iov[1] = (struct iovec){ (void *)data, len };
	s->out_iovcnt = len ? 2 : 1;
	r = served_flush(s);
	if (r != -EAGAIN) {
		s->batch_len = 0;
		return r;
	}
	s->out_blocked = true;
	return served_watch(t, s);
}

/*
 * Strong order, unprotected: add @rep to the batch (the top of the file, "Reply batches").
 * Small data is copied now, so the reply says what the pool held when the request was
 * served; large data goes out at once with the batch, from the pool, as an unbatched reply
 * would. There is always room for one more header and TCP_BATCH_COPY_MAX bytes: a batch is
 * sent as soon as there is not.
 */
static int batch_reply(struct tcp_tp *t, struct tcp_served *s, const struct tcp_wire_hdr *rep,
		       const void *data)
{
	if (!s->batch) {
		s->batch = malloc(TCP_BATCH_MAX);
		if (!s->batch)
			return -ENOMEM;
	}
	tcp_wire_encode_hdr(rep, s->batch + s->batch_len);
	s->batch_len += TCP_WIRE_HDR_LEN;
	s->batch_n++;
	if (rep->len > TCP_BATCH_COPY_MAX)
		return batch_send(t, s, data, rep->len);
	if (rep->len) {
		DDSS_POOL_ACCESS_BEGIN(); /* a read reply's data is pool bytes */
		memcpy(s->batch + s->batch_len, data, rep->len);
		DDSS_POOL_ACCESS_END();
		s->batch_len += rep->len;
	}
	if (TCP_BATCH_MAX - s->batch_len < TCP_WIRE_HDR_LEN + TCP_BATCH_COPY_MAX)
		return batch_send(t, s, NULL, 0);
	return 0;
}

static int served_reply(struct tcp_tp *t, struct tcp_served *s, const struct tcp_wire_hdr *rep,
			const void *data)
{
	int r;

	if (!s->protect && !weak(t))
		return batch_reply(t, s, rep, data);
	r = served_set_out(s, rep, data, rep->len);

	if (r)
		return r;
	r = served_flush(s);
	if (r != -EAGAIN)
		return r;
	/* Stop reading this connection until the reply is out (back-pressure). */
	s->out_blocked = true;
	return served_watch(t, s);
}

/* ---- weak order (see the top) ---- */

/* Hold @rep (for the request in s->cur) behind the replies held already. */
static int weak_hold(struct tcp_tp *t, struct tcp_served *s, const struct tcp_wire_hdr *rep,
		     bool late, bool read)
{
	struct tcp_held *h = malloc(sizeof(*h) + (read ? rep->len : 0));

	if (!h)
		return -ENOMEM;
	*h = (struct tcp_held){ .rep = *rep, .off = s->cur.off, .late = late, .read = read,
				.round = t->round };
	if (s->held_tail)
		s->held_tail->next = h;
	else
		s->held_head = h;
	s->held_tail = h;
	s->nheld++;
	if (!s->weak_listed) {
		s->weak_next = t->weak_list;
		t->weak_list = s;
		s->weak_listed = true;
	}
	return 0;
}

/*
 * Send the released replies at the head, in order, until one still held (or the socket is
 * full: the connection then waits for EPOLLOUT, reading nothing). 0 or a failure.
 */
static int weak_send(struct tcp_tp *t, struct tcp_served *s)
{
	for (;;) {
		struct tcp_held *h = s->held_head;
		int r = served_flush(s); /* what is going out already (0 if nothing) */

		if (r == -EAGAIN) {
			s->out_blocked = true;
			return served_watch(t, s);
		}
		if (r)
			return r;
		if (s->head_sending) { /* held_head's reply is out */
			s->head_sending = false;
			s->held_head = h->next;
			if (!s->held_head)
				s->held_tail = NULL;
			s->nheld--;
			free(h);
			h = s->held_head;
		}
		if (!h || h->late)
			break;
		r = served_set_out(s, &h->rep, h->data, h->read ? h->rep.len : 0);
		if (r)
			return r;
		s->head_sending = true;
	}
	s->out_blocked = false;
	return served_watch(t, s);
}

/* A request behind the held READs has executed: they are overtaken, and wait on. */
static void weak_overtaken(struct tcp_served *s, int64_t now)
{
	for (struct tcp_held *h = s->held_head; h; h = h->next)
		if (h->late && h->read && !h->due_ns)
			h->due_ns = now + TCP_WEAK_HOLD_NS;
}

/*
 * Whether @s's rank may still touch the pool: not once it was declared dead, nor once it
 * was readmitted as a new process (the connection's generation is the old one's). The cut
 * only shuts the old connections down: what they had queued is still read until this
 * thread closes them, which may be after the readmission cleared the refusal. Served then,
 * an old process's late write would land on a mark its home settled for it
 * (coh_readmit.c).
 */
static bool peer_current(struct tcp_tp *t, const struct tcp_served *s)
{
	/* Sequentially consistent loads (transport.h): the second half of act_announce's
	 * handshake with a cut. */
	return !ddss_tp_peer_refused(&t->base, s->peer) &&
	       s->gen == ddss_tp_peer_generation(&t->base, s->peer);
}

void (*tcp_serve_act_hook)(struct tcp_tp *t, uint32_t rank);

/*
 * A write's bytes or an atomic of @s's rank is about to be checked (peer_current) and then
 * to act on the pool: say so first. A cut stores the refusal, then waits while this says
 * the rank (tcp_serve_cut); both sequentially consistent, so either the check sees the
 * refusal or the cut sees this and waits until act_end. Without it a request that passed
 * its check just before the cut was acted on after the cut returned: after a readmission
 * (which needs the cut), on a mark its home had settled for the old process
 * (coh_readmit.c). One atomic store per write and atomic; READs, notifications and
 * messages do not act on the pool, and their handlers may cut a rank themselves.
 */
static void act_announce(struct tcp_tp *t, const struct tcp_served *s)
{
	__atomic_store_n(&t->acting, s->peer + 1, __ATOMIC_SEQ_CST);
}

static void act_end(struct tcp_tp *t)
{
	__atomic_store_n(&t->acting, 0, __ATOMIC_RELEASE);
}

/* Whether the request in s->cur was posted bound on a connection the rank has since
 * replaced (see the top): it must not act. */
static bool bound_superseded(const struct tcp_served *s)
{
	return (s->cur.flags & TCP_WIRE_F_BOUND) &&
	       __atomic_load_n(&s->superseded, __ATOMIC_ACQUIRE);
}

/* Whether the request in s->cur may act on the pool. */
static bool request_may_act(struct tcp_tp *t, const struct tcp_served *s)
{
	return peer_current(t, s) && !bound_superseded(s);
}

/*
 * Release held replies: every one (@all: a fenced request is next), else those held for a
 * whole round, overtaken READs only once their hold is over. The released READs sample
 * the pool newest first; an older READ still held is overtaken by the sampling of a newer
 * one. Then send what is ready.
 */
static int weak_release(struct tcp_tp *t, struct tcp_served *s, bool all)
{
	int64_t now = all ? 0 : ddss_now_ns();
	struct tcp_held *newest = NULL;
	bool sampled = false;

	/* Declared dead meanwhile (or taken over since): it may not read the pool any more. */
	if (!peer_current(t, s))
		return -EHOSTDOWN;
	for (struct tcp_held *h = s->held_head; h; h = h->next) {
		if (h->late) {
			h->rev = newest;
			newest = h;
		}
	}
	DDSS_POOL_ACCESS_BEGIN();
	for (struct tcp_held *h = newest; h; h = h->rev) {
		if (!all) {
			if (h->read && sampled && !h->due_ns)
				h->due_ns = now + TCP_WEAK_HOLD_NS;
			if (h->round >= t->round || now < h->due_ns)
				continue;
		}
		if (h->read) {
			memcpy(h->data, t->pool + h->off, h->rep.len);
			sampled = true;
		}
		h->late = false;
	}
	DDSS_POOL_ACCESS_END();
	return weak_send(t, s);
}

/* Why a connection is closed after serving it failed with @r. */
static const char *serve_failure(int r)
{
	if (r == -EHOSTDOWN)
		return "its rank was declared dead (or taken over by a new process): the rest "
		       "of what it sent is dropped";
	return "cannot send a reply";
}

/* Execute the fully received request in s->cur. */
static int serve_request(struct tcp_tp *t, struct tcp_served *s)
{
	const struct ddss_tp_handlers *hd = &t->base.cfg.handlers;
	const struct tcp_wire_hdr *c = &s->cur;
	struct tcp_wire_hdr rep = { .kind = TCP_K_REPLY, .seq = c->seq, .status = s->cur_err };
	const void *data = NULL;
	/* Only formed once the request passed validation (cur_err == 0). */
	uint64_t *word = s->cur_err ? NULL : (uint64_t *)(t->pool + c->off);
	bool late = false, read = false, atomic = c->kind == TCP_K_CAS || c->kind == TCP_K_FADD;

	if (atomic)
		act_announce(t, s); /* ended below, once it ran */
	/* Declared dead while its request was on the way, or taken over by a new process
	 * since: it may not touch the pool any more. */
	if (!peer_current(t, s)) {
		act_end(t);
		return -EHOSTDOWN;
	}
	/* Bound, of a superseded connection: dropped unanswered (the rank failed it; a write's
	 * bytes went nowhere, payload_dst). */
	if (bound_superseded(s)) {
		act_end(t);
		return 0;
	}
	if (atomic && tcp_serve_act_hook)
		tcp_serve_act_hook(t, s->peer);
	switch (c->kind) {
	case TCP_K_READ:
		if (!s->cur_err) {
			data = t->pool + c->off;
			rep.len = (uint32_t)c->a;
			late = read = weak(t); /* sampled when released */
		}
		break;
	case TCP_K_WRITE:
		break; /* the bytes were placed as they arrived */
	case TCP_K_CAS:
		if (!s->cur_err) {
			uint64_t expected = c->a;

			__atomic_compare_exchange_n(word, &expected, c->b, false, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
			rep.a = expected;
			late = weak(t);
		}
		break;
	case TCP_K_FADD:
		if (!s->cur_err) {
			rep.a = __atomic_fetch_add(word, c->a, __ATOMIC_SEQ_CST);
			late = weak(t);
		}
		break;
	case TCP_K_NOTIFY:
		if (hd->on_notify)
			hd->on_notify(hd->arg, s->peer, (uint32_t)c->a);
		return 0;
	case TCP_K_MSG:
		if (hd->on_msg)
			hd->on_msg(hd->arg, s->peer, c->tag, s->msgbuf, c->len);
		return 0;
	default:
		return -EPROTO;
	}
	act_end(t);
	/* Weak order: held, or behind a held reply or one still going out. */
	if (late || s->held_head || s->out_iovcnt)
		return weak_hold(t, s, &rep, late, read);
	return served_reply(t, s, &rep, data);
}

/*
 * Destination of the next payload bytes of s->cur, or NULL to discard them. In the pool,
 * the act is announced (act_announce): the caller ends it (act_end) once they are placed.
 */
static unsigned char *payload_dst(struct tcp_tp *t, struct tcp_served *s)
{
	/* A write of a rank declared dead meanwhile lands nowhere (serve_request refuses the
	 * rest of what it sends), nor does a bound one of a superseded connection. */
	if (s->cur.kind == TCP_K_WRITE && !s->cur_err) {
		act_announce(t, s);
		if (request_may_act(t, s)) {
			if (tcp_serve_act_hook)
				tcp_serve_act_hook(t, s->peer);
			return t->pool + s->cur.off + s->payload_got;
		}
		act_end(t);
	}
	if (s->cur.kind == TCP_K_MSG)
		return s->msgbuf + s->payload_got;
	return NULL;
}

/* Weak order, as a request's header is in (s->cur): a fenced request waits for every
 * earlier READ and atomic, before any of its bytes land; any other but a READ overtakes
 * the held READs. 0, or the error that ends the connection. */
static int weak_on_request(struct tcp_tp *t, struct tcp_served *s)
{
	if ((s->cur.flags & TCP_WIRE_F_FENCE) && s->held_head)
		return weak_release(t, s, true);
	if (s->held_head && s->cur.kind != TCP_K_READ)
		weak_overtaken(s, ddss_now_ns());
	return 0;
}

/*
 * Protected connection: gather the next sealed request and open it; only then is any of it
 * used (its header checked, its bytes placed, a handler called). 0 = served, -EAGAIN =
 * need more input, -EBADMSG (it failed verification), else a protocol error.
 */
/*
 * An aligned 8-byte write into the pool. Strong order stores it at once, as NICs do in
 * practice. Weak order places it one byte at a time, low byte first and high byte first by
 * turns, pausing TCP_WEAK_TEAR_NS once, after 1 to 7 bytes by turns: neither InfiniBand nor PCIe
 * promises that a write's bytes land together, and Soft-RoCE in a TCG guest copies them
 * one by one (the kernel's memcpy is a rep movsb there). A CPU that reads such a word must
 * never trust what it sees mid-write: lock records are sealed (docs/locks.md, "Sealed
 * words"), and version words change only by atomics (docs/coherence.md).
 */
static void store_word(struct tcp_tp *t, unsigned char *dst, const unsigned char *src)
{
	uint64_t v;

	if (!weak(t)) {
		memcpy(&v, src, 8);
		DDSS_POOL_ACCESS_BEGIN();
		__atomic_store_n((uint64_t *)dst, v, __ATOMIC_RELEASE);
		DDSS_POOL_ACCESS_END();
		return;
	}
	unsigned tear = t->weak_tears++;
	bool down = tear & 1;
	unsigned window = 1 + (tear >> 1) % 7; /* after 1 byte, then 2, ... 7 by turns */

	for (unsigned i = 0; i < 8; i++) {
		unsigned at = down ? 7 - i : i;

		/* One window wide enough for a reader to land in, after a different number
		 * of bytes each time. No more: a sched_yield between the other bytes, as there
		 * was until 2026-12-07, gave the CPU away for a whole time slice each on a
		 * crowded machine. (lock_posted_tcp_weak's overruns, once put down to that,
		 * were a late 0 byte landing in a reused lock record: locks.md.) */
		if (i == window) {
			struct timespec ts = { 0, TCP_WEAK_TEAR_NS };

			nanosleep(&ts, NULL);
		}
		DDSS_POOL_ACCESS_BEGIN();
		__atomic_store_n(dst + at, src[at], __ATOMIC_RELEASE);
		DDSS_POOL_ACCESS_END();
	}
}

static int served_step_sealed(struct tcp_tp *t, struct tcp_served *s)
{
	uint64_t max = t->pool_len > DDSS_TP_MSG_MAX ? t->pool_len : DDSS_TP_MSG_MAX;
	size_t used, len;
	unsigned char *dst;
	int r;

	if (s->rx_start == s->rx_end)
		return -EAGAIN;
	r = tcp_pframe_gather(&s->prx, s->rxbuf + s->rx_start, s->rx_end - s->rx_start, max,
			      &used);
	s->rx_start += used;
	if (r <= 0)
		return r ? r : -EAGAIN;
	len = tcp_pframe_payload_len(&s->prx);
	if (tcp_protect_open(&s->prot, s->prx.buf, len))
		return -EBADMSG;
	if (tcp_wire_decode_hdr(s->prx.buf, &s->cur))
		return -EPROTO;
	r = tcp_wire_check_request(&s->cur, t->pool_len);
	if (r == -EPROTO)
		return r;
	s->cur_err = r;
	s->payload_got = 0;
	r = weak_on_request(t, s);
	if (r)
		return r;
	dst = len ? payload_dst(t, s) : NULL;
	if (dst && s->cur.kind == TCP_K_WRITE && len == 8 && !((uintptr_t)dst & 7)) {
		store_word(t, dst, s->prx.buf + TCP_WIRE_HDR_LEN);
	} else if (dst) {
		DDSS_POOL_ACCESS_BEGIN();
		memcpy(dst, s->prx.buf + TCP_WIRE_HDR_LEN, len);
		DDSS_POOL_ACCESS_END();
	}
	act_end(t);
	tcp_pframe_done(&s->prx);
	return serve_request(t, s);
}

/* Consume buffered bytes: 0 = progress, -EAGAIN = need more input, else protocol error. */
static int served_step(struct tcp_tp *t, struct tcp_served *s)
{
	size_t avail = s->rx_end - s->rx_start;

	if (s->protect)
		return served_step_sealed(t, s);
	if (!s->have_hdr) {
		int r;

		if (avail < TCP_WIRE_HDR_LEN)
			return -EAGAIN;
		if (tcp_wire_decode_hdr(s->rxbuf + s->rx_start, &s->cur))
			return -EPROTO;
		r = tcp_wire_check_request(&s->cur, t->pool_len);
		if (r == -EPROTO)
			return r;
		s->cur_err = r;
		s->have_hdr = true;
		s->payload_got = 0;
		s->rx_start += TCP_WIRE_HDR_LEN;
		avail -= TCP_WIRE_HDR_LEN;
		r = weak_on_request(t, s);
		if (r)
			return r;
	}
	if (s->payload_got < s->cur.len) {
		size_t n = s->cur.len - s->payload_got;
		unsigned char *dst;

		if (n > avail)
			n = avail;
		if (n == 0 || (s->cur.len == 8 && n < 8))
			return -EAGAIN; /* nothing yet, or wait for all 8 bytes */
		dst = payload_dst(t, s); /* announces the act: ended below */
		if (n == 8 && s->cur.len == 8 && dst && !((uintptr_t)dst & 7)) {
			store_word(t, dst, s->rxbuf + s->rx_start);
		} else if (dst) {
			DDSS_POOL_ACCESS_BEGIN();
			memcpy(dst, s->rxbuf + s->rx_start, n);
			DDSS_POOL_ACCESS_END();
		}
		act_end(t);
		s->rx_start += n;
		s->payload_got += n;
		if (s->payload_got < s->cur.len)
			return -EAGAIN;
	}
	s->have_hdr = false;
	return serve_request(t, s);
}

/*
 * Serve every complete request buffered, unless a reply waits to go out or too many are
 * held; then watch for what comes next. 0, or the connection was closed (-1).
 */
static int served_steps(struct tcp_tp *t, struct tcp_served *s)
{
	int r;

	while (!s->out_blocked && s->nheld < TCP_WEAK_MAX_HELD) {
		r = served_step(t, s);
		if (r == -EAGAIN)
			break;
		if (r == -EPROTO) {
			DDSS_WARN("rank %u sent a malformed request", s->peer);
			served_close(t, s, "protocol error");
			return -1;
		}
		if (r == -EBADMSG) {
			DDSS_WARN("a frame from rank %u failed verification (DDSS_TCP_PROTECT=%s): "
				  "forged, altered, replayed or lost on the way",
				  s->peer, tcp_protect_name(s->prot.mode));
			served_close(t, s, "protocol error: a frame failed verification");
			return -1;
		}
		if (r) {
			served_close(t, s, serve_failure(r));
			return -1;
		}
	}
	if (!s->out_blocked && batch_send(t, s, NULL, 0)) {
		served_close(t, s, "cannot send a reply");
		return -1;
	}
	if (served_watch(t, s)) {
		served_close(t, s, "cannot watch the connection");
		return -1;
	}
	return 0;
}

/* Read what the socket has (one recv) and serve every complete request. */
static void served_input(struct tcp_tp *t, struct tcp_served *s)
{
	unsigned char *dst;
	size_t room;
	ssize_t n;
	int r;

	if (s->have_hdr && s->rx_start == s->rx_end &&
	    s->cur.len - s->payload_got >= SERVE_DIRECT_MIN && (dst = payload_dst(t, s))) {
		room = s->cur.len - s->payload_got;
	} else {
		if (s->rx_start == s->rx_end) {
			s->rx_start = s->rx_end = 0;
		} else if (s->rx_start > 0) {
			memmove(s->rxbuf, s->rxbuf + s->rx_start, s->rx_end - s->rx_start);
			s->rx_end -= s->rx_start;
			s->rx_start = 0;
		}
		dst = s->rxbuf + s->rx_end;
		room = TCP_RXBUF_LEN - s->rx_end;
		if (!room)
			return; /* full of requests held back (weak order): a round end serves them */
	}
	DDSS_POOL_ACCESS_BEGIN(); /* large write payloads land in the pool directly */
	n = recv(s->fd, dst, room, MSG_DONTWAIT);
	DDSS_POOL_ACCESS_END();
	act_end(t); /* announced if payload_dst gave a place in the pool */
	if (n == 0) {
		served_close(t, s, "peer closed the connection");
		return;
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		served_close(t, s, strerror(errno));
		return;
	}
	if (dst == s->rxbuf + s->rx_end) {
		s->rx_end += (size_t)n;
	} else {
		s->payload_got += (size_t)n;
		if (s->payload_got == s->cur.len) {
			s->have_hdr = false;
			r = serve_request(t, s);
			if (r) {
				served_close(t, s, serve_failure(r));
				return;
			}
		}
	}
	served_steps(t, s);
}

static void served_event(struct tcp_tp *t, struct tcp_served *s, uint32_t events)
{
	if (s->out_blocked) {
		/* Weak order: the replies released meanwhile go out behind it. */
		int r = weak(t) ? weak_send(t, s) : served_flush(s);

		if (r == -EAGAIN || (!r && weak(t) && s->out_blocked))
			return; /* still full */
		if (r) {
			served_close(t, s, "connection lost while replying");
			return;
		}
		s->out_blocked = false;
		s->batch_len = 0; /* what was going out was the batch, or it was empty */
		/* Requests may already sit in the buffer; serve them before reading more. */
		served_steps(t, s);
		return;
	}
	(void)events;
	served_input(t, s);
}

/*
 * Weak order, at the end of a progress round: release what was held long enough on every
 * connection that holds replies, and serve the requests that waited behind too many held.
 */
static void weak_round_end(struct tcp_tp *t)
{
	struct tcp_served *s = t->weak_list, *next;

	t->weak_list = NULL;
	for (; s; s = next) {
		next = s->weak_next;
		s->weak_listed = false;
		if (weak_release(t, s, false)) {
			served_close(t, s, "cannot send a reply");
			continue;
		}
		if (served_steps(t, s))
			continue; /* closed */
		if (s->held_head && !s->weak_listed) {
			s->weak_next = t->weak_list;
			t->weak_list = s;
			s->weak_listed = true;
		}
	}
	t->round++;
}

/*
 * Weak order: wait for events, but only until the first held reply is due (a round with
 * no events still ends: what it held is released).
 */
static int weak_wait(struct tcp_tp *t, struct epoll_event *evs, int max)
{
	int64_t due = INT64_MAX, left;
	struct timespec ts;
	int n;

	for (struct tcp_served *s = t->weak_list; s; s = s->weak_next) {
		for (struct tcp_held *h = s->held_head; h; h = h->next)
			if (h->late && h->due_ns < due)
				due = h->due_ns;
	}
	if (due == INT64_MAX)
		return epoll_wait(t->epfd, evs, max, -1);
	left = due - ddss_now_ns();
	if (left < 0)
		left = 0;
	ts = (struct timespec){ left / 1000000000, left % 1000000000 };
	n = epoll_pwait2(t->epfd, evs, max, &ts, NULL);
	if (n < 0 && errno == ENOSYS) /* before Linux 5.11: whole milliseconds */
		n = epoll_wait(t->epfd, evs, max, (int)((left + 999999) / 1000000));
	return n;
}

/*
 * After a round that served something, the progress thread may poll for the next request
 * for DDSS_HOME_SPIN_US (tcp_provider.c; by default in poll and adaptive completion
 * modes) before it sleeps. A peer that works in a loop (a lock's release and its next
 * lock, a get after a get) sends its next request within a round trip, which then costs
 * this thread no wake-up: on a VM whose idle vCPUs halt, each wake-up costs 20-50 us
 * (docs/transport.md, "The home's wait").
 *
 * The poll must never take a core another thread needs: with more busy threads than
 * cores, a polling home is one more runnable thread, it loses the scheduler's preference
 * for a thread woken from sleep, and every request then waits for a time slice (the
 * coherence suite on 4 ranks and 2 cores ran 10 times slower). So it yields between looks,
 * and a look that comes back later than HOME_SPIN_SHARED_NS means another thread ran on
 * this CPU meanwhile: the poll ends there, and the thread sleeps between requests for a
 * while before it polls again. That while starts at HOME_SPIN_BACKOFF_MIN_NS and doubles
 * with each poll that loses the CPU (HOME_SPIN_BACKOFF_MAX_SHIFT times at most), and
 * halves with each that finds the CPU free: one loss (an interrupt, a thread's start-up)
 * costs a few milliseconds of sleeping, and a crowded CPU sees a poll about once a second.
 */
#define HOME_SPIN_SHARED_NS 50000LL        /* a look plus a yield takes 1-3 us when alone */
#define HOME_SPIN_BACKOFF_MIN_NS 5000000LL /* 5 ms */
#define HOME_SPIN_BACKOFF_MAX_SHIFT 8      /* 5 ms << 8: 1.28 s */

/* A poll found the CPU free (@free) or lost it: move the back-off a step. */
static void poll_verdict(struct tcp_tp *t, bool free, int64_t now)
{
	if (free) {
		if (t->home_spin_backoff > 0)
			t->home_spin_backoff--;
		return;
	}
	__atomic_add_fetch(&t->base.home_poll_yields, 1, __ATOMIC_RELAXED);
	t->home_spin_resume = now + (HOME_SPIN_BACKOFF_MIN_NS << t->home_spin_backoff);
	if (t->home_spin_backoff < HOME_SPIN_BACKOFF_MAX_SHIFT)
		t->home_spin_backoff++;
}

/* One poll of up to @spin_ns from @now: the events found, or 0 when it ended without any. */
static int poll_events(struct tcp_tp *t, struct epoll_event *evs, int max, int64_t now,
		       int64_t spin_ns)
{
	int64_t end = now + spin_ns;
	bool yielded = false;

	for (;;) {
		int n = epoll_wait(t->epfd, evs, max, 0);
		int64_t last = now;

		if (n) {
			if (n > 0)
				__atomic_add_fetch(&t->base.home_polled, 1, __ATOMIC_RELAXED);
			if (yielded)
				poll_verdict(t, true, now);
			return n;
		}
		sched_yield();
		yielded = true;
		now = ddss_now_ns();
		if (now - last > HOME_SPIN_SHARED_NS) {
			poll_verdict(t, false, now);
			return 0;
		}
		if (now >= end) {
			poll_verdict(t, true, now);
			return 0;
		}
	}
}

static int wait_events(struct tcp_tp *t, struct epoll_event *evs, int max, int64_t spin_ns)
{
	int64_t now = spin_ns > 0 ? ddss_now_ns() : 0;

	if (spin_ns > 0 && now >= t->home_spin_resume) {
		int n = poll_events(t, evs, max, now, spin_ns);

		if (n)
			return n;
	}
	return epoll_wait(t->epfd, evs, max, -1);
}

static void *progress_main(void *arg)
{
	struct tcp_tp *t = arg;
	struct epoll_event evs[64];
	int64_t spin_ns = t->home_spin_ns;
	bool served = false;

	for (;;) {
		int n = weak(t) && t->weak_list ? weak_wait(t, evs, 64) :
						  wait_events(t, evs, 64, served ? spin_ns : 0);

		served = false;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			DDSS_ERR("epoll_wait: %s", strerror(errno));
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			enum tcp_ev_type type = *(enum tcp_ev_type *)evs[i].data.ptr;

			if (type == TCP_EV_STOP)
				return NULL;
			if (type == TCP_EV_LATER) {
				/* Not a request: no poll for the next one after it. */
				tcp_later_fire(t);
				continue;
			}
			served = true;
			if (type == TCP_EV_CHAN)
				tcp_chan_event(evs[i].data.ptr, evs[i].events);
			else
				served_event(t, evs[i].data.ptr, evs[i].events);
		}
		if (weak(t))
			weak_round_end(t);
	}
}

bool tcp_serve_has(struct tcp_tp *t, uint32_t rank)
{
	uint32_t gen = ddss_tp_peer_generation(&t->base, rank);
	bool has = false;

	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s && !has; s = s->next) {
		struct pollfd p = { .fd = s->fd, .events = POLLRDHUP };

		if (s->peer != rank || s->gen != gen)
			continue;
		/* Its end already seen by the kernel, not yet by the progress thread: the
		 * process may have died (it closes both directions). */
		has = poll(&p, 1, 0) == 0;
	}
	pthread_mutex_unlock(&t->served_mu);
	return has;
}

int tcp_serve_cut(struct tcp_tp *t, uint32_t rank)
{
	int64_t give_up = ddss_now_ns() + TCP_CUT_ACT_WAIT_NS;

	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s; s = s->next)
		if (s->peer == rank)
			shutdown(s->fd, SHUT_RDWR); /* the progress thread sees the end and closes */
	pthread_mutex_unlock(&t->served_mu);
	/*
	 * The refusal is stored (ddss_tp_peer_refuse): a write or atomic of the rank that
	 * announced itself before checking it may have passed the check. Wait until the
	 * progress thread says anything else: a later act of the rank sees the refusal. A
	 * thread descheduled mid-act for this long leaves the rank marked, not cut.
	 */
	while (__atomic_load_n(&t->acting, __ATOMIC_SEQ_CST) == rank + 1) {
		if (ddss_now_ns() >= give_up) {
			DDSS_WARN("rank %u: a request of its was still acting on the pool %d ms "
				  "after it was refused: not cut off yet", rank,
				  (int)(TCP_CUT_ACT_WAIT_NS / 1000000));
			return -EBUSY;
		}
		sched_yield();
	}
	return 0;
}

int tcp_serve_add(struct tcp_tp *t, int fd, const struct tcp_accept_hs *hs,
		  const struct tcp_protect *prot)
{
	uint32_t peer = hs->peer;
	struct tcp_served *s;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->prot = *prot;
	s->protect = prot->mode != DDSS_TP_PROTECT_OFF;
	s->ev_type = TCP_EV_SERVED;
	s->fd = fd;
	s->peer = peer;
	s->gen = hs->gen;
	s->watching = EPOLLIN; /* before the progress thread may see it */
	tcp_set_sock_opts(fd);
	pthread_mutex_lock(&t->serve_state_mu);
	/*
	 * The rank was readmitted as another process after this one's hello was checked: it
	 * is the old process (or one we cannot tell from it), and it must not shut out the
	 * new one's connections below. readmit stores the generation before it lets anyone
	 * in, and a readmission needs the rank refused, which every hello is checked for.
	 * Under serve_state_mu: tcp_peer_readmit resets the state under it too.
	 */
	if (s->gen != ddss_tp_peer_generation(&t->base, peer)) {
		pthread_mutex_unlock(&t->serve_state_mu);
		served_free(s);
		DDSS_INFO("turning away a connection from rank %u: its process was replaced "
			  "while it shook hands", peer);
		return -ESTALE;
	}
	tcp_peer_set_pool_len(t, s->peer, hs->pool_len);
	pthread_mutex_lock(&t->served_mu);
	/* A rank talks to us on one connection (its channel, tcp_chan.c); it opens another only
	 * once it gave the old one up. So the older ones go: a rank has one connection here,
	 * and one it no longer uses cannot be kept open for requests it would not own up to. */
	for (struct tcp_served *o = t->served; o; o = o->next) {
		if (o->peer != peer)
			continue;
		/* Before the new one is watched: nothing of the old is served after it (top). */
		__atomic_store_n(&o->superseded, true, __ATOMIC_RELEASE);
		shutdown(o->fd, SHUT_RDWR); /* the progress thread sees the end and closes */
	}
	s->next = t->served;
	t->served = s;
	pthread_mutex_unlock(&t->served_mu);
	tcp_peer_set_state(t, s->peer, s->gen, DDSS_TP_PEER_UP);
	/* Its close now speaks for it: our channel's close need not be watched. */
	tcp_chan_watch_close(&t->peers[peer].chan, false);
	/* Refused while we shook hands. Under serve_state_mu: a readmission that follows the
	 * refusal clears the flag only after its own turn here, and had it come first, the
	 * generation check above would have turned us away. */
	if (ddss_tp_peer_refused(&t->base, s->peer))
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&t->serve_state_mu);
	if (ev_set(t, s, EPOLLIN, EPOLL_CTL_ADD)) {
		int r = -errno;

		DDSS_ERR("epoll_ctl: %s", strerror(errno));
		/* The rank's older connections were shut down for this one: it may have none. */
		pthread_mutex_lock(&t->serve_state_mu);
		if (!served_unlink(t, s))
			tcp_peer_set_state(t, s->peer, s->gen, DDSS_TP_PEER_DOWN);
		pthread_mutex_unlock(&t->serve_state_mu);
		served_free(s);
		return r;
	}
	return 0;
}

static int listen_on(const struct ddss_tp_node *node, int *fd_p)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	char port[8];
	int fd, one = 1, r;

	snprintf(port, sizeof(port), "%u", node->port);
	if (getaddrinfo(node->host, port, &hints, &res) != 0)
		return -EADDRNOTAVAIL;
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(res);
		return r;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 128)) {
		r = -errno;
		DDSS_ERR("cannot listen on %s:%u: %s", node->host, node->port, strerror(-r));
		close(fd);
		freeaddrinfo(res);
		return r;
	}
	freeaddrinfo(res);
	*fd_p = fd;
	return 0;
}

int tcp_serve_start(struct tcp_tp *t)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &t->stop_ev };
	int r, accepting = 0;
	socklen_t len = sizeof(accepting);

	if (cfg->listen_fd >= 0) {
		if (getsockopt(cfg->listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) ||
		    !accepting) {
			DDSS_ERR("listen fd %d is not a listening socket", cfg->listen_fd);
			return -EBADF;
		}
		/* A launcher passed it through exec; a program this rank executes must not keep
		 * it, or the port would accept connections after this rank died, and a peer's
		 * reconnect would wait out a handshake nobody answers. */
		if (fcntl(cfg->listen_fd, F_SETFD, FD_CLOEXEC)) {
			r = -errno;
			DDSS_ERR("listen fd %d: cannot set close-on-exec: %s", cfg->listen_fd,
				 strerror(-r));
			return r;
		}
		t->listen_fd = cfg->listen_fd;
	} else {
		r = listen_on(&t->base.nodes[cfg->rank - 1], &t->listen_fd);
		if (r)
			return r;
	}
	t->stop_ev = TCP_EV_STOP;
	t->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (t->stop_fd < 0 || epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->stop_fd, &ev)) {
		r = -errno;
		goto err_listen;
	}
	r = tcp_later_start(t);
	if (r)
		goto err_listen;
	r = -pthread_create(&t->progress_thread, NULL, progress_main, t);
	if (r)
		goto err_listen;
	r = -pthread_create(&t->acceptor_thread, NULL, tcp_acceptor_main, t);
	if (r)
		goto err_progress;
	return 0;

err_progress:
	eventfd_write(t->stop_fd, 1);
	pthread_join(t->progress_thread, NULL);
err_listen:
	tcp_later_stop(t);
	if (t->stop_fd >= 0)
		close(t->stop_fd);
	t->stop_fd = -1;
	close(t->listen_fd);
	t->listen_fd = -1;
	return r;
}

void tcp_serve_stop(struct tcp_tp *t)
{
	struct tcp_served *s;

	/* shutdown() wakes the blocked accept(); close() alone would not. */
	shutdown(t->listen_fd, SHUT_RDWR);
	pthread_join(t->acceptor_thread, NULL);
	close(t->listen_fd);
	t->listen_fd = -1;
	eventfd_write(t->stop_fd, 1);
	pthread_join(t->progress_thread, NULL);
	close(t->stop_fd);
	t->stop_fd = -1;
	tcp_later_stop(t);
	t->weak_list = NULL;
	while ((s = t->served)) {
		t->served = s->next;
		epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		served_free(s);
	}
}
