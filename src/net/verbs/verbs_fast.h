/*
 * The verbs provider's per-operation fast path, inline on purpose (included by verbs_int.h).
 *
 * Why inline: on rxe the whole operation (requester, responder, completer) runs inside the
 * system call of ibv_post_send, so what separates us from raw verbs is only our own
 * user-space path around it. Under emulation (the rxe guest) every call, return and
 * indirect jump after that long kernel path misses the emulator's jump cache, and the
 * out-of-line path (nine calls more than a raw post + poll loop) added about 4% to a 1 B
 * read or an 8 B atomic (docs/transport.md, "Latency against perftest").
 *
 * Only the common case lives here: a connected QP with room in its send queue, a staging
 * slot for a small buffer, a successful completion of a caller's request. Everything else
 * (connecting, a full queue, large or registered buffers, errors, notifications, messages)
 * takes the out-of-line functions in the .c files, which handle every case themselves.
 */
#ifndef DDSS_NET_VERBS_VERBS_FAST_H
#define DDSS_NET_VERBS_VERBS_FAST_H

#include <string.h>

/* ---- staging slots (verbs_mem.c has the rest) ---- */

static inline void *verbs_stage_addr(struct verbs_tp *vt, uint32_t slot)
{
	return vt->stage_buf + (size_t)slot * VERBS_STAGE_LEN;
}

/*
 * The free slots are a lock-free stack (a mutex pair costs a few percent of an emulated
 * round trip). head = (tag << 32) | (slot + 1), 0 in the low half meaning empty; every
 * change bumps the tag, so a slot popped and pushed back in between cannot fool a CAS.
 */
static inline uint64_t verbs_stage_head(uint64_t tag, uint32_t slot_plus_1)
{
	return ((tag + 1) << 32) | slot_plus_1;
}

