/*
 * Daemon mode: running one client call in the daemon (serve_ops.c), and what the calls
 * need from the server (server.c).
 */
#ifndef DDSS_DAEMON_SERVE_H
#define DDSS_DAEMON_SERVE_H

#include "daemon/chan.h"
#include "daemon/proto.h"
#include "daemon/server.h"

struct ddss_seg_desc;

/*
 * Run request @q (already copied out of shared memory) on @ctx with @chan's data area as
 * the payload, answering in @a. Everything in @q is checked here as a direct call's
 * arguments would be; a range outside the data area is -EINVAL.
 */
void ddss_serve_call(struct ddss_server *srv, ddss_ctx_t *ctx, struct ddss_chan *chan,
		     const struct dmsg_req *q, struct dmsg_resp *a);

/* GET with want_desc: where @d lies in this rank's pool, if the client may read it there. */
void ddss_serve_describe(ddss_ctx_t *ctx, const struct ddss_seg_desc *d, struct dmsg_resp *a);

/* The calls the server's fast lane answered (0 without one). */
uint64_t ddss_server_lane_calls(struct ddss_server *srv);

/* A barrier over every client of every daemon (server.c). */
int ddss_server_barrier(struct ddss_server *srv);

/* BENCH: which call the daemon times itself (ddss-daemon-bench). */
enum dbench_what {
	DBENCH_GET = 1, /* ddss_get of 1 byte */
	DBENCH_PUT,     /* ddss_put of 1 byte */
	DBENCH_LOCK,    /* exclusive acquire + release */
	DBENCH_STAT,    /* ddss_stat_ss of a cached key: no I/O, the call's own cost */
};

#endif /* DDSS_DAEMON_SERVE_H */
