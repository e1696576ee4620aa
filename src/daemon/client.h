/*
 * Daemon mode, the client's side (docs/daemon.md): a process attached to its node's ddssd.
 * The public calls of a context in daemon mode forward here (client_api.c); each call
 * borrows one of the client's channels for its duration, so any number of threads may
 * call at once, each with its own channel and its own worker thread in the daemon.
 */
#ifndef DDSS_DAEMON_CLIENT_H
#define DDSS_DAEMON_CLIENT_H

#include "daemon/proto.h"

#include <stddef.h>
#include <stdint.h>

struct ddss_client;

/* DDSS_DAEMON_STALL_MS's default: a daemon that has not run for 10 s is given up. */
#define DDSS_DAEMON_STALL_MS_DEFAULT 10000

/*
 * Attach to the daemon listening at @path, waiting up to @timeout_ms for it to answer.
 * -ENOENT / -ECONNREFUSED (no daemon there), -EPROTO (another build), -ETIMEDOUT, -ENOMEM.
 */
int ddss_client_attach(const char *path, int timeout_ms, struct ddss_client **cl_p);
/* Detach: the daemon releases whatever locks this client still holds. */
void ddss_client_detach(struct ddss_client *cl);

uint32_t ddss_client_rank(const struct ddss_client *cl);
uint32_t ddss_client_size(const struct ddss_client *cl);

/* The daemon's pool mapped for local reads (daemon/local.h), or NULL. */
struct ddss_local *ddss_client_local(const struct ddss_client *cl);

/*
 * One call: send @req (its data_off is set here), with @put_len bytes of @put_data as the
 * payload, and wait for the answer in @resp. A GET's answer payload (req->len bytes) is
 * copied to @get_buf when the call succeeded. Returns the transport's error (-ENOTCONN
 * once the daemon is gone, -ETIMEDOUT for the call that found it frozen for
 * DDSS_DAEMON_STALL_MS, and gave it up, -ENOMEM), else resp->rc.
 */
int ddss_client_call(struct ddss_client *cl, struct dmsg_req *req, const void *put_data,
		     size_t put_len, void *get_buf, struct dmsg_resp *resp);

#endif /* DDSS_DAEMON_CLIENT_H */
