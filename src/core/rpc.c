/*
 * Request/reply over tagged control messages (see rpc.h).
 *
 * Wire: request = [id : 32 | op : 16 | 0 : 16 | body], reply = [id : 32 | status : 32 | body],
 * little-endian. Waiting calls sit in a list under one mutex, each with its own condition
 * variable; the reply handler finds its call by id. A reply nobody waits for (late, after a
 * timeout) is dropped.
 */
#include "core/rpc.h"
#include "core/log.h"
#include "core/wire.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a waiting call looks at its peer's state (a dead peer sends no reply). */
#define RPC_CHECK_MS 50

struct rpc_call {
	struct rpc_call *next;
	uint32_t id;
	bool done;
	int status;
	void *reply;
	size_t reply_cap, reply_len;
	pthread_cond_t cv;
};

struct ddss_rpc {
	struct ddss_net *net;
	ddss_rpc_serve_fn serve;
	void *arg;
	pthread_mutex_t mu;
	struct rpc_call *calls; /* waiting, under mu */
	uint32_t next_id;       /* under mu */
	bool closed;
};

static void on_request(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_rpc *rpc = arg;
	const uint8_t *p = buf;

	if (len < DDSS_RPC_HDR) {
		DDSS_WARN("rpc: %zu-byte request from rank %u dropped", len, from);
		return;
	}
	rpc->serve(rpc->arg, from, wire_get32(p), (uint16_t)wire_get32(p + 4), p + DDSS_RPC_HDR,
		   len - DDSS_RPC_HDR);
}

static void on_reply(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_rpc *rpc = arg;
	const uint8_t *p = buf;
	struct rpc_call *c;
	uint32_t id;

	if (len < DDSS_RPC_HDR) {
		DDSS_WARN("rpc: %zu-byte reply from rank %u dropped", len, from);
		return;
	}
	id = wire_get32(p);
	len -= DDSS_RPC_HDR;
	pthread_mutex_lock(&rpc->mu);
	for (c = rpc->calls; c && c->id != id; c = c->next)
		;
	if (c && !c->done) {
		c->status = (int32_t)wire_get32(p + 4);
		/* A peer's status is input too: -errno, 0, or a small op-specific code. */
		if (c->status < -4095 || c->status > DDSS_RPC_CODE_MAX) {
			DDSS_WARN("rpc: reply status %d from rank %u", c->status, from);
			c->status = -EPROTO;
		}
		if (len > c->reply_cap) {
			DDSS_WARN("rpc: %zu-byte reply from rank %u for a %zu-byte buffer", len,
				  from, c->reply_cap);
			c->status = -EPROTO;
			len = 0;
		}
		if (len)
			memcpy(c->reply, p + DDSS_RPC_HDR, len);
		c->reply_len = len;
		c->done = true;
		pthread_cond_signal(&c->cv);
	}
	pthread_mutex_unlock(&rpc->mu);
}

int ddss_rpc_open(struct ddss_net *net, ddss_rpc_serve_fn serve, void *arg,
		  struct ddss_rpc **rpc_p)
{
	struct ddss_rpc *rpc = calloc(1, sizeof(*rpc));
	int r;

	if (!rpc)
		return -ENOMEM;
	rpc->net = net;
	rpc->serve = serve;
	rpc->arg = arg;
	pthread_mutex_init(&rpc->mu, NULL);
	r = ddss_net_on_msg(net, DDSS_MSG_RPC_REQ, on_request, rpc);
	if (!r)
		r = ddss_net_on_msg(net, DDSS_MSG_RPC_REP, on_reply, rpc);
	if (r) {
		pthread_mutex_destroy(&rpc->mu);
		free(rpc);
		return r;
	}
	*rpc_p = rpc;
	return 0;
}

