/*
 * Connections over rdma_cm: the listener (which also picks the device: the one that owns
 * this rank's address), outgoing connections made lazily by the first thread that needs a
 * peer, incoming ones accepted by the cm thread, and the two progress threads
 * (rdma_cm events; the receive CQ).
 *
 * Who does what. A thread that needs a peer starts address resolution and sleeps on the
 * connection's condition variable; the cm thread drives the rdma_cm steps (route,
 * QP, connect) and reports the outcome. Events are acknowledged as soon as they are read
 * (their private data copied first), so rdma_destroy_id never waits on the cm thread.
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"
#include "net/thread_files.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* A reconnect to a peer that was up (after a fabric error) waits at most this long. */
#define VERBS_RECONNECT_MS 3000

/* An rdma_cm event, copied so it can be acknowledged before it is handled. */
struct cm_event {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id;
	void *ctx;
	uint8_t initiator_depth;
	uint32_t qp_num;          /* connect request: the initiator's QP */
	unsigned char pdata[256];
	size_t pdata_len;
};

void verbs_peer_set_state(struct verbs_tp *vt, uint32_t rank, enum ddss_tp_peer_state s)
{
	ddss_tp_peer_changed(&vt->base, &vt->peers[rank].state, rank, s);
}

uint32_t verbs_served_rank(struct verbs_tp *vt, uint32_t qp_num)
{
	uint32_t rank = 0;

	/* Linear in the group size; fine for the groups we run (a hash when that changes). */
	pthread_mutex_lock(&vt->served_mu);
	for (uint32_t r = 1; r <= vt->base.cfg.size && !rank; r++)
		if (vt->served_qpn[r] == qp_num)
			rank = r;
	pthread_mutex_unlock(&vt->served_mu);
	return rank;
}

static bool out_refused(void *arg)
{
	struct verbs_out *o = arg;

	return ddss_tp_peer_refused(&o->tp->base, o->peer);
}

/*
 * @node's address with @port, looked up by @deadline_ns. With @o (its mu held), the peer's:
 * a refusal ends the lookup, and one given up on stays in o->lookup for the next attempt.
 */
static int node_addr(const struct ddss_tp_node *node, uint16_t port, int64_t deadline_ns,
		     struct verbs_out *o, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int r;

	r = ddss_resolve(node->host, port, &hints, deadline_ns, o ? out_refused : NULL, o,
			 o ? &o->lookup : NULL, &res);
	if (r) {
		if (r != -EHOSTDOWN)
			DDSS_ERR("verbs: cannot resolve '%s': %s", node->host, strerror(-r));
		return r;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

/*
 * What an initiator tells its target in the handshake: with an SRQ, its outgoing QP takes
 * receives like any other (from the SRQ), so the target may send it liveness messages.
 * Without one the QP has no receive buffers, and a SEND would meet RNR NAKs.
 */
static uint32_t takes_msgs(const struct verbs_tp *vt)
{
	/* DDSS_VERBS_LIVENESS=off: never (heartbeats then share the data QP, as before). */
	if (verbs_env_choice("DDSS_VERBS_LIVENESS", "on", "off") == 2)
		return 0;
	return vt->srq ? VERBS_HELLO_TAKES_MSGS : 0;
}

/* @flags: VERBS_HELLO_* (an initiator's; a target sends 0). The group id is the pair's
 * with @peer (ddss_tp_pair_group): an old incarnation cannot pass for the current one. */
static void local_hello(struct verbs_tp *vt, uint32_t peer, uint32_t flags,
			unsigned char out[VERBS_HELLO_LEN])
{
	struct verbs_hello h = {
		.flags = flags,
		.group = ddss_tp_pair_group(&vt->base, peer),
		.rank = vt->base.cfg.rank,
		.size = vt->base.cfg.size,
		.pool_addr = vt->pool ? (uintptr_t)vt->pool->mr->addr : 0,
		.pool_len = vt->pool ? vt->pool->mr->length : 0,
		.rkey = vt->pool ? vt->pool->mr->rkey : 0,
	};

	verbs_hello_encode(&h, out);
}

/* 0 if @h is a member of our group that may talk to us (as @expect_rank, if non-zero). */
static int check_hello(struct verbs_tp *vt, const struct verbs_hello *h, uint32_t expect_rank)
{
	if (h->group != ddss_tp_pair_group(&vt->base, h->rank) || h->size != vt->base.cfg.size)
		return -EPERM;
	if (h->rank < 1 || h->rank > vt->base.cfg.size || (expect_rank && h->rank != expect_rank))
		return -EPROTO;
	return 0;
}

/* ---- device and listener ---- */

/* DDSS_TRAFFIC_CLASS=N (0..255): the RoCE traffic class (DSCP << 2 | ECN) of our ids. */
static int traffic_class(struct verbs_tp *vt)
{
	const char *s = getenv("DDSS_TRAFFIC_CLASS");
	char *end;
	long v;

	vt->tos = -1;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || *end || end == s || v < 0 || v > 255) {
		DDSS_ERR("verbs: DDSS_TRAFFIC_CLASS=%s: want a traffic class from 0 to 255", s);
		return -EINVAL;
	}
	vt->tos = (int)v;
	DDSS_INFO("verbs: traffic class %ld (DSCP %ld)", v, v >> 2);
	return 0;
}

/* Set the traffic class (if one was asked for) of @id, before it resolves or listens. */
static int set_tos(struct verbs_tp *vt, struct rdma_cm_id *id)
{
	uint8_t tos = (uint8_t)vt->tos;
	int r;

	if (vt->tos < 0 || rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
					   sizeof(tos)) == 0)
		return 0;
	r = -errno;
	DDSS_ERR("verbs: cannot set traffic class %d: %s", vt->tos, strerror(-r));
	return r;
}

/* DDSS_DEVICE is "name" or "name:port"; the rank's address must be on that device/port. */
static int check_device(struct verbs_tp *vt)
{
	const char *want = vt->base.cfg.device;
	const char *have = ibv_get_device_name(vt->ctx->device);
	const char *colon;
	size_t n;

	if (!want || !*want)
		return 0;
	colon = strchr(want, ':');
	n = colon ? (size_t)(colon - want) : strlen(want);
	if (strlen(have) != n || strncmp(have, want, n) != 0 ||
	    (colon && strtoul(colon + 1, NULL, 10) != vt->listen_id->port_num)) {
		DDSS_ERR("verbs: rank %u's address %s is on %s port %u, not on DDSS_DEVICE=%s",
			 vt->base.cfg.rank, vt->base.nodes[vt->base.cfg.rank - 1].host, have,
			 vt->listen_id->port_num, want);
		return -ENODEV;
	}
	return 0;
}

