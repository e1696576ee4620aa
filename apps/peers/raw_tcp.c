/* The raw TCP ceiling: a minimal value server and its client calls (raw_tcp.h). */
#include "raw_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR_LEN 8
#define CONN_BUF (2 * (HDR_LEN + RAW_TCP_MAX_VALUE))

struct raw_conn {
	int fd;
	size_t have;                       /* bytes of requests in buf */
	unsigned char buf[CONN_BUF];
	unsigned char value[RAW_TCP_MAX_VALUE]; /* zeros until set */
	struct raw_conn *next;
};

struct raw_server {
	int lfd, stop_fd, epfd, cpu;
	uint16_t port;
	pthread_t th;
	struct raw_conn *conns;
};

static void encode_hdr(unsigned char h[HDR_LEN], char op, uint32_t len)
{
	memset(h, 0, HDR_LEN);
	h[0] = (unsigned char)op;
	memcpy(h + 4, &len, 4);
}

/* All of @len bytes out; the server's sockets are non-blocking, so wait while full. */
static int write_all(int fd, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			if (poll(&pfd, 1, 1000) > 0)
				continue;
		}
		return -EPIPE;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n == 0 || errno != EINTR) {
			return -ECONNRESET;
		}
	}
	return 0;
}

/* Serve every complete request in @c's buffer; -1 when the connection must close. */
static int serve_buffered(struct raw_conn *c)
{
	size_t at = 0;

	while (c->have - at >= HDR_LEN) {
		unsigned char *h = c->buf + at;
		uint32_t len;

		memcpy(&len, h + 4, 4);
		if (len > RAW_TCP_MAX_VALUE || (h[0] != 'G' && h[0] != 'S'))
			return -1;
		if (h[0] == 'G') {
			if (write_all(c->fd, c->value, len))
				return -1;
			at += HDR_LEN;
			continue;
		}
		if (c->have - at < HDR_LEN + len)
			break;
		memcpy(c->value, h + HDR_LEN, len);
		if (write_all(c->fd, "+", 1))
			return -1;
		at += HDR_LEN + len;
	}
	memmove(c->buf, c->buf + at, c->have - at);
	c->have -= at;
	return 0;
}

static void conn_close(struct raw_server *s, struct raw_conn *c)
{
	struct raw_conn **pp;

	for (pp = &s->conns; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

static void conn_input(struct raw_server *s, struct raw_conn *c)
{
	for (;;) {
		ssize_t n = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, MSG_DONTWAIT);

		if (n > 0) {
			c->have += (size_t)n;
			if (serve_buffered(c))
				break;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	conn_close(s, c);
}

static void conn_accept(struct raw_server *s)
{
	int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
	struct raw_conn *c;
	struct epoll_event ev = { .events = EPOLLIN };

	if (fd < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	ev.data.ptr = c;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		close(fd);
		free(c);
		return;
	}
	c->next = s->conns;
	s->conns = c;
}

static void *server_main(void *arg)
{
	struct raw_server *s = arg;

	if (s->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(s->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	for (;;) {
		struct epoll_event ev[16];
		int n = epoll_wait(s->epfd, ev, 16, -1);

		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == &s->stop_fd)
				return NULL;
			if (ev[i].data.ptr == &s->lfd)
				conn_accept(s);
			else
				conn_input(s, ev[i].data.ptr);
		}
	}
}

int raw_server_start(int cpu, struct raw_server **srv_p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct raw_server *s = calloc(1, sizeof(*s));
	struct epoll_event ev = { .events = EPOLLIN };
	int r = -ENOMEM;

	if (!s)
		return r;
	s->cpu = cpu;
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	s->stop_fd = eventfd(0, EFD_CLOEXEC);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->lfd < 0 || s->stop_fd < 0 || s->epfd < 0 ||
	    bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(s->lfd, 64) ||
	    getsockname(s->lfd, (struct sockaddr *)&sa, &sl))
		goto err;
	s->port = ntohs(sa.sin_port);
	ev.data.ptr = &s->lfd;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev))
		goto err;
	ev.data.ptr = &s->stop_fd;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->stop_fd, &ev))
		goto err;
	r = -pthread_create(&s->th, NULL, server_main, s);
	if (r)
		goto err_r;
	*srv_p = s;
	return 0;
err:
	r = -errno;
err_r:
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	if (s->epfd >= 0)
		close(s->epfd);
	free(s);
	return r;
}

void raw_server_stop(struct raw_server *s)
{
	if (!s)
		return;
	if (eventfd_write(s->stop_fd, 1) == 0)
		pthread_join(s->th, NULL);
	while (s->conns)
		conn_close(s, s->conns);
	close(s->lfd);
	close(s->stop_fd);
	close(s->epfd);
	free(s);
}

int raw_connect(const struct raw_server *s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(s->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, r;

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		r = -errno;
		close(fd);
		return r;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int raw_set(int fd, const void *buf, size_t len)
{
	unsigned char frame[HDR_LEN + RAW_TCP_MAX_VALUE], ack;

	if (len > RAW_TCP_MAX_VALUE)
		return -EINVAL;
	encode_hdr(frame, 'S', (uint32_t)len);
	memcpy(frame + HDR_LEN, buf, len);
	if (write_all(fd, frame, HDR_LEN + len))
		return -ECONNRESET;
	return read_all(fd, &ack, 1) ? -ECONNRESET : ack == '+' ? 0 : -EPROTO;
}

int raw_get(int fd, void *buf, size_t len)
{
	unsigned char h[HDR_LEN];

	if (len > RAW_TCP_MAX_VALUE)
		return -EINVAL;
	encode_hdr(h, 'G', (uint32_t)len);
	if (write_all(fd, h, HDR_LEN))
		return -ECONNRESET;
	return read_all(fd, buf, len);
}
