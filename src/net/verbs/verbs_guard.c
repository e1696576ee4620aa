/*
 * The read/atomic guard: on rxe, nothing is posted on a QP behind an outstanding READ or
 * atomic (beyond the chain it was posted in).
 *
 * Why: rxe (Linux 6.1, rxe_comp.c) completes a READ or atomic *successfully and without
 * its data* when loss hits in a particular way. A PSN-sequence NAK "implicitly acks" every
 * PSN before it, so the completer moves its expected PSN past a READ or atomic whose
 * response was lost. When that request is retried, the responder replays the response,
 * the completer finds its PSN behind the expected one and equal to the WQE's last PSN,
 * and completes the WQE as if acknowledged: no data copied, status success. The caller
 * then reads whatever its buffer held: a stale compare&swap result, an old read. The IB
 * spec says a NAK acks earlier SENDs and WRITEs, not READs or atomics, which still need
 * their responses; a NIC waits for them.
 *
 * The NAK needs three things on one QP: a READ/atomic whose response is lost, a request
 * after it that is lost, and a request after that which arrives. Posting nothing behind an
 * outstanding READ/atomic (the chain it came in, at most one WR more here, excepted) rules
 * out the third, so the replayed response arrives at the expected PSN and is copied.
 * Seen with 2% loss on the guest's rxe link: a fenced compare&swap returned 11 where the
 * word held 15 (tests/net/conformance.c), about one suite run in two.
 *
 * Cost: on rxe, reads and atomics to one peer no longer overlap each other or later
 * posts. DDSS_VERBS_READ_GUARD=on|off overrides the choice (auto: on for rxe only).
 */
#include "net/verbs/verbs_int.h"

#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *verbs_guard_decide(struct verbs_tp *vt, uint32_t vendor_id)
{
	const char *env = getenv("DDSS_VERBS_READ_GUARD");

	if (env && strcmp(env, "on") == 0) {
		vt->read_guard = true;
		return "on (DDSS_VERBS_READ_GUARD=on)";
	}
	if (env && strcmp(env, "off") == 0) {
		vt->read_guard = false;
		return "off (DDSS_VERBS_READ_GUARD=off)";
	}
	if (env && *env && strcmp(env, "auto") != 0)
		DDSS_WARN("verbs: DDSS_VERBS_READ_GUARD=%s is not auto, on or off; using auto", env);
	vt->read_guard = vendor_id == RXE_VENDOR_ID;
	return vt->read_guard ? "on (rxe can complete them without data after a lost packet)" :
				"off";
}

static bool wants_response(const struct ibv_send_wr *w)
{
	return w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* The last guarded chain holding a READ/atomic has not completed yet. */
static bool response_outstanding(struct verbs_out *o)
{
	unsigned tail = __atomic_load_n(&o->guard_tail, __ATOMIC_ACQUIRE);

	/* A tail beyond sq_posted was forgotten with its QP (verbs_drain): nothing waits. */
	return (int)(__atomic_load_n(&o->sq_done, __ATOMIC_ACQUIRE) - tail) < 0 &&
	       (int)(__atomic_load_n(&o->sq_posted, __ATOMIC_ACQUIRE) - tail) >= 0;
}

/*
 * verbs_post with the guard on. Posts on @o are serialised by guard_mu, which is held only
 * around the reservation and ibv_post_send: every wait (for the outstanding response, for
 * send-queue room) happens outside it, so a completion handled by this thread while it
 * waits may post to @o itself. Bounded by the operation timeout, after which the connection
 * fails, as any wait for a WR does.
 */
int verbs_post_guarded(struct verbs_out *o, struct ibv_send_wr *wr)
{
	struct verbs_tp *vt = o->tp;
	int64_t deadline = ddss_now_ns() + (int64_t)vt->base.cfg.op_timeout_ms * 1000000;
	bool responses = false;
	unsigned n = 0;

	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		responses |= wants_response(w);
		n++;
	}
	for (;;) {
		int r = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE);
		bool room;

		if (r)
			return r;
		if (!response_outstanding(o)) {
			pthread_mutex_lock(&o->guard_mu);
			room = __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST) + n -
				       __atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST) <=
			       vt->sq_depth;
			if (!response_outstanding(o) && room) {
				r = verbs_post_slow(o, wr);
				/* Every guarded post holds guard_mu: sq_posted counts our chain last. */
				if (r == 0 && responses)
					__atomic_store_n(&o->guard_tail,
							 __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST),
							 __ATOMIC_RELEASE);
				pthread_mutex_unlock(&o->guard_mu);
				return r;
			}
			pthread_mutex_unlock(&o->guard_mu);
		}
		if (ddss_now_ns() >= deadline) {
			verbs_out_fail(o, -ETIMEDOUT);
			return -ETIMEDOUT;
		}
		verbs_progress_wait(vt, deadline);
	}
}
