/*
 * Initiator channels of the tcp provider: one ordered connection per peer.
 *
 * Locks, always taken in this order: connect_mu, rx ownership (cv_mu + rx_busy), send_mu,
 * q_mu; the provider's serve_state_mu (tcp.h) comes after connect_mu and before send_mu
 * (a connect publishes "up" under it; "down" is decided under it from tcp_chan_up). A failure is first recorded (ch->error, set by a thread holding send_mu or rx
 * ownership, which also shuts the socket down so blocked readers wake up); outstanding
 * requests are then completed by the rx owner ("reap"), because only the rx owner may be
 * writing into a request's buffer. The flusher never touches request memory once the error
 * is set, so a completed request's buffer is never read again.
 *
 * Combined sends. Threads of a rank share the channel to a peer, and on a busy client
 * each request used to cost its own sendmsg: on loopback about half of a client's CPU per
 * request, since the send also runs the receiving side's TCP input. A request whose
 * poster waits for it at once (DDSS_TP_WAITED: the blocking helpers) is held instead of
 * sent when requests of the channel are in flight and another thread posted last, that is
 * when other threads are at work; the poster then yields its CPU once before it sends
 * everything held. The threads that run in that moment (typically those whose replies just
 * came in) add their frames, and one sendmsg carries them all. A lone thread sends at once,
 * so its latency is unchanged; on a machine with idle cores the yield returns at once.
 * Order is unchanged: held frames go out before any later frame of the channel.
 */
