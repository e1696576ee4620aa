/*
 * Daemon mode, the daemon's side (docs/daemon.md): serve the node's clients on a context
 * that is this node's rank. One thread listens on the unix socket and watches every
 * client's socket (a hang-up is a client gone: its channels are closed and its locks
 * released); one worker thread per channel runs the calls, acting for its client
 * (ddss_lock_act_for), so the lock module tells the clients' holds apart.
 */
#ifndef DDSS_DAEMON_SERVER_H
#define DDSS_DAEMON_SERVER_H

#include "ddss/ddss.h"

#include <stdint.h>

struct ddss_server;

struct ddss_server_conf {
	const char *socket_path;
	uint32_t expected_clients; /* a barrier waits for this many clients; 0: those attached */
	int barrier_timeout_ms;    /* how long a client waits in a barrier for the others */
};

/* Listen at conf->socket_path (replacing a stale socket file) and serve @ctx's clients. */
int ddss_server_start(ddss_ctx_t *ctx, const struct ddss_server_conf *conf,
		      struct ddss_server **srv_p);

/*
 * Stop: no new clients; every client's channels are closed and its locks released. Waits
 * up to @timeout_ms for the workers to finish their calls; returns how many are still
 * busy (then the context must not be freed: they still use it).
 */
int ddss_server_stop(struct ddss_server *srv, int timeout_ms);

/* Clients attached now (for logs and tests). */
unsigned ddss_server_clients(struct ddss_server *srv);

#endif /* DDSS_DAEMON_SERVER_H */
