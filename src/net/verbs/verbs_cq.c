/*
 * Send completions: the application threads that wait poll the one send CQ themselves,
 * one owner at a time (no thread hop on the latency path); a thread whose request another
 * owner completes is woken by it. (The receive side is verbs_recv.c.)
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"
#include "net/spin.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_BATCH 16

int verbs_cq_open(struct verbs_tp *vt)
{
	struct ibv_device_attr da;
	unsigned peers = vt->base.cfg.size + 1;
	int cqe;

	if (ibv_query_device(vt->ctx, &da))
		return -errno;
	/* Every WR is signaled, so the CQ must hold every QP's whole send queue at once. */
	vt->sq_depth = VERBS_SQ_DEPTH;
	if ((unsigned)da.max_qp_wr < vt->sq_depth)
		vt->sq_depth = (unsigned)da.max_qp_wr;
	while (vt->sq_depth > 16 && (uint64_t)vt->sq_depth * peers > (uint64_t)da.max_cqe)
		vt->sq_depth /= 2;
	cqe = (int)(vt->sq_depth * peers);
	if (cqe > da.max_cqe)
		cqe = da.max_cqe;
	pthread_mutex_init(&vt->own_mu, NULL);
	pthread_cond_init(&vt->own_cv, NULL);
	/* Adaptive: measure the spin bound now rather than in the first wait. */
	if (vt->base.cfg.completion == DDSS_TP_COMPLETION_ADAPTIVE)
		ddss_spin_init();
	if (vt->base.cfg.completion != DDSS_TP_COMPLETION_POLL) {
		vt->scq_ch = ibv_create_comp_channel(vt->ctx);
		if (!vt->scq_ch)
			return -errno;
	}
	vt->scq = ibv_create_cq(vt->ctx, cqe, NULL, vt->scq_ch, 0);
	if (!vt->scq)
		return -errno;
	return 0;
}

void verbs_cq_close(struct verbs_tp *vt)
{
	if (vt->scq)
		ibv_destroy_cq(vt->scq);
	if (vt->scq_ch)
		ibv_destroy_comp_channel(vt->scq_ch);
	pthread_mutex_destroy(&vt->own_mu);
	pthread_cond_destroy(&vt->own_cv);
}

/* ---- send side ---- */

static int wc_errno(const struct verbs_out *o, enum ibv_wc_status st)
{
	int fail = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE);

	switch (st) {
	case IBV_WC_WR_FLUSH_ERR:
		return fail ? fail : -ECONNRESET;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -EHOSTDOWN;
	case IBV_WC_REM_ACCESS_ERR:
		return -EACCES;
	case IBV_WC_REM_INV_REQ_ERR:
		return -EINVAL;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_LEN_ERR:
		return -EFAULT;
	default:
		return -EIO;
	}
}

void verbs_send_wc_slow(struct verbs_tp *vt, const struct ibv_wc *wc)
{
	struct ddss_tp_req *req = NULL;
	uint32_t peer;
	struct verbs_out *o;
	int status = 0;

	if (verbs_wrid_is_liveness(wc->wr_id)) { /* a served QP's: no outgoing QP's business */
		verbs_liveness_done(vt, wc);
		return;
	}
	if (wc->wr_id & 1) {
		peer = (uint32_t)(wc->wr_id >> 32);
	} else {
		req = (struct ddss_tp_req *)(uintptr_t)wc->wr_id;
		peer = req->peer;
	}
	o = &vt->peers[peer].out;
	if (wc->status != IBV_WC_SUCCESS) {
		status = wc_errno(o, wc->status);
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			DDSS_WARN("verbs: operation to rank %u failed: %s", peer,
				  ibv_wc_status_str(wc->status));
		else if (!__atomic_load_n(&o->fail, __ATOMIC_ACQUIRE))
			/* Flushed, with no error of its own and not failed by us: the QP broke on
			 * its receive side (verbs_recv.c says how) or by a device event. */
			DDSS_WARN("verbs: operation to rank %u flushed: its connection broke", peer);
		/* The QP is in error now: every later WR flushes; the connection is lost. */
		verbs_out_wc_fail(o, wc->status, status);
	}
	verbs_sq_complete(o);
	if (!req)
		return;
	if (verbs_priv(req)->internal) {
		verbs_mem_finish(vt, req, status == 0);
		free(req->local); /* the message's private copy */
		free(req);
	} else {
		verbs_req_finish(vt, req, status);
	}
}

