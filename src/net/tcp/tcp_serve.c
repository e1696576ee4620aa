/*
 * The serving side of the tcp provider.
 *
 * The acceptor thread takes incoming connections and runs their handshake with blocking
 * I/O (bounded by TCP_HANDSHAKE_TIMEOUT_MS); only a peer that proves it belongs to this
 * group learns our pool length and gets served. The progress thread then serves each
 * connection's requests on our pool with non-blocking I/O over epoll, in order: when a
 * reply does not fit in the socket, it stops reading that connection until the reply is
 * out, which is the back-pressure that bounds memory whatever the initiator posts.
 */
#include "net/tcp/tcp.h"
#include "core/log.h"
#include "core/tsan.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* Large write payloads bypass the receive buffer and land in the pool directly. */
#define SERVE_DIRECT_MIN 4096u

static int ev_set(struct tcp_tp *t, struct tcp_served *s, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	return epoll_ctl(t->epfd, op, s->fd, &ev) ? -errno : 0;
}

static void served_close(struct tcp_tp *t, struct tcp_served *s, const char *why)
{
	struct tcp_served **pp;
	bool others = false;

	DDSS_INFO("closing connection from rank %u: %s", s->peer, why);
	epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	pthread_mutex_lock(&t->served_mu);
	for (pp = &t->served; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	for (struct tcp_served *o = t->served; o; o = o->next)
		others |= o->peer == s->peer;
	pthread_mutex_unlock(&t->served_mu);
	close(s->fd); /* only once unlinked: tcp_serve_cut must never see a reused number */
	if (!others)
		tcp_peer_set_state(t, s->peer, DDSS_TP_PEER_DOWN);
	free(s);
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

static int served_reply(struct tcp_tp *t, struct tcp_served *s, const struct tcp_wire_hdr *rep,
			const void *data)
{
	int r;

	tcp_wire_encode_hdr(rep, s->out_hdr);
	s->out_iov[0] = (struct iovec){ s->out_hdr, TCP_WIRE_HDR_LEN };
	s->out_iov[1] = (struct iovec){ (void *)data, rep->len };
	s->out_iovcnt = rep->len ? 2 : 1;
	r = served_flush(s);
	if (r != -EAGAIN)
		return r;
	/* Stop reading this connection until the reply is out (back-pressure). */
	s->out_blocked = true;
	return ev_set(t, s, EPOLLOUT, EPOLL_CTL_MOD);
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

	/* Declared dead while its request was on the way: it may not touch the pool any more. */
	if (ddss_tp_peer_refused(&t->base, s->peer))
		return -EHOSTDOWN;
	switch (c->kind) {
	case TCP_K_READ:
		if (!s->cur_err) {
			data = t->pool + c->off;
			rep.len = (uint32_t)c->a;
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
		}
		break;
	case TCP_K_FADD:
		if (!s->cur_err)
			rep.a = __atomic_fetch_add(word, c->a, __ATOMIC_SEQ_CST);
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
	return served_reply(t, s, &rep, data);
}

/* Destination of the next payload bytes of s->cur, or NULL to discard them. */
static unsigned char *payload_dst(struct tcp_tp *t, struct tcp_served *s)
{
	/* A write of a rank declared dead meanwhile lands nowhere (serve_request refuses the
	 * rest of what it sends). */
	if (s->cur.kind == TCP_K_WRITE && !s->cur_err && !ddss_tp_peer_refused(&t->base, s->peer))
		return t->pool + s->cur.off + s->payload_got;
	if (s->cur.kind == TCP_K_MSG)
		return s->msgbuf + s->payload_got;
	return NULL;
}

/* Consume buffered bytes: 0 = progress, -EAGAIN = need more input, else protocol error. */
static int served_step(struct tcp_tp *t, struct tcp_served *s)
{
	size_t avail = s->rx_end - s->rx_start;

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
	}
	if (s->payload_got < s->cur.len) {
		size_t n = s->cur.len - s->payload_got;
		unsigned char *dst = payload_dst(t, s);

		if (n > avail)
			n = avail;
		if (n == 0)
			return -EAGAIN;
		/* An aligned 8-byte write lands as one store, like a NIC's: lock records are
		 * read by spinning CPUs that must never see half of one (docs/locks.md). */
		if (n == 8 && s->cur.len == 8 && dst && !((uintptr_t)dst & 7)) {
			uint64_t v;

			memcpy(&v, s->rxbuf + s->rx_start, 8);
			DDSS_POOL_ACCESS_BEGIN();
			__atomic_store_n((uint64_t *)dst, v, __ATOMIC_RELEASE);
			DDSS_POOL_ACCESS_END();
		} else if (s->cur.len == 8 && n < 8) {
			return -EAGAIN; /* wait for all 8 bytes */
		} else if (dst) {
			DDSS_POOL_ACCESS_BEGIN();
			memcpy(dst, s->rxbuf + s->rx_start, n);
			DDSS_POOL_ACCESS_END();
		}
		s->rx_start += n;
		s->payload_got += n;
		if (s->payload_got < s->cur.len)
			return -EAGAIN;
	}
	s->have_hdr = false;
	return serve_request(t, s);
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
	}
	DDSS_POOL_ACCESS_BEGIN(); /* large write payloads land in the pool directly */
	n = recv(s->fd, dst, room, MSG_DONTWAIT);
	DDSS_POOL_ACCESS_END();
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
				served_close(t, s, "cannot reply");
				return;
			}
		}
	}
	while (!s->out_blocked) {
		r = served_step(t, s);
		if (r == -EAGAIN)
			break;
		if (r == -EPROTO) {
			DDSS_WARN("rank %u sent a malformed request", s->peer);
			served_close(t, s, "protocol error");
			return;
		}
		if (r) {
			served_close(t, s, "cannot send a reply");
			return;
		}
	}
}

