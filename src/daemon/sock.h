/*
 * Daemon mode: one message over the client <-> daemon unix socket (SOCK_SEQPACKET), with
 * at most one file descriptor riding along (SCM_RIGHTS).
 */
#ifndef DDSS_DAEMON_SOCK_H
#define DDSS_DAEMON_SOCK_H

#include <stddef.h>

/* Send @len bytes of @m, and @fd unless it is < 0. 0, -EPIPE (peer gone), -errno. */
int ddss_sock_send(int s, const void *m, size_t len, int fd);

/*
 * Receive one message of exactly @len bytes into @m, waiting up to @timeout_ms (< 0: no
 * limit). A descriptor that came with it goes to *@fd_p (-1 if none), or is closed when
 * @fd_p is NULL. 0, -ECONNRESET (peer hung up), -EPROTO (wrong size), -ETIMEDOUT, -errno.
 */
int ddss_sock_recv(int s, void *m, size_t len, int *fd_p, int timeout_ms);

#endif /* DDSS_DAEMON_SOCK_H */
