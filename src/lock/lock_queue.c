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

static const uint64_t one = 1;
static const uint64_t zero;

static uint32_t my_id(const struct ddss_lock *lk, const struct lock_req *rq)
{
	return LOCK_ID(lk->rank, rq->slot | (lk->poll ? 0 : LOCK_ID_SLEEPS));
}

static bool id_ok(const struct ddss_lock *lk, uint32_t id)
{
	return ddss_tp_valid_rank(lk->tp, LOCK_ID_RANK(id)) &&
	       LOCK_ID_SLOT(id) < DDSS_LOCK_SLOTS;
}

static int cas(struct ddss_lock *lk, const struct lock_req *rq, unsigned word, uint64_t cmp,
	       uint64_t swp, uint64_t *old_p)
{
	return ddss_tp_cas(lk->tp, rq->home, rq->hdr + word, cmp, swp, old_p);
}

static int fadd(struct ddss_lock *lk, const struct lock_req *rq, unsigned word, uint64_t add,
		uint64_t *old_p)
{
	return ddss_tp_fadd(lk->tp, rq->home, rq->hdr + word, add, old_p);
}

/* A wait that only lasts while a peer is between two steps of its own: bounded by the
 * operation timeout, so a peer dying there gives an error instead of a hang. */
static int64_t transient_deadline(const struct ddss_lock *lk)
{
	return ddss_now_ns() + (int64_t)lk->tp->cfg.op_timeout_ms * 1000000ll;
}

/* ---- fair mode: tickets ---- */

/* Wait until turn word N shows our ticket: only as long as the previous ticket's CAS loop. */
static int wait_turn(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t turn;
		int r = ddss_tp_read(lk->tp, rq->home, rq->hdr + LOCK_N, &turn, 8);

		if (r)
			return r;
		if (turn == rq->ticket)
			return 0;
		if (++spins % 64 == 0) {
			if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
				return -ESHUTDOWN;
			if (ddss_now_ns() >= deadline_ns)
				return -ETIMEDOUT;
		}
		sched_yield();
	}
}

/* ---- granting shared waiters ---- */

/*
 * Hand the lock to the @s shared requests queued behind @slot: collect their entries (they
 * may still be on their way), then post every grant at once and wait for them together.
 */
static int grant_shared(struct ddss_lock *lk, unsigned slot, uint32_t s)
{
	struct ddss_tp_req stack_reqs[16], *reqs = stack_reqs;
	uint32_t stack_ids[16], *ids = stack_ids;
	uint32_t got = 0, scan = s < REC_ENTRIES ? s : REC_ENTRIES;
	int64_t deadline = transient_deadline(lk);
	unsigned spins = 0;
	int r = 0;

	if (!s)
		return 0;
	if (s > 16) {
		reqs = calloc(s, sizeof(*reqs));
		ids = calloc(s, sizeof(*ids));
		if (!reqs || !ids) {
			free(reqs == stack_reqs ? NULL : reqs);
			free(ids == stack_ids ? NULL : ids);
			return -ENOMEM;
		}
	}
	while (got < s) {
		uint32_t seen = lock_wake_seen(lk, slot);
		uint32_t before = got;

		for (uint32_t i = 0; i < scan && got < s; i++) {
			uint64_t e = lock_rec_load(lk, slot, REC_ENTRY + 8 * i);

			if (!e)
				continue;
			ids[got++] = (uint32_t)e;
			if (s <= REC_ENTRIES) {
				lock_rec_store(lk, slot, REC_ENTRY + 8 * i, 0); /* nobody else writes it */
			} else {
				/* Overflow requests CAS into taken entries: clear with an atomic too. */
				uint64_t old;

				r = ddss_tp_cas(lk->tp, lk->rank, (uint64_t)slot * REC_LEN + REC_ENTRY + 8 * i,
						e, 0, &old);
				if (r)
					goto out;
			}
		}
		if (got == before) {
			r = lock_wait_step(lk, slot, seen, 0, deadline, &spins);
			if (r) {
				DDSS_ERR("lock: %u of %u shared waiters never queued: %s", s - got, s,
					 ddss_strerror(r));
				goto out;
			}
		}
	}
	/* Sleeping waiters get one notification each; spinning ones one write each, all
	 * posted before any is waited for. */
	for (uint32_t i = 0; i < s; i++) {
		uint32_t id = ids[i];
		int e;

		if (!id_ok(lk, id)) {
			DDSS_ERR("lock: bad shared waiter id %#x in a record: skipped", id);
			ids[i] = 0;
			continue;
		}
		if (id & LOCK_ID_SLEEPS) {
			e = ddss_tp_notify(lk->tp, LOCK_ID_RANK(id),
					   LOCK_NOTE(LOCK_NOTE_GRANT, LOCK_ID_SLOT(id)));
			ids[i] = 0; /* nothing to wait for */
		} else {
			e = ddss_tp_post_write(lk->tp, LOCK_ID_RANK(id),
					       (uint64_t)LOCK_ID_SLOT(id) * REC_LEN + REC_GRANT,
					       &one, 8, &reqs[i]);
			if (e)
				ids[i] = 0;
		}
		if (e)
			DDSS_WARN("lock: grant to waiter %#x failed: %s", id, ddss_strerror(e));
	}
	for (uint32_t i = 0; i < s; i++) {
		if (!ids[i])
			continue;
		if (ddss_tp_wait(lk->tp, &reqs[i], DDSS_TP_TIMEOUT_DEFAULT) == 0 && reqs[i].status)
			DDSS_WARN("lock: grant to waiter %#x failed: %s", ids[i],
				  ddss_strerror(reqs[i].status));
	}
out:
	if (reqs != stack_reqs)
		free(reqs);
	if (ids != stack_ids)
		free(ids);
	return r;
}