int verbs_conn_open(struct verbs_tp *vt)
{
	const struct ddss_tp_node *me = &vt->base.nodes[vt->base.cfg.rank - 1];
	struct sockaddr_storage ss;
	int r;

	unsigned char rnd[DDSS_AUTH_NONCE_LEN];

	pthread_mutex_init(&vt->served_mu, NULL);
	pthread_mutex_init(&vt->ev_mu, NULL);
	vt->stop_fd = -1;
	if (vt->base.cfg.auth) {
		vt->replay = calloc(vt->base.cfg.size + 1, sizeof(*vt->replay));
		if (!vt->replay)
			return -ENOMEM;
		do {
			ddss_auth_nonce(rnd);
			memcpy(&vt->epoch, rnd, sizeof(vt->epoch));
		} while (!vt->epoch); /* 0 means "not known" on the wire */
	}
	r = traffic_class(vt);
	if (!r)
		r = verbs_slow_teardown_decide(vt);
	if (r)
		return r;
	/*
	 * Open every device now, on this thread: librdmacm otherwise opens a device the first
	 * time an id resolves to it, possibly on a helper thread whose file table is its own
	 * (net/thread_files.h), where the device's fd would mean nothing to other threads.
	 */
	vt->devices = rdma_get_devices(&vt->ndevices);
	if (!vt->devices)
		vt->ndevices = 0;
	vt->cm_ch = rdma_create_event_channel();
	if (!vt->cm_ch) {
		r = -errno;
		DDSS_ERR("verbs: rdma_cm is not available: %s", strerror(-r));
		return r;
	}
	if (fcntl(vt->cm_ch->fd, F_SETFL, fcntl(vt->cm_ch->fd, F_GETFL) | O_NONBLOCK))
		return -errno;
	vt->listen_kind = VERBS_CTX_LISTEN;
	if (rdma_create_id(vt->cm_ch, &vt->listen_id, &vt->listen_kind, RDMA_PS_TCP))
		return -errno;
	r = set_tos(vt, vt->listen_id); /* accepted ids inherit it */
	if (!r)
		r = node_addr(me, me->port, ddss_now_ns() +
			      (int64_t)vt->base.cfg.connect_timeout_ms * 1000000, NULL, &ss);
	if (r)
		return r;
	/* Our own address once, here: every connect binds to it (port 0), and none of them
	 * then looks it up with o->mu held. */
	vt->self_addr = ss;
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&vt->self_addr)->sin6_port = 0;
	else
		((struct sockaddr_in *)&vt->self_addr)->sin_port = 0;
	if (rdma_bind_addr(vt->listen_id, (struct sockaddr *)&ss)) {
		r = -errno;
		DDSS_ERR("verbs: cannot bind %s:%u: %s", me->host, me->port, strerror(-r));
		return r;
	}
	vt->ctx = vt->listen_id->verbs;
	if (!vt->ctx) {
		/* rdma_cm needs a netdev with an RDMA device; loopback (127.x) has none. */
		DDSS_ERR("verbs: no RDMA device owns address %s (rdma_cm does not work on lo)",
			 me->host);
		return -ENODEV;
	}
	r = check_device(vt);
	if (!r)
		r = verbs_grave_open(vt);
	if (r)
		return r;
	vt->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return vt->stop_fd < 0 ? -errno : 0;
}

/* ---- outgoing connections ---- */

/* An outgoing QP (@served false) receives nothing; a served one takes SENDs, on the SRQ or
 * (without one) on its own receive queue. */
static struct ibv_qp_init_attr qp_attr(struct verbs_tp *vt, unsigned send_wr, unsigned inl,
				       bool served)
{
	struct ibv_qp_init_attr a = {
		.send_cq = vt->scq,
		.recv_cq = vt->rcq,
		.srq = vt->srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = send_wr, .max_send_sge = 2, .max_inline_data = inl },
		.sq_sig_all = 1,
	};

	if (!vt->srq) {
		a.cap.max_recv_wr = served ? vt->rq_depth : 1;
		a.cap.max_recv_sge = 1;
	}
	return a;
}

/* Inline sizes asked for in turn: devices grant e.g. 256 (rxe), 220, 96 or 101, or none. */
static const unsigned inline_steps[] = { VERBS_INLINE_WANT, 220, 128, 96, 64, 32, 0 };

/* ---- group secret (net/auth.h) ---- */

static struct ddss_auth_transcript transcript(struct verbs_tp *vt, uint32_t initiator,
					      uint32_t target, const unsigned char *nonce_i,
					      const unsigned char *bind)
{
	uint32_t peer = initiator == vt->base.cfg.rank ? target : initiator;
	struct ddss_auth_transcript tr = { .group = ddss_tp_pair_group(&vt->base, peer),
					   .initiator = initiator, .target = target,
					   .size = vt->base.cfg.size };

	/* One message each way: the initiator's nonce is an authenticator, the target's
	 * "nonce" binds the request to the target's epoch and the initiator's QP. */
	memcpy(tr.nonce_i, nonce_i, sizeof(tr.nonce_i));
	memcpy(tr.nonce_t, bind, sizeof(tr.nonce_t));
	return tr;
}

/* Our connect request to o->peer: no pool information, an authenticator and its proof. */
static unsigned auth_request(struct verbs_out *o, unsigned char out[VERBS_AUTH_REQ_LEN])
{
	struct verbs_tp *vt = o->tp;
	struct verbs_auth_req a = { .group = ddss_tp_pair_group(&vt->base, o->peer),
				    .rank = vt->base.cfg.rank,
				    .flags = takes_msgs(vt) };
	unsigned char proof[DDSS_AUTH_PROOF_LEN];
	struct ddss_auth_transcript tr;

	/* Our own epoch we know; a peer's we learn from its first reject (-ESTALE). */
	a.epoch = o->peer == vt->base.cfg.rank ? vt->epoch : o->peer_epoch;
	ddss_auth_bind(a.epoch, o->id->route.addr.addr.ibaddr.sgid.raw, o->id->qp->qp_num,
		       o->auth_bind);
	ddss_auth_stamp(o->auth_nonce);
	tr = transcript(vt, vt->base.cfg.rank, o->peer, o->auth_nonce, o->auth_bind);
	ddss_auth_prove(vt->base.cfg.auth, DDSS_AUTH_INITIATOR, &tr, proof);
	memcpy(a.nonce, o->auth_nonce, sizeof(a.nonce));
	memcpy(a.proof, proof, sizeof(a.proof));
	verbs_auth_req_encode(&a, out);
	return VERBS_AUTH_REQ_LEN;
}

/* The accept of o->peer carries its proof after the hello: 0 or -EACCES. */
static int check_accept_proof(struct verbs_out *o, const struct cm_event *e)
{
	struct verbs_tp *vt = o->tp;
	struct ddss_auth_transcript tr = transcript(vt, vt->base.cfg.rank, o->peer, o->auth_nonce,
						    o->auth_bind);

	if (e->pdata_len < VERBS_AUTH_REP_LEN ||
	    ddss_auth_check(vt->base.cfg.auth, DDSS_AUTH_TARGET, &tr, e->pdata + VERBS_HELLO_LEN,
			    DDSS_AUTH_PROOF_LEN)) {
		DDSS_WARN("verbs: rank %u does not know the group secret: not talking to it",
			  o->peer);
		return -EACCES;
	}
	return 0;
}