#include "net/tcp/tcp.h"
#include "core/log.h"
#include "net/sleepers.h"
#include "net/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void req_complete(struct ddss_tp_req *req, int status, uint64_t result)
{
	req->status = status;
	req->result = result;
	/* After this store the owner may free req: touch nothing of it afterwards. */
	__atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

static int chan_error(const struct tcp_chan *ch)
{
	return __atomic_load_n(&ch->error, __ATOMIC_ACQUIRE);
}

void tcp_chan_init(struct tcp_chan *ch, struct tcp_tp *t, uint32_t peer)
{
	memset(ch, 0, sizeof(*ch));
	ch->ev_type = TCP_EV_CHAN;
	ch->tp = t;
	ch->peer = peer;
	ch->fd = -1;
	ch->next_seq = 1;
	pthread_mutex_init(&ch->connect_mu, NULL);
	pthread_mutex_init(&ch->send_mu, NULL);
	pthread_mutex_init(&ch->q_mu, NULL);
	pthread_mutex_init(&ch->cv_mu, NULL);
	pthread_cond_init(&ch->cv, NULL);
}

void tcp_chan_destroy(struct tcp_chan *ch)
{
	tcp_protect_clear(&ch->prot);
	tcp_pframe_free(&ch->prx);
	if (ch->ptx)
		sodium_memzero(ch->ptx, ch->ptx_cap);
	free(ch->ptx);
	ddss_lookup_drop(&ch->lookup);
	pthread_mutex_destroy(&ch->connect_mu);
	pthread_mutex_destroy(&ch->send_mu);
	pthread_mutex_destroy(&ch->q_mu);
	pthread_mutex_destroy(&ch->cv_mu);
	pthread_cond_destroy(&ch->cv);
}

/* Call with send_mu held or as rx owner. The first failure wins. */
static void chan_fail(struct tcp_chan *ch, int err)
{
	int expected = 0;

	if (!__atomic_compare_exchange_n(&ch->error, &expected, err, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	if (err != -ECANCELED)
		DDSS_INFO("channel to rank %u failed: %s", ch->peer, strerror(-err));
	if (ch->fd >= 0)
		shutdown(ch->fd, SHUT_RDWR);
	tcp_peer_set_state(ch->tp, ch->peer, ch->gen, DDSS_TP_PEER_DOWN);
}

/*
 * Threads waiting for their request while another owns rx sleep on ch->sleepers
 * (net/sleepers.h): the rx owner wakes the one whose reply it completed, and, when it gives
 * rx up, one whose request is still pending to take over. With one condition variable for
 * all, every reply woke every waiting thread (8 client threads: 7 wake-ups a reply), and
 * each woken thread then queued for cv_mu behind the owner.
 */

/* cv_mu held, rx just given up: rx_acquire's waiters retry, and one sleeper whose request
 * is still pending is claimed to take rx over (NULL: none). */
static struct ddss_sleeper *hand_off_locked(struct tcp_chan *ch)
{
	if (ch->rx_waiters)
		pthread_cond_broadcast(&ch->cv);
	return ddss_sleepers_claim_pending(&ch->sleepers);
}

static void rx_acquire(struct tcp_chan *ch)
{
	pthread_mutex_lock(&ch->cv_mu);
	while (ch->rx_busy) {
		ch->rx_waiters++;
		pthread_cond_wait(&ch->cv, &ch->cv_mu);
		ch->rx_waiters--;
	}
	ch->rx_busy = true;
	pthread_mutex_unlock(&ch->cv_mu);
}

static void rx_release(struct tcp_chan *ch)
{
	struct ddss_sleeper *next;

	pthread_mutex_lock(&ch->cv_mu);
	ch->rx_busy = false;
	next = hand_off_locked(ch);
	pthread_mutex_unlock(&ch->cv_mu);
	if (next)
		ddss_sleeper_wake(next);
}

/* Rx owner: the requester of @req (completed; compared, never dereferenced) may sleep. */
static void wake_req(struct tcp_chan *ch, const struct ddss_tp_req *req)
{
	struct ddss_sleeper *s;

	pthread_mutex_lock(&ch->cv_mu);
	s = ddss_sleepers_claim_req(&ch->sleepers, req);
	pthread_mutex_unlock(&ch->cv_mu);
	if (s)
		ddss_sleeper_wake(s);
}

/* Rx owner, after completing everything with an error: every sleeper checks its request. */
static void wake_all(struct tcp_chan *ch)
{
	pthread_mutex_lock(&ch->cv_mu);
	if (ch->rx_waiters)
		pthread_cond_broadcast(&ch->cv);
	ddss_sleepers_wake_all(&ch->sleepers);
	pthread_mutex_unlock(&ch->cv_mu);
}

/* Rx owner, after a failure: complete every outstanding request with the error. */
static void reap_as_owner(struct tcp_chan *ch)
{
	int err = chan_error(ch);
	struct ddss_tp_req *list, *req;

	if (!err)
		return;
	pthread_mutex_lock(&ch->q_mu);
	list = ch->q_head;
	ch->q_head = ch->q_tail = NULL;
	pthread_mutex_unlock(&ch->q_mu);
	if (ch->rx_cur) {
		req_complete(ch->rx_cur, err, 0);
		ch->rx_cur = NULL;
	}
	while (list) {
		req = list;
		list = req->next;
		req_complete(req, err, 0);
	}
	ch->rx_start = ch->rx_end = 0;
	wake_all(ch);
}

/* send_mu held: register @mask for fd with the progress thread's epoll (0: none). */
static int ev_set_mask(struct tcp_chan *ch, uint32_t mask)
{
	struct epoll_event ev = { .events = mask, .data.ptr = ch };
	int op = !ch->ev_mask ? EPOLL_CTL_ADD : !mask ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;

	if (mask == ch->ev_mask || ch->fd < 0)
		return 0;
	if (epoll_ctl(ch->tp->epfd, op, ch->fd, &ev))
		return -errno;
	ch->ev_mask = mask;
	return 0;
}

/* send_mu held: the events fd is watched for, EPOLLOUT aside. */
static uint32_t ev_base(const struct tcp_chan *ch)
{
	return ch->watch_close && !__atomic_load_n(&ch->far_closed, __ATOMIC_RELAXED) ?
		       EPOLLRDHUP : 0;
}

static void out_disarm(struct tcp_chan *ch)
{
	if (ch->out_armed) {
		ev_set_mask(ch, ev_base(ch));
		ch->out_armed = false;
	}
}

/*
 * send_mu held: the held frames are gone (sent or dropped). Release: a poster whose wait
 * sees nheld 0 without taking send_mu (push_held) also sees that the send read its buffers.
 */
static void held_clear(struct tcp_chan *ch)
{
	ch->nheld_frames = 0;
	__atomic_store_n(&ch->held_waiting, false, __ATOMIC_RELAXED);
	__atomic_store_n(&ch->nheld, 0, __ATOMIC_RELEASE);
}

/* send_mu held: forget queued output (the error is set, so it would never be sent). */
static void out_drop(struct tcp_chan *ch)
{
	struct tcp_out *o;

	while ((o = ch->out_head)) {
		ch->out_head = o->next;
		free(o->owned);
		free(o);
	}
	ch->out_tail = NULL;
	held_clear(ch);
	out_disarm(ch);
}

/* connect_mu held, after a failure or at shutdown: close the socket, back to "not connected". */
static void chan_teardown(struct tcp_chan *ch)
{
	rx_acquire(ch);
	reap_as_owner(ch);
	pthread_mutex_lock(&ch->send_mu);
	out_drop(ch);
	ev_set_mask(ch, 0);
	if (ch->fd >= 0)
		close(ch->fd); /* which drops its epoll registration in any case */
	ch->ev_mask = 0;
	__atomic_store_n(&ch->fd, -1, __ATOMIC_RELEASE);
	__atomic_store_n(&ch->far_closed, false, __ATOMIC_RELAXED);
	ch->watch_close = false; /* the next connect decides anew */
	__atomic_store_n(&ch->error, 0, __ATOMIC_RELEASE);
	ch->next_seq = 1;
	ch->protect = false;
	tcp_protect_clear(&ch->prot);
	pthread_mutex_unlock(&ch->send_mu);
	ch->rx_start = ch->rx_end = 0;
	tcp_pframe_done(&ch->prx);
	rx_release(ch);
}

/* How long a peer known to have been up gets to answer a new connection's handshake. */
#define DEAD_HANDSHAKE_NS 5000000000LL

/*
 * The connect and handshake of a peer known to have been up, together: DEAD_HANDSHAKE_NS,
 * cut to the operation timeout (a frozen rank's kernel accepts the connection for it, and
 * a call must not wait longer for that than for an operation), but to no less than 1 s (a
 * handshake is two round trips with a proof each way, answered by the peer's acceptor
 * thread, which a loaded machine may run late). A thread's own shorter bound
 * (ddss_tp_set_thread_connect_bound) cuts it further, for a reconnect only (our channel was
 * up before): a first connect to a home that reads up because it connected to us is a
 * healthy one, and gets the full bound; *by_thread_p says whether it was cut.
 */
#define KNOWN_BOUND_MIN_NS 1000000000LL

static int64_t known_bound_ns(const struct tcp_chan *ch, bool *by_thread_p)
{
	int64_t ns = DEAD_HANDSHAKE_NS, op_ns = (int64_t)ch->tp->base.cfg.op_timeout_ms * 1000000;
	int64_t thread_ns = (int64_t)ddss_tp_thread_connect_bound() * 1000000;

	if (op_ns > 0 && op_ns < ns)
		ns = op_ns > KNOWN_BOUND_MIN_NS ? op_ns : KNOWN_BOUND_MIN_NS;
	*by_thread_p = thread_ns > 0 && thread_ns < ns && __atomic_load_n(&ch->ever_up,
									 __ATOMIC_RELAXED);
	return *by_thread_p ? thread_ns : ns;
}

/*
 * connect(2) on non-blocking @fd, given up at @deadline or once @ch's peer is refused:
 * against a host that drops SYNs (powered off, cut off) a blocking connect waits out the
 * kernel's retries, about 2 minutes, with connect_mu held, and the refusal (the heartbeat
 * thread's) waits for connect_mu. 0 (@fd blocking again) or -errno.
 */
static int connect_bounded(struct tcp_chan *ch, int fd, const struct addrinfo *ai,
			   int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = 0, n;

	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS)
		return -errno;
	for (;;) {
		int64_t left_ms = (deadline - ddss_now_ns() + 999999) / 1000000;

		if (ddss_tp_peer_refused(&ch->tp->base, ch->peer))
			return -EHOSTDOWN;
		if (left_ms <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, left_ms < TCP_REFUSAL_SLICE_MS ? (int)left_ms : TCP_REFUSAL_SLICE_MS);
		if (n > 0)
			break;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
		return -errno;
	if (err)
		return -err;
	n = fcntl(fd, F_GETFL);
	if (n < 0 || fcntl(fd, F_SETFL, n & ~O_NONBLOCK))
		return -errno;
	return 0;
}

static bool chan_refused(void *arg)
{
	struct tcp_chan *ch = arg;

	return ddss_tp_peer_refused(&ch->tp->base, ch->peer);
}

static int connect_once(struct tcp_chan *ch, int64_t deadline, int *fd_p)
{
	const struct ddss_tp_node *node = &ch->tp->base.nodes[ch->peer - 1];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	int err = -ECONNREFUSED;

	/* Bounded as the connect below: a slow resolver must not hold connect_mu, which the
	 * refusal needs (resolve.h). */
	err = ddss_resolve(node->host, node->port, &hints, deadline, chan_refused, ch,
			   &ch->lookup, &res);
	if (err)
		return err;
	err = -ECONNREFUSED;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				ai->ai_protocol);

		if (fd < 0) {
			err = -errno;
			continue;
		}
		err = connect_bounded(ch, fd, ai, deadline);
		if (!err) {
			freeaddrinfo(res);
			*fd_p = fd;
			return 0;
		}
		close(fd);
		if (err == -ETIMEDOUT || err == -EHOSTDOWN)
			break; /* no time left for another address */
	}
	freeaddrinfo(res);
	return err;
}

/*
 * connect_mu held. A peer never seen up is retried until the connect timeout (it may not
 * have started yet); one that was up and went down, or any peer once the group has
 * formed (ddss_tp_formed), gets a single attempt, so operations on a dead rank fail fast.
 * *by_thread_p: the calling thread's own bound cut the attempt short (known_bound_ns).
 */
static int chan_connect(struct tcp_chan *ch, bool *by_thread_p)
{
	const struct ddss_tp_config *cfg = &ch->tp->base.cfg;
	int64_t deadline = ddss_now_ns() + (int64_t)cfg->connect_timeout_ms * 1000000;
	long backoff_ms = 5;
	struct tcp_protect prot = { .mode = DDSS_TP_PROTECT_OFF };
	uint32_t gen;
	int fd = -1, r;
	bool served;
	/* It was up, or every rank has been: if it does not answer now, it is gone. A rank
	 * readmitted as a new process (tp_incarnation.c) may still be starting. */
	bool known = __atomic_load_n(&ch->ever_up, __ATOMIC_RELAXED) ||
		     (ddss_tp_formed(&ch->tp->base) && !ch->readmitted);
	int64_t known_deadline = ddss_now_ns() + known_bound_ns(ch, by_thread_p);

	*by_thread_p = *by_thread_p && known; /* else the connect timeout bounds it */
	if (ddss_tp_peer_refused(&ch->tp->base, ch->peer))
		return -EHOSTDOWN;
	for (;;) {
		/* One attempt at a known peer, bounded as its handshake is below. */
		r = connect_once(ch, known ? known_deadline : deadline, &fd);
		if (r == 0)
			break;
		if (known)
			return -EHOSTDOWN;
		if (ddss_now_ns() >= deadline)
			return r == -ECONNREFUSED ? -ETIMEDOUT : r;
		/* Declared dead while we wait for it to start (a replacement that died before we
		 * ever reached it): stop now. connect_mu is held, and the refusal needs it. */
		if (ddss_tp_peer_refused(&ch->tp->base, ch->peer))
			return -EHOSTDOWN;
		/* Back-off between attempts while the peer starts (not a synchronisation). */
		struct timespec ts = { 0, backoff_ms * 1000000 };
		nanosleep(&ts, NULL);
		if (backoff_ms < 100)
			backoff_ms *= 2;
	}
	tcp_set_sock_opts(fd);
	gen = ddss_tp_peer_generation(&ch->tp->base, ch->peer);
	/* A peer that should be there answers its handshake at once. A frozen rank's kernel
	 * still accepts for it, and a dead rank's listening socket may outlive it in a
	 * process that kept a copy (not one it started: tcp_serve_start makes an inherited
	 * socket close-on-exec), accepting connections nobody serves. */
	r = tcp_handshake_connect(ch->tp, ch->peer, fd, known ? known_deadline : deadline,
				  &ch->peer_pool_len, &prot);
	/* Readmitted as another process while we shook hands: which one answered is unclear,
	 * and the old one is dead to us. */
	if (!r && gen != ddss_tp_peer_generation(&ch->tp->base, ch->peer))
		r = -EHOSTDOWN;
	if (r) {
		tcp_protect_clear(&prot);
		close(fd);
		return known && r == -ETIMEDOUT ? -EHOSTDOWN : r;
	}
	tcp_set_rcvtimeo(fd, TCP_RX_SLICE_MS);

	/* Install the socket; nobody may use the channel while fd changes. */
	rx_acquire(ch);
	pthread_mutex_lock(&ch->send_mu);
	ch->prot = prot;
	ch->protect = prot.mode != DDSS_TP_PROTECT_OFF;
	ch->gen = gen;
	ch->conn_id++;
	tcp_pframe_done(&ch->prx);
	__atomic_store_n(&ch->fd, fd, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ch->send_mu);
	tcp_protect_clear(&prot);
	rx_release(ch);
	__atomic_store_n(&ch->ever_up, true, __ATOMIC_RELAXED);
	ch->readmitted = false;
	/* Under serve_state_mu: a served connection's close, or this channel's own close seen
	 * by the progress thread, decides "down" from what it finds connected (tcp_chan_up);
	 * its verdict must not land after this, on a channel that works. */
	pthread_mutex_lock(&ch->tp->serve_state_mu);
	tcp_peer_set_pool_len(ch->tp, ch->peer, ch->peer_pool_len);
	tcp_peer_set_state(ch->tp, ch->peer, gen, DDSS_TP_PEER_UP);
	/* A peer that has not connected to us is seen dead only by this socket's close. */
	served = tcp_serve_has(ch->tp, ch->peer);
	tcp_chan_watch_close(ch, !served);
	/* It may have closed both ends since we installed the socket, and the progress
	 * thread may have judged its close before we took the mutex: its "down" is ours. */
	if (!served && !tcp_chan_up(ch, gen))
		tcp_peer_set_state(ch->tp, ch->peer, gen, DDSS_TP_PEER_DOWN);
	pthread_mutex_unlock(&ch->tp->serve_state_mu);
	return 0;
}

/*
 * connect_mu for tcp_chan_ensure. A thread with a connect bound of its own
 * (ddss_tp_set_thread_connect_bound) waits for another thread's reconnect at most that
 * long, then fails with -ETIMEDOUT, as its own attempt would have been cut: the daemon's
 * lane posted into a channel whose worker was in a handshake nobody answered, and waited
 * out its 5 s with every lent channel stalled behind it (lane.c). A first connect waits
 * like any other thread, as known_bound_ns gives it the full bound.
 */
static int connect_lock(struct tcp_chan *ch)
{
	int ms = ddss_tp_thread_connect_bound();
	struct timespec until;

	if (ms <= 0 || !__atomic_load_n(&ch->ever_up, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&ch->connect_mu);
		return 0;
	}
	/* The wall clock: pthread_mutex_clocklock(CLOCK_MONOTONIC) would not mind a step of
	 * it, but ThreadSanitizer (GCC 12) does not know that call and then reports every
	 * unlock. A step only ends this short wait early (an error the bound allows anyway)
	 * or late. */
	until = ddss_time_after(CLOCK_REALTIME, (int64_t)ms * 1000000);
	return -pthread_mutex_timedlock(&ch->connect_mu, &until);
}

/*
 * Connect unless connected. Threads that wait for connect_mu while an attempt runs take
 * its failure as theirs: otherwise each would make its own attempt after it, one after the
 * other, and against a peer whose port accepts with nobody serving it (frozen, or a dead
 * rank's socket kept by another process) each attempt waits out the handshake's bound
 * (known_bound_ns): 8 threads of a daemon's fast lane waited 20-40 s for their error
 * (daemon_fault_lane). A failure cut short by the attempting thread's own bound is not
 * shared: the waiter may wait longer. A thread that comes after an attempt ended tries anew.
 * A thread with a bound of its own waits for the lock at most that long (connect_lock).
 */
int tcp_chan_ensure(struct tcp_chan *ch)
{
	unsigned gen;
	int r = 0;

	if (__atomic_load_n(&ch->fd, __ATOMIC_ACQUIRE) >= 0 && !chan_error(ch))
		return 0;
	gen = __atomic_load_n(&ch->connect_gen, __ATOMIC_ACQUIRE);
	r = connect_lock(ch);
	if (r)
		return r;
	if (chan_error(ch))
		chan_teardown(ch);
	if (ch->fd < 0) {
		if (ch->connect_gen != gen && ch->connect_rc) {
			r = ch->connect_rc;
		} else {
			bool by_thread = false;

			r = chan_connect(ch, &by_thread);
			ch->connect_rc = by_thread ? 0 : r;
			__atomic_store_n(&ch->connect_gen, ch->connect_gen + 1, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&ch->connect_mu);
	return r;
}

void tcp_chan_shutdown(struct tcp_chan *ch, int err)
{
	pthread_mutex_lock(&ch->connect_mu);
	pthread_mutex_lock(&ch->send_mu);
	if (ch->fd >= 0)
		chan_fail(ch, err);
	pthread_mutex_unlock(&ch->send_mu);
	chan_teardown(ch);
	pthread_mutex_unlock(&ch->connect_mu);
}

/* send_mu held: register interest in "socket writable" with the progress thread. */
static int out_arm(struct tcp_chan *ch)
{
	int r;

	if (ch->out_armed)
		return 0;
	r = ev_set_mask(ch, ev_base(ch) | EPOLLOUT);
	if (r)
		return r;
	ch->out_armed = true;
	return 0;
}

/* Skip @n bytes of @iov in place; returns the index of the first unsent vector. */
static int iov_advance(struct iovec *iov, int iovcnt, size_t n)
{
	int i = 0;

	while (i < iovcnt && n >= iov[i].iov_len) {
		n -= iov[i].iov_len;
		i++;
	}
	if (i < iovcnt) {
		iov[i].iov_base = (char *)iov[i].iov_base + n;
		iov[i].iov_len -= n;
	}
	return i;
}

/*
 * send_mu held. Send now if nothing is queued ahead, else (or for what did not fit) queue:
 * a request's buffers are referenced (they live until it completes), a one-way frame is
 * copied. On failure the channel is failed and -ECONNRESET returned.
 */
static int chan_send_iov(struct tcp_chan *ch, struct iovec *iov, int iovcnt, bool copy)
{
	struct msghdr mh = { 0 };
	struct tcp_out *o;
	int first = 0, r;

	if (!iovcnt)
		return 0;
	if (!ch->out_head) {
		ssize_t n;

		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)iovcnt;
		do {
			n = sendmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		} while (n < 0 && errno == EINTR);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			chan_fail(ch, -ECONNRESET);
			return -ECONNRESET;
		}
		first = iov_advance(iov, iovcnt, n < 0 ? 0 : (size_t)n);
		if (first == iovcnt)
			return 0;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		goto fail;
	for (int i = first; i < iovcnt; i++)
		o->iov[o->iovcnt++] = iov[i];
	if (copy) {
		size_t total = 0, at = 0;

		for (int i = 0; i < o->iovcnt; i++)
			total += o->iov[i].iov_len;
		o->owned = malloc(total);
		if (!o->owned) {
			free(o);
			goto fail;
		}
		for (int i = 0; i < o->iovcnt; i++) {
			memcpy(o->owned + at, o->iov[i].iov_base, o->iov[i].iov_len);
			at += o->iov[i].iov_len;
		}
		o->iov[0] = (struct iovec){ o->owned, total };
		o->iovcnt = 1;
	}
	if (ch->out_tail)
		ch->out_tail->next = o;
	else
		ch->out_head = o;
	ch->out_tail = o;
	r = out_arm(ch);
	if (r) {
		DDSS_ERR("cannot watch channel to rank %u: %s", ch->peer, strerror(-r));
		chan_fail(ch, -ECONNRESET);
		return -ECONNRESET;
	}
	return 0;
fail:
	/* Part of a frame may be on the wire already: the stream is unusable. */
	chan_fail(ch, -ENOMEM);
	return -ENOMEM;
}

/* send_mu held. Send iov, with a held frame ahead of it in the same system call (it is older). */
static int chan_send(struct tcp_chan *ch, struct iovec *iov, int iovcnt, bool copy)
{
	struct iovec all[TCP_OUT_IOV];
	unsigned frames = ch->nheld_frames + (iovcnt ? 1 : 0);
	int r;

	if (!ch->nheld)
		return chan_send_iov(ch, iov, iovcnt, copy);
	memcpy(all, ch->held, sizeof(ch->held[0]) * (size_t)ch->nheld);
	if (iovcnt) /* push_held passes none */
		memcpy(all + ch->nheld, iov, sizeof(iov[0]) * (size_t)iovcnt);
	r = chan_send_iov(ch, all, iovcnt + ch->nheld, copy);
	if (frames > 1)
		__atomic_add_fetch(&ch->tp->base.sends_combined, frames - 1, __ATOMIC_RELAXED);
	held_clear(ch); /* after the send: see held_clear */
	return r;
}

void tcp_chan_flush(struct tcp_chan *ch)
{
	pthread_mutex_lock(&ch->send_mu);
	if (chan_error(ch) || ch->fd < 0) {
		out_drop(ch);
		pthread_mutex_unlock(&ch->send_mu);
		return;
	}
	while (ch->out_head) {
		struct tcp_out *o = ch->out_head;
		struct msghdr mh = { .msg_iov = o->iov, .msg_iovlen = (size_t)o->iovcnt };
		ssize_t n = sendmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		int first;

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				break;
			chan_fail(ch, -ECONNRESET);
			out_drop(ch);
			break;
		}
		first = iov_advance(o->iov, o->iovcnt, (size_t)n);
		if (first < o->iovcnt) {
			memmove(o->iov, o->iov + first, sizeof(o->iov[0]) * (size_t)(o->iovcnt - first));
			o->iovcnt -= first;
			break;
		}
		ch->out_head = o->next;
		if (!ch->out_head)
			ch->out_tail = NULL;
		free(o->owned);
		free(o);
	}
	if (!ch->out_head)
		out_disarm(ch);
	pthread_mutex_unlock(&ch->send_mu);
}

/* send_mu held, fd open: whether the kernel has seen the connection's far end close. */
static bool far_end_closed(const struct tcp_chan *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/*
 * The peer is down for this rank when both its connections are gone: ours to it (this
 * channel) and its to us (a served connection). Either alone is no news of the peer: a
 * peer whose operation to us timed out closes only its own, and is alive (docs/failure.md,
 * "Down after an operation timeout is not dead"). A process that dies closes both, and
 * whichever end the progress thread sees last sets it down; a failure of the channel
 * itself (an operation of ours timed out, a send failed) sets it down at once (chan_fail).
 */
void tcp_chan_event(struct tcp_chan *ch, uint32_t events)
{
	struct tcp_tp *t = ch->tp;
	bool closed = false;
	uint32_t gen = 0;

	if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		pthread_mutex_lock(&ch->send_mu);
		/* The event may be of a socket the channel has replaced since: look again. */
		if (ch->fd >= 0 && !__atomic_load_n(&ch->far_closed, __ATOMIC_RELAXED) &&
		    far_end_closed(ch)) {
			__atomic_store_n(&ch->far_closed, true, __ATOMIC_RELAXED);
			/* Level-triggered: it would fire again at once. */
			if (ev_set_mask(ch, ch->out_armed ? EPOLLOUT : 0) &&
			    !epoll_ctl(t->epfd, EPOLL_CTL_DEL, ch->fd, NULL))
				ch->ev_mask = 0; /* the flush that was armed for fails anyway */
			/* Our own failure shut the socket down (chan_fail): not news. */
			closed = !chan_error(ch);
			gen = ch->gen;
		}
		pthread_mutex_unlock(&ch->send_mu);
	}
	if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		tcp_chan_flush(ch);
	if (!closed)
		return;
	DDSS_INFO("rank %u closed our connection to it", ch->peer);
	/* Under serve_state_mu, as a served connection's close (tcp_serve.c), and only if the
	 * channel has not connected again meanwhile. */
	pthread_mutex_lock(&t->serve_state_mu);
	if (!tcp_serve_has(t, ch->peer) && !tcp_chan_up(ch, gen))
		tcp_peer_set_state(t, ch->peer, gen, DDSS_TP_PEER_DOWN);
	pthread_mutex_unlock(&t->serve_state_mu);
}

/*
 * Why a watch that comes and goes. A peer that dies while nobody waits on the channel
 * closes it, and it is down here only once both its connections are seen closed
 * (tcp_chan_event). While its connection to us is open, that connection's close is seen
 * anyway (tcp_serve.c, served_close): it checks this socket's far end at that moment, and
 * arms the watch if it is still open. So the socket is in the progress thread's epoll only
 * while the peer has no connection to us, which a working group never is for long; a
 * socket in an epoll set runs its callback on every segment that arrives, replies too.
 * Level-triggered: a far end that closed before the watch fires at once.
 */
void tcp_chan_watch_close(struct tcp_chan *ch, bool on)
{
	int r;

	pthread_mutex_lock(&ch->send_mu);
	ch->watch_close = on;
	r = ev_set_mask(ch, ev_base(ch) | (ch->out_armed ? EPOLLOUT : 0));
	if (r && on)
		DDSS_WARN("channel to rank %u: epoll_ctl: %s (its close is seen late)", ch->peer,
			  strerror(-r));
	/* Left armed, it would only cost as before; not with a flush armed, which needs it. */
	else if (r && !ch->out_armed && ch->fd >= 0 &&
		 !epoll_ctl(ch->tp->epfd, EPOLL_CTL_DEL, ch->fd, NULL))
		ch->ev_mask = 0;
	pthread_mutex_unlock(&ch->send_mu);
}

bool tcp_chan_up(struct tcp_chan *ch, uint32_t gen)
{
	bool up;

	pthread_mutex_lock(&ch->send_mu);
	up = ch->fd >= 0 && !chan_error(ch) && ch->gen == gen &&
	     !__atomic_load_n(&ch->far_closed, __ATOMIC_RELAXED) && !far_end_closed(ch);
	pthread_mutex_unlock(&ch->send_mu);
	return up;
}

/*
 * send_mu held, protected connection: seal @n frames (their encoded headers back to back
 * at @hdrs, the last one with @len bytes of @payload) and send them as one write, copied
 * if they cannot all go now. A failure fails the channel.
 */
static int send_sealed(struct tcp_chan *ch, const unsigned char *hdrs, size_t n,
		       const void *payload, size_t len)
{
	size_t total = (n - 1) * tcp_protect_frame_len(0) + tcp_protect_frame_len(len), at = 0;
	struct iovec iov;
	int r = tcp_buf_reserve(&ch->ptx, &ch->ptx_cap, total);

	for (size_t i = 0; !r && i < n; i++) {
		size_t l = i + 1 == n ? len : 0;

		r = tcp_protect_seal(&ch->prot, hdrs + i * TCP_WIRE_HDR_LEN, payload, l,
				     ch->ptx + at);
		at += tcp_protect_frame_len(l);
	}
	if (r) {
		chan_fail(ch, r);
		return r;
	}
	iov = (struct iovec){ ch->ptx, total };
	r = chan_send(ch, &iov, 1, true);
	/* What did not go out was copied: a buffer grown for one large frame need not stay. */
	if (ch->ptx_cap > TCP_PFRAME_KEEP) {
		free(ch->ptx);
		ch->ptx = NULL;
		ch->ptx_cap = 0;
	}
	return r;
}

/* Its address tells the channel's posters apart. */
static __thread char this_thread;

/*
 * This thread's chain of frames posted "more" (DDSS_TP_MORE): the channel and the
 * connection (conn_id) its last one went into. An atomic posted "more" completes what the
 * frames before it wrote (a write or delta put's fetch&add behind its copy), so it must go
 * into their connection: if that one failed meanwhile, the frames held in it were dropped
 * (or may not have landed), and the atomic, on a new connection, completed a version whose
 * copy was lost (a review of 956b9cb). Such an atomic fails with -ECONNRESET instead. Reads
 * and writes (the daemon's lane batches unrelated ones) and posts without "more" (a lock's
 * release) go on as before. The chain ends at a post without "more" or at a wait or test
 * on the channel; until then a broken chain stays broken. conn_id is compared under
 * send_mu, where it is set with fd, so a reconnect in progress cannot slip between the
 * check and the send. One channel per thread: a chain that goes on to another peer and
 * back starts again (no caller does that).
 */
static __thread struct {
	const struct tcp_chan *ch;
	uint64_t conn;
} chain;

/*
 * send_mu held: whether a frame of @n vectors posted with @flags waits in held. "More"
 * and "later" frames always do, if there is room (a later one until tcp_later.c's bound
 * at most); a waited one when others are in flight (@busy), so that their threads' next
 * frames go out with it (the top of the file).
 */
static bool hold_frame(const struct tcp_chan *ch, unsigned flags, bool busy, int n)
{
	if (ch->nheld + n > TCP_HELD_IOV)
		return false;
	return (flags & (DDSS_TP_MORE | DDSS_TP_LATER)) || ((flags & DDSS_TP_WAITED) && busy);
}

int tcp_chan_post(struct tcp_chan *ch, struct ddss_tp_req *req, const struct tcp_wire_hdr *h,
		  const void *payload, size_t payload_len, unsigned flags)
{
	struct tcp_wire_hdr hdr = *h;
	struct iovec iov[2];
	int timeout_ms = ch->tp->base.cfg.op_timeout_ms;
	int n = payload_len ? 2 : 1;
	bool busy, later = false;

	req->done = 0;
	req->status = 0;
	req->result = 0;
	req->next = NULL;
	req->deadline_ns = timeout_ms > 0 ? ddss_now_ns() + (int64_t)timeout_ms * 1000000 : INT64_MAX;

	pthread_mutex_lock(&ch->send_mu);
	if (ch->fd < 0 || chan_error(ch)) {
		pthread_mutex_unlock(&ch->send_mu);
		return -ECONNRESET;
	}
	if ((flags & DDSS_TP_MORE) && (h->kind == TCP_K_CAS || h->kind == TCP_K_FADD) &&
	    chain.ch == ch && chain.conn != ch->conn_id) {
		pthread_mutex_unlock(&ch->send_mu);
		return -ECONNRESET; /* the frames it completes went with a failed connection */
	}
	if (flags & DDSS_TP_MORE) {
		if (chain.ch != ch) { /* a chain starts: its connection is this one */
			chain.ch = ch;
			chain.conn = ch->conn_id;
		}
	} else if (chain.ch == ch) {
		chain.ch = NULL;
	}
	hdr.seq = req->seq = ch->next_seq++;
	tcp_wire_encode_hdr(&hdr, req->hdr);
	/* Queue before sending: another thread may read the reply before send() returns. */
	pthread_mutex_lock(&ch->q_mu);
	/* Busy: requests in flight, and another thread posted last. A thread alone (say, its
	 * lock behind its own posted release) would only wait for itself. */
	busy = ch->q_head != NULL && ch->last_poster != &this_thread;
	ch->last_poster = &this_thread;
	if (ch->q_tail)
		ch->q_tail->next = req;
	else
		ch->q_head = req;
	ch->q_tail = req;
	pthread_mutex_unlock(&ch->q_mu);
	if (ch->protect) {
		/* Sealed now, in wire order: never held. */
		send_sealed(ch, req->hdr, 1, payload, payload_len);
		pthread_mutex_unlock(&ch->send_mu);
		return 0;
	}
	iov[0] = (struct iovec){ req->hdr, TCP_WIRE_HDR_LEN };
	iov[1] = (struct iovec){ (void *)payload, payload_len };
	if (hold_frame(ch, flags, busy, n)) {
		/* The request's header and payload live until it completes: refer to them. */
		memcpy(ch->held + ch->nheld, iov, sizeof(iov[0]) * (size_t)n);
		ch->nheld_frames++;
		if (!(flags & (DDSS_TP_MORE | DDSS_TP_LATER)))
			__atomic_store_n(&ch->held_waiting, true, __ATOMIC_RELAXED);
		__atomic_store_n(&ch->nheld, ch->nheld + n, __ATOMIC_RELAXED);
		later = flags & DDSS_TP_LATER;
	} else {
		/* A send failure fails the channel; the queued request completes with it. */
		chan_send(ch, iov, n, false);
	}
	pthread_mutex_unlock(&ch->send_mu);
	if (later)
		tcp_later_arm(ch->tp); /* no lock held: it may have to send at once */
	return 0;
}

/*
 * Send a held frame now: its poster is about to wait for a reply on this channel. Every
 * wait and test comes here, so the common case (nothing held) takes no lock: a frame this
 * thread held is seen by its own load; one of another thread's, seen or not, is that
 * thread's to push. Seeing 0 (acquire) after another thread sent this thread's frame
 * orders that send's read of the buffers before the poster reuses them.
 */
static void push_held(struct tcp_chan *ch)
{
	if (chain.ch == ch)
		chain.ch = NULL; /* a wait or test ends this thread's chain */
	tcp_chan_push(ch);
}

/* Send what is held now, whoever holds it (the progress thread: tcp_later.c). */
void tcp_chan_push(struct tcp_chan *ch)
{
	if (!__atomic_load_n(&ch->nheld, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&ch->send_mu);
	if (ch->nheld && ch->fd >= 0 && !chan_error(ch))
		chan_send(ch, NULL, 0, false);
	pthread_mutex_unlock(&ch->send_mu);
}

/*
 * One-way frames (no reply expected), copied if they cannot all go out now: @iov holds
 * @nframes encoded frames, all header-only but the last, whose payload is @iov[1] when
 * @iovcnt is 2 (what a protected connection seals).
 */
static int send_copied(struct tcp_chan *ch, struct iovec *iov, int iovcnt, size_t nframes)
{
	int r;

	pthread_mutex_lock(&ch->send_mu);
	if (ch->fd < 0 || chan_error(ch))
		r = -ECONNRESET;
	else if (ch->protect)
		r = send_sealed(ch, iov[0].iov_base, nframes, iovcnt > 1 ? iov[1].iov_base : NULL,
				iovcnt > 1 ? iov[1].iov_len : 0);
	else
		r = chan_send(ch, iov, iovcnt, true);
	pthread_mutex_unlock(&ch->send_mu);
	return r;
}

int tcp_chan_send_oneway(struct tcp_chan *ch, const struct tcp_wire_hdr *h, const void *payload,
			 size_t payload_len)
{
	unsigned char hdr[TCP_WIRE_HDR_LEN];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)payload, payload_len } };

	tcp_wire_encode_hdr(h, hdr);
	return send_copied(ch, iov, payload_len ? 2 : 1, 1);
}

