/*
 * The N-CoSED protocol on a segment's lock word, exactly as docs/locks.md states it (and
 * tests/model/lock.pml models it): exclusive waiters form a distributed FIFO queue through
 * the tail half, shared requests count in the lower half, an exclusive request closes the
 * shared "epoch" it swaps out and drains it before entering.
 *
 * Acquires advance rq->stage step by step, so one that timed out can be resumed later by
 * the janitor (lock_api.c) from exactly where it stopped.
 */
#include "core/log.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

static const uint64_t zero;

static uint32_t my_id(const struct ddss_lock *lk, const struct lock_req *rq)
{
	return lock_own_id(lk, rq->slot) | (lk->poll ? 0 : LOCK_ID_SLEEPS);
}

static bool id_ok(const struct ddss_lock *lk, uint32_t id)
{
	return ddss_tp_valid_rank(lk->tp, LOCK_ID_RANK(id));
}

/* Surveys (lock_recover.c, lock_agent.c) may now place the request: behind rq->pred. */
static void counted(struct ddss_lock *lk, const struct lock_req *rq)
{
	struct lock_slot *sl = &lk->slot[rq->slot];

	sl->q_pred = rq->pred;
	__atomic_store_n(&sl->q_state, Q_COUNTED, __ATOMIC_RELEASE);
}

/*
 * The lock's atomics at its home. A release whose hold may still have a READ in flight
 * (a get's transfer, rq->fence) posts them fenced: a NIC may otherwise execute the
 * release before the READ samples the data, and the next holder's put could land in the
 * middle of what the get returns (docs/transport.md, "Ordering and fences").
 */
static int cas(struct ddss_lock *lk, const struct lock_req *rq, unsigned word, uint64_t cmp,
	       uint64_t swp, uint64_t *old_p)
{
	return ddss_tp_cas_ex(lk->tp, rq->home, rq->hdr + word, cmp, swp, lock_fenced(rq), old_p);
}

static int fadd(struct ddss_lock *lk, const struct lock_req *rq, unsigned word, uint64_t add,
		uint64_t *old_p)
{
	return ddss_tp_fadd_ex(lk->tp, rq->home, rq->hdr + word, add, lock_fenced(rq), old_p);
}

/*
 * The acquire's own atomics: a failed one may still have landed (the operation timed out
 * or the connection went while it was on the way), so the request is marked. Running its
 * stage again would apply it twice: a swap loop that finds its own id in the tail takes
 * itself for its predecessor and waits for itself for ever. queue_acquire (lock_api.c)
 * reads the marks to choose between freeing, resuming and losing the slot.
 */
static int acq_cas(struct ddss_lock *lk, struct lock_req *rq, unsigned word, uint64_t cmp,
		   uint64_t swp, uint64_t *old_p)
{
	int r = cas(lk, rq, word, cmp, swp, old_p);

	if (r) {
		rq->unknown = true;
		rq->id_maybe_out |= word == LOCK_W && LOCK_TAIL(swp) != 0;
	}
	return r;
}

static int acq_fadd(struct ddss_lock *lk, struct lock_req *rq, unsigned word, uint64_t add,
		    uint64_t *old_p)
{
	int r = fadd(lk, rq, word, add, old_p);

	if (r)
		rq->unknown = true;
	return r;
}

/* A wait that only lasts while a peer is between two steps of its own: bounded by the
 * operation timeout, so a peer dying there gives an error instead of a hang (0: no
 * operation timeout, as tcp allows: no bound, where it used to give up at once). */
static int64_t transient_deadline(const struct ddss_lock *lk)
{
	int ms = lk->tp->cfg.op_timeout_ms;

	return ms > 0 ? ddss_now_ns() + (int64_t)ms * 1000000ll : INT64_MAX;
}

/* ---- fair mode: tickets ---- */