/*
 * A connect request with a group secret configured: 0 and the sender in *h (no pool
 * information), or the -errno to reject it with (-ESTALE: not for our epoch). The proof
 * must be for our epoch and for the GID and QP the request came from; the authenticator
 * is remembered only once the proof holds (strangers cannot fill the replay cache), in
 * the cache of the rank it proves (one member cannot fill another's).
 */
static int check_auth_request(struct verbs_tp *vt, const struct cm_event *e, struct verbs_hello *h,
			      unsigned char nonce_i[DDSS_AUTH_NONCE_LEN],
			      unsigned char bind[DDSS_AUTH_NONCE_LEN])
{
	struct ddss_auth_replay **rp;
	struct ddss_auth_transcript tr;
	struct verbs_auth_req a;

	if (verbs_auth_req_decode(e->pdata, e->pdata_len, &a)) {
		if (verbs_hello_decode(e->pdata, e->pdata_len, h) == 0) {
			DDSS_WARN("verbs: refusing rank %u: it has no group secret and we do", h->rank);
			return -EACCES;
		}
		return -EPROTO;
	}
	*h = (struct verbs_hello){ .group = a.group, .rank = a.rank, .size = vt->base.cfg.size,
				   .flags = a.flags };
	if (h->group != ddss_tp_pair_group(&vt->base, h->rank) || h->rank < 1 ||
	    h->rank > vt->base.cfg.size)
		return -EPERM;
	if (a.epoch != vt->epoch)
		return -ESTALE; /* a first request, or one from before we started */
	ddss_auth_bind(vt->epoch, e->id->route.addr.addr.ibaddr.dgid.raw, e->qp_num, bind);
	tr = transcript(vt, a.rank, vt->base.cfg.rank, a.nonce, bind);
	if (ddss_auth_check(vt->base.cfg.auth, DDSS_AUTH_INITIATOR, &tr, a.proof, sizeof(a.proof))) {
		DDSS_WARN("verbs: refusing rank %u: it does not know the group secret, or the "
			  "request was made for another QP", a.rank);
		return -EACCES;
	}
	memcpy(nonce_i, a.nonce, DDSS_AUTH_NONCE_LEN);
	rp = &vt->replay[a.rank];
	if (!*rp) {
		*rp = malloc(sizeof(**rp));
		if (!*rp)
			return -ENOMEM;
		ddss_auth_replay_init(*rp);
	}
	return ddss_auth_replay_check(*rp, a.nonce);
}

/* cm thread, o->mu held: route resolved, so make the QP and send the request. */
static int out_connect(struct verbs_out *o)
{
	struct verbs_tp *vt = o->tp;
	struct ibv_qp_init_attr a;
	uint8_t ack_timeout = vt->ack_timeout;
	unsigned char hello[VERBS_AUTH_REQ_LEN > VERBS_HELLO_LEN ? VERBS_AUTH_REQ_LEN
								   : VERBS_HELLO_LEN];
	struct rdma_conn_param cp = {
		.private_data = hello,
		.private_data_len = VERBS_HELLO_LEN,
		.responder_resources = vt->rd_atom,
		.initiator_depth = vt->rd_atom,
		.retry_count = VERBS_TRANSPORT_RETRY,
		.rnr_retry_count = VERBS_RNR_RETRY,
	};
	size_t step = 0;

	if (o->id->verbs != vt->ctx) {
		DDSS_ERR("verbs: route to rank %u leaves through another device than %s", o->peer,
			 ibv_get_device_name(vt->ctx->device));
		return -ENODEV;
	}
	/* Devices refuse an inline size above theirs: ask for less, step by step. */
	for (;;) {
		a = qp_attr(vt, vt->sq_depth, inline_steps[step], false);
		if (rdma_create_qp(o->id, vt->pd, &a) == 0)
			break;
		if (++step == sizeof(inline_steps) / sizeof(inline_steps[0]))
			return -errno;
	}
	o->inline_max = a.cap.max_inline_data;
	/* A finite wait for each ACK (older kernels lack the option: their default stays). */
	if (rdma_set_option(o->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
			    sizeof(ack_timeout)))
		DDSS_DBG("verbs: cannot set the ACK timeout: %s", strerror(errno));
	pthread_mutex_lock(&o->sq_mu);
	__atomic_store_n(&o->qp, o->id->qp, __ATOMIC_RELEASE);
	__atomic_store_n(&o->qp_num, o->id->qp->qp_num, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&o->sq_mu);
	if (vt->base.cfg.auth)
		cp.private_data_len = auth_request(o, hello);
	else
		local_hello(vt, o->peer, takes_msgs(vt), hello);
	return rdma_connect(o->id, &cp) ? -errno : 0;
}

static void out_set_failed(struct verbs_out *o, int err, bool retriable)
{
	__atomic_store_n(&o->phase, VERBS_FAILED, __ATOMIC_RELEASE);
	o->conn_err = err;
	o->retriable = retriable;
}

/*
 * rdma_cm leaves the min RNR NAK timer at 0, which encodes 655 ms: every receive underrun
 * would stall the sender that long. Set on a QP that takes receives, once in RTS (where
 * the timer may still change).
 */
static void set_min_rnr_timer(struct ibv_qp *qp)
{
	struct ibv_qp_attr rnr = { .min_rnr_timer = VERBS_MIN_RNR_TIMER };
	static bool warned;

	if (ibv_modify_qp(qp, &rnr, IBV_QP_MIN_RNR_TIMER) && !__atomic_exchange_n(&warned, true,
										   __ATOMIC_RELAXED))
		DDSS_WARN("verbs: cannot set the min RNR timer: %s", strerror(errno));
}