/* Take a free staging slot (false if none). */
static inline bool verbs_stage_get(struct verbs_tp *vt, uint32_t *slot_p)
{
	uint64_t h = __atomic_load_n(&vt->stage_top, __ATOMIC_ACQUIRE), next;
	uint32_t top;

	do {
		top = (uint32_t)h;
		if (top == 0)
			return false;
		/* Stale if another thread pops this slot first; then the CAS fails anyway. */
		next = verbs_stage_head(h >> 32,
					__atomic_load_n(&vt->stage_next[top - 1], __ATOMIC_RELAXED));
	} while (!__atomic_compare_exchange_n(&vt->stage_top, &h, next, true, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	*slot_p = top - 1;
	return true;
}

/* Give a staging slot back. */
static inline void verbs_stage_put(struct verbs_tp *vt, uint32_t slot)
{
	uint64_t h = __atomic_load_n(&vt->stage_top, __ATOMIC_ACQUIRE);

	do
		__atomic_store_n(&vt->stage_next[slot], (uint32_t)h, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&vt->stage_top, &h, verbs_stage_head(h >> 32, slot + 1),
					    true, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
}

/* memcpy without a call for the few bytes of a small transfer (memcpy goes through the PLT). */
static inline void verbs_copy(void *dst, const void *src, size_t len)
{
	if (len > 16) {
		memcpy(dst, src, len);
		return;
	}
	for (size_t i = 0; i < len; i++)
		((unsigned char *)dst)[i] = ((const unsigned char *)src)[i];
}

/* ---- the local side of a transfer ---- */

/**
 * Describe [@buf, @buf+@len) as an SGE for a transfer (@to_local: the NIC writes it),
 * recording in @req how (staging copy-in for writes done here).
 */
static inline int verbs_mem_prepare(struct verbs_tp *vt, struct ddss_tp_req *req, void *buf,
				    size_t len, bool to_local, struct ibv_sge *sge)
{
	struct verbs_req_priv *pv = verbs_priv(req);
	uint32_t slot;

	/* Copying a small buffer costs less than looking for its registration. */
	if (len <= VERBS_STAGE_LEN && verbs_stage_get(vt, &slot)) {
		void *at = verbs_stage_addr(vt, slot);

		pv->local_kind = VL_STAGE;
		pv->stage = slot;
		if (!to_local)
			verbs_copy(at, buf, len);
		sge->addr = (uintptr_t)at;
		sge->length = (uint32_t)len;
		sge->lkey = vt->stage_mr->lkey;
		return 0;
	}
	return verbs_mem_prepare_slow(vt, req, buf, len, to_local, sge);
}

/** On completion: copy staged data out (reads, when @ok), release slot or registration. */
static inline void verbs_mem_finish(struct verbs_tp *vt, struct ddss_tp_req *req, bool ok)
{
	struct verbs_req_priv *pv = verbs_priv(req);

	if (pv->local_kind == VL_STAGE) {
		if (ok && req->op == DDSS_TP_OP_READ)
			verbs_copy(req->local, verbs_stage_addr(vt, pv->stage), req->len);
		verbs_stage_put(vt, pv->stage);
	} else if (pv->local_kind == VL_DYN_MR) {
		verbs_mem_unregister(req);
	}
	pv->local_kind = VL_NONE;
}

/* ---- connections and posting ---- */

/** Make the outgoing connection to @o->peer usable (connect if needed). Blocks. */
static inline int verbs_out_ensure(struct verbs_out *o)
{
	/* Racy peek, rechecked by verbs_post; no clock read on this path (it can cost 1 us). */
	if (__atomic_load_n(&o->fail, __ATOMIC_ACQUIRE) == 0 &&
	    __atomic_load_n(&o->phase, __ATOMIC_ACQUIRE) == VERBS_UP)
		return 0;
	return verbs_out_connect(o);
}

/**
 * Post one signaled WR (or a chain) on @o's QP, waiting (bounded) for send-queue room.
 * Lock-free: the WR is first reserved in sq_posted and only then are fail and qp looked at;
 * teardown sets fail first and destroys the QP only once the queue is empty, so (both
 * sides sequentially consistent) a poster either reserved early enough to be waited for,
 * or sees fail and backs out.
 */
static inline int verbs_post(struct verbs_out *o, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_qp *qp;

	if (__builtin_expect(o->tp->read_guard, 0))
		return verbs_post_guarded(o, wr);
	if (wr->next)
		return verbs_post_slow(o, wr);
	if (__atomic_add_fetch(&o->sq_posted, 1, __ATOMIC_SEQ_CST) -
	    __atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST) > o->tp->sq_depth ||
	    __atomic_load_n(&o->fail, __ATOMIC_SEQ_CST) ||
	    !(qp = __atomic_load_n(&o->qp, __ATOMIC_ACQUIRE)) || ibv_post_send(qp, wr, &bad)) {
		/* Full, failed or refused: undo and let the slow path wait, retry or report. */
		__atomic_fetch_sub(&o->sq_posted, 1, __ATOMIC_SEQ_CST);
		return verbs_post_slow(o, wr);
	}
	return 0;
}

/* ---- completions ---- */

/* Take the send CQ (one polling owner at a time). */
static inline bool verbs_try_own(struct verbs_tp *vt)
{
	return __atomic_exchange_n(&vt->owner, 1, __ATOMIC_ACQ_REL) == 0;
}

static inline void verbs_release_own(struct verbs_tp *vt)
{
	/* Polling waiters never sleep on own_cv, so there is nobody to wake. */
	if (vt->base.cfg.completion == DDSS_TP_COMPLETION_POLL)
		__atomic_store_n(&vt->owner, 0, __ATOMIC_RELEASE);
	else
		verbs_release_own_event(vt);
}

/* Owner only: one more of @o's WRs completed (only the owner writes sq_done: no locked op). */
static inline void verbs_sq_complete(struct verbs_out *o)
{
	__atomic_store_n(&o->sq_done, __atomic_load_n(&o->sq_done, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELEASE);
}

/* A caller's request whose WR completed: its atomic result, its local buffer, then done. */
static inline void verbs_req_finish(struct verbs_tp *vt, struct ddss_tp_req *req, int status)
{
	if (status == 0 && (req->op == DDSS_TP_OP_CAS || req->op == DDSS_TP_OP_FADD)) {
		if (verbs_priv(req)->local_kind == VL_STAGE)
			memcpy(&req->result, verbs_stage_addr(vt, verbs_priv(req)->stage), 8);
		if (vt->atomic_be)
			req->result = be64toh(req->result);
	}
	verbs_mem_finish(vt, req, status == 0);
	req->status = status;
	__atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

/** Owner only: handle one send completion. */
static inline void verbs_send_wc(struct verbs_tp *vt, const struct ibv_wc *wc)
{
	struct ddss_tp_req *req = (struct ddss_tp_req *)(uintptr_t)wc->wr_id;

	/* Errors, provider-owned WRs and messages: the full handler. */
	if (wc->status != IBV_WC_SUCCESS || (wc->wr_id & 1) || verbs_priv(req)->internal) {
		verbs_send_wc_slow(vt, wc);
		return;
	}
	verbs_sq_complete(&vt->peers[req->peer].out);
	verbs_req_finish(vt, req, 0);
}

/*
 * Polls of the fast path before the first clock read: long enough to cover a round trip
 * even where one poll is slow (emulation: ~50 ns a poll, ~40 us a read), short next to any
 * timeout (a few ms).
 */
#define VERBS_FAST_SPINS 65536

/**
 * Wait for @req. Fast path: the completion is there, or (polling mode) comes within a few
 * polls; no clock read, and ownership of the CQ is held across the polls.
 */
static inline int verbs_wait(struct verbs_tp *vt, struct ddss_tp_req *req, int timeout_ms)
{
	bool spin = vt->base.cfg.completion == DDSS_TP_COMPLETION_POLL;
	unsigned spins = 0;

	if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return 0;
	if (verbs_try_own(vt)) {
		struct ibv_wc wc;
		int n;

		do {
			n = ibv_poll_cq(vt->scq, 1, &wc);
			if (n > 0)
				verbs_send_wc(vt, &wc);
		} while (n >= 0 && !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE) && spin &&
			 ++spins < VERBS_FAST_SPINS);
		verbs_release_own(vt);
		if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
			return 0;
	}
	return verbs_wait_slow(vt, req, timeout_ms);
}

#endif /* DDSS_NET_VERBS_VERBS_FAST_H */