/* Wait until turn word N shows our ticket: only as long as the previous ticket's CAS loop. */
static int wait_turn(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	unsigned spins = 0;
	uint64_t last = ~0ull;
	int64_t next_check = 0;

	for (;;) {
		uint64_t turn;
		int r = ddss_tp_read(lk->tp, rq->home, rq->hdr + LOCK_N, &turn, 8);

		if (r)
			return r;
		if (turn == rq->ticket)
			return 0;
		/* A turn that does not move may belong to a dead rank's ticket. */
		if (turn != last) {
			last = turn;
			next_check = 0;
		}
		r = lock_turn_check(lk, rq, turn, &next_check);
		if (r)
			return r;
		/* Tickets between ours and the turn each need one CAS loop: poll less often the
		 * further back we are, so waiters do not flood the home with reads. */
		if (rq->ticket - turn > 1 && rq->ticket - turn < (1ull << 20)) {
			struct timespec ts = { 0, (long)(rq->ticket - turn) * 2000 };

			nanosleep(&ts, NULL);
		}
		if (++spins % 64 == 0) {
			if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
				return -ESHUTDOWN;
			if (ddss_now_ns() >= deadline_ns)
				return -ETIMEDOUT;
		}
		sched_yield();
	}
}

/* ---- exclusive ---- */

/* Queued behind rq->pred: wait until the lock is handed to us (at once if no pred). */
static int wait_grant(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint64_t v;

	if (!rq->pred)
		return 0;
	if (rq->agent)
		return lock_agent_wait_grant(lk, rq, deadline_ns);
	return lock_wait_rec(lk, rq->slot, REC_GRANT, LOCK_ID_RANK(rq->pred), deadline_ns, &v);
}

static int x_acquire(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns);

/*
 * Free means no tail and every shared arrival released (D == [0 | S]). Between reading D
 * and the second CAS the word can go through a whole epoch and come back to the same
 * [0 | s] with a new shared holder in it (an ABA that the spin model found), so after
 * that CAS we register as the closer of those s arrivals like any exclusive request
 * (acquire step 6): almost always all s are released already and nothing is waited for.
 */
static int x_try(struct ddss_lock *lk, struct lock_req *rq)
{
	uint64_t old, d;
	int r = acq_cas(lk, rq, LOCK_W, 0, LOCK_WORD(my_id(lk, rq), 0), &old);

	if (r)
		return r;
	if (!old) {
		counted(lk, rq);
		rq->stage = STAGE_DONE;
		return 0;
	}
	if (LOCK_TAIL(old)) {
		lock_agent_nudge(lk, rq, LOCK_TAIL(old)); /* a dead tail never leaves */
		return -EBUSY;
	}
	r = ddss_tp_read(lk->tp, rq->home, rq->hdr + LOCK_D, &d, 8);
	if (r)
		return r;
	if (d != LOCK_WORD(0, LOCK_COUNT(old)))
		return -EBUSY; /* shared holders, or a closer draining them */
	r = acq_cas(lk, rq, LOCK_W, old, LOCK_WORD(my_id(lk, rq), 0), &d);
	if (r)
		return r;
	if (d != old)
		return -EBUSY;
	rq->pred = 0;
	rq->count = LOCK_COUNT(old);
	counted(lk, rq);
	rq->stage = STAGE_GRANTED;
	return x_acquire(lk, rq, INT64_MAX);
}

/* Swap ourselves in as tail, keeping nothing of the word but the predecessor and count. */
static int x_swap(struct ddss_lock *lk, struct lock_req *rq)
{
	uint64_t expect = 0, old;
	int r;

	for (;;) {
		r = acq_cas(lk, rq, LOCK_W, expect, LOCK_WORD(my_id(lk, rq), 0), &old);
		if (r)
			return r;
		if (old == expect)
			break;
		expect = old;
	}
	rq->pred = LOCK_TAIL(old);
	rq->count = LOCK_COUNT(old);
	if (rq->pred && !id_ok(lk, rq->pred)) {
		DDSS_ERR("lock word at rank %u holds a bad tail %#x", rq->home, rq->pred);
		return -EPROTO;
	}
	counted(lk, rq);
	return 0;
}