/* cm thread: an event on an outgoing connection's id. */
static void out_event(struct verbs_tp *vt, struct verbs_out *o, const struct cm_event *e)
{
	struct verbs_hello h;
	int r;

	pthread_mutex_lock(&o->mu);
	if (o->id != e->id) /* from an attempt already given up */
		goto out;
	if (e->type == RDMA_CM_EVENT_DISCONNECTED || e->type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
		if (o->phase == VERBS_UP) {
			/* Said, as every other loss of a connection is: an operation fails for it. */
			DDSS_INFO("verbs: connection to rank %u: %s; reconnecting on next use",
				  o->peer, e->type == RDMA_CM_EVENT_DISCONNECTED ?
				  "closed by the peer" : "device removed");
			verbs_out_fail(o, e->type == RDMA_CM_EVENT_DISCONNECTED ? -ECONNRESET : -ENODEV);
		}
		goto out;
	}
	if (o->phase != VERBS_CONNECTING)
		goto out;
	switch (e->type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(o->id, VERBS_RESOLVE_MS))
			out_set_failed(o, -errno, true);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		r = out_connect(o);
		if (r)
			out_set_failed(o, r, r != -ENODEV);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		r = verbs_hello_decode(e->pdata, e->pdata_len, &h);
		if (!r)
			r = check_hello(vt, &h, o->peer);
		if (!r && vt->base.cfg.auth)
			r = check_accept_proof(o, e);
		if (r) {
			DDSS_ERR("verbs: rank %u answered with an invalid handshake", o->peer);
			out_set_failed(o, r, false);
			rdma_disconnect(o->id);
			break;
		}
		o->raddr = h.pool_addr;
		o->rkey = h.rkey;
		__atomic_store_n(&vt->peers[o->peer].pool_len, h.pool_len, __ATOMIC_RELEASE);
		__atomic_store_n(&o->fail, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&o->phase, VERBS_UP, __ATOMIC_RELEASE);
		__atomic_store_n(&o->ever_up, true, __ATOMIC_RELAXED);
		o->readmitted = false;
		o->took_msgs = takes_msgs(vt) != 0;
		if (o->took_msgs)
			set_min_rnr_timer(o->qp);
		__atomic_store_n(&o->up, 1, __ATOMIC_RELEASE);
		verbs_peer_set_state(vt, o->peer, DDSS_TP_PEER_UP);
		break;
	case RDMA_CM_EVENT_REJECTED: {
		uint64_t epoch;

		/* Our own reject carries a reason; anything else means nobody listens (yet). */
		r = verbs_reject_decode(e->pdata, e->pdata_len, &epoch);
		if (r == -ESTALE && epoch && vt->base.cfg.auth) {
			/* Asked for another (or no) epoch of the peer: it told us its own. */
			DDSS_DBG("verbs: rank %u runs epoch %016llx", o->peer,
				 (unsigned long long)epoch);
			o->peer_epoch = epoch;
		} else if (r) {
			DDSS_ERR("verbs: rank %u refused us: %s", o->peer, strerror(-r));
		}
		out_set_failed(o, r ? r : -ECONNREFUSED, r == 0);
		break;
	}
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		out_set_failed(o, -EHOSTUNREACH, true);
		break;
	default:
		break;
	}
out:
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
}

/*
 * Fail @o's current connection with @err (once: later errors keep the first). @down: the
 * peer is reported down, if it was up; a fabric error is not such news (see
 * verbs_out_wc_fail), and neither are a failed attempt or close.
 */
static void out_fail(struct verbs_out *o, int err, bool down)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int expected = 0;

	if (__atomic_compare_exchange_n(&o->fail, &expected, err, false, __ATOMIC_SEQ_CST,
					__ATOMIC_ACQUIRE)) {
		/* In the error state the QP flushes every outstanding WR: waiters get @err. */
		pthread_mutex_lock(&o->sq_mu);
		if (o->qp)
			ibv_modify_qp(o->qp, &a, IBV_QP_STATE);
		pthread_mutex_unlock(&o->sq_mu);
	}
	if (down && err != -ECANCELED && __atomic_exchange_n(&o->up, 0, __ATOMIC_ACQ_REL))
		verbs_peer_set_state(o->tp, o->peer, DDSS_TP_PEER_DOWN);
}

void verbs_out_fail(struct verbs_out *o, int err)
{
	out_fail(o, err, true);
}

void verbs_out_wc_fail(struct verbs_out *o, enum ibv_wc_status st, int err)
{
	/*
	 * Retries exhausted (a link flap, congestion, a receiver short of buffers) or flushed
	 * by something else that broke the QP: the connection is lost, not the peer. The next
	 * operation reconnects, and whether the peer lives is the peer timeout's call
	 * (net/heartbeat.c): the lock layer takes a rank that is down for dead.
	 */
	bool fabric = st == IBV_WC_RETRY_EXC_ERR || st == IBV_WC_RNR_RETRY_EXC_ERR ||
		      st == IBV_WC_WR_FLUSH_ERR;

	if (fabric && st != IBV_WC_WR_FLUSH_ERR) /* verbs_send_wc_slow logged the error */
		DDSS_INFO("verbs: rank %u is not reported down for it; reconnecting on next use",
			  o->peer);
	out_fail(o, err, !fabric);
}

void verbs_out_fail_all(struct verbs_tp *vt, int err)
{
	for (uint32_t r = 1; r <= vt->base.cfg.size; r++)
		out_fail(&vt->peers[r].out, err, false);
}

/*
 * o->mu held: free the previous attempt's QP and id, once nothing of it is outstanding.
 * @quiesce: a QP that took receives (liveness messages, from the SRQ) goes to the graves,
 * freed once the receive thread has handled them (verbs_grave.c), which may be this very
 * thread; false at close, when the receive thread has stopped.
 */
static void out_teardown(struct verbs_out *o, bool quiesce)
{
	struct ibv_qp *qp;

	if (!o->id)
		return;
	if (o->qp) {
		out_fail(o, -ECONNRESET, false);
		verbs_drain(o, 5000);
		if (quiesce)
			verbs_simulate_slow_teardown(o->tp);
	}
	/* fail is set and the queue is empty: no poster can still be using the QP (verbs_post). */
	pthread_mutex_lock(&o->sq_mu);
	qp = o->qp;
	__atomic_store_n(&o->qp, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&o->sq_mu);
	if (qp && quiesce && o->took_msgs) {
		verbs_grave_add(o->tp, o->id, o->peer); /* its late events: out_event ignores them */
	} else {
		if (qp)
			rdma_destroy_qp(o->id);
		rdma_destroy_id(o->id);
	}
	/* After the grave has it: a message it took is never without a rank. */
	__atomic_store_n(&o->qp_num, 0, __ATOMIC_RELEASE);
	o->took_msgs = false;
	o->id = NULL;
}

/*
 * o->mu held: begin an attempt (address resolution); the cm thread goes on. The peer's
 * name is looked up by @until (the caller's deadline or bound); a lookup that fails ends
 * the attempt, with its error, for every waiter.
 */
static int out_start(struct verbs_out *o, int64_t until)
{
	struct verbs_tp *vt = o->tp;
	struct sockaddr_storage src = vt->self_addr, dst;
	const struct ddss_tp_node *node = &vt->base.nodes[o->peer - 1];
	int r;

	r = node_addr(node, node->port, until, o, &dst);
	if (r) {
		out_set_failed(o, r, false);
		return r;
	}
	if (rdma_create_id(vt->cm_ch, &o->id, o, RDMA_PS_TCP))
		return -errno;
	r = set_tos(vt, o->id);
	if (r) {
		out_set_failed(o, r, false);
		return r;
	}
	__atomic_store_n(&o->fail, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&o->phase, VERBS_CONNECTING, __ATOMIC_RELEASE);
	/* Bind to our own address, so traffic leaves through our device. */
	if (rdma_resolve_addr(o->id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
			      VERBS_RESOLVE_MS)) {
		r = -errno;
		out_set_failed(o, r, true);
		return r;
	}
	return 0;
}