void ddss_rpc_close(struct ddss_rpc *rpc)
{
	if (!rpc)
		return;
	pthread_mutex_lock(&rpc->mu);
	rpc->closed = true;
	for (struct rpc_call *c = rpc->calls; c; c = c->next) {
		c->status = -ESHUTDOWN;
		c->done = true;
		pthread_cond_signal(&c->cv);
	}
	/* Wait for the callers to take their calls off the list before freeing the mutex. */
	while (rpc->calls) {
		pthread_mutex_unlock(&rpc->mu);
		sched_yield();
		pthread_mutex_lock(&rpc->mu);
	}
	pthread_mutex_unlock(&rpc->mu);
	pthread_mutex_destroy(&rpc->mu);
	free(rpc);
}

static bool peer_down(struct ddss_rpc *rpc, uint32_t peer)
{
	struct ddss_tp_peer_info info;

	return ddss_tp_peer_info(ddss_net_tp(rpc->net), peer, &info) == 0 &&
	       info.state == DDSS_TP_PEER_DOWN;
}

static void unlink_call(struct ddss_rpc *rpc, struct rpc_call *c)
{
	struct rpc_call **pp = &rpc->calls;

	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
}

int ddss_rpc_call(struct ddss_rpc *rpc, uint32_t peer, uint16_t op, const void *body, size_t len,
		  void *reply, size_t reply_cap, size_t *reply_len_p, int timeout_ms)
{
	uint8_t msg[DDSS_TP_MSG_MAX];
	struct rpc_call c = { .reply = reply, .reply_cap = reply ? reply_cap : 0 };
	int64_t deadline;
	int r;

	if (len > DDSS_RPC_BODY_MAX)
		return -EMSGSIZE;
	if (timeout_ms < 0)
		timeout_ms = ddss_net_tp(rpc->net)->cfg.op_timeout_ms;
	deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c.cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&rpc->mu);
	if (rpc->closed) {
		pthread_mutex_unlock(&rpc->mu);
		pthread_cond_destroy(&c.cv);
		return -ESHUTDOWN;
	}
	c.id = ++rpc->next_id ? rpc->next_id : ++rpc->next_id;
	c.next = rpc->calls;
	rpc->calls = &c;
	pthread_mutex_unlock(&rpc->mu);

	wire_put32(msg, c.id);
	wire_put32(msg + 4, op);
	if (len)
		memcpy(msg + DDSS_RPC_HDR, body, len);
	r = ddss_net_send(rpc->net, peer, DDSS_MSG_RPC_REQ, msg, DDSS_RPC_HDR + len);

	pthread_mutex_lock(&rpc->mu);
	while (!r && !c.done) {
		int64_t now = ddss_now_ns(), until = now + RPC_CHECK_MS * 1000000ll;
		struct timespec ts;

		if (now >= deadline) {
			r = -ETIMEDOUT;
			ddss_tp_count_timeout(ddss_net_tp(rpc->net));
			break;
		}
		if (peer_down(rpc, peer)) {
			r = -EHOSTDOWN;
			break;
		}
		if (until > deadline)
			until = deadline;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (until - now) / 1000000000;
		ts.tv_nsec += (until - now) % 1000000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c.cv, &rpc->mu, &ts);
	}
	if (!r)
		r = c.status;
	unlink_call(rpc, &c);
	pthread_mutex_unlock(&rpc->mu);
	pthread_cond_destroy(&c.cv);
	if (r >= 0 && reply_len_p)
		*reply_len_p = c.reply_len;
	return r;
}

int ddss_rpc_reply(struct ddss_rpc *rpc, uint32_t to, uint32_t id, int status, const void *body,
		   size_t len)
{
	uint8_t msg[DDSS_TP_MSG_MAX];

	if (len > DDSS_RPC_BODY_MAX)
		return -EMSGSIZE;
	wire_put32(msg, id);
	wire_put32(msg + 4, (uint32_t)status);
	if (len)
		memcpy(msg + DDSS_RPC_HDR, body, len);
	return ddss_net_send(rpc->net, to, DDSS_MSG_RPC_REP, msg, DDSS_RPC_HDR + len);
}