static int x_acquire(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint64_t v;
	int r;

	switch (rq->stage) {
	case STAGE_START:
		if (__atomic_load_n(&lk->fair, __ATOMIC_RELAXED)) {
			struct lock_slot *sl = &lk->slot[rq->slot];

			/* Turn checks (lock_recover.c) count us from before the fetch&add. */
			__atomic_store_n(&sl->q_ticket_state, TICKET_TAKING, __ATOMIC_RELEASE);
			r = acq_fadd(lk, rq, LOCK_K, 1, &rq->ticket);
			if (r)
				return r;
			sl->q_ticket = rq->ticket;
			__atomic_store_n(&sl->q_ticket_state, TICKET_HELD, __ATOMIC_RELEASE);
			if (ddss_lock_test_hook)
				ddss_lock_test_hook(lk->ctx, DDSS_LOCK_TP_TICKET);
		}
		rq->stage = STAGE_TICKET;
		/* fall through */
	case STAGE_TICKET:
		if (__atomic_load_n(&lk->fair, __ATOMIC_RELAXED)) {
			r = wait_turn(lk, rq, deadline_ns);
			if (r)
				return r;
		}
		rq->stage = STAGE_TURN;
		/* fall through */
	case STAGE_TURN:
		r = x_swap(lk, rq);
		if (!r && __atomic_load_n(&lk->fair, __ATOMIC_RELAXED)) {
			/* Pass the turn: from our ticket only. A fetch&add that timed out and
			 * landed after a turn check had passed the turn for us (lock_recover.c)
			 * would move it twice, past a ticket whose holder then waits for ever. */
			r = acq_cas(lk, rq, LOCK_N, rq->ticket, rq->ticket + 1, &v);
			if (!r)
				__atomic_store_n(&lk->slot[rq->slot].q_ticket_state, TICKET_PASSED,
						 __ATOMIC_RELEASE);
		}
		if (r)
			return r;
		rq->stage = STAGE_SWAPPED;
		/* fall through */
	case STAGE_SWAPPED:
		if (ddss_lock_test_hook)
			ddss_lock_test_hook(lk->ctx, DDSS_LOCK_TP_SWAPPED);
		if (rq->agent)
			lock_agent_swapped(lk, rq);
		if (rq->pred) {
			uint64_t s = lock_seal(rq->count), me = lock_seal(my_id(lk, rq));
			uint32_t prank = LOCK_ID_RANK(rq->pred);
			uint64_t at = (uint64_t)LOCK_ID_SLOT(rq->pred) * REC_LEN;

			/* next_s first: the predecessor reads it once it sees next. A predecessor
			 * of an earlier process of its rank went with it, like a dead one's. */
			r = lock_id_current(lk, rq->pred) ?
				    ddss_tp_write(lk->tp, prank, at + REC_NEXT_S, &s, 8) : -EHOSTDOWN;
			if (!r)
				r = lock_rec_send(lk, rq->pred, REC_NEXT, &me);
			if (r && rq->agent) /* it is dead or failed: the agent waits on surveys */
				DDSS_WARN("lock recovery: predecessor %#x: %s", rq->pred,
					  ddss_strerror(r));
			else if (r)
				return r;
		}
		rq->stage = STAGE_ANNOUNCED;
		/* fall through */
	case STAGE_ANNOUNCED:
		r = wait_grant(lk, rq, deadline_ns);
		if (r)
			return r;
		rq->stage = STAGE_GRANTED;
		/* fall through */
	case STAGE_GRANTED:
		if (rq->count) {
			uint64_t old;

			/* From now on a drain note may come at any time (lock_reclaim.c). */
			__atomic_store_n(&lk->slot[rq->slot].closer, true, __ATOMIC_RELEASE);
			r = acq_fadd(lk, rq, LOCK_D, (uint64_t)my_id(lk, rq) << 32, &old);
			if (r)
				return r;
			if (LOCK_TAIL(old) || LOCK_COUNT(old) > rq->count) {
				DDSS_ERR("lock drain word at rank %u was %#llx (closing %u)", rq->home,
					 (unsigned long long)old, rq->count);
				return -EPROTO;
			}
			rq->drain = rq->count - LOCK_COUNT(old);
		}
		rq->stage = STAGE_DRAINING;
		/* fall through */
	case STAGE_DRAINING:
		if (rq->count) {
			r = lock_drain_wait(lk, rq, deadline_ns);
			if (!r) /* every release of the epoch is in: nobody touches D until we leave */
				r = ddss_tp_write(lk->tp, rq->home, rq->hdr + LOCK_D, &zero, 8);
			if (r)
				return r;
		}
		rq->stage = STAGE_DONE;
		/* fall through */
	case STAGE_DONE:
		return 0;
	}
	return -EINVAL;
}