int tcp_chan_send_frames(struct tcp_chan *ch, const void *frames, size_t len)
{
	struct iovec iov = { (void *)frames, len };

	return send_copied(ch, &iov, 1, len / TCP_WIRE_HDR_LEN);
}

/*
 * Rx owner: decode the reply header @buf and take its request off the queue (*req_p): 0,
 * or -EPROTO when it answers no request of ours as it must.
 */
static int take_reply(struct tcp_chan *ch, const unsigned char *buf, struct tcp_wire_hdr *h_p,
		      struct ddss_tp_req **req_p)
{
	struct tcp_wire_hdr h;
	struct ddss_tp_req *req;
	size_t expect;

	if (tcp_wire_decode_hdr(buf, &h) || h.kind != TCP_K_REPLY)
		return -EPROTO;
	pthread_mutex_lock(&ch->q_mu);
	req = ch->q_head;
	if (req && req->seq == h.seq) {
		expect = req->op == DDSS_TP_OP_READ && h.status == 0 ? req->len : 0;
		if (h.len == expect && h.status <= 0 && h.status > -4096) {
			ch->q_head = req->next;
			if (!ch->q_head)
				ch->q_tail = NULL;
		} else {
			req = NULL;
		}
	} else {
		req = NULL;
	}
	pthread_mutex_unlock(&ch->q_mu);
	if (!req) {
		DDSS_WARN("unexpected reply from rank %u (seq %llu)", ch->peer,
			  (unsigned long long)h.seq);
		return -EPROTO;
	}
	*h_p = h;
	*req_p = req;
	return 0;
}