/* ---- exclusive ---- */

static int x_try(struct ddss_lock *lk, struct lock_req *rq)
{
	uint64_t old;
	int r = cas(lk, rq, LOCK_W, 0, LOCK_WORD(my_id(lk, rq), 0), &old);

	if (r)
		return r;
	if (old)
		return -EBUSY;
	rq->stage = STAGE_DONE;
	return 0;
}

/* Swap ourselves in as tail, keeping nothing of the word but the predecessor and count. */
static int x_swap(struct ddss_lock *lk, struct lock_req *rq)
{
	uint64_t expect = 0, old;
	int r;

	for (;;) {
		r = cas(lk, rq, LOCK_W, expect, LOCK_WORD(my_id(lk, rq), 0), &old);
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
	return 0;
}

static int x_acquire(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint64_t v;
	int r;

	switch (rq->stage) {
	case STAGE_START:
		if (__atomic_load_n(&lk->fair, __ATOMIC_RELAXED)) {
			r = fadd(lk, rq, LOCK_K, 1, &rq->ticket);
			if (r)
				return r;
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
		if (!r && __atomic_load_n(&lk->fair, __ATOMIC_RELAXED))
			r = fadd(lk, rq, LOCK_N, 1, &v); /* pass the turn */
		if (r)
			return r;
		rq->stage = STAGE_SWAPPED;
		/* fall through */
	case STAGE_SWAPPED:
		if (rq->pred) {
			uint64_t s = rq->count, me = my_id(lk, rq);
			uint32_t prank = LOCK_ID_RANK(rq->pred);
			uint64_t at = (uint64_t)LOCK_ID_SLOT(rq->pred) * REC_LEN;

			/* next_s first: the predecessor reads it once it sees next. */
			r = ddss_tp_write(lk->tp, prank, at + REC_NEXT_S, &s, 8);
			if (!r)
				r = lock_rec_send(lk, rq->pred, REC_NEXT, &me);
			if (r)
				return r;
		}
		rq->stage = STAGE_ANNOUNCED;
		/* fall through */
	case STAGE_ANNOUNCED:
		if (rq->pred) {
			r = lock_wait_rec(lk, rq->slot, REC_GRANT, LOCK_ID_RANK(rq->pred),
					  deadline_ns, &v);
			if (r)
				return r;
		}
		rq->stage = STAGE_GRANTED;
		/* fall through */
	case STAGE_GRANTED:
		if (rq->count) {
			uint64_t old;

			r = fadd(lk, rq, LOCK_D, (uint64_t)my_id(lk, rq) << 32, &old);
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
			r = lock_wait_drained(lk, rq->slot, rq->drain, deadline_ns);
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

/* Shared requests queued behind @slot that have registered so far: the likely count. */
static uint32_t queued_guess(struct ddss_lock *lk, unsigned slot)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < REC_ENTRIES; i++)
		n += lock_rec_load(lk, slot, REC_ENTRY + 8 * i) != 0;
	return n;
}

static int x_release(struct ddss_lock *lk, const struct lock_req *rq)
{
	uint32_t me = my_id(lk, rq), x;
	uint64_t next = lock_rec_load(lk, rq->slot, REC_NEXT), old;
	int r;

	if (!next) {
		x = queued_guess(lk, rq->slot); /* a wrong guess costs one more CAS */
		for (;;) {
			r = cas(lk, rq, LOCK_W, LOCK_WORD(me, x), LOCK_WORD(0, x), &old);
			if (r)
				return r;
			if (old == LOCK_WORD(me, x))
				return grant_shared(lk, rq->slot, x); /* they become the idle epoch */
			if (LOCK_TAIL(old) != me)
				break;
			x = LOCK_COUNT(old);
		}
		/* Transient state: a successor swapped itself in and is about to announce. */
		r = lock_wait_rec(lk, rq->slot, REC_NEXT, 0, transient_deadline(lk), &next);
		if (r) {
			DDSS_ERR("lock: successor never announced itself: %s", ddss_strerror(r));
			return r;
		}
	}
	if (!id_ok(lk, (uint32_t)next)) {
		DDSS_ERR("lock: bad successor id %#llx in our record", (unsigned long long)next);
		return -EPROTO;
	}
	r = grant_shared(lk, rq->slot, (uint32_t)lock_rec_load(lk, rq->slot, REC_NEXT_S));
	if (r)
		return r;
	return lock_grant(lk, (uint32_t)next);
}

/* ---- shared ---- */

static int s_try(struct ddss_lock *lk, struct lock_req *rq)
{
	uint32_t x = 0;
	uint64_t old;
	int r;

	for (;;) {
		r = cas(lk, rq, LOCK_W, LOCK_WORD(0, x), LOCK_WORD(0, x + 1), &old);
		if (r)
			return r;
		if (old == LOCK_WORD(0, x))
			break;
		if (LOCK_TAIL(old))
			return -EBUSY;
		x = LOCK_COUNT(old);
	}
	rq->stage = STAGE_DONE;
	return 0;
}

/* Put our id into the queued-behind waiter's entry k (k % 64: taken only on overflow). */
static int s_register(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint32_t k = rq->count, prank = LOCK_ID_RANK(rq->pred);
	uint64_t at = (uint64_t)LOCK_ID_SLOT(rq->pred) * REC_LEN + REC_ENTRY + 8 * (k % REC_ENTRIES);
	uint64_t val = LOCK_WORD(k + 1, my_id(lk, rq)), old;
	unsigned spins = 0;
	int r;

	for (;;) {
		r = ddss_tp_cas(lk->tp, prank, at, 0, val, &old);
		if (r)
			return r;
		if (!old)
			break;
		if (++spins % 64 == 0) {
			if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
				return -ESHUTDOWN;
			if (ddss_now_ns() >= deadline_ns)
				return -ETIMEDOUT;
		}
		sched_yield();
	}
	return ddss_tp_notify(lk->tp, prank, LOCK_NOTE(LOCK_NOTE_WAKE, LOCK_ID_SLOT(rq->pred)));
}

static int s_acquire(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	uint64_t old, v;
	int r;

	switch (rq->stage) {
	case STAGE_START:
	case STAGE_TICKET:
	case STAGE_TURN:
		r = fadd(lk, rq, LOCK_W, 1, &old);
		if (r)
			return r;
		rq->pred = LOCK_TAIL(old);
		rq->count = LOCK_COUNT(old);
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
		if (rq->pred) {
			r = lock_wait_rec(lk, rq->slot, REC_GRANT, LOCK_ID_RANK(rq->pred),
					  deadline_ns, &v);
			if (r)
				return r;
		}
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
	return ddss_tp_notify(lk->tp, LOCK_ID_RANK(LOCK_TAIL(old)),
			      LOCK_NOTE(LOCK_NOTE_DRAIN, LOCK_ID_SLOT(LOCK_TAIL(old))));
}

/* ---- entry points ---- */

int lock_queue_acquire(struct ddss_lock *lk, struct lock_req *rq, bool try_only,
		       int64_t deadline_ns)
{
	if (rq->stage == STAGE_START) {
		/* Our record is ours until we publish our id in a lock word: clear it. */
		lock_rec_store(lk, rq->slot, REC_NEXT_S, 0);
		lock_rec_store(lk, rq->slot, REC_NEXT, 0);
		lock_rec_store(lk, rq->slot, REC_GRANT, 0);
		if (try_only)
			return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_try(lk, rq) : s_try(lk, rq);
	}
	return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_acquire(lk, rq, deadline_ns) :
						 s_acquire(lk, rq, deadline_ns);
}

int lock_queue_release(struct ddss_lock *lk, const struct lock_req *rq)
{
	return rq->mode == DDSS_LOCK_EXCLUSIVE ? x_release(lk, rq) : s_release(lk, rq);
}
