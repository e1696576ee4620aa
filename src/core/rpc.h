/*
 * Request/reply control messages on top of the net layer's tagged messages: what the
 * segment service (allocate, look up, release, names) runs on. Data never goes this way.
 *
 * A call blocks the calling (application) thread until the reply, the peer going down
 * (-EHOSTDOWN) or the timeout (-ETIMEDOUT). The serving side's handler runs on the
 * transport's progress thread and must not block: it answers with ddss_rpc_reply(), at
 * once or later from any thread.
 */
#ifndef DDSS_CORE_RPC_H
#define DDSS_CORE_RPC_H

#include "net/net.h"

#include <stddef.h>
#include <stdint.h>

#define DDSS_RPC_HDR 8u
#define DDSS_RPC_BODY_MAX (DDSS_TP_MSG_MAX - DDSS_RPC_HDR)
/* Reply statuses: -4095..-1 (errors), 0, or 1..DDSS_RPC_CODE_MAX (codes an op defines);
 * anything else arrives as -EPROTO. */
#define DDSS_RPC_CODE_MAX 255

struct ddss_rpc;

/* A request @id with operation @op from @from; @body is valid only during the call. */
typedef void (*ddss_rpc_serve_fn)(void *arg, uint32_t from, uint32_t id, uint16_t op,
				  const uint8_t *body, size_t len);

/** Attach to @net (before ddss_net_start) and serve requests with @serve. */
int ddss_rpc_open(struct ddss_net *net, ddss_rpc_serve_fn serve, void *arg,
		  struct ddss_rpc **rpc_p);
/** Free (after ddss_net_close: no handler runs any more). Calls still waiting get -ESHUTDOWN. */
void ddss_rpc_close(struct ddss_rpc *rpc);

/**
 * Send request @op to @peer and wait for its reply. The reply body (at most @reply_cap
 * bytes; a longer one gives -EPROTO) goes to @reply, its length to *reply_len_p (may be
 * NULL). @timeout_ms < 0: the operation timeout. Returns the server's status (0, a
 * positive value the operation defines, or -errno), or -EHOSTDOWN, -ETIMEDOUT,
 * -EMSGSIZE, or the transport's error.
 */
int ddss_rpc_call(struct ddss_rpc *rpc, uint32_t peer, uint16_t op, const void *body, size_t len,
		  void *reply, size_t reply_cap, size_t *reply_len_p, int timeout_ms);

/** Answer request @id from @to with @status and @body. Any thread. */
int ddss_rpc_reply(struct ddss_rpc *rpc, uint32_t to, uint32_t id, int status, const void *body,
		   size_t len);

#endif /* DDSS_CORE_RPC_H */