/*
 * Hand over: the shared requests queued behind us first, then the exclusive successor.
 * Without an announced successor we must also take our id out of the tail, by CAS; the
 * shared requests already registered are granted before that CAS, so its round trip is
 * not in their wait (the ones that arrive meanwhile are granted after it).
 */
/* Before handing the lock to a waiter directly: the holder's last transfer has landed. */
static void fence(const struct lock_req *rq)
{
	if (rq->fence)
		rq->fence->wait(rq->fence->arg);
}

/*
 * Our successor's next_s, which it wrote before next: whole once next is on every NIC we
 * know of, but a write that lands out of order is only a moment behind (sealed words,
 * lock_int.h). A word that never unseals is a peer's bug, not a wait.
 */
static int wait_next_s(struct ddss_lock *lk, const struct lock_req *rq, uint32_t *x_p)
{
	int64_t deadline = 0;

	while (!lock_rec_sealed(lk, rq->slot, REC_NEXT_S, x_p)) {
		if (!deadline) {
			deadline = transient_deadline(lk);
		} else if (ddss_now_ns() >= deadline) {
			DDSS_ERR("lock: our successor's shared count never landed whole (%#llx)",
				 (unsigned long long)lock_rec_load(lk, rq->slot, REC_NEXT_S));
			return -EPROTO;
		}
		sched_yield();
	}
	return 0;
}

/*
 * @first: the old value the first CAS (for [me | 0]) returned, when it was posted and
 * someone else finishes the release (lock_posted.c); NULL for a release from the start.
 */
static int x_release(struct ddss_lock *lk, const struct lock_req *rq, const uint64_t *first)
{
	/* x: shared requests counted behind us (in W); settled: those of them granted, or
	 * found dead before they registered (lock_grant_more). */
	uint32_t me = my_id(lk, rq), x = 0, settled = 0, next = 0;
	uint64_t old;
	int r;

	if (!first)
		lock_rec_sealed(lk, rq->slot, REC_NEXT, &next); /* still 0 if not whole yet */
	if (!next) {
		for (;;) {
			if (first) {
				old = *first;
				first = NULL;
			} else {
				if (lock_grant_pending(lk, rq->slot))
					fence(rq);
				r = lock_grant_ready(lk, rq->slot);
				if (r < 0)
					return r;
				settled += (uint32_t)r;
				if (x < settled)
					x = settled; /* that many arrived at least: a better guess */
				/*
				 * Every request counted behind us is granted before the word goes
				 * idle: a closer of the idle epoch may swap in the moment it does,
				 * and its drain check must find every live request of that epoch
				 * granted (lock_recover.c). Granting after the CAS let a request
				 * whose rank died before it registered hold the grants back while
				 * the closer was told "clear" (issue 26).
				 */
				if (x > settled) {
					fence(rq);
					r = lock_grant_more(lk, rq->slot, x - settled);
					if (r < 0)
						return r;
					settled += (uint32_t)r > x - settled ? (uint32_t)r : x - settled;
					if (x < settled)
						x = settled;
				}
				/* Nobody behind us that we know of: may return before the CAS does. */
				if (!x)
					r = lock_posted_cas(lk, rq, LOCK_WORD(me, 0), LOCK_WORD(0, 0),
							    &old);
				else
					r = cas(lk, rq, LOCK_W, LOCK_WORD(me, x), LOCK_WORD(0, x),
						&old);
				if (r)
					return r; /* or LOCK_RELEASE_POSTED */
			}
			if (old == LOCK_WORD(me, x)) /* all granted: they are the idle epoch */
				return 0;
			if (LOCK_TAIL(old) != me)
				break;
			x = LOCK_COUNT(old);
		}
		/* Transient state: a successor swapped itself in and is about to announce
		 * (unless it died first: lock_recover.c finds that out). */
		r = lock_wait_successor(lk, rq, my_id(lk, rq), transient_deadline(lk), &next);
		if (r) {
			DDSS_ERR("lock: successor never announced itself: %s", ddss_strerror(r));
			return r;
		}
	}
	if (!id_ok(lk, next)) {
		DDSS_ERR("lock: bad successor id %#x in our record", next);
		return -EPROTO;
	}
	fence(rq);
	r = wait_next_s(lk, rq, &x);
	if (r)
		return r;
	if (x < settled) {
		DDSS_ERR("lock: successor counts %u shared requests, %u already granted", x,
			 settled);
		return -EPROTO;
	}
	r = lock_grant_more(lk, rq->slot, x - settled);
	if (r < 0)
		return r;
	if ((uint32_t)r > x - settled) {
		DDSS_ERR("lock: %u shared waiters registered behind us, our successor counts %u",
			 settled + (uint32_t)r, x);
		return -EPROTO;
	}
	return lock_grant(lk, next);
}