/*
 * Rx owner, protected connection: gather the next sealed reply, open it, and only then
 * complete its request. 0 = progress made, -EAGAIN = need more, -EBADMSG (it failed
 * verification), -EPROTO, -ENOMEM.
 */
static int rx_parse_sealed(struct tcp_chan *ch, struct ddss_tp_req *until)
{
	struct tcp_wire_hdr h;
	struct ddss_tp_req *req;
	uint64_t max = 0;
	size_t used, len;
	int r;

	if (ch->rx_start == ch->rx_end)
		return -EAGAIN;
	/* Only the head request may be answered next; only a READ's answer has a payload. */
	pthread_mutex_lock(&ch->q_mu);
	if (ch->q_head && ch->q_head->op == DDSS_TP_OP_READ)
		max = ch->q_head->len;
	pthread_mutex_unlock(&ch->q_mu);
	r = tcp_pframe_gather(&ch->prx, ch->rxbuf + ch->rx_start, ch->rx_end - ch->rx_start, max,
			      &used);
	ch->rx_start += used;
	if (r <= 0)
		return r ? r : -EAGAIN;
	len = tcp_pframe_payload_len(&ch->prx);
	if (tcp_protect_open(&ch->prot, ch->prx.buf, len)) {
		DDSS_WARN("a frame from rank %u failed verification (DDSS_TCP_PROTECT=%s): forged, "
			  "altered, replayed or lost on the way; closing the connection",
			  ch->peer, tcp_protect_name(ch->prot.mode));
		return -EBADMSG;
	}
	r = take_reply(ch, ch->prx.buf, &h, &req);
	if (r)
		return r;
	if (h.len)
		memcpy(req->local, ch->prx.buf + TCP_WIRE_HDR_LEN, h.len);
	tcp_pframe_done(&ch->prx);
	req_complete(req, h.status, h.len ? 0 : h.a);
	if (req != until)
		wake_req(ch, req);
	return 0;
}

