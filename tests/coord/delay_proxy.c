/* Tests: a loopback TCP proxy that answers some requests late (delay_proxy.h). */
#include "delay_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct delay_proxy {
	int lfd;
	struct sockaddr_in up;
	pthread_mutex_t mu; /* prefix */
	char prefix[160];
	int delay_ms;
	unsigned delayed; /* atomic */
	unsigned conns;   /* atomic: connection threads running */
	bool stop;        /* atomic */
	pthread_t th;
};

struct conn {
	struct delay_proxy *p;
	int cfd;
};

static bool send_all(int fd, const char *b, size_t n)
{
	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

		if (k <= 0)
			return false;
		b += k;
		n -= (size_t)k;
	}
	return true;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct delay_proxy *p = c->p;
	int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool answered = false, hold = false;
	char buf[65536];

	if (ufd < 0 || connect(ufd, (struct sockaddr *)&p->up, sizeof(p->up)))
		goto out;
	for (;;) {
		struct pollfd f[2] = { { .fd = c->cfd, .events = POLLIN },
				       { .fd = ufd, .events = POLLIN } };
		ssize_t n;

		if (poll(f, 2, 30000) <= 0)
			break;
		if (f[0].revents) {
			n = recv(c->cfd, buf, sizeof(buf), 0);
			if (n <= 0)
				break;
			/* A request comes in a chunk or two (headers, body), its answer after. */
			pthread_mutex_lock(&p->mu);
			if (!answered && p->prefix[0] &&
			    memmem(buf, (size_t)n, p->prefix, strlen(p->prefix)))
				hold = true;
			pthread_mutex_unlock(&p->mu);
			if (!send_all(ufd, buf, (size_t)n))
				break;
		}
		if (f[1].revents) {
			n = recv(ufd, buf, sizeof(buf), 0);
			if (n <= 0)
				break;
			if (hold) {
				/* The slow member: its answer comes late (what is simulated). */
				struct timespec ts = { p->delay_ms / 1000,
						       (long)(p->delay_ms % 1000) * 1000000 };

				__atomic_add_fetch(&p->delayed, 1, __ATOMIC_RELAXED);
				nanosleep(&ts, NULL);
				hold = false;
			}
			answered = true;
			if (!send_all(c->cfd, buf, (size_t)n))
				break;
		}
	}
out:
	if (ufd >= 0)
		close(ufd);
	close(c->cfd);
	free(c);
	__atomic_sub_fetch(&p->conns, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct delay_proxy *p = arg;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd f = { .fd = p->lfd, .events = POLLIN };
		struct conn *c;
		pthread_t th;

		if (poll(&f, 1, 100) <= 0)
			continue;
		c = malloc(sizeof(*c));
		if (!c)
			continue;
		c->p = p;
		c->cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		__atomic_add_fetch(&p->conns, 1, __ATOMIC_ACQUIRE);
		if (c->cfd < 0 || pthread_create(&th, NULL, conn_main, c)) {
			if (c->cfd >= 0)
				close(c->cfd);
			free(c);
			__atomic_sub_fetch(&p->conns, 1, __ATOMIC_RELEASE);
			continue;
		}
		pthread_detach(th);
	}
	return NULL;
}

int delay_proxy_start(const char *upstream, const char *prefix, int delay_ms,
		      struct delay_proxy **p_p, char *self)
{
	struct delay_proxy *p = calloc(1, sizeof(*p));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	char host[64];
	unsigned port;

	if (!p)
		return -ENOMEM;
	if (sscanf(upstream, "%63[^:]:%u", host, &port) != 2 ||
	    inet_pton(AF_INET, host, &p->up.sin_addr) != 1) {
		free(p);
		return -EINVAL;
	}
	p->up.sin_family = AF_INET;
	p->up.sin_port = htons((uint16_t)port);
	pthread_mutex_init(&p->mu, NULL);
	snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
	p->delay_ms = delay_ms;
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(p->lfd, 64) ||
	    getsockname(p->lfd, (struct sockaddr *)&a, &len) ||
	    pthread_create(&p->th, NULL, accept_main, p)) {
		if (p->lfd >= 0)
			close(p->lfd);
		free(p);
		return -EIO;
	}
	snprintf(self, 32, "127.0.0.1:%u", ntohs(a.sin_port));
	*p_p = p;
	return 0;
}

void delay_proxy_hold(struct delay_proxy *p, const char *prefix)
{
	pthread_mutex_lock(&p->mu);
	snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
	pthread_mutex_unlock(&p->mu);
}

unsigned delay_proxy_delayed(struct delay_proxy *p)
{
	return __atomic_load_n(&p->delayed, __ATOMIC_RELAXED);
}

void delay_proxy_stop(struct delay_proxy *p)
{
	struct timespec ts = { 0, 10000000 };

	__atomic_store_n(&p->stop, true, __ATOMIC_RELEASE);
	pthread_join(p->th, NULL);
	close(p->lfd);
	/* Connections end when either side closes (30 s without traffic at most). */
	for (unsigned i = 0; i < 4000 && __atomic_load_n(&p->conns, __ATOMIC_ACQUIRE); i++)
		nanosleep(&ts, NULL);
	if (!__atomic_load_n(&p->conns, __ATOMIC_ACQUIRE))
		free(p); /* else left to the process's end: a thread may still use it */
}