static void served_event(struct tcp_tp *t, struct tcp_served *s, uint32_t events)
{
	if (s->out_blocked) {
		int r = served_flush(s);

		if (r == -EAGAIN)
			return;
		if (r || ev_set(t, s, EPOLLIN, EPOLL_CTL_MOD)) {
			served_close(t, s, "connection lost while replying");
			return;
		}
		s->out_blocked = false;
		/* Requests may already sit in the buffer; serve them before reading more. */
		while (!s->out_blocked) {
			r = served_step(t, s);
			if (r == -EAGAIN)
				break;
			if (r) {
				served_close(t, s, "protocol error");
				return;
			}
		}
		return;
	}
	(void)events;
	served_input(t, s);
}

static void *progress_main(void *arg)
{
	struct tcp_tp *t = arg;
	struct epoll_event evs[64];

	for (;;) {
		int n = epoll_wait(t->epfd, evs, 64, -1);

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
			if (type == TCP_EV_CHAN)
				tcp_chan_flush(evs[i].data.ptr);
			else
				served_event(t, evs[i].data.ptr, evs[i].events);
		}
	}
}

void tcp_serve_cut(struct tcp_tp *t, uint32_t rank)
{
	pthread_mutex_lock(&t->served_mu);
	for (struct tcp_served *s = t->served; s; s = s->next)
		if (s->peer == rank)
			shutdown(s->fd, SHUT_RDWR); /* the progress thread sees the end and closes */
	pthread_mutex_unlock(&t->served_mu);
}

static void accept_one(struct tcp_tp *t, int fd)
{
	struct tcp_served *s;
	uint64_t pool_len = 0;
	uint32_t peer = 0;

	if (tcp_handshake_accept(t, fd, &peer, &pool_len)) {
		ddss_tp_handshake_failed(&t->base);
		close(fd);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return;
	}
	s->ev_type = TCP_EV_SERVED;
	s->fd = fd;
	s->peer = peer;
	tcp_set_sock_opts(fd);
	tcp_peer_set_pool_len(t, s->peer, pool_len);
	pthread_mutex_lock(&t->served_mu);
	s->next = t->served;
	t->served = s;
	pthread_mutex_unlock(&t->served_mu);
	tcp_peer_set_state(t, s->peer, DDSS_TP_PEER_UP);
	if (ddss_tp_peer_refused(&t->base, s->peer))
		shutdown(fd, SHUT_RDWR); /* refused while we shook hands */
	if (ev_set(t, s, EPOLLIN, EPOLL_CTL_ADD)) {
		DDSS_ERR("epoll_ctl: %s", strerror(errno));
		pthread_mutex_lock(&t->served_mu);
		t->served = s->next; /* still at the head: only the progress thread unlinks */
		pthread_mutex_unlock(&t->served_mu);
		close(fd);
		free(s);
	}
}

static void *acceptor_main(void *arg)
{
	struct tcp_tp *t = arg;

	for (;;) {
		int fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd >= 0) {
			accept_one(t, fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			DDSS_WARN("accept: %s", strerror(errno));
			usleep(10000); /* let descriptors free up rather than spin */
			continue;
		}
		return NULL; /* EINVAL after shutdown(): we are stopping */
	}
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
	r = -pthread_create(&t->progress_thread, NULL, progress_main, t);
	if (r)
		goto err_listen;
	r = -pthread_create(&t->acceptor_thread, NULL, acceptor_main, t);
	if (r)
		goto err_progress;
	return 0;

err_progress:
	eventfd_write(t->stop_fd, 1);
	pthread_join(t->progress_thread, NULL);
err_listen:
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
	while ((s = t->served)) {
		t->served = s->next;
		epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		free(s);
	}
}