/* Rx owner: consume buffered bytes. 0 = progress made, -EAGAIN = need more, -EPROTO. */
static int rx_parse(struct tcp_chan *ch, struct ddss_tp_req *until)
{
	struct tcp_wire_hdr h;
	struct ddss_tp_req *req;
	size_t avail = ch->rx_end - ch->rx_start;
	int r;

	if (ch->protect)
		return rx_parse_sealed(ch, until);

	if (ch->rx_cur) {
		size_t n = ch->rx_cur->len - ch->rx_cur_got;

		if (n > avail)
			n = avail;
		if (n == 0)
			return -EAGAIN;
		memcpy((char *)ch->rx_cur->local + ch->rx_cur_got, ch->rxbuf + ch->rx_start, n);
		ch->rx_start += n;
		ch->rx_cur_got += n;
		if (ch->rx_cur_got == ch->rx_cur->len) {
			req = ch->rx_cur;
			ch->rx_cur = NULL;
			req_complete(req, 0, 0);
			if (req != until)
				wake_req(ch, req);
		}
		return 0;
	}
	if (avail < TCP_WIRE_HDR_LEN)
		return -EAGAIN;
	r = take_reply(ch, ch->rxbuf + ch->rx_start, &h, &req);
	if (r)
		return r;
	ch->rx_start += TCP_WIRE_HDR_LEN;
	if (h.len) {
		ch->rx_cur = req;
		ch->rx_cur_got = 0;
		return 0;
	}
	req_complete(req, h.status, h.a);
	if (req != until)
		wake_req(ch, req);
	return 0;
}

