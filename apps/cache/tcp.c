/*
 * ddss-cache: the two-sided baseline. The back-end answers "document d if its version
 * differs from v" over plain TCP sockets, one thread per connection, as a traditional
 * back-end would: every request, hit or miss, needs the back-end's CPU.
 */
#include "cache.h"

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct tcp_server {
	int fd;
	struct tcp_doc *docs;
	unsigned ndocs;
	size_t size;
	void (*lock)(unsigned doc);
	void (*unlock)(unsigned doc);
	pthread_t acceptor;
	pthread_mutex_t mu; /* guards conns */
	pthread_t *conns;
	size_t nconns, cap;
};

struct conn {
	struct tcp_server *srv;
	int fd;
};

/* Read exactly @len bytes: 0, -ECONNRESET on EOF, or -errno. */
static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, MSG_WAITALL);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* One connection: answer requests until the client closes. */
static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct tcp_server *s = c->srv;
	char *out = malloc(sizeof(struct tcp_rep) + s->size);
	struct tcp_req req;

	while (out && !read_full(c->fd, &req, sizeof(req))) {
		struct tcp_rep rep = { 0 };
		uint32_t d = be32toh(req.doc);
		uint64_t have = be64toh(req.have), v;
		size_t len = 0;

		if (d >= s->ndocs)
			break;
		s->lock(d);
		v = s->docs[d].version;
		if (v != have) {
			memcpy(out + sizeof(rep), s->docs[d].data, s->size);
			len = s->size;
		}
		s->unlock(d);
		rep.version = htobe64(v);
		rep.len = htobe32((uint32_t)len);
		memcpy(out, &rep, sizeof(rep));
		if (write_full(c->fd, out, sizeof(rep) + len))
			break;
	}
	free(out);
	close(c->fd);
	free(c);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct tcp_server *s = arg;

	for (;;) {
		int fd = accept(s->fd, NULL, NULL);
		struct conn *c;
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* shut down by tcp_server_stop */
		}
		nodelay(fd);
		c = malloc(sizeof(*c));
		pthread_mutex_lock(&s->mu);
		if (c && s->nconns == s->cap) {
			size_t cap = s->cap ? 2 * s->cap : 16;
			pthread_t *n = realloc(s->conns, cap * sizeof(*n));

			if (n) {
				s->conns = n;
				s->cap = cap;
			}
		}
		if (!c || s->nconns == s->cap) {
			pthread_mutex_unlock(&s->mu);
			fprintf(stderr, "ddss-cache: tcp server: out of memory, connection refused\n");
			free(c);
			close(fd);
			continue;
		}
		c->srv = s;
		c->fd = fd;
		if (pthread_create(&t, NULL, conn_main, c)) {
			pthread_mutex_unlock(&s->mu);
			fprintf(stderr, "ddss-cache: tcp server: cannot start a thread\n");
			free(c);
			close(fd);
			continue;
		}
		s->conns[s->nconns++] = t;
		pthread_mutex_unlock(&s->mu);
	}
}

static int listen_on(const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res, *ai;
	int fd = -1, err = -EADDRNOTAVAIL;

	if (getaddrinfo(host, "0", &hints, &res))
		return -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 64))
			break;
		err = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd >= 0 ? fd : err;
}

static uint16_t port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len))
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

int tcp_server_start(const char *host, struct tcp_doc *docs, unsigned ndocs, size_t size,
		     void (*lock)(unsigned doc), void (*unlock)(unsigned doc),
		     struct tcp_server **srv_p, uint16_t *port_p)
{
	struct tcp_server *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	*s = (struct tcp_server){ .docs = docs, .ndocs = ndocs, .size = size, .lock = lock,
				  .unlock = unlock };
	pthread_mutex_init(&s->mu, NULL);
	s->fd = listen_on(host);
	if (s->fd < 0) {
		r = s->fd;
		goto out_free;
	}
	r = -pthread_create(&s->acceptor, NULL, accept_main, s);
	if (r)
		goto out_close;
	*port_p = port_of(s->fd);
	*srv_p = s;
	return 0;

out_close:
	close(s->fd);
out_free:
	pthread_mutex_destroy(&s->mu);
	free(s);
	return r;
}

void tcp_server_stop(struct tcp_server *s)
{
	shutdown(s->fd, SHUT_RDWR); /* wakes the acceptor */
	pthread_join(s->acceptor, NULL);
	close(s->fd);
	for (size_t i = 0; i < s->nconns; i++)
		pthread_join(s->conns[i], NULL);
	free(s->conns);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int tcp_connect(const char *host, uint16_t port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
	char service[8];
	int fd = -1, err = -EHOSTUNREACH;

	snprintf(service, sizeof(service), "%u", port);
	if (getaddrinfo(host, service, &hints, &res))
		return -EHOSTUNREACH;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		err = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return err;
	nodelay(fd);
	return fd;
}

int tcp_fetch(int fd, uint32_t doc, uint64_t have, void *buf, size_t size,
	      uint64_t *version_p, bool *changed_p)
{
	struct tcp_req req = { .doc = htobe32(doc), .have = htobe64(have) };
	struct tcp_rep rep;
	uint32_t len;
	int r = write_full(fd, &req, sizeof(req));

	if (!r)
		r = read_full(fd, &rep, sizeof(rep));
	if (r)
		return r;
	len = be32toh(rep.len);
	if (len && len != size)
		return -EPROTO;
	if (len) {
		r = read_full(fd, buf, size);
		if (r)
			return r;
	}
	*version_p = be64toh(rep.version);
	*changed_p = len != 0;
	return 0;
}
