/*
 * The raw TCP ceiling of ddss-peers-bench's throughput test: the least any request-reply
 * store over loopback TCP must do. One server thread (epoll, like redis-server) keeps one
 * value per connection; each client thread has its own connection and does a blocking
 * write + read per call, as a hiredis client does. No parsing, no lookup, no copy beyond
 * the socket's: whatever DDSS or Redis do on top costs more than this, so its ops/s bound
 * what either can reach with the same clients on the same CPUs.
 *
 * Wire: a request is an 8-byte header { op 'G' or 'S', 3 bytes 0, length (u32, host order) }
 * followed, for 'S', by the value; the reply is the value for 'G', one byte for 'S'.
 */
#ifndef DDSS_APPS_RAW_TCP_H
#define DDSS_APPS_RAW_TCP_H

#include <stddef.h>

#define RAW_TCP_MAX_VALUE 4096

struct raw_server;

/* Listen on 127.0.0.1 (a free port) and serve from a thread pinned to @cpu (-1: unpinned). */
int raw_server_start(int cpu, struct raw_server **srv_p);
/* Stop the thread, close every connection and free. */
void raw_server_stop(struct raw_server *srv);

/* A client connection to @srv (a socket, blocking, TCP_NODELAY); -errno on failure. */
int raw_connect(const struct raw_server *srv);
/* Store / fetch this connection's value of @len bytes (<= RAW_TCP_MAX_VALUE): 0 or -errno. */
int raw_set(int fd, const void *buf, size_t len);
int raw_get(int fd, void *buf, size_t len);

#endif /* DDSS_APPS_RAW_TCP_H */