/*
 * Rx owner: receive more bytes. Large read payloads go straight into the caller's buffer.
 * @block: wait until @deadline: spinning on non-blocking recv in poll mode, in the kernel in
 * event mode, and in adaptive mode spinning up to the spin bound (net/spin.h) from the
 * first empty recv, then in the kernel. Spinning reads the clock every TCP_SPINS_PER_CLOCK
 * recvs only (a clock read costs about a microsecond in the emulated guest), and gives the
 * core away there: the thread that will answer may be runnable on this core, and nothing
 * else would let it run before the spin ends (docs/transport.md, "A spinning waiter beside
 * its home").
 * Returns 0, -EAGAIN (non-blocking, nothing there), -ETIMEDOUT, or a failure (-ECONNRESET).
 */
#define TCP_SPINS_PER_CLOCK 4

static int rx_fill(struct tcp_chan *ch, int64_t deadline, bool block)
{
	enum ddss_tp_completion mode = ch->tp->base.cfg.completion;
	bool spin = mode != DDSS_TP_COMPLETION_EVENT;
	int64_t spin_end = mode == DDSS_TP_COMPLETION_POLL ? INT64_MAX : 0; /* 0: not started */
	unsigned spins = 0;
	void *dst;
	size_t room;
	ssize_t n;

	if (ch->rx_cur && ch->rx_start == ch->rx_end &&
	    ch->rx_cur->len - ch->rx_cur_got >= TCP_RXBUF_LEN / 4) {
		dst = (char *)ch->rx_cur->local + ch->rx_cur_got;
		room = ch->rx_cur->len - ch->rx_cur_got;
	} else {
		if (ch->rx_start == ch->rx_end) {
			ch->rx_start = ch->rx_end = 0;
		} else if (ch->rx_start > 0) {
			memmove(ch->rxbuf, ch->rxbuf + ch->rx_start, ch->rx_end - ch->rx_start);
			ch->rx_end -= ch->rx_start;
			ch->rx_start = 0;
		}
		dst = ch->rxbuf + ch->rx_end;
		room = TCP_RXBUF_LEN - ch->rx_end;
	}
	for (;;) {
		int flags = MSG_DONTWAIT;

		if (block && !spin) {
			int64_t left_ns = deadline - ddss_now_ns();

			if (deadline != INT64_MAX && left_ns < TCP_RX_SLICE_MS * 1000000ll) {
				struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };

				if (left_ns <= 0)
					return -ETIMEDOUT;
				/*
				 * Rounded up, and a poll that ends empty looks at the clock
				 * again: the wait must not end before the deadline, or the
				 * operation timeout would report -ETIMEDOUT without expiring
				 * the request (tcp_chan_wait), which then stayed queued.
				 */
				if (poll(&pfd, 1, (int)((left_ns + 999999) / 1000000)) == 0)
					continue;
			} else {
				flags = 0; /* blocking; SO_RCVTIMEO bounds it to one slice */
			}
		}
		n = recv(ch->fd, dst, room, flags);
		if (n > 0)
			break;
		if (n == 0) {
			chan_fail(ch, -ECONNRESET);
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			chan_fail(ch, -ECONNRESET);
			return -ECONNRESET;
		}
		if (!block)
			return -EAGAIN;
		if (spin && spin_end == 0) {
			int64_t now = ddss_now_ns();

			spin_end = now + ddss_spin_ns();
			if (spin_end > deadline)
				spin_end = deadline;
			spin = spin_end > now;
		} else if (!spin || ++spins % TCP_SPINS_PER_CLOCK == 0) {
			int64_t now = ddss_now_ns();

			if (now >= deadline)
				return -ETIMEDOUT;
			if (now >= spin_end)
				spin = false; /* adaptive: spun long enough, block from now on */
			else
				sched_yield(); /* the answer may need our core: tcp_spin_yield.c */
		}
		if (chan_error(ch))
			return chan_error(ch);
	}
	if (dst == ch->rxbuf + ch->rx_end) {
		ch->rx_end += (size_t)n;
	} else {
		ch->rx_cur_got += (size_t)n;
		if (ch->rx_cur_got == ch->rx_cur->len) {
			struct ddss_tp_req *req = ch->rx_cur;

			ch->rx_cur = NULL;
			req_complete(req, 0, 0);
			wake_req(ch, req);
		}
	}
	return 0;
}