/*
 * Every sleeper wakes at every release (a herd) and all but one sleep again. Two cures were
 * tried and measured in the rxe guest (ddss-clients-bench, 8 client threads, 2026-11-26),
 * and neither won: both cut the tails and cost the medians.
 *  - The tcp channel's (net/sleepers.h: the poller wakes each requester, and one thread to
 *    take over): p99 of a get 1.4 ms instead of 3 ms, medians up to 2x. The owner makes one
 *    futex call per completion before its own caller gets control back.
 *  - One futex word for all, bumped and woken at each release, so woken threads take no
 *    mutex: null put p99 0.7-1.6 ms instead of 0.8-5.1 ms, but version put medians 61-72 us
 *    instead of 34-58, write put 134-178 instead of 68-143. Queueing on the mutex paces
 *    the woken threads on two CPUs.
 */
void verbs_release_own_event(struct verbs_tp *vt)
{
	__atomic_store_n(&vt->owner, 0, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&vt->sleepers, __ATOMIC_SEQ_CST)) {
		pthread_mutex_lock(&vt->own_mu);
		pthread_cond_broadcast(&vt->own_cv);
		pthread_mutex_unlock(&vt->own_mu);
	}
}

/* Owner only: handle what the send CQ holds. */
static int poll_scq(struct verbs_tp *vt)
{
	struct ibv_wc wc[POLL_BATCH];
	int n, total = 0;

	while ((n = ibv_poll_cq(vt->scq, POLL_BATCH, wc)) > 0) {
		for (int i = 0; i < n; i++)
			verbs_send_wc(vt, &wc[i]);
		total += n;
		if (n < POLL_BATCH)
			break;
	}
	return n < 0 ? -EIO : total;
}

int verbs_progress(struct verbs_tp *vt)
{
	int n;

	if (!verbs_try_own(vt))
		return 0;
	n = poll_scq(vt);
	verbs_release_own(vt);
	return n;
}

/*
 * Owner, event mode (adaptive once it has spun): sleep until the CQ has something or @ms
 * passes. The CQ is armed and then polled once more, so a completion that arrived before
 * arming is not slept through.
 */
