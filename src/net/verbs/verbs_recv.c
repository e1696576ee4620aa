/*
 * The receive side: messages and notifications arrive as SENDs on the served QPs, into
 * registered buffers posted to one shared receive queue (SRQ), or on a device without one
 * (irdma on E810; DDSS_VERBS_DISABLE=srq) to each served QP's own receive queue. The
 * receive thread takes them off the one receive CQ, hands them to the handlers and posts
 * each buffer again.
 *
 * Every buffer is accounted for exactly: recv_owner[i] says where buffer i is posted (the
 * SRQ, or a QP by number) or 0 when it is posted nowhere, and only the thread that moves it
 * from one to the other (compare&swap) posts or takes it. So a buffer whose completion is
 * flushed is reposted once, a stale completion of a destroyed QP cannot post a buffer
 * twice, and recv_posted (ddss_verbs_srq_posted) is exact. A QP that takes receives is
 * destroyed only once they are all handled (verbs_grave.c): a provider
 * such as libmlx5 discards the completions of a QP it destroys, and the buffers behind them
 * would be lost for good.
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define POLL_BATCH 16
/* recv_owner of a buffer in the SRQ (QP numbers have 24 bits). */
#define OWNER_SRQ 0x80000000u

unsigned ddss_verbs_srq_posted(struct ddss_tp *tp)
{
	return __atomic_load_n(&verbs_tp_of(tp)->recv_posted, __ATOMIC_ACQUIRE);
}

unsigned long ddss_verbs_teardown_stalls(struct ddss_tp *tp)
{
	return __atomic_load_n(&verbs_tp_of(tp)->teardown_stalls, __ATOMIC_RELAXED);
}

/* Without an SRQ: a buffer posted nowhere goes back on the free stack. */
static void free_push(struct verbs_tp *vt, uint32_t index)
{
	pthread_mutex_lock(&vt->recv_mu);
	vt->recv_free[vt->recv_nfree++] = index;
	pthread_mutex_unlock(&vt->recv_mu);
}

static bool free_pop(struct verbs_tp *vt, uint32_t *index_p)
{
	bool ok;

	pthread_mutex_lock(&vt->recv_mu);
	ok = vt->recv_nfree > 0;
	if (ok)
		*index_p = vt->recv_free[--vt->recv_nfree];
	pthread_mutex_unlock(&vt->recv_mu);
	return ok;
}

/* Post buffer @index (posted nowhere) to the SRQ (@qp NULL) or to @qp's receive queue. */
static int recv_post(struct verbs_tp *vt, uint32_t index, struct ibv_qp *qp)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(vt->recv_buf + (size_t)index * VERBS_RECV_LEN),
		.length = VERBS_RECV_LEN,
		.lkey = vt->recv_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = index, .sg_list = &sge, .num_sge = 1 }, *bad;
	uint32_t owner = qp ? qp->qp_num : OWNER_SRQ, expected = 0;
	int r;

	if (!__atomic_compare_exchange_n(&vt->recv_owner[index], &expected, owner, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		DDSS_ERR("verbs: receive buffer %u is already posted (to %#x); not posting it twice",
			 index, expected);
		return -EALREADY;
	}
	/* Counted before the post: its completion may be polled before ibv_post_* returns. */
	__atomic_add_fetch(&vt->recv_posted, 1, __ATOMIC_ACQ_REL);
	r = qp ? ibv_post_recv(qp, &wr, &bad) : ibv_post_srq_recv(vt->srq, &wr, &bad);
	if (r) {
		__atomic_sub_fetch(&vt->recv_posted, 1, __ATOMIC_ACQ_REL);
		__atomic_store_n(&vt->recv_owner[index], 0, __ATOMIC_RELEASE);
		DDSS_ERR("verbs: cannot post a receive: %s", strerror(r));
	}
	return -r;
}

int verbs_recv_fill_qp(struct verbs_tp *vt, struct ibv_qp *qp)
{
	unsigned n = 0;
	uint32_t index;
	int r = 0;

	if (vt->srq)
		return 0;
	while (n < vt->rq_depth && free_pop(vt, &index)) {
		r = recv_post(vt, index, qp);
		if (r) {
			free_push(vt, index);
			break;
		}
		n++;
	}
	if (n < vt->rq_depth)
		DDSS_WARN("verbs: only %u of %u receive buffers for a new connection (qp %u)", n,
			  vt->rq_depth, qp->qp_num);
	return n ? 0 : r ? r : -ENOBUFS;
}

unsigned verbs_recv_held_by(struct verbs_tp *vt, uint32_t qp_num)
{
	unsigned n = 0;

	if (vt->srq)
		return 0;
	for (uint32_t i = 0; i < vt->recv_count; i++)
		n += __atomic_load_n(&vt->recv_owner[i], __ATOMIC_ACQUIRE) == qp_num;
	return n;
}