/*
 * Rx owner: read and complete replies until @until is done (0), the deadline passes
 * (-ETIMEDOUT), nothing is available without blocking (-EAGAIN), or the channel fails
 * (its error; the caller reaps).
 */
static int rx_progress(struct tcp_chan *ch, struct ddss_tp_req *until, int64_t deadline, bool block)
{
	int r;

	while (!ddss_tp_req_done(until)) {
		if (chan_error(ch))
			return chan_error(ch);
		r = rx_parse(ch, until);
		if (r == 0)
			continue;
		if (r != -EAGAIN) {
			chan_fail(ch, r);
			return r;
		}
		r = rx_fill(ch, deadline, block);
		if (r)
			return r;
	}
	return 0;
}

/* The operation timeout passed with @req still pending: the peer is considered dead. */
static void expire(struct tcp_chan *ch, struct ddss_tp_req *req)
{
	DDSS_WARN("operation to rank %u timed out after %d ms", ch->peer,
		  ch->tp->base.cfg.op_timeout_ms);
	ddss_tp_count_timeout(&ch->tp->base);
	pthread_mutex_lock(&ch->send_mu);
	if (!ddss_tp_req_done(req))
		chan_fail(ch, -ETIMEDOUT);
	pthread_mutex_unlock(&ch->send_mu);
	rx_acquire(ch);
	reap_as_owner(ch);
	rx_release(ch);
}

