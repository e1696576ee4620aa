/* Daemon mode: messages over the unix socket (sock.h). */
#include "daemon/sock.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int ddss_sock_send(int s, const void *m, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = (void *)m, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	do
		n = sendmsg(s, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -EPIPE : -errno;
	return (size_t)n == len ? 0 : -EPROTO;
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Room for a few descriptors: any beyond one are closed, none may stay open unseen. */
#define RECV_FDS_MAX 8

int ddss_sock_recv(int s, void *m, size_t len, int *fd_p, int timeout_ms)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(RECV_FDS_MAX * sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = m, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct pollfd p = { .fd = s, .events = POLLIN };
	int fd = -1, nfds = 0, r;
	ssize_t n;

	if (fd_p)
		*fd_p = -1;
	/* A signal resumes the wait with what is left of it, not all of it again. */
	for (int64_t until = now_ms() + timeout_ms;;) {
		int64_t left = until - now_ms();

		r = poll(&p, 1, timeout_ms < 0 ? -1 : left > 0 ? (int)left : 0);
		if (r >= 0 || errno != EINTR)
			break;
	}
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	do
		n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EPIPE ? -ECONNRESET : -errno;
	/* Take every descriptor that arrived (a peer may send several, in several records);
	 * keep one only if exactly one came. (The kernel closes those the buffer had no room
	 * for, and sets MSG_CTRUNC.) */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int got;

			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds++ == 0)
				fd = got;
			else
				close(got);
		}
	}
	if (nfds > 1 || (msg.msg_flags & MSG_CTRUNC)) {
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	if (n == 0) {
		if (fd >= 0)
			close(fd);
		return -ECONNRESET;
	}
	if ((size_t)n != len || (msg.msg_flags & MSG_TRUNC)) {
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	if (fd_p)
		*fd_p = fd;
	else if (fd >= 0)
		close(fd);
	return 0;
}