static int block_on_scq(struct verbs_tp *vt, int ms)
{
	struct pollfd pfd = { .fd = vt->scq_ch->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *cq_ctx;
	int n;

	if (ibv_req_notify_cq(vt->scq, 0))
		return -EIO;
	n = poll_scq(vt);
	if (n)
		return n;
	if (poll(&pfd, 1, ms) > 0 && ibv_get_cq_event(vt->scq_ch, &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1);
	return poll_scq(vt);
}

/* Not the owner: wait until @req is done or the owner lets go (or @ms passes). */
static void sleep_while_owned(struct verbs_tp *vt, struct ddss_tp_req *req, int ms)
{
	struct timespec ts;

	if (vt->base.cfg.completion == DDSS_TP_COMPLETION_POLL) {
		sched_yield();
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000;
	ts.tv_sec += ts.tv_nsec / 1000000000;
	ts.tv_nsec %= 1000000000;
	pthread_mutex_lock(&vt->own_mu);
	__atomic_fetch_add(&vt->sleepers, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&vt->owner, __ATOMIC_SEQ_CST) &&
	       !(req && __atomic_load_n(&req->done, __ATOMIC_ACQUIRE)))
		if (pthread_cond_timedwait(&vt->own_cv, &vt->own_mu, &ts))
			break;
	__atomic_fetch_sub(&vt->sleepers, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&vt->own_mu);
}

/*
 * One step towards @req's completion (or, with req NULL, towards any completion): poll as
 * owner, blocking up to @ms in event and adaptive mode when there is nothing, or wait for
 * the owner.
 */
static void progress_step(struct verbs_tp *vt, struct ddss_tp_req *req, int ms)
{
	int n;

	if (!verbs_try_own(vt)) {
		sleep_while_owned(vt, req, ms);
		return;
	}
	n = poll_scq(vt);
	if (n == 0 && vt->scq_ch && !(req && __atomic_load_n(&req->done, __ATOMIC_ACQUIRE)))
		block_on_scq(vt, ms);
	verbs_release_own(vt);
}

int verbs_test(struct verbs_tp *vt, struct ddss_tp_req *req)
{
	if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return 0;
	verbs_progress(vt);
	return __atomic_load_n(&req->done, __ATOMIC_ACQUIRE) ? 0 : -EAGAIN;
}

static int slice_ms(int64_t deadline_ns)
{
	int64_t left = (deadline_ns - ddss_now_ns() + 999999) / 1000000;

	return left > VERBS_WAIT_SLICE_MS ? VERBS_WAIT_SLICE_MS : left < 0 ? 0 : (int)left;
}

/* Polls between clock reads while spinning: a read can cost a microsecond (emulated HPET). */
#define SPINS_PER_CLOCK 256
/* The same for adaptive mode's spin, which is bounded by microseconds, not a timeout. */
#define ADAPTIVE_SPINS_PER_CLOCK 32

/*
 * Adaptive mode, before sleeping: poll for @req until the spin bound (net/spin.h) has
 * passed since @start, or @deadline. The owner keeps the CQ between empty polls and lets go after each
 * poll that completed something, so threads sleeping on own_cv whose request it completed
 * are woken; a thread that is not the owner checks its request and yields (it may become
 * the owner when the current one lets go). True if @req is done.
 */
static bool spin_for(struct verbs_tp *vt, struct ddss_tp_req *req, int64_t start,
		     int64_t deadline)
{
	int64_t end = start + ddss_spin_ns();
	bool own = false;
	unsigned spins = 0;

	if (end > deadline)
		end = deadline;
	while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
		if (!own)
			own = verbs_try_own(vt);
		if (own) {
			if (poll_scq(vt)) {
				verbs_release_own(vt);
				own = false;
			}
		} else {
			sched_yield();
		}
		if (++spins % ADAPTIVE_SPINS_PER_CLOCK == 0 && ddss_now_ns() >= end)
			break;
	}
	if (own)
		verbs_release_own(vt);
	return __atomic_load_n(&req->done, __ATOMIC_ACQUIRE);
}

int verbs_wait_slow(struct verbs_tp *vt, struct ddss_tp_req *req, int timeout_ms)
{
	bool is_default = timeout_ms == DDSS_TP_TIMEOUT_DEFAULT;
	bool spin = vt->base.cfg.completion == DDSS_TP_COMPLETION_POLL;
	int ms = is_default ? vt->base.cfg.op_timeout_ms : timeout_ms;
	int64_t deadline, now = ddss_now_ns();
	bool failed_peer = false;
	unsigned spins = 0;

	deadline = ms < 0 ? INT64_MAX : now + (int64_t)ms * 1000000;
	/* Adaptive: poll for about a wake-up's cost; then as event mode (arm and sleep). */
	if (vt->base.cfg.completion == DDSS_TP_COMPLETION_ADAPTIVE && spin_for(vt, req, now, deadline))
		return 0;
	while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
		if (spin && ++spins % SPINS_PER_CLOCK) {
			progress_step(vt, req, 0);
			continue;
		}
		if (ddss_now_ns() >= deadline) {
			if (!is_default || failed_peer || ms <= 0)
				return -ETIMEDOUT;
			/*
			 * The operation timeout passed: give up on the peer. Its QP errors out and
			 * every outstanding WR (this one too) completes with -ETIMEDOUT soon.
			 */
			DDSS_WARN("verbs: operation to rank %u outstanding for %d ms; failing the peer",
				  req->peer, ms);
			verbs_out_fail(&vt->peers[req->peer].out, -ETIMEDOUT);
			ddss_tp_count_timeout(&vt->base);
			failed_peer = true;
			deadline = ddss_now_ns() + 5000 * 1000000ll;
		}
		progress_step(vt, req, slice_ms(deadline));
	}
	return 0;
}

