/*
 * The read/atomic guard (rxe only): a READ or atomic is posted on a QP only when nothing
 * else is outstanding on it, and nothing is posted behind it until it has completed.
 *
 * Why: rxe's completer (Linux 6.1, rxe_comp.c) can complete a READ or atomic *successfully
 * and without its data* after a lost packet, in two ways (read in its source; their
 * results were seen under 2% loss in the guest):
 *
 * 1. A PSN-sequence NAK "implicitly acks" every PSN before it, so the completer moves its
 *    expected PSN past a READ/atomic whose response was lost (a later request lost, one
 *    after it arriving). The retried request's replayed response then has a PSN behind the
 *    expected one and equal to the WQE's last PSN, and the WQE completes as if acked: no
 *    data copied. The IB spec has such a NAK ack earlier SENDs and WRITEs only.
 * 2. A WRITE or SEND, then an atomic, both executed, both responses lost. The retry
 *    resends the WRITE first; the responder answers a duplicate with a plain ACK of the
 *    last PSN it executed, the atomic's; the completer takes that ACK as the atomic's
 *    completion (a plain ACK is handled as a write's, whatever the WQE is): no result.
 *
 * Either way the caller reads whatever its buffer held: a fenced compare&swap returned 11
 * where the word held 15, a compare&swap behind a held write returned another value than
 * the word's (tests/net/conformance.c, under tests/net/fabric_fault.sh --mode loss). A NIC
 * matches responses to requests by PSN and opcode. With nothing else outstanding, a
 * retry starts at the READ/atomic itself and nothing follows it: neither case can arise,
 * and the replayed response arrives at the expected PSN and is copied.
 *
 * Cost, on rxe only: reads and atomics to one peer overlap nothing (a held write and the
 * atomic behind it take two round trips). DDSS_VERBS_READ_GUARD=on|off overrides the
 * choice (auto: on for rxe).
 */
#include "net/verbs/verbs_int.h"

#include "core/log.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *verbs_guard_decide(struct verbs_tp *vt, uint32_t vendor_id)
{
	switch (verbs_env_choice("DDSS_VERBS_READ_GUARD", "on", "off")) {
	case 1:
		vt->read_guard = true;
		return "on (DDSS_VERBS_READ_GUARD=on)";
	case 2:
		vt->read_guard = false;
		return "off (DDSS_VERBS_READ_GUARD=off)";
	}
	vt->read_guard = vendor_id == RXE_VENDOR_ID;
	return vt->read_guard ? "on (rxe can complete them without data after a lost packet)" :
				"off";
}

static bool wants_response(const struct ibv_send_wr *w)
{
	return w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* The last READ/atomic posted has not completed yet. */
static bool response_outstanding(struct verbs_out *o)
{
	unsigned tail = __atomic_load_n(&o->guard_tail, __ATOMIC_ACQUIRE);

	/* A tail beyond sq_posted was forgotten with its QP (verbs_drain): nothing waits. */
	return (int)(__atomic_load_n(&o->sq_done, __ATOMIC_ACQUIRE) - tail) < 0 &&
	       (int)(__atomic_load_n(&o->sq_posted, __ATOMIC_ACQUIRE) - tail) >= 0;
}

/* Nothing is outstanding on @o. */
static bool idle(struct verbs_out *o)
{
	return __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST) ==
	       __atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST);
}

/* Polls of the turn before sleeping: the poster ahead is usually about to pass it on. */
#define TURN_SPINS 64

/* guard_mu held: the turn goes to @next, or past it over tickets whose waiters left. */
static void give_turn_locked(struct verbs_out *o, unsigned next)
{
	for (unsigned i = 0; i < o->guard_nleft;) {
		if (o->guard_left[i] == next) {
			o->guard_left[i] = o->guard_left[--o->guard_nleft];
			next++;
			i = 0;
		} else {
			i++;
		}
	}
	__atomic_store_n(&o->guard_turn, next, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&o->guard_cv);
}

static void pass_turn(struct verbs_out *o, unsigned ticket)
{
	pthread_mutex_lock(&o->guard_mu);
	give_turn_locked(o, ticket + 1);
	pthread_mutex_unlock(&o->guard_mu);
}

