/*
 * The tcp transport: always built, usable wherever a TCP connection over loopback works
 * (ddssrun's ranks on one host talk over 127.0.0.1). Other hosts reach this one on its
 * other IPv4 addresses, listed for the DDSS_NODES of a multi-host group.
 */
#include "info.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connection to ourselves gets no further than the kernel: it answers at once or never. */
#define LOOPBACK_MS 1000

/* 0 if a TCP connection over 127.0.0.1 works; else -errno, and @what names the step. */
static int loopback_connect(const char **what)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int lfd, cfd = -1, afd = -1, r = 0;
	struct pollfd p;

	*what = "socket";
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl)) {
		*what = "bind/listen on 127.0.0.1";
		r = -errno;
		goto close_listen;
	}
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (cfd < 0) {
		r = -errno;
		goto close_listen;
	}
	*what = "connect to 127.0.0.1";
	if (connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) && errno != EINPROGRESS) {
		r = -errno;
		goto close_conn;
	}
	p = (struct pollfd){ .fd = lfd, .events = POLLIN };
	if (poll(&p, 1, LOOPBACK_MS) != 1) {
		r = -ETIMEDOUT;
		goto close_conn;
	}
	*what = "accept";
	afd = accept(lfd, NULL, NULL);
	if (afd < 0)
		r = -errno;
	else
		close(afd);
close_conn:
	close(cfd);
close_listen:
	close(lfd);
	return r;
}

bool info_tcp_print(void)
{
	char others[512];
	const char *what;
	int r = loopback_connect(&what);
	int n;

	if (r) {
		info_line("tcp:", "unusable: no loopback (%s: %s); ranks on this host cannot reach "
			  "each other", what, strerror(-r));
		return false;
	}
	n = info_ipv4_others(others, sizeof(others));
	info_line("tcp:", "usable (loopback connect works)");
	if (n)
		info_more("other hosts reach this one at %s", others);
	else
		info_more("no IPv4 address but loopback: a group on this host only");
	return true;
}
