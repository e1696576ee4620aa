/*
 * Handing a lock to the shared requests queued behind an exclusive waiter, all at once.
 *
 * Shared request k of an epoch registers in the exclusive waiter's record: k < 64 writes
 * its sealed id into entry[k] (lock_int.h; each entry is written once per epoch, so the
 * owner clears it with a plain store); k >= 64 pushes itself on the record's overflow stack with a remote
 * CAS (its own record's link word holds the one below), which the owner empties with one
 * CAS through its loopback (never a CPU atomic on a word remote atomics touch).
 */
#include "core/log.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <stdlib.h>

struct fanout {
	uint32_t *ids;
	uint32_t n, cap;
};

static int fanout_add(struct fanout *f, uint32_t id)
{
	if (f->n == f->cap) {
		uint32_t cap = f->cap ? 2 * f->cap : 64;
		uint32_t *ids = realloc(f->ids, cap * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		f->ids = ids;
		f->cap = cap;
	}
	f->ids[f->n++] = id;
	return 0;
}

/* Take the whole overflow stack of @slot and follow it; the ids go to @f. */
static int take_overflow(struct ddss_lock *lk, unsigned slot, struct fanout *f)
{
	uint64_t at = (uint64_t)slot * REC_LEN + REC_OVF, head = 0, old;
	int r;

	if (!lock_rec_load(lk, slot, REC_OVF))
		return 0;
	for (;;) {
		r = ddss_tp_cas(lk->tp, lk->rank, at, head, 0, &old);
		if (r)
			return r;
		if (old == head)
			break;
		head = old;
	}
	for (uint32_t id = (uint32_t)head; id;) {
		uint64_t link;

		if (!ddss_tp_valid_rank(lk->tp, LOCK_ID_RANK(id)))
			return -EPROTO;
		if (!lock_id_current(lk, id))
			return -EHOSTDOWN; /* the stack below an earlier process's request */
		r = fanout_add(f, id);
		if (!r) {
			__atomic_add_fetch(&lk->slot[slot].regs_seen, 1, __ATOMIC_RELEASE);
			r = ddss_tp_read(lk->tp, LOCK_ID_RANK(id),
					 (uint64_t)LOCK_ID_SLOT(id) * REC_LEN + REC_LINK, &link, 8);
		}
		if (r)
			return r;
		id = (uint32_t)link;
	}
	return 0;
}

/* Move every registered request of @slot into @f. */
static int collect(struct ddss_lock *lk, unsigned slot, struct fanout *f)
{
	for (uint32_t i = 0; i < REC_ENTRIES; i++) {
		uint32_t id;
		int r;

		/* Empty, or still landing: its notification makes us collect again. */
		if (!lock_rec_sealed(lk, slot, REC_ENTRY + 8 * i, &id))
			continue;
		r = fanout_add(f, id);
		if (r)
			return r;
		lock_rec_store(lk, slot, REC_ENTRY + 8 * i, 0);
		/* Counted for lock_reclaim.c: all of an epoch's registrations are in. */
		__atomic_add_fetch(&lk->slot[slot].regs_seen, 1, __ATOMIC_RELEASE);
	}
	return take_overflow(lk, slot, f);
}

/*
 * Grant the sleeping waiters of @f: one GRANT notification each, batched per rank (one
 * system call on tcp, one doorbell on verbs, instead of one per waiter: in a cascade the
 * releaser's sends were most of the time until the last shared waiter was granted).
 * Clears the ids it handled (sets them to 0).
 */
static void grant_sleepers(struct ddss_lock *lk, struct fanout *f)
{
	uint32_t batch[DDSS_TP_NOTIFY_BATCH];

	for (uint32_t i = 0; i < f->n; i++) {
		uint32_t rank = LOCK_ID_RANK(f->ids[i]), n = 0;
		int e;

		if (!(f->ids[i] & LOCK_ID_SLEEPS))
			continue;
		/* This rank's sleepers from i on, in order; the rest wait for their rank's turn. */
		for (uint32_t j = i; j < f->n && n < DDSS_TP_NOTIFY_BATCH; j++) {
			if (!(f->ids[j] & LOCK_ID_SLEEPS) || LOCK_ID_RANK(f->ids[j]) != rank)
				continue;
			batch[n++] = LOCK_NOTE(LOCK_NOTE_GRANT, LOCK_ID_SLOT(f->ids[j]));
			f->ids[j] = 0;
		}
		e = ddss_tp_notify_many(lk->tp, rank, batch, n);
		if (e)
			DDSS_WARN("lock: granting %u waiters at rank %u failed: %s", n, rank,
				  ddss_strerror(e));
	}
}

/* Grant everyone in @f: sleeping waiters by notification (batched per rank), spinning
 * ones by one RDMA write each, all posted before any is waited for. */
static void send_grants(struct ddss_lock *lk, struct fanout *f)
{
	static const uint64_t one = 1;
	struct ddss_tp_req stack_reqs[16], *reqs = stack_reqs;
	uint32_t spinners = 0;
	bool *posted;

	for (uint32_t i = 0; i < f->n; i++) {
		uint32_t id = f->ids[i];

		spinners += !(id & LOCK_ID_SLEEPS);
		if (!ddss_tp_valid_rank(lk->tp, LOCK_ID_RANK(id))) {
			DDSS_ERR("lock: bad shared waiter id %#x in a record: skipped", id);
			f->ids[i] = 0;
		} else if (!lock_id_current(lk, id)) {
			f->ids[i] = 0; /* an earlier process's: gone with it, like a dead rank's */
		}
	}
	grant_sleepers(lk, f);
	if (!spinners)
		return;
	if (f->n > 16 && !(reqs = calloc(f->n, sizeof(*reqs)))) {
		for (uint32_t i = 0; i < f->n; i++) /* no memory: one at a time */
			if (f->ids[i])
				lock_grant(lk, f->ids[i]);
		return;
	}
	posted = calloc(f->n, sizeof(*posted));
	for (uint32_t i = 0; i < f->n; i++) {
		uint32_t id = f->ids[i];
		int e;

		if (!id)
			continue;
		if (!posted) {
			e = lock_grant(lk, id);
		} else {
			e = ddss_tp_post_write(lk->tp, LOCK_ID_RANK(id),
					       (uint64_t)LOCK_ID_SLOT(id) * REC_LEN + REC_GRANT,
					       &one, 8, &reqs[i]);
			posted[i] = !e;
		}
		if (e)
			DDSS_WARN("lock: grant to waiter %#x failed: %s", id, ddss_strerror(e));
	}
	for (uint32_t i = 0; posted && i < f->n; i++) {
		if (posted[i] && ddss_tp_wait(lk->tp, &reqs[i], DDSS_TP_TIMEOUT_DEFAULT) == 0 &&
		    reqs[i].status)
			DDSS_WARN("lock: grant to waiter %#x failed: %s", f->ids[i],
				  ddss_strerror(reqs[i].status));
	}
	free(posted);
	if (reqs != stack_reqs)
		free(reqs);
}

bool lock_grant_pending(struct ddss_lock *lk, unsigned slot)
{
	return __atomic_load_n(&lk->slot[slot].wake, __ATOMIC_ACQUIRE) != lk->slot[slot].wake_mark;
}

int lock_grant_ready(struct ddss_lock *lk, unsigned slot)
{
	struct fanout f = { 0 };
	int r;

	/* Every registration is followed by a notification for the slot: none since we
	 * last looked means (almost surely) nothing to collect; a miss only costs the
	 * caller one more CAS round, after which it looks again. */
	if (!lock_grant_pending(lk, slot))
		return 0;
	lk->slot[slot].wake_mark = __atomic_load_n(&lk->slot[slot].wake, __ATOMIC_ACQUIRE);
	r = collect(lk, slot, &f);

	send_grants(lk, &f); /* even after an error: those collected are waiting */
	free(f.ids);
	return r ? r : (int)f.n;
}

/* Registrations waited for this long make a census ask whether the missing are alive. */
#define MISSING_FIRST_NS (250 * 1000000ll)
#define MISSING_EVERY_NS (1000 * 1000000ll)

/* Whether @plain_id (a waiter id without the "sleeps" bit) is in the fanout @arg. */
static bool fanout_has(const void *arg, uint32_t plain_id)
{
	const struct fanout *f = arg;

	for (uint32_t i = 0; i < f->n; i++)
		if ((f->ids[i] & ~(uint32_t)LOCK_ID_SLEEPS) == plain_id)
			return true;
	return false;
}

/*
 * Shared requests counted behind @slot that have not registered after a while: 1 if none
 * of them is alive (a census of every member finds no live shared request waiting behind
 * us that is not in @f, and none with its first atomic still out). Those were counted by
 * ranks that died before their one write; they will never register, and the closer of our
 * epoch learns from its drain check that their releases will not come either. 0 if one may
 * still come; -ESHUTDOWN.
 */
static int missing_are_dead(struct ddss_lock *lk, unsigned slot, const struct fanout *f)
{
	const struct lock_slot *sl = &lk->slot[slot];
	int r = lock_census_waiting_behind(lk, sl->q_home, sl->q_hdr, lock_own_id(lk, slot),
					   true, fanout_has, f);

	return r == -ESHUTDOWN ? r : r == 0;
}

int lock_grant_more(struct ddss_lock *lk, unsigned slot, uint32_t n)
{
	int64_t deadline = 0; /* read the clock only if we must wait: it is slow in a VM */
	int64_t check = 0;
	struct fanout f = { 0 };
	unsigned spins = 0;
	int r = 0;

	if (!n)
		return 0; /* the common release: nobody registered behind us */
	while (f.n < n) {
		uint32_t seen = lock_wake_seen(lk, slot), before = f.n;

		r = collect(lk, slot, &f);
		if (r)
			break;
		if (f.n == before) {
			/* Requests counted in the word but not registered yet: on their way, or
			 * counted by a rank that died before its write. */
			if (!deadline) {
				check = ddss_now_ns() + MISSING_FIRST_NS;
				deadline = ddss_now_ns() +
					   (int64_t)lk->tp->cfg.op_timeout_ms * 1000000ll;
			}
			if (ddss_now_ns() >= check) {
				r = missing_are_dead(lk, slot, &f);
				if (r < 0)
					break;
				if (r) {
					/* A registration may have landed between our last look
					 * and the census, which then declared its rank dead:
					 * nothing of that rank lands any more, so one more look
					 * takes whatever did (left behind, it would be counted
					 * as settled twice; the spin model found it). */
					r = collect(lk, slot, &f);
					if (!r && f.n < n)
						DDSS_WARN("lock: %u of %u shared waiters were counted "
							  "by ranks that died before they queued",
							  n - f.n, n);
					break;
				}
				check = ddss_now_ns() + MISSING_EVERY_NS;
			}
			r = lock_wait_step_until(lk, slot, seen, check, deadline, &spins);
			if (r) {
				DDSS_ERR("lock: %u of %u shared waiters never queued: %s", n - f.n, n,
					 ddss_strerror(r));
				break;
			}
		}
	}
	send_grants(lk, &f); /* even after an error: those collected are waiting */
	r = r ? r : (int)f.n;
	free(f.ids);
	return r;
}

int lock_fail_registered(struct ddss_lock *lk, unsigned slot)
{
	struct fanout f = { 0 };
	int r = collect(lk, slot, &f);

	for (uint32_t i = 0; i < f.n; i++) /* even after an error: those collected wait */
		lock_fail(lk, f.ids[i]);
	free(f.ids);
	return r;
}