static void timed_wait(struct verbs_out *o, int64_t until_ns)
{
	struct timespec ts;
	int64_t now = ddss_now_ns(), ms = (until_ns - now + 999999) / 1000000; /* no spin */

	if (ms <= 0)
		return;
	if (ms > VERBS_WAIT_SLICE_MS)
		ms = VERBS_WAIT_SLICE_MS;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000;
	ts.tv_sec += ts.tv_nsec / 1000000000;
	ts.tv_nsec %= 1000000000;
	pthread_cond_timedwait(&o->cv, &o->mu, &ts);
}

/*
 * o->mu for verbs_out_connect. A thread with a connect bound of its own
 * (ddss_tp_set_thread_connect_bound: the daemon's lane, the stray-ask and reconnect threads)
 * reconnecting to a peer that was up waits about that long: at most that for the mutex,
 * then at most that for the connection, whether the attempt is its own or another
 * thread's, and leaves the attempt going for the others: *give_up_p is when it stops
 * waiting (INT64_MAX: no bound of its own). As tcp_chan.c's connect_lock and
 * known_bound_ns; before 2026-12-07 verbs ignored the bound, and the lane waited up to
 * twice VERBS_RECONNECT_MS with every lent channel stalled behind it.
 */
static int out_connect_lock(struct verbs_out *o, int64_t *give_up_p)
{
	int64_t bound_ns = (int64_t)ddss_tp_thread_connect_bound() * 1000000;
	struct timespec until;

	*give_up_p = INT64_MAX;
	if (bound_ns <= 0 || !__atomic_load_n(&o->ever_up, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&o->mu);
		return 0;
	}
	/* The wall clock, as in connect_lock (ThreadSanitizer and clocklock). */
	until = ddss_time_after(CLOCK_REALTIME, bound_ns);
	if (pthread_mutex_timedlock(&o->mu, &until))
		return -ETIMEDOUT;
	/* Readmitted meanwhile (verbs_peer_readmit): a first connect again, not cut. */
	if (o->ever_up)
		*give_up_p = ddss_now_ns() + bound_ns;
	return 0;
}

int verbs_out_connect(struct verbs_out *o)
{
	struct verbs_tp *vt = o->tp;
	int64_t deadline, budget_ns, give_up;
	bool attempted = false, cut = false;
	int r;

	if (ddss_tp_peer_refused(&vt->base, o->peer))
		return -EHOSTDOWN;
	/* Port down or device lost (verbs_async.c): fail at once, no attempt. */
	r = __atomic_load_n(&vt->port_err, __ATOMIC_ACQUIRE);
	if (r)
		return r;
	budget_ns = (int64_t)vt->base.cfg.connect_timeout_ms * 1000000;
	r = out_connect_lock(o, &give_up);
	if (r)
		return r;
	/* A peer that restarted tells us its new epoch; one that restarts again meanwhile
	 * as well: ask at most twice more. */
	o->stale = 2;
	/* A peer that was up is asked once, briefly: the caller may be the heartbeat thread. */
	if (o->ever_up && vt->base.cfg.connect_timeout_ms > VERBS_RECONNECT_MS)
		budget_ns = (int64_t)VERBS_RECONNECT_MS * 1000000;
	deadline = ddss_now_ns() + budget_ns;
	for (;;) {
		bool failed = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE) != 0;

		/* Declared dead while we wait for it (see tcp_chan.c): stop now. */
		if (ddss_tp_peer_refused(&vt->base, o->peer)) {
			r = -EHOSTDOWN;
			break;
		}
		if (o->phase == VERBS_UP && !failed) {
			r = 0;
			break;
		}
		if (o->phase == VERBS_CONNECTING) {
			int64_t now = ddss_now_ns(), until = deadline;

			/* The attempt has had its budget (its initiator's, who may have left: a
			 * bounded thread). Nothing said no: a waiter whose own time is not up
			 * retries if a peer that was never up may still be starting. */
			if (now >= o->attempt_deadline) {
				out_set_failed(o, -ETIMEDOUT, true);
				continue;
			}
			/* Whoever began it, this attempt is ours: its outcome is our answer, and
			 * no new attempt of ours gets a fresh budget after it. Until 2026-12-07 a
			 * thread that waited on another's attempt then made its own with a whole
			 * budget again: twice the bound at a frozen peer (tp_thread_bound_verbs). */
			attempted = true;
			/* Our own time is up: the attempt goes on for the others. */
			if (now >= deadline) {
				r = -ETIMEDOUT;
				break;
			}
			/* Our own bound is up: the attempt goes on without us. */
			if (now >= give_up) {
				r = -ETIMEDOUT;
				cut = true;
				break;
			}
			if (o->attempt_deadline < until)
				until = o->attempt_deadline;
			timed_wait(o, until < give_up ? until : give_up);
			continue;
		}
		if (o->phase == VERBS_UP) /* it was up and has been lost */
			out_set_failed(o, __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE), false);
		/*
		 * Refused for who we are (another group, another secret): that will not change,
		 * and asking again costs a connect request (whose reject can be lost, which
		 * costs the whole connect timeout).
		 */
		if (o->phase == VERBS_FAILED && (o->conn_err == -EACCES || o->conn_err == -EPERM)) {
			r = o->conn_err;
			break;
		}
		if (o->phase == VERBS_FAILED && attempted && o->conn_err == -ESTALE && o->stale > 0) {
			o->stale--; /* the reject told us the peer's epoch: ask again at once */
		} else if (o->phase == VERBS_FAILED && attempted) {
			/*
			 * A peer that was never up may just not have started: retry until the connect
			 * timeout. One that was up, or any once the group has formed, gets one
			 * attempt per call, so a dead peer fails fast.
			 */
			if (o->ever_up || (ddss_tp_formed(&vt->base) && !o->readmitted) ||
			    !o->retriable ||
			    ddss_now_ns() >= deadline) {
				r = o->conn_err;
				break;
			}
			unsigned seen = o->attempts;

			timed_wait(o, ddss_now_ns() + VERBS_RETRY_MS * 1000000ll);
			/* Another waiter began the next attempt meanwhile: it is ours too, ended or
			 * not (ending it here would cost it its answer, once per waiter). */
			if (o->attempts != seen || o->phase != VERBS_FAILED)
				continue;
			if (ddss_now_ns() >= deadline) {
				r = o->conn_err;
				break;
			}
		}
		out_teardown(o, true);
		/*
		 * The peer gets its whole budget to answer: taking the broken QP down can take
		 * seconds of it (its WRs drained; DDSS_VERBS_SLOW_TEARDOWN_MS in tests).
		 */
		if (!attempted)
			deadline = ddss_now_ns() + budget_ns;
		attempted = true;
		o->attempt_deadline = deadline;
		__atomic_add_fetch(&o->attempts, 1, __ATOMIC_RELEASE); /* read unlocked: chain */
		r = out_start(o, deadline < give_up ? deadline : give_up);
		if (r && !o->retriable)
			break;
	}
	/*
	 * The reconnect after a fabric error was answered, with a no: nobody listens there any
	 * more, or it refuses us. That is news of the peer; silence (unreachable, no answer in
	 * time) is not, and is left to the peer timeout.
	 */
	if (r && o->ever_up && !cut) /* a cut leaves the attempt going: no news yet */
		DDSS_INFO("verbs: reconnecting to rank %u failed: %s", o->peer, strerror(-r));
	if (r && o->ever_up && (r == -ECONNREFUSED || r == -EPERM || r == -EACCES || r == -EPROTO) &&
	    __atomic_exchange_n(&o->up, 0, __ATOMIC_ACQ_REL))
		verbs_peer_set_state(vt, o->peer, DDSS_TP_PEER_DOWN);
	pthread_mutex_unlock(&o->mu);
	return r;
}

