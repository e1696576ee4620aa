/*
 * Whether a home has cut a rank off for good (RC_GONE): declared dead there, and its
 * channels closed, so nothing the rank sent can land in the home's memory any more.
 *
 * Only the home can tell. Other ranks see a rank down long before its last operations are
 * known not to land: a write or atomic can sit in the home's socket, or in its NIC's
 * queue of a QP not yet in the error state. The coherence layer asks this before it
 * settles the mark of a put whose writer died in the middle (coherence/coh_slots.c): a
 * later put may then rewrite the copy, which a late write or fetch&add of the dead writer
 * would otherwise undo.
 *
 * The home answers on its progress thread, from the transport's refusal state
 * (net/transport.h, ddss_tp_peer_cut): 0 cut off; -EAGAIN being cut off, or its cut did
 * not hold and the heartbeat thread tries it again each round (a QP that would not go to
 * the error state; on tcp a request of the rank still acting on the pool a second after
 * its refusal): the asker asks again every GONE_RETRY_NS, up to the operation timeout;
 * -EBUSY alive. (Until 2026-12-07 a cut that failed was never tried again in a static
 * group, and the answer was -EIO at once.) A rank it sees
 * down and not alive (the rule of lock_rc_ask) it declares dead on the spot. A readmitted
 * rank is a new process and counts as alive: the question is about a rank, not an
 * incarnation, so the answer stays on the safe side. (The marks its old process left here
 * were settled as the new one came in: coherence/coh_readmit.c.)
 */
#include "core/ctx.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <time.h>

/* How often an asker asks again while the home is still cutting the rank off. */
#define GONE_RETRY_NS (20 * 1000000ll)
/* Without an operation timeout: how long the home may take to cut a rank off. */
#define GONE_WAIT_DEFAULT_MS 10000

void lock_gone_on_ask(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	struct ddss_net *net = lk->ctx->net;
	uint32_t rank = m->pred; /* in range: lock_rc_decode */
	int status;

	LOCK_RSTAT(lk, writers_asked);
	if (rank == lk->rank) {
		status = -EBUSY; /* we are answering */
	} else if (ddss_tp_peer_cut(lk->tp, rank)) {
		status = 0;
	} else if (ddss_tp_peer_refused(lk->tp, rank)) {
		/* Being cut off (the heartbeat thread closes its channels), or its cut failed
		 * and is tried again next round: either way, ask again. A last look at the cut
		 * settles a race with the one that just ended. */
		status = ddss_tp_peer_cut(lk->tp, rank) ? 0 : -EAGAIN;
	} else if (lock_peer_down(lk, rank)) {
		/* The rule of lock_rc_ask: down and not alive is dead. */
		if (ddss_net_down_but_alive(net, rank)) {
			ddss_net_reconnect_ask(net, rank);
			status = -EBUSY;
		} else {
			ddss_net_declare_dead(net, rank);
			status = -EAGAIN;
		}
	} else {
		status = -EBUSY;
	}
	if (!status)
		LOCK_RSTAT(lk, writers_vouched);
	lock_home_answer(lk, from, m->id, status);
}

int ddss_lock_home_cut_off(ddss_ctx_t *ctx, uint32_t home, uint32_t rank)
{
	struct ddss_lock *lk = ctx->lock;
	int64_t wait_ms = lk->tp->cfg.op_timeout_ms > 0 ? lk->tp->cfg.op_timeout_ms :
							    GONE_WAIT_DEFAULT_MS;
	int64_t deadline = ddss_now_ns() + wait_ms * 1000000ll;
	int r;

	if (!ddss_tp_valid_rank(lk->tp, home) || !ddss_tp_valid_rank(lk->tp, rank))
		return -EINVAL;
	if (rank == lk->rank)
		return -EBUSY;
	for (;;) {
		r = lock_home_ask(lk, home, RC_GONE, 0, rank, deadline);
		if (r != -EAGAIN || ddss_now_ns() + GONE_RETRY_NS >= deadline)
			return r == -EAGAIN ? -ETIMEDOUT : r;
		nanosleep(&(struct timespec){ .tv_nsec = GONE_RETRY_NS }, NULL);
	}
}
