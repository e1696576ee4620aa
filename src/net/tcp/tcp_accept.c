/*
 * The tcp provider's acceptor: incoming connections up to the end of their handshake.
 *
 * One thread, one poll loop. A new connection waits, without blocking anyone, until its
 * HELLO frame has arrived in full; the answer goes out at once (tcp_handshake.c), and with
 * a secret the connection waits in the same loop for its AUTH frame, then is answered
 * again and served. Every wait is a poll, bounded by TCP_HANDSHAKE_TIMEOUT_MS from accept.
 * So connections that say nothing, trickle their frames or stall between them never hold
 * up a rank that is joining: they are dropped at their deadline, and when too many wait at
 * once (in all, or from one address) the oldest is dropped for the newcomer
 * (docs/security.md).
 */
#include "net/tcp/tcp.h"
#include "core/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pending {
	int fd;
	int64_t deadline;                       /* the whole handshake ends by then */
	struct sockaddr_storage from;
	socklen_t from_len;
	unsigned char frame[TCP_HELLO_FRAME_LEN]; /* what has arrived of HELLO, then AUTH */
	size_t got;
	bool hello_done;                        /* answered; AUTH is awaited */
	struct tcp_accept_hs hs;
};

struct acceptor {
	struct tcp_tp *t;
	struct pending p[TCP_PENDING_MAX];
	struct pollfd pfd[TCP_PENDING_MAX + 1]; /* [0]: the listening socket */
	unsigned n;
};

static void drop(struct acceptor *a, unsigned i)
{
	close(a->p[i].fd);
	ddss_tp_handshake_failed(&a->t->base);
	a->p[i] = a->p[--a->n];
}

static bool same_source(const struct pending *x, const struct sockaddr_storage *from)
{
	if (x->from.ss_family != from->ss_family)
		return false;
	if (from->ss_family == AF_INET)
		return ((const struct sockaddr_in *)&x->from)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)from)->sin_addr.s_addr;
	if (from->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)&x->from)->sin6_addr,
			       &((const struct sockaddr_in6 *)from)->sin6_addr,
			       sizeof(struct in6_addr));
	return true;
}

/* Room for one more from @from: drop the oldest waiting one if the limits say so. */
static void make_room(struct acceptor *a, const struct sockaddr_storage *from)
{
	unsigned same = 0, oldest = 0, oldest_same = 0;

	for (unsigned i = 0; i < a->n; i++) {
		if (a->p[i].deadline < a->p[oldest].deadline)
			oldest = i;
		if (same_source(&a->p[i], from) &&
		    (!same++ || a->p[i].deadline < a->p[oldest_same].deadline))
			oldest_same = i;
	}
	if (same >= TCP_PENDING_PER_SOURCE)
		drop(a, oldest_same);
	else if (a->n == TCP_PENDING_MAX)
		drop(a, oldest);
}

/* The listening socket is ready: take one connection. False once it has been shut down. */
static bool take_new(struct acceptor *a)
{
	struct pending x = { .from_len = sizeof(x.from) };

	x.fd = accept4(a->t->listen_fd, (struct sockaddr *)&x.from, &x.from_len,
		       SOCK_CLOEXEC);
	if (x.fd < 0) {
		if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
			return true;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			DDSS_WARN("accept: %s", strerror(errno));
			if (a->n)
				drop(a, 0); /* free a descriptor rather than spin */
			else
				usleep(10000);
			return true;
		}
		return false; /* EINVAL after shutdown(): we are stopping */
	}
	x.deadline = ddss_now_ns() + (int64_t)TCP_HANDSHAKE_TIMEOUT_MS * 1000000;
	make_room(a, &x.from);
	a->p[a->n++] = x;
	return true;
}

/* Pending @i is readable: read what came of its frame; at a full frame, the next step. */
static void progress(struct acceptor *a, unsigned i)
{
	struct pending *x = &a->p[i];
	ssize_t n = recv(x->fd, x->frame + x->got, sizeof(x->frame) - x->got, MSG_DONTWAIT);
	struct tcp_protect prot = { .mode = DDSS_TP_PROTECT_OFF };
	int fd = x->fd, r;

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		drop(a, i); /* hung up, or an error: nobody to answer */
		return;
	}
	x->got += (size_t)n;
	if (x->got < sizeof(x->frame))
		return;
	x->got = 0;
	if (!x->hello_done) {
		r = tcp_handshake_accept_hello(a->t, fd, x->frame, &x->hs);
		x->hello_done = true;
		if (!r && x->hs.need_auth)
			return; /* its AUTH frame comes through this loop too */
	} else {
		r = tcp_handshake_accept_auth(a->t, fd, x->frame, &x->hs, &prot);
	}
	if (!r)
		r = tcp_serve_add(a->t, fd, &x->hs, &prot);
	tcp_protect_clear(&prot);
	if (r) {
		drop(a, i);
		return;
	}
	a->p[i] = a->p[--a->n]; /* served from now on */
}

void *tcp_acceptor_main(void *arg)
{
	struct acceptor *a = calloc(1, sizeof(*a));
	bool open = true;

	if (!a) {
		DDSS_ERR("tcp: no memory for the acceptor: no connection will be accepted");
		return NULL;
	}
	a->t = arg;
	while (open) {
		int64_t now = ddss_now_ns(), next = INT64_MAX;
		int timeout = -1, r;

		for (unsigned i = 0; i < a->n;) {
			if (a->p[i].deadline <= now) {
				drop(a, i); /* silent or slow past its deadline */
				continue;
			}
			if (a->p[i].deadline < next)
				next = a->p[i].deadline;
			i++;
		}
		if (next != INT64_MAX)
			timeout = (int)((next - now) / 1000000) + 1;
		a->pfd[0] = (struct pollfd){ .fd = a->t->listen_fd, .events = POLLIN };
		for (unsigned i = 0; i < a->n; i++)
			a->pfd[i + 1] = (struct pollfd){ .fd = a->p[i].fd, .events = POLLIN };
		r = poll(a->pfd, a->n + 1, timeout);
		if (r < 0 && errno != EINTR) {
			DDSS_ERR("tcp acceptor: poll: %s", strerror(errno));
			break;
		}
		if (r <= 0)
			continue;
		/* Newest first: a pending entry moved by drop() comes from a higher index,
		 * which this pass has already seen. */
		for (unsigned i = a->n; i-- > 0;)
			if (a->pfd[i + 1].revents)
				progress(a, i);
		if (a->pfd[0].revents)
			open = take_new(a);
	}
	while (a->n)
		drop(a, 0);
	free(a);
	return NULL;
}