void verbs_recv_reclaim(struct verbs_tp *vt, uint32_t qp_num)
{
	unsigned n = 0;

	if (vt->srq)
		return;
	for (uint32_t i = 0; i < vt->recv_count; i++) {
		uint32_t expected = qp_num;

		if (__atomic_compare_exchange_n(&vt->recv_owner[i], &expected, 0, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			__atomic_sub_fetch(&vt->recv_posted, 1, __ATOMIC_ACQ_REL);
			free_push(vt, i);
			n++;
		}
	}
	if (n)
		DDSS_WARN("verbs: %u receive buffers of qp %u never flushed; reclaimed", n, qp_num);
}

uint64_t verbs_recv_ask_pass(struct verbs_tp *vt)
{
	uint64_t one = 1, start;

	pthread_mutex_lock(&vt->recv_mu);
	start = vt->recv_epoch;
	pthread_mutex_unlock(&vt->recv_mu);
	/* A pass counts once it took a kick, and it polls only after taking it. */
	if (write(vt->recv_kick_fd, &one, sizeof(one)) != sizeof(one))
		DDSS_WARN("verbs: cannot ask the receive thread for a pass: %s", strerror(errno));
	return start;
}

bool verbs_recv_passed(struct verbs_tp *vt, uint64_t asked_at)
{
	bool done;

	pthread_mutex_lock(&vt->recv_mu);
	done = vt->recv_epoch != asked_at;
	pthread_mutex_unlock(&vt->recv_mu);
	return done;
}

int verbs_recv_open(struct verbs_tp *vt)
{
	struct ibv_device_attr da;
	bool use_srq;
	int r;

	vt->recv_kick_fd = -1;
	pthread_mutex_init(&vt->recv_mu, NULL);
	if (ibv_query_device(vt->ctx, &da))
		return -errno;
	use_srq = da.max_srq > 0 && da.max_srq_wr > 0 && !verbs_simulate_lack("srq");
	if (use_srq) {
		vt->recv_count = VERBS_RECV_COUNT;
		if ((unsigned)da.max_srq_wr < vt->recv_count)
			vt->recv_count = (unsigned)da.max_srq_wr;
		DDSS_INFO("verbs: receives on a shared receive queue of %u buffers", vt->recv_count);
	} else {
		/* Every rank (this one included) may serve a connection, and one more may be
		 * in teardown while its rank reconnects. */
		vt->rq_depth = VERBS_RQ_DEPTH;
		if ((unsigned)da.max_qp_wr < vt->rq_depth)
			vt->rq_depth = (unsigned)da.max_qp_wr;
		vt->recv_count = vt->rq_depth * (vt->base.cfg.size + 1);
		DDSS_INFO("verbs: %s has no shared receive queue%s: %u receive buffers per connection "
			  "(%u in all)", ibv_get_device_name(vt->ctx->device),
			  da.max_srq > 0 ? " (DDSS_VERBS_DISABLE=srq)" : "", vt->rq_depth,
			  vt->recv_count);
	}
	vt->recv_owner = calloc(vt->recv_count, sizeof(*vt->recv_owner));
	vt->recv_free = calloc(vt->recv_count, sizeof(*vt->recv_free));
	if (!vt->recv_owner || !vt->recv_free)
		return -ENOMEM;
	vt->recv_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (vt->recv_kick_fd < 0)
		return -errno;
	vt->rcq_ch = ibv_create_comp_channel(vt->ctx);
	if (!vt->rcq_ch)
		return -errno;
	/* The receive thread also wakes for kicks: reading the channel must not block then. */
	if (fcntl(vt->rcq_ch->fd, F_SETFL, fcntl(vt->rcq_ch->fd, F_GETFL) | O_NONBLOCK))
		return -errno;
	vt->rcq = ibv_create_cq(vt->ctx, (int)vt->recv_count, NULL, vt->rcq_ch, 0);
	if (!vt->rcq)
		return -errno;
	if (ibv_req_notify_cq(vt->rcq, 0))
		return -errno;
	if (use_srq) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = vt->recv_count, .max_sge = 1 } };

		vt->srq = ibv_create_srq(vt->pd, &sa);
		if (!vt->srq) {
			r = -errno;
			DDSS_ERR("verbs: cannot create a shared receive queue: %s", strerror(-r));
			return r;
		}
	}
	if (posix_memalign((void **)&vt->recv_buf, 4096, (size_t)vt->recv_count * VERBS_RECV_LEN))
		return -ENOMEM;
	vt->recv_mr = ibv_reg_mr(vt->pd, vt->recv_buf, (size_t)vt->recv_count * VERBS_RECV_LEN,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!vt->recv_mr)
		return -errno;
	for (uint32_t i = vt->recv_count; i-- > 0;) {
		if (!vt->srq) {
			vt->recv_free[vt->recv_nfree++] = i;
			continue;
		}
		r = recv_post(vt, i, NULL);
		if (r)
			return r;
	}
	return 0;
}

