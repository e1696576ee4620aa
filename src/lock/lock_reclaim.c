/*
 * Reclaiming waiter slots that a failure took out of use (issue 30: nothing leaks per
 * death).
 *
 * A slot whose request failed mid-queue (SLOT_LOST), or whose recovery agent took the lock
 * past a failed predecessor (SLOT_RETIRED, await_pred), cannot be reused at once: peers
 * may still write into its record or notify it, and a write meant for the old request
 * would land in the new one's (a stray GRANT or FAIL, a successor that is not ours). Such
 * a slot is quarantined, and freed once every write that can still come has come. Who can
 * write into a request's record, by the protocol (docs/locks.md):
 *
 *  - its predecessor (the tail it swapped out or queued behind), once: a GRANT, or a FAIL
 *    if that one was lost. Nothing more comes once either landed, or once the predecessor
 *    is down (cut from the group: nothing of its process lands any more).
 *  - an exclusive request's successor: the one request that swapped it out of the tail
 *    announces itself once (REC_NEXT_S, then REC_NEXT), and the shared requests counted
 *    behind it register once each; REC_NEXT_S says how many. A lost slot fails each of
 *    them (lock_posted.c, fail_behind) as they come. Once the successor is in and failed
 *    and all of them registered, nothing more comes from that side.
 *
 * Never reclaimed (RECLAIM_NEVER): a closer that may have registered in the drain word
 * (a shared holder's drain note may come whenever it releases), and an exclusive request
 * whose compare&swap on the lock word failed before it learned its place (its id may be in
 * the tail: nobody can tell who will write into it). A shared request's or a ticket's first fetch&add put no id
 * anywhere: such a request is freed at once (lock_api.c, queue_acquire). A lost exclusive
 * request that nobody swapped out yet waits for its successor; one that swapped out a
 * successor who died before announcing itself stays quarantined. Those are rare: the
 * common deaths (a holder or waiter killed, the requests queued behind it failing, the
 * home's agent taking the lock back) free every slot they took out.
 */
#include "core/log.h"
#include "lock/lock_int.h"

void lock_reclaim_hold_locked(struct ddss_lock *lk, unsigned slot, bool lost)
{
	struct lock_slot *sl = &lk->slot[slot];
	uint32_t qs = __atomic_load_n(&sl->q_state, __ATOMIC_ACQUIRE);
	bool never = __atomic_load_n(&sl->retire, __ATOMIC_ACQUIRE) ||
		     __atomic_load_n(&sl->closer, __ATOMIC_ACQUIRE) || qs == Q_COUNTING ||
		     qs == Q_TRYING;

	sl->rc_pred = qs == Q_COUNTED ? sl->q_pred : 0;
	sl->rc_lost_excl = lost && qs == Q_COUNTED && !sl->q_shared;
	sl->reclaim = never ? RECLAIM_NEVER : RECLAIM_WAIT;
	if (!never)
		__atomic_add_fetch(&lk->quarantined, 1, __ATOMIC_RELEASE);
}

/* Nothing more can come from the request's predecessor. */
static bool pred_quiet(struct ddss_lock *lk, unsigned slot, uint32_t pred)
{
	return !pred || __atomic_load_n(&lk->slot[slot].failed, __ATOMIC_ACQUIRE) ||
	       lock_rec_load(lk, slot, REC_GRANT) || lock_id_down(lk, pred);
}

static bool fail_job_out(const struct lock_slot *sl)
{
	/* fail_behind marks itself running before it clears fail_queued (seq_cst both). */
	return __atomic_load_n(&sl->fail_queued, __ATOMIC_SEQ_CST) ||
	       __atomic_load_n(&sl->fail_running, __ATOMIC_SEQ_CST);
}

/* A lost exclusive request: its successor announced itself and was failed, and every
 * shared request counted behind it registered (and was collected to be failed). */
static bool successors_quiet(struct ddss_lock *lk, unsigned slot)
{
	const struct lock_slot *sl = &lk->slot[slot];
	uint32_t next, next_s;

	if (!lock_rec_sealed(lk, slot, REC_NEXT, &next) || fail_job_out(sl))
		return false;
	if (__atomic_load_n(&sl->failed_next, __ATOMIC_ACQUIRE) != next)
		return false;
	return lock_rec_sealed(lk, slot, REC_NEXT_S, &next_s) &&
	       __atomic_load_n(&sl->regs_seen, __ATOMIC_ACQUIRE) >= next_s;
}

static void free_locked(struct ddss_lock *lk, unsigned slot)
{
	struct lock_slot *sl = &lk->slot[slot];

	if (sl->state == SLOT_LOST)
		lk->slots_taken--; /* a retired slot was uncounted when it was put */
	sl->reclaim = RECLAIM_NONE;
	__atomic_store_n(&sl->lost, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sl->await_pred, false, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->failed_next, 0, __ATOMIC_RELAXED);
	sl->state = SLOT_FREE;
	sl->next_free = lk->free_head;
	lk->free_head = (int)slot;
	__atomic_sub_fetch(&lk->quarantined, 1, __ATOMIC_RELEASE);
}

void lock_slots_reclaim(struct ddss_lock *lk)
{
	unsigned cand[DDSS_LOCK_SLOTS], n = 0, freed = 0;
	uint32_t pred[DDSS_LOCK_SLOTS];
	bool excl[DDSS_LOCK_SLOTS], quiet[DDSS_LOCK_SLOTS];

	if (!__atomic_load_n(&lk->quarantined, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&lk->mu);
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++) {
		if (lk->slot[i].reclaim != RECLAIM_WAIT)
			continue;
		pred[n] = lk->slot[i].rc_pred;
		excl[n] = lk->slot[i].rc_lost_excl;
		cand[n++] = i;
	}
	pthread_mutex_unlock(&lk->mu);
	/* The checks ask the transport whether peers are down: not under mu. Each condition
	 * only ever turns true, so what holds now still holds below. */
	for (unsigned i = 0; i < n; i++)
		quiet[i] = pred_quiet(lk, cand[i], pred[i]) &&
			   (!excl[i] || successors_quiet(lk, cand[i]));
	pthread_mutex_lock(&lk->mu);
	for (unsigned i = 0; i < n; i++) {
		if (!quiet[i] || lk->slot[cand[i]].reclaim != RECLAIM_WAIT ||
		    fail_job_out(&lk->slot[cand[i]]))
			continue; /* another caller freed it, or a fail job came after all */
		free_locked(lk, cand[i]);
		freed++;
	}
	pthread_mutex_unlock(&lk->mu);
	if (freed)
		DDSS_INFO("lock: %u quarantined waiter slot(s) free again", freed);
}