/* ---- incoming connections (cm thread) ---- */

/*
 * cm thread (or close): @s leaves the list and service. @quiesce: its QP goes to the graves,
 * freed once its receives are handled (verbs_grave.c); false at close, when nothing polls.
 */
static void served_free(struct verbs_tp *vt, struct verbs_served *s, bool quiesce)
{
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct verbs_served **pp;
	bool graved = false;

	if (__atomic_load_n(&vt->closing, __ATOMIC_ACQUIRE))
		quiesce = false; /* a peer that left as we close: see verbs_close */
	/* Out of the list and out of service together: verbs_serve_cut misses no live QP. */
	pthread_mutex_lock(&vt->served_mu);
	for (pp = &vt->served; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	if (s->qp && quiesce && !s->retired)
		ibv_modify_qp(s->qp, &err, IBV_QP_STATE);
	if (s->id->qp && quiesce) {
		/* Its late events find no context; the grave knows its number from now on. */
		s->id->context = NULL;
		verbs_grave_add(vt, s->id, s->peer);
		graved = true;
	}
	if (s->peer && vt->served_qpn[s->peer] == s->qp_num) {
		vt->served_qpn[s->peer] = 0;
		vt->served_qp[s->peer] = NULL;
		verbs_liveness_set(vt, s->peer, false);
	}
	pthread_mutex_unlock(&vt->served_mu);
	if (!graved) {
		if (s->id->qp) /* at close the buffers go with the pool */
			rdma_destroy_qp(s->id);
		rdma_destroy_id(s->id);
	}
	free(s);
}

int verbs_serve_cut(struct verbs_tp *vt, uint32_t rank)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int r = 0;

	/* Every QP the rank has here, not only its newest: each one holds our rkey. */
	pthread_mutex_lock(&vt->served_mu);
	for (struct verbs_served *s = vt->served; s; s = s->next)
		if (s->peer == rank && s->qp && ibv_modify_qp(s->qp, &a, IBV_QP_STATE)) {
			r = -errno;
			DDSS_WARN("verbs: cannot cut rank %u off (qp %u): %s", rank, s->qp_num,
				  strerror(errno));
		}
	pthread_mutex_unlock(&vt->served_mu);
	return r;
}

/* cm thread: take @s out of service for good (a newer connection of its rank replaced it). */
static void served_retire(struct verbs_tp *vt, struct verbs_served *s)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	pthread_mutex_lock(&vt->served_mu);
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE))
		DDSS_WARN("verbs: cannot retire rank %u's qp %u: %s", s->peer, s->qp_num,
			  strerror(errno));
	s->retired = true;
	s->retire_ns = ddss_now_ns() + (int64_t)VERBS_RETIRE_MS * 1000000;
	pthread_mutex_unlock(&vt->served_mu);
}

/* cm thread: free the retired connections whose time is up; ms until the next one, or -1. */
static int served_reap(struct verbs_tp *vt)
{
	int64_t now = ddss_now_ns(), next = INT64_MAX;
	struct verbs_served *s, *n;

	for (s = vt->served; s; s = n) {
		n = s->next;
		if (!s->retired)
			continue;
		if (s->retire_ns <= now)
			served_free(vt, s, true);
		else if (s->retire_ns < next)
			next = s->retire_ns;
	}
	if (next == INT64_MAX)
		return -1;
	return (int)((next - now) / 1000000) + 1;
}

/* Reject a connect request; only -ESTALE's tells anything more: our epoch. */
static void reject(struct verbs_tp *vt, struct rdma_cm_id *id, int err)
{
	unsigned char why[VERBS_REJECT_LEN];

	verbs_reject_encode(err, err == -ESTALE ? vt->epoch : 0, why);
	rdma_reject(id, why, sizeof(why));
	rdma_destroy_id(id);
}

/* cm thread: connections @rank has here, retired ones included. */
static unsigned served_count(struct verbs_tp *vt, uint32_t rank)
{
	unsigned n = 0;

	for (struct verbs_served *s = vt->served; s; s = s->next)
		n += s->peer == rank;
	return n;
}