/* See verbs_post (verbs_fast.h) for why no lock is taken here either. */
int verbs_post_slow(struct verbs_out *o, struct ibv_send_wr *wr)
{
	struct verbs_tp *vt = o->tp;
	struct ibv_send_wr *bad;
	struct ibv_qp *qp;
	int64_t deadline = 0;
	unsigned n = 0;
	int r;

	for (struct ibv_send_wr *w = wr; w; w = w->next)
		n++;
	/* A full send queue drains as completions are polled; help that along. */
	while (__atomic_add_fetch(&o->sq_posted, n, __ATOMIC_SEQ_CST) -
	       __atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST) > vt->sq_depth) {
		int64_t now;

		__atomic_fetch_sub(&o->sq_posted, n, __ATOMIC_SEQ_CST);
		r = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE);
		if (r)
			return r;
		now = ddss_now_ns();
		if (!deadline)
			deadline = now + (int64_t)vt->base.cfg.op_timeout_ms * 1000000;
		if (now >= deadline)
			return -ETIMEDOUT;
		progress_step(vt, NULL, 1);
	}
	r = __atomic_load_n(&o->fail, __ATOMIC_SEQ_CST);
	qp = __atomic_load_n(&o->qp, __ATOMIC_ACQUIRE);
	if (r == 0 && !qp)
		r = -ENOTCONN;
	if (r == 0) {
		r = -ibv_post_send(qp, wr, &bad);
		if (r)
			DDSS_WARN("verbs: ibv_post_send to rank %u: %s", o->peer, strerror(-r));
	}
	if (r)
		__atomic_fetch_sub(&o->sq_posted, n, __ATOMIC_SEQ_CST);
	return r;
}

void verbs_progress_wait(struct verbs_tp *vt, int64_t deadline)
{
	progress_step(vt, NULL, slice_ms(deadline));
}

/*
 * Completions of one RC QP come in order, so sq_done reaching the sq_posted seen now means
 * every earlier WR has completed. Later posts of other threads are not waited for. Bounded
 * by the operation timeout, after which the connection fails (as verbs_wait_slow does).
 */
int verbs_wait_earlier(struct verbs_out *o)
{
	struct verbs_tp *vt = o->tp;
	unsigned target = __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST);
	int64_t deadline = ddss_now_ns() + (int64_t)vt->base.cfg.op_timeout_ms * 1000000;

	while ((int)(__atomic_load_n(&o->sq_done, __ATOMIC_ACQUIRE) - target) < 0) {
		int r = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE);

		if (r)
			return r;
		if (ddss_now_ns() >= deadline) {
			verbs_out_fail(o, -ETIMEDOUT);
			ddss_tp_count_timeout(&vt->base);
			return -ETIMEDOUT;
		}
		progress_step(vt, NULL, slice_ms(deadline));
	}
	return 0;
}

void verbs_drain(struct verbs_out *o, int timeout_ms)
{
	struct verbs_tp *vt = o->tp;
	int64_t deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;

	for (;;) {
		unsigned used = __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST) -
				__atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST);

		if (used == 0)
			return;
		if (ddss_now_ns() >= deadline) {
			/*
			 * They never will once the QP is destroyed: forget them, so the next
			 * connection starts with an empty send queue.
			 */
			DDSS_WARN("verbs: %u operations to rank %u never completed", used, o->peer);
			__atomic_fetch_sub(&o->sq_posted, used, __ATOMIC_SEQ_CST);
			return;
		}
		progress_step(vt, NULL, 10);
	}
}