/*
 * Until it is @ticket's turn on @o: 0; or, past @deadline (0: none), -EAGAIN with the
 * ticket left behind (the turn skips it) unless the turn came meanwhile.
 */
static int wait_turn(struct verbs_out *o, unsigned ticket, int64_t deadline)
{
	int r = 0;

	for (unsigned i = 0; i < TURN_SPINS; i++) {
		if (__atomic_load_n(&o->guard_turn, __ATOMIC_ACQUIRE) == ticket)
			return 0;
		sched_yield();
	}
	pthread_mutex_lock(&o->guard_mu);
	while (__atomic_load_n(&o->guard_turn, __ATOMIC_ACQUIRE) != ticket) {
		struct timespec until;

		if (deadline && ddss_now_ns() >= deadline &&
		    o->guard_nleft < sizeof(o->guard_left) / sizeof(o->guard_left[0])) {
			o->guard_left[o->guard_nleft++] = ticket;
			r = -EAGAIN;
			break;
		}
		/* Timed as a safety net and for @deadline: the turn passes with a broadcast. */
		until = ddss_time_after(CLOCK_REALTIME, 10 * 1000000);
		pthread_cond_timedwait(&o->guard_cv, &o->guard_mu, &until);
	}
	pthread_mutex_unlock(&o->guard_mu);
	return r;
}

/* Whether @o may take @n more WRs now (@responses: a READ/atomic among them). */
static bool may_post(struct verbs_out *o, unsigned n, bool responses)
{
	if (response_outstanding(o) || (responses && !idle(o)))
		return false;
	return __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST) + n -
		       __atomic_load_n(&o->sq_done, __ATOMIC_SEQ_CST) <= o->tp->sq_depth;
}

/*
 * verbs_post with the guard on. Posts on @o take turns in arrival order (a ticket), so a
 * READ/atomic waiting for the QP to go idle is not starved by a stream of writes, nor a
 * heartbeat by a stream of atomics. The poster whose turn it is waits for completions
 * (polling the CQ); the others sleep until the turn passes. Bounded by the operation
 * timeout, after which the connection fails and every turn passes at once; a thread with
 * a post bound (ddss_tp_set_thread_post_bound: the heartbeat thread) gives up sooner with
 * -EAGAIN, leaving its ticket to be skipped, so that it never sits behind a request to a
 * peer that died. Send completions run no caller code, so nothing posts from inside these
 * waits.
 */
int verbs_post_guarded(struct verbs_out *o, struct ibv_send_wr *wr)
{
	struct verbs_tp *vt = o->tp;
	int64_t now = ddss_now_ns();
	int64_t deadline = now + (int64_t)vt->base.cfg.op_timeout_ms * 1000000;
	int bound_ms = ddss_tp_thread_post_bound();
	int64_t give_up = bound_ms ? now + (int64_t)bound_ms * 1000000 : 0;
	unsigned ticket = __atomic_fetch_add(&o->guard_next, 1, __ATOMIC_SEQ_CST);
	bool responses = false;
	unsigned n = 0;
	int r;

	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		responses |= wants_response(w);
		n++;
	}
	r = wait_turn(o, ticket, give_up);
	if (r)
		return r;
	/* Our turn: nobody else posts on @o until we pass it on. */
	for (;;) {
		r = __atomic_load_n(&o->fail, __ATOMIC_ACQUIRE);
		if (r)
			break;
		if (may_post(o, n, responses)) {
			r = verbs_post_slow(o, wr);
			if (r == 0 && responses)
				__atomic_store_n(&o->guard_tail,
						 __atomic_load_n(&o->sq_posted, __ATOMIC_SEQ_CST),
						 __ATOMIC_RELEASE);
			break;
		}
		now = ddss_now_ns();
		if (give_up && now >= give_up) {
			r = -EAGAIN;
			break;
		}
		if (now >= deadline) {
			DDSS_WARN("verbs: the QP to rank %u did not go idle in %d ms; failing the peer",
				  o->peer, vt->base.cfg.op_timeout_ms);
			verbs_out_fail(o, -ETIMEDOUT);
			ddss_tp_count_timeout(&vt->base);
			r = -ETIMEDOUT;
			break;
		}
		verbs_progress_wait(vt, give_up && give_up < deadline ? give_up : deadline);
	}
	pass_turn(o, ticket);
	return r;
}