/* ---- shared ---- */

static int s_try(struct ddss_lock *lk, struct lock_req *rq)
{
	uint32_t x = 0;
	uint64_t old;
	int r;

	for (;;) {
		if (x == UINT32_MAX) { /* cannot happen: see LOCK_S_RESET; never wrap to 0 */
			DDSS_ERR("lock word at rank %u: shared count at its limit", rq->home);
			return -EPROTO;
		}
		r = acq_cas(lk, rq, LOCK_W, LOCK_WORD(0, x), LOCK_WORD(0, x + 1), &old);
		if (r)
			return r;
		if (old == LOCK_WORD(0, x))
			break;
		if (LOCK_TAIL(old)) {
			lock_agent_nudge(lk, rq, LOCK_TAIL(old));
			return -EBUSY;
		}
		x = LOCK_COUNT(old);
	}
	/* The count we arrived at, as s_acquire keeps it: at LOCK_S_RESET the release resets. */
	rq->pred = 0;
	rq->count = x;
	counted(lk, rq);
	rq->stage = STAGE_DONE;
	return 0;
}

/*
 * Tell the exclusive waiter we queue behind (rq->pred) that we are its shared request k:
 * one write into its entry k, or for k >= 64 a push on its overflow stack (lock_grant.c).
 */
static int s_register(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint32_t k = rq->count, prank = LOCK_ID_RANK(rq->pred);
	uint64_t rec = (uint64_t)LOCK_ID_SLOT(rq->pred) * REC_LEN;
	uint64_t val = lock_seal(my_id(lk, rq)), head = 0, old;
	int r;

	if (!lock_id_current(lk, rq->pred))
		return -EHOSTDOWN; /* an earlier process of its rank: gone with it */
	if (k < REC_ENTRIES) {
		r = ddss_tp_write(lk->tp, prank, rec + REC_ENTRY + 8 * k, &val, 8);
	} else {
		for (;;) {
			lock_rec_store(lk, rq->slot, REC_LINK, head); /* read once we are pushed */
			r = ddss_tp_cas(lk->tp, prank, rec + REC_OVF, head, my_id(lk, rq), &old);
			rq->unknown |= r != 0; /* pushed twice, our record would link to itself */
			if (r || old == head)
				break;
			head = old;
			if (ddss_now_ns() >= deadline_ns)
				return -ETIMEDOUT;
		}
	}
	if (r)
		return r;
	r = ddss_tp_notify(lk->tp, prank, LOCK_NOTE(LOCK_NOTE_WAKE, LOCK_ID_SLOT(rq->pred)));
	rq->unknown |= r && k >= REC_ENTRIES; /* pushed: run again, it would push us twice */
	return r;
}

static int s_acquire(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint64_t old;
	int r;

	switch (rq->stage) {
	case STAGE_START:
	case STAGE_TICKET:
	case STAGE_TURN:
		r = acq_fadd(lk, rq, LOCK_W, 1, &old);
		if (r)
			return r;
		rq->pred = LOCK_TAIL(old);
		rq->count = LOCK_COUNT(old);
		counted(lk, rq);
		if (rq->count == UINT32_MAX) /* cannot happen: see LOCK_S_RESET */
			DDSS_ERR("lock word at rank %u: shared count overflowed", rq->home);
		if (rq->pred && !id_ok(lk, rq->pred)) {
			DDSS_ERR("lock word at rank %u holds a bad tail %#x", rq->home, rq->pred);
			return -EPROTO;
		}
		rq->stage = STAGE_SWAPPED;
		/* fall through */
	case STAGE_SWAPPED:
		if (rq->pred) {
			r = s_register(lk, rq, deadline_ns);
			if (r)
				return r;
		}
		rq->stage = STAGE_ANNOUNCED;
		/* fall through */
	case STAGE_ANNOUNCED:
		r = wait_grant(lk, rq, deadline_ns);
		if (r)
			return r;
		rq->stage = STAGE_DONE;
		/* fall through */
	default:
		return 0;
	}
}

