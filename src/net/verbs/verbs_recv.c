/*
 * The receive side: messages and notifications arrive as SENDs on the served QPs, into
 * one shared receive queue (SRQ) of registered buffers; the receive thread takes them off
 * the receive CQ, hands them to the handlers and posts each buffer again.
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define POLL_BATCH 16

int verbs_recv_open(struct verbs_tp *vt)
{
	struct ibv_device_attr da;

	if (ibv_query_device(vt->ctx, &da))
		return -errno;
	vt->rcq_ch = ibv_create_comp_channel(vt->ctx);
	if (!vt->rcq_ch)
		return -errno;
	vt->rcq = ibv_create_cq(vt->ctx, VERBS_RECV_COUNT, NULL, vt->rcq_ch, 0);
	if (!vt->rcq)
		return -errno;
	if (ibv_req_notify_cq(vt->rcq, 0))
		return -errno;

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = VERBS_RECV_COUNT, .max_sge = 1 } };

	if ((unsigned)da.max_srq_wr < VERBS_RECV_COUNT) {
		DDSS_ERR("verbs: device allows %d receives per SRQ, need %u", da.max_srq_wr,
			 VERBS_RECV_COUNT);
		return -ENOTSUP;
	}
	vt->srq = ibv_create_srq(vt->pd, &sa);
	if (!vt->srq)
		return -errno;
	if (posix_memalign((void **)&vt->recv_buf, 4096, (size_t)VERBS_RECV_COUNT * VERBS_RECV_LEN))
		return -ENOMEM;
	vt->recv_mr = ibv_reg_mr(vt->pd, vt->recv_buf, (size_t)VERBS_RECV_COUNT * VERBS_RECV_LEN,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!vt->recv_mr)
		return -errno;
	for (uint32_t i = 0; i < VERBS_RECV_COUNT; i++) {
		int r = verbs_recv_post(vt, i);

		if (r)
			return r;
	}
	return 0;
}

void verbs_recv_close(struct verbs_tp *vt)
{
	if (vt->srq)
		ibv_destroy_srq(vt->srq);
	if (vt->recv_mr)
		ibv_dereg_mr(vt->recv_mr);
	free(vt->recv_buf);
	if (vt->rcq)
		ibv_destroy_cq(vt->rcq);
	if (vt->rcq_ch)
		ibv_destroy_comp_channel(vt->rcq_ch);
}

int verbs_recv_post(struct verbs_tp *vt, uint32_t index)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(vt->recv_buf + (size_t)index * VERBS_RECV_LEN),
		.length = VERBS_RECV_LEN,
		.lkey = vt->recv_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = index, .sg_list = &sge, .num_sge = 1 }, *bad;
	int r = ibv_post_srq_recv(vt->srq, &wr, &bad);

	if (r)
		DDSS_ERR("verbs: cannot post a receive: %s", strerror(r));
	return -r;
}

static void handle_recv_wc(struct verbs_tp *vt, const struct ibv_wc *wc)
{
	const struct ddss_tp_handlers *hd = &vt->base.cfg.handlers;
	uint32_t index = (uint32_t)wc->wr_id;
	const unsigned char *buf = vt->recv_buf + (size_t)index * VERBS_RECV_LEN;
	uint32_t from, len;
	uint16_t tag;

	if (index >= VERBS_RECV_COUNT)
		return;
	if (wc->status != IBV_WC_SUCCESS)
		goto repost; /* a served QP went away; the sender sees its own error */
	from = verbs_served_rank(vt, wc->qp_num);
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
	verbs_recv_post(vt, index);
}

void verbs_recv_poll(struct verbs_tp *vt)
{
	struct ibv_wc wc[POLL_BATCH];
	struct ibv_cq *cq;
	void *cq_ctx;
	int n;

	if (ibv_get_cq_event(vt->rcq_ch, &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1);
	/* Re-arm before draining, so nothing that arrives meanwhile goes unnoticed. */
	ibv_req_notify_cq(vt->rcq, 0);
	while ((n = ibv_poll_cq(vt->rcq, POLL_BATCH, wc)) > 0)
		for (int i = 0; i < n; i++)
			handle_recv_wc(vt, &wc[i]);
}
