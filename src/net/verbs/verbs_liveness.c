/*
 * The liveness path: a message that bulk data to a peer cannot hold up (the heartbeat).
 *
 * Why: every other message to a peer goes on our outgoing QP to it, behind whatever READs
 * and WRITEs we posted there. A transfer that takes a good part of the peer timeout (a
 * multi-GiB put on a slow link; 4 MiB on a lossy rxe link, where go-back-N took seconds)
 * would hold our heartbeats back, and the peer would declare us dead though we are fine
 * (docs/failure.md, "Fabric faults", item 10).
 *
 * How: the QP a peer connected to us (served) carries its requests to us; its own send
 * queue is empty. A liveness message goes there, as one inline SEND, in the other
 * direction, and arrives on the peer's outgoing QP, which takes receives from the SRQ like
 * every QP of this provider. The peer says in its handshake that it takes them
 * (VERBS_HELLO_TAKES_MSGS: it has an SRQ; without one a SEND would meet RNR NAKs, and an
 * RNR retry-exceeded breaks the whole QP). Only messages that need no order with the
 * others go this way; when the path is missing (no such QP yet, the peer has no SRQ, the
 * device gives no inline room) or busy (VERBS_LIVENESS_SEND_WR in flight), the caller
 * takes the usual one (ddss_tp_msg_send_unordered).
 *
 * The peer's end: the receive thread finds the rank of such a message by its outgoing QP
 * (verbs_out_rank), a connection it opened and authenticated itself.
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <string.h>

void verbs_liveness_set(struct verbs_tp *vt, uint32_t rank, bool on)
{
	vt->served_liveness[rank] = on;
	/* A new QP starts with nothing in flight. */
	if (on)
		__atomic_store_n(&vt->liveness_inflight[rank], 0, __ATOMIC_RELEASE);
}

int verbs_liveness_send(struct verbs_tp *vt, uint32_t peer, uint16_t tag, const void *buf,
			size_t len)
{
	unsigned char hdr[VERBS_MSG_HDR_LEN];
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)hdr, .length = VERBS_MSG_HDR_LEN },
		{ .addr = (uintptr_t)buf, .length = (uint32_t)len },
	};
	struct ibv_send_wr wr = {
		.wr_id = verbs_wrid_liveness(peer),
		.sg_list = sge,
		.num_sge = len ? 2 : 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_INLINE,
	}, *bad;
	int r = -EAGAIN;

	if (VERBS_MSG_HDR_LEN + len > VERBS_LIVENESS_INLINE)
		return -EAGAIN;
	verbs_msg_hdr_encode(tag, (uint32_t)len, hdr);
	/* The lane's completions are counted when the send CQ is polled, which only posters
	 * waiting for their own do: a quiet rank would find its lane full for good. */
	verbs_progress(vt);
	/* Under served_mu: the QP cannot be destroyed meanwhile (served_free). */
	pthread_mutex_lock(&vt->served_mu);
	if (vt->served_liveness[peer] && vt->served_qp[peer]) {
		if (__atomic_add_fetch(&vt->liveness_inflight[peer], 1, __ATOMIC_ACQ_REL) <=
			    (int)VERBS_LIVENESS_SEND_WR &&
		    ibv_post_send(vt->served_qp[peer], &wr, &bad) == 0) {
			__atomic_add_fetch(&vt->liveness_sent, 1, __ATOMIC_RELAXED);
			r = 0;
		} else {
			int n = __atomic_sub_fetch(&vt->liveness_inflight[peer], 1,
						   __ATOMIC_ACQ_REL);

			DDSS_INFO("verbs: the liveness lane to rank %u is full or refused the "
				  "send (%d unanswered): this one goes the usual way", peer, n);
		}
	}
	pthread_mutex_unlock(&vt->served_mu);
	return r;
}

void verbs_liveness_done(struct verbs_tp *vt, const struct ibv_wc *wc)
{
	uint32_t peer = (uint32_t)(wc->wr_id >> 32);

	/*
	 * A failure is the served QP's (its initiator went, or was cut off): the peer's
	 * liveness is the heartbeat thread's call, and messages take the usual path until a
	 * new QP is established. A late completion of an old QP may take the count below 0:
	 * the device's own queue limit then refuses the extra post (-EAGAIN, usual path).
	 */
	if (peer >= 1 && peer <= vt->base.cfg.size)
		__atomic_sub_fetch(&vt->liveness_inflight[peer], 1, __ATOMIC_ACQ_REL);
}

uint32_t verbs_out_rank(struct verbs_tp *vt, uint32_t qp_num)
{
	for (uint32_t r = 1; r <= vt->base.cfg.size; r++)
		if (__atomic_load_n(&vt->peers[r].out.qp_num, __ATOMIC_ACQUIRE) == qp_num)
			return r;
	return 0;
}

unsigned long ddss_verbs_liveness_sent(struct ddss_tp *tp)
{
	return __atomic_load_n(&verbs_tp_of(tp)->liveness_sent, __ATOMIC_RELAXED);
}