/*
 * One fetch&add on the drain word, whatever the epoch: releases are counted in R, arrivals
 * in S, and whoever closes the epoch waits for the difference (docs/locks.md). A closer
 * that already registered gets a drain notification.
 */
static int s_release(struct ddss_lock *lk, const struct lock_req *rq)
{
	uint64_t old;
	int r = fadd(lk, rq, LOCK_D, 1, &old);

	if (r || !LOCK_TAIL(old))
		return r;
	if (!id_ok(lk, LOCK_TAIL(old))) {
		DDSS_ERR("lock drain word at rank %u names a bad closer %#x", rq->home,
			 LOCK_TAIL(old));
		return -EPROTO;
	}
	if (!lock_id_current(lk, LOCK_TAIL(old)))
		return 0; /* a closer of an earlier process of its rank: nobody waits */
	return ddss_tp_notify(lk->tp, LOCK_ID_RANK(LOCK_TAIL(old)),
			      LOCK_NOTE(LOCK_NOTE_DRAIN, LOCK_ID_SLOT(LOCK_TAIL(old))));
}

/* ---- entry points ---- */

int lock_queue_acquire(struct ddss_lock *lk, struct lock_req *rq, bool try_only,
		       int64_t deadline_ns)
{
	if (rq->stage == STAGE_START) {
		struct lock_slot *sl = &lk->slot[rq->slot];

		/* Our record is ours until we publish our id in a lock word: clear it. */
		lock_rec_store(lk, rq->slot, REC_NEXT_S, 0);
		lock_rec_store(lk, rq->slot, REC_NEXT, 0);
		lock_rec_store(lk, rq->slot, REC_GRANT, 0);
		/* Surveys (lock_recover.c, lock_agent.c) count us from before our first atomic
		 * on the word: until it returns, nobody can tell where we are in the queue. */
		sl->q_home = rq->home;
		sl->q_hdr = rq->hdr;
		sl->q_shared = rq->mode == DDSS_LOCK_SHARED;
		__atomic_store_n(&sl->q_state, try_only ? Q_TRYING : Q_COUNTING, __ATOMIC_RELEASE);
		if (try_only)
			return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_try(lk, rq) : s_try(lk, rq);
	}
	return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_acquire(lk, rq, deadline_ns) :
						 s_acquire(lk, rq, deadline_ns);
}

int lock_queue_release(struct ddss_lock *lk, const struct lock_req *rq)
{
	return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_release(lk, rq, NULL) : s_release(lk, rq);
}

int lock_queue_release_after(struct ddss_lock *lk, const struct lock_req *rq, uint64_t old)
{
	return x_release(lk, rq, &old);
}

/*
 * The home's own look at a released segment's words, before it frees their memory: the
 * queue is empty (T == 0), every shared arrival has released (S == R), no epoch is being
 * closed (C == 0) and, in fair mode, no exclusive request holds a ticket it has not used
 * (K == N). W is read again last: had anyone arrived meanwhile, it would have changed
 * (S only grows, and T is 0 only while nobody queues). Loads only; the words stay the
 * NIC's (docs/locks.md "Words").
 */
bool ddss_lock_words_idle(const void *hdr)
{
	const uint64_t *w = (const uint64_t *)((const char *)hdr + LOCK_W);
	const uint64_t *d = (const uint64_t *)((const char *)hdr + LOCK_D);
	const uint64_t *k = (const uint64_t *)((const char *)hdr + LOCK_K);
	const uint64_t *n = (const uint64_t *)((const char *)hdr + LOCK_N);
	uint64_t w0 = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	uint64_t dv = __atomic_load_n(d, __ATOMIC_ACQUIRE);
	uint64_t kv = __atomic_load_n(k, __ATOMIC_ACQUIRE);
	uint64_t nv = __atomic_load_n(n, __ATOMIC_ACQUIRE);

	return LOCK_TAIL(w0) == 0 && LOCK_COUNT(w0) == LOCK_COUNT(dv) && LOCK_TAIL(dv) == 0 &&
	       kv == nv && __atomic_load_n(w, __ATOMIC_ACQUIRE) == w0;
}