static void on_connect_request(struct verbs_tp *vt, const struct cm_event *e)
{
	struct ibv_qp_init_attr a;
	unsigned char hello[VERBS_AUTH_REP_LEN];
	unsigned char nonce_i[DDSS_AUTH_NONCE_LEN] = { 0 }, bind[DDSS_AUTH_NONCE_LEN] = { 0 };
	struct rdma_conn_param cp = {
		.private_data = hello,
		.private_data_len = VERBS_HELLO_LEN,
		.retry_count = VERBS_TRANSPORT_RETRY,
		.rnr_retry_count = VERBS_RNR_RETRY,
	};
	struct verbs_served *s, *t;
	struct verbs_hello h;
	bool refused;
	int r;

	if (vt->base.cfg.auth) {
		r = check_auth_request(vt, e, &h, nonce_i, bind);
	} else {
		r = verbs_hello_decode(e->pdata, e->pdata_len, &h);
		if (!r)
			r = check_hello(vt, &h, 0);
		else if (verbs_auth_req_decode(e->pdata, e->pdata_len,
					       &(struct verbs_auth_req){ 0 }) == 0)
			r = -EACCES; /* it has a group secret and we have none */
	}
	if (r == -ESTALE) { /* the usual first request: it learns our epoch */
		reject(vt, e->id, r);
		return;
	}
	if (!r && ddss_tp_peer_refused(&vt->base, h.rank)) {
		DDSS_WARN("verbs: refusing rank %u: it was declared dead", h.rank);
		r = -ECONNREFUSED;
	} else if (!r && served_count(vt, h.rank) >= VERBS_SERVED_PER_RANK) {
		DDSS_WARN("verbs: refusing rank %u: it has %u connections here already", h.rank,
			  VERBS_SERVED_PER_RANK);
		r = -EBUSY;
	} else if (r) {
		DDSS_WARN("verbs: refused a connection: %s", r == -EPERM ? "another group" :
			  r == -EACCES ? "group secret" : "bad handshake");
	}
	if (r) {
		ddss_tp_handshake_failed(&vt->base);
		reject(vt, e->id, r);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		reject(vt, e->id, -ENOMEM);
		return;
	}
	s->kind = VERBS_CTX_SERVED;
	s->id = e->id;
	s->peer = h.rank;
	e->id->context = s;
	/* Sends liveness messages if its initiator takes them, and the device lets it. */
	s->liveness = h.flags & VERBS_HELLO_TAKES_MSGS;
	a = qp_attr(vt, s->liveness ? VERBS_LIVENESS_SEND_WR : 1,
		    s->liveness ? VERBS_LIVENESS_INLINE : 0, true);
	if (s->liveness && rdma_create_qp(e->id, vt->pd, &a)) {
		DDSS_DBG("verbs: no QP with %u bytes inline for rank %u (%s): no liveness path",
			 VERBS_LIVENESS_INLINE, h.rank, strerror(errno));
		s->liveness = false;
		a = qp_attr(vt, 1, 0, true);
	}
	if (!e->id->qp && rdma_create_qp(e->id, vt->pd, &a)) {
		r = -errno;
		DDSS_ERR("verbs: cannot create a QP for rank %u: %s", h.rank, strerror(-r));
		free(s);
		reject(vt, e->id, r);
		return;
	}
	s->qp = e->id->qp;
	s->qp_num = e->id->qp->qp_num;
	/*
	 * The lane's sends wait for ACKs like ours do (rdma_cm's default on the passive side
	 * is the initiator's packet lifetime, about 1 s a try on RoCE): set before
	 * rdma_accept, which moves the QP to RTS with it.
	 */
	if (s->liveness && rdma_set_option(e->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
					   &vt->ack_timeout, sizeof(vt->ack_timeout)))
		DDSS_DBG("verbs: cannot set the ACK timeout of rank %u's QP: %s", h.rank,
			 strerror(errno));
	if (verbs_recv_fill_qp(vt, e->id->qp)) { /* without an SRQ: its own buffers */
		rdma_destroy_qp(e->id);
		verbs_recv_reclaim(vt, s->qp_num);
		free(s);
		reject(vt, e->id, -ENOBUFS);
		return;
	}
	/*
	 * Listed before the refusal is read again: a rank declared dead meanwhile is either
	 * seen refused here or has this QP cut by verbs_serve_cut (which takes the lock
	 * after setting the flag).
	 */
	pthread_mutex_lock(&vt->served_mu);
	s->next = vt->served;
	vt->served = s;
	refused = ddss_tp_peer_refused(&vt->base, h.rank);
	pthread_mutex_unlock(&vt->served_mu);
	if (refused) {
		unsigned char why[VERBS_REJECT_LEN];

		DDSS_WARN("verbs: refusing rank %u: it was declared dead", h.rank);
		verbs_reject_encode(-ECONNREFUSED, 0, why);
		rdma_reject(e->id, why, sizeof(why));
		served_free(vt, s, true);
		return;
	}
	/* Serve as many reads/atomics at once as the initiator will issue (device permitting). */
	cp.responder_resources = e->initiator_depth < vt->rd_atom ? e->initiator_depth : vt->rd_atom;
	cp.initiator_depth = vt->rd_atom;
	local_hello(vt, h.rank, 0, hello);
	if (vt->base.cfg.auth) {
		struct ddss_auth_transcript tr = transcript(vt, h.rank, vt->base.cfg.rank, nonce_i,
							    bind);

		ddss_auth_prove(vt->base.cfg.auth, DDSS_AUTH_TARGET, &tr, hello + VERBS_HELLO_LEN);
		cp.private_data_len = VERBS_AUTH_REP_LEN;
	}
	pthread_mutex_lock(&vt->served_mu);
	vt->served_qpn[h.rank] = s->qp_num;
	vt->served_qp[h.rank] = e->id->qp;
	verbs_liveness_set(vt, h.rank, false); /* until it is established */
	pthread_mutex_unlock(&vt->served_mu);
	if (!vt->base.cfg.auth) /* with a secret, learned on our own connection to it */
		__atomic_store_n(&vt->peers[h.rank].pool_len, h.pool_len, __ATOMIC_RELEASE);
	if (rdma_accept(e->id, &cp)) {
		DDSS_WARN("verbs: accepting rank %u failed: %s", h.rank, strerror(errno));
		served_free(vt, s, true);
		return;
	}
	/* Its older connections lose access now; they are destroyed when they close. */
	for (t = vt->served; t; t = t->next)
		if (t != s && t->peer == h.rank && !t->retired)
			served_retire(vt, t);
	set_min_rnr_timer(e->id->qp); /* in RTS now: rdma_accept moved it there */
}

static void served_event(struct verbs_tp *vt, struct verbs_served *s, const struct cm_event *e)
{
	switch (e->type) {
	case RDMA_CM_EVENT_ESTABLISHED:
		s->established = true;
		pthread_mutex_lock(&vt->served_mu);
		if (s->liveness && !s->retired && vt->served_qpn[s->peer] == s->qp_num)
			verbs_liveness_set(vt, s->peer, true);
		pthread_mutex_unlock(&vt->served_mu);
		if (!s->retired)
			verbs_peer_set_state(vt, s->peer, DDSS_TP_PEER_UP);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		/*
		 * Only the peer's current connection speaks for its state, and only while ours
		 * to it is not up: that one reports its own loss (the peer may have closed just
		 * its outgoing side).
		 */
		{
			uint32_t peer = s->peer;
			bool down = s->established && vt->served_qpn[peer] == s->qp_num &&
				    !__atomic_load_n(&vt->peers[peer].out.up, __ATOMIC_ACQUIRE);

			/* Unlinked first: whoever reads the peer down then finds no served QP
			 * of it either (ddss_tp_peer_info's served). */
			served_free(vt, s, true);
			if (down)
				verbs_peer_set_state(vt, peer, DDSS_TP_PEER_DOWN);
		}
		break;
	default:
		break;
	}
}