void verbs_recv_close(struct verbs_tp *vt)
{
	if (!vt->recv_owner && !vt->rcq_ch)
		return; /* never opened */
	if (vt->srq)
		ibv_destroy_srq(vt->srq);
	if (vt->recv_mr)
		ibv_dereg_mr(vt->recv_mr);
	free(vt->recv_buf);
	if (vt->rcq)
		ibv_destroy_cq(vt->rcq);
	if (vt->rcq_ch)
		ibv_destroy_comp_channel(vt->rcq_ch);
	if (vt->recv_kick_fd >= 0)
		close(vt->recv_kick_fd);
	free(vt->recv_owner);
	free(vt->recv_free);
	pthread_mutex_destroy(&vt->recv_mu);
}

/* Without an SRQ: the served QP @qp_num, if it is still its rank's current one. */
static struct ibv_qp *current_qp(struct verbs_tp *vt, uint32_t qp_num, uint32_t *rank_p)
{
	struct ibv_qp *qp = NULL;
	uint32_t rank = verbs_served_rank(vt, qp_num);

	if (rank) {
		pthread_mutex_lock(&vt->served_mu);
		if (vt->served_qpn[rank] == qp_num)
			qp = vt->served_qp[rank];
		pthread_mutex_unlock(&vt->served_mu);
	}
	*rank_p = qp ? rank : 0;
	return qp;
}

static void handle_recv_wc(struct verbs_tp *vt, const struct ibv_wc *wc)
{
	const struct ddss_tp_handlers *hd = &vt->base.cfg.handlers;
	uint32_t index = (uint32_t)wc->wr_id;
	const unsigned char *buf = vt->recv_buf + (size_t)index * VERBS_RECV_LEN;
	uint32_t expected = vt->srq ? OWNER_SRQ : wc->qp_num;
	struct ibv_qp *qp = NULL;
	uint32_t from, len;
	uint16_t tag;

	if (index >= vt->recv_count)
		return;
	/* Ours to take only if it is posted where this completion says (else stale). */
	if (!__atomic_compare_exchange_n(&vt->recv_owner[index], &expected, 0, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	__atomic_sub_fetch(&vt->recv_posted, 1, __ATOMIC_ACQ_REL);
	if (vt->srq) {
		from = verbs_served_rank(vt, wc->qp_num);
		if (!from) /* a liveness message, on our outgoing QP (verbs_liveness.c) */
			from = verbs_out_rank(vt, wc->qp_num);
	} else {
		qp = current_qp(vt, wc->qp_num, &from);
	}
	if (!from) /* taken before its QP left service: still its rank's (verbs_grave.c) */
		from = verbs_grave_rank(vt, wc->qp_num);
	if (wc->status != IBV_WC_SUCCESS) {
		/* Flushed: a QP went away, and its sender sees its own error. Anything else
		 * broke the QP here (an outgoing one with it, which no send error explains). */
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			DDSS_WARN("verbs: a receive on qp %u (rank %u) failed: %s", wc->qp_num, from,
				  ibv_wc_status_str(wc->status));
		goto repost;
	}
	if (!from) {
		DDSS_WARN("verbs: message on an unknown connection (qp %u) dropped", wc->qp_num);
		goto repost;
	}
	if (wc->wc_flags & IBV_WC_WITH_IMM) {
		if (wc->byte_len == 0 && hd->on_notify)
			hd->on_notify(hd->arg, from, be32toh(wc->imm_data));
		else if (wc->byte_len)
			DDSS_WARN("verbs: malformed notification from rank %u dropped", from);
	} else if (verbs_msg_hdr_decode(buf, wc->byte_len, &tag, &len) == 0) {
		if (hd->on_msg)
			hd->on_msg(hd->arg, from, tag, buf + VERBS_MSG_HDR_LEN, len);
	} else {
		DDSS_WARN("verbs: malformed message (%u bytes) from rank %u dropped", wc->byte_len,
			  from);
	}
repost:
	/* Without an SRQ, back to the QP it came from while that one lives; else kept free. */
	if (vt->srq)
		recv_post(vt, index, NULL);
	else if (!qp || wc->status != IBV_WC_SUCCESS || recv_post(vt, index, qp))
		free_push(vt, index);
}

void verbs_recv_poll(struct verbs_tp *vt)
{
	struct ibv_wc wc[POLL_BATCH];
	struct ibv_cq *cq;
	void *cq_ctx;
	uint64_t kicks;
	bool kicked;
	int n;

	/* A teardown's request (verbs_recv_ask_pass), taken before the CQ is polled empty. */
	kicked = read(vt->recv_kick_fd, &kicks, sizeof(kicks)) == sizeof(kicks);
	if (ibv_get_cq_event(vt->rcq_ch, &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1);
	/* Re-arm before draining, so nothing that arrives meanwhile goes unnoticed. */
	ibv_req_notify_cq(vt->rcq, 0);
	while ((n = ibv_poll_cq(vt->rcq, POLL_BATCH, wc)) > 0)
		for (int i = 0; i < n; i++)
			handle_recv_wc(vt, &wc[i]);
	if (kicked) {
		pthread_mutex_lock(&vt->recv_mu);
		vt->recv_epoch++;
		pthread_mutex_unlock(&vt->recv_mu);
	}
}