/*
 * cv_mu held: sleep on @me until a waker claims it or @deadline (INT64_MAX: none) passes.
 * Returns true, without cv_mu, when woken for @me's request done (the common case: the
 * thread leaves without touching the mutex the rx owner keeps taking); else with cv_mu
 * held and @me off the list.
 */
static bool sleep_locked(struct tcp_chan *ch, struct ddss_sleeper *me, int64_t deadline)
{
	ddss_sleeper_link(&ch->sleepers, me);
	pthread_mutex_unlock(&ch->cv_mu);
	ddss_sleeper_wait(me, deadline);
	/* Claimed means unlinked: nothing on the list points at @me any more. */
	if (ddss_sleeper_claimed(me) && ddss_tp_req_done(me->req))
		return true;
	pthread_mutex_lock(&ch->cv_mu);
	if (!ddss_sleeper_claimed(me))
		ddss_sleeper_unlink(&ch->sleepers, me); /* timed out: nobody took it off */
	return false;
}

int tcp_chan_wait(struct tcp_chan *ch, struct ddss_tp_req *req, int timeout_ms)
{
	int64_t now = ddss_now_ns();
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now + (int64_t)timeout_ms * 1000000;
	struct ddss_sleeper me = { .req = req };
	int r = 0;

	if (req->deadline_ns < deadline)
		deadline = req->deadline_ns;
	/* Combined sends (the top of the file): let the threads that are ready run first. */
	if (__atomic_load_n(&ch->held_waiting, __ATOMIC_RELAXED))
		sched_yield();
	push_held(ch);
	pthread_mutex_lock(&ch->cv_mu);
	while (!ddss_tp_req_done(req)) {
		if (!ch->rx_busy) {
			ch->rx_busy = true;
			pthread_mutex_unlock(&ch->cv_mu);
			r = rx_progress(ch, req, deadline, true);
			if (chan_error(ch))
				reap_as_owner(ch);
			rx_release(ch);
			if (r == -ETIMEDOUT && !ddss_tp_req_done(req))
				goto timed_out;
			pthread_mutex_lock(&ch->cv_mu);
			continue;
		}
		if (sleep_locked(ch, &me, deadline))
			return 0;
		if (!ddss_tp_req_done(req) && ddss_now_ns() >= deadline) {
			pthread_mutex_unlock(&ch->cv_mu);
			goto timed_out;
		}
	}
	pthread_mutex_unlock(&ch->cv_mu);
	return 0;

timed_out:
	if (ddss_now_ns() >= req->deadline_ns) {
		expire(ch, req);
		return 0;
	}
	return -ETIMEDOUT;
}

int tcp_chan_test(struct tcp_chan *ch, struct ddss_tp_req *req)
{
	push_held(ch);
	pthread_mutex_lock(&ch->cv_mu);
	if (ddss_tp_req_done(req)) {
		pthread_mutex_unlock(&ch->cv_mu);
		return 0;
	}
	if (ch->rx_busy) {
		/* Someone else is reading replies; ours will be completed by them. */
		pthread_mutex_unlock(&ch->cv_mu);
		return -EAGAIN;
	}
	ch->rx_busy = true;
	pthread_mutex_unlock(&ch->cv_mu);
	rx_progress(ch, req, INT64_MAX, false);
	if (chan_error(ch))
		reap_as_owner(ch);
	rx_release(ch);
	if (ddss_tp_req_done(req))
		return 0;
	if (ddss_now_ns() >= req->deadline_ns) {
		expire(ch, req);
		return 0;
	}
	return -EAGAIN;
}