static void handle_cm_events(struct verbs_tp *vt)
{
	struct rdma_cm_event *ev;
	struct cm_event e;

	while (rdma_get_cm_event(vt->cm_ch, &ev) == 0) {
		memset(&e, 0, sizeof(e));
		e.type = ev->event;
		e.status = ev->status;
		e.id = ev->id;
		e.ctx = ev->id->context;
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			e.pdata_len = ev->param.conn.private_data_len;
			if (e.pdata_len > sizeof(e.pdata))
				e.pdata_len = sizeof(e.pdata);
			memcpy(e.pdata, ev->param.conn.private_data, e.pdata_len);
		}
		e.initiator_depth = ev->param.conn.initiator_depth;
		if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST)
			e.qp_num = ev->param.conn.qp_num;
		rdma_ack_cm_event(ev);

		if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST)
			on_connect_request(vt, &e);
		else if (e.ctx && *(enum verbs_ctx_kind *)e.ctx == VERBS_CTX_OUT)
			out_event(vt, (struct verbs_out *)e.ctx, &e);
		else if (e.ctx && *(enum verbs_ctx_kind *)e.ctx == VERBS_CTX_SERVED)
			served_event(vt, (struct verbs_served *)e.ctx, &e);
	}
}

/*
 * Two threads, so that a message handler (on the receive thread) may connect to a peer:
 * the connection's rdma_cm steps run on the cm thread meanwhile. The cm thread also reads
 * the device's asynchronous events (verbs_async.c).
 */
static void *cm_main(void *arg)
{
	struct verbs_tp *vt = arg;
	struct pollfd pfd[4] = {
		{ .fd = vt->stop_fd, .events = POLLIN },
		{ .fd = vt->cm_ch->fd, .events = POLLIN },
		{ .fd = vt->ctx->async_fd, .events = POLLIN },
		{ .fd = vt->grave_fd, .events = POLLIN }, /* a QP to free (verbs_grave.c) */
	};
	int wait_ms = -1, grave_ms;

	ddss_log_set_rank(vt->base.cfg.rank);
	ddss_tp_thread_files(&vt->base);
	for (;;) {
		if (poll(pfd, 4, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents)
			break;
		if (pfd[2].revents)
			verbs_async_handle(vt);
		if (pfd[1].revents)
			handle_cm_events(vt);
		wait_ms = served_reap(vt);
		grave_ms = verbs_grave_reap(vt); /* after: served_reap may add graves */
		if (grave_ms >= 0 && (wait_ms < 0 || grave_ms < wait_ms))
			wait_ms = grave_ms;
	}
	return NULL;
}

static void *recv_main(void *arg)
{
	struct verbs_tp *vt = arg;
	struct pollfd pfd[3] = {
		{ .fd = vt->stop_fd, .events = POLLIN },
		{ .fd = vt->rcq_ch->fd, .events = POLLIN },
		{ .fd = vt->recv_kick_fd, .events = POLLIN }, /* a teardown asks for a pass */
	};

	ddss_log_set_rank(vt->base.cfg.rank);
	ddss_tp_thread_files(&vt->base);
	for (;;) {
		if (poll(pfd, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[0].revents)
			break;
		verbs_recv_poll(vt);
	}
	return NULL;
}

/*
 * What our calls on helper threads touch: the rdma_cm channel, the completion channels,
 * the stop eventfd, and every device's command and async fds (posting, registering and
 * creating QPs all write to the command fd; rxe rings its doorbell there).
 */
int verbs_thread_fds(struct ddss_tp *tp, int *fds, size_t max)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	size_t n = 0;

#define KEEP(fd) do { if (n == max) return -E2BIG; fds[n++] = (fd); } while (0)
	KEEP(vt->stop_fd);
	KEEP(vt->cm_ch->fd);
	KEEP(vt->rcq_ch->fd);
	KEEP(vt->recv_kick_fd);
	KEEP(vt->grave_fd);
	if (vt->scq_ch)
		KEEP(vt->scq_ch->fd);
	KEEP(vt->ctx->cmd_fd);
	KEEP(vt->ctx->async_fd);
	for (int i = 0; i < vt->ndevices; i++) {
		KEEP(vt->devices[i]->cmd_fd);
		KEEP(vt->devices[i]->async_fd);
	}
#undef KEEP
	return (int)n;
}

int verbs_conn_start(struct verbs_tp *vt)
{
	int r;

	if (rdma_listen(vt->listen_id, 64)) {
		r = -errno;
		DDSS_ERR("verbs: cannot listen: %s", strerror(-r));
		return r;
	}
	r = verbs_async_open(vt);
	if (r)
		return r;
	r = -pthread_create(&vt->cm_thread, NULL, cm_main, vt);
	if (r)
		return r;
	vt->cm_thread_running = true;
	r = -pthread_create(&vt->recv_thread, NULL, recv_main, vt);
	if (r) {
		verbs_conn_stop(vt); /* stops the cm thread */
		return r;
	}
	vt->started = true;
	return 0;
}

void verbs_conn_stop(struct verbs_tp *vt)
{
	uint64_t one = 1;

	if (!vt->cm_thread_running && !vt->started)
		return;
	/* The eventfd stays readable, so both threads see it. */
	if (write(vt->stop_fd, &one, sizeof(one)) != sizeof(one))
		DDSS_WARN("verbs: cannot wake the progress threads");
	pthread_join(vt->cm_thread, NULL);
	if (vt->started)
		pthread_join(vt->recv_thread, NULL);
	vt->started = false;
	vt->cm_thread_running = false;
}

void verbs_conn_close(struct verbs_tp *vt)
{
	uint32_t size = vt->base.cfg.size;

	/*
	 * Incoming side first: no new connections, and peers' connections to us break before
	 * ours to them, so a peer that sees us go cannot reach us through a half-closed pair.
	 */
	if (vt->listen_id)
		rdma_destroy_id(vt->listen_id);
	vt->listen_id = NULL;
	while (vt->served)
		served_free(vt, vt->served, false); /* the SRQ and its buffers go next */
	/* Then flush every outgoing QP, wait for the flushes, and free. */
	for (uint32_t r = 1; r <= size; r++)
		verbs_out_fail(&vt->peers[r].out, -ECANCELED);
	for (uint32_t r = 1; r <= size; r++) {
		struct verbs_out *o = &vt->peers[r].out;

		pthread_mutex_lock(&o->mu);
		if (o->id)
			rdma_disconnect(o->id);
		out_teardown(o, false);
		pthread_mutex_unlock(&o->mu);
	}
	verbs_grave_close(vt); /* before the id's channel, and the SRQ and CQ they use */
	if (vt->cm_ch)
		rdma_destroy_event_channel(vt->cm_ch);
	if (vt->stop_fd >= 0)
		close(vt->stop_fd);
	if (vt->devices)
		rdma_free_devices(vt->devices);
	vt->devices = NULL;
	pthread_mutex_destroy(&vt->served_mu);
	pthread_mutex_destroy(&vt->ev_mu);
	for (uint32_t r = 0; vt->replay && r <= size; r++)
		if (vt->replay[r]) {
			ddss_auth_replay_destroy(vt->replay[r]);
			free(vt->replay[r]);
		}
	free(vt->replay);
	vt->replay = NULL;
}
