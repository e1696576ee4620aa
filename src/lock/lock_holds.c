/*
 * Which locks this context holds: key -> (home, header offset, exclusive slot, shared
 * holds). Release needs it to know the mode and, for an exclusive hold, the waiter record
 * that successors announce themselves in. All calls hold ddss_lock.mu.
 *
 * Holds have an owner. In direct mode it is always 0: the context holds its locks, as the
 * papers' processes do. In the daemon (src/daemon) one context serves many client
 * processes, and each worker thread acts for one client (ddss_lock_act_for): a client
 * sees, releases and skips implicit locks under only its own holds, and its holds can be
 * released when it dies.
 */
#include "lock/lock_int.h"

#include <errno.h>
#include <stdlib.h>

#define HOLD_BUCKETS 256u

static unsigned bucket(uint64_t key)
{
	key ^= key >> 29;
	key *= 0xbf58476d1ce4e5b9ull;
	return (unsigned)(key >> 56) % HOLD_BUCKETS;
}

int lock_holds_init(struct ddss_lock *lk)
{
	lk->holds = calloc(HOLD_BUCKETS, sizeof(*lk->holds));
	return lk->holds ? 0 : -ENOMEM;
}

void lock_holds_fini(struct ddss_lock *lk)
{
	if (!lk->holds)
		return;
	for (unsigned b = 0; b < HOLD_BUCKETS; b++) {
		while (lk->holds[b]) {
			struct lock_hold *h = lk->holds[b];

			lk->holds[b] = h->next;
			free(h);
		}
	}
	free(lk->holds);
	lk->holds = NULL;
	while (lk->hold_free) {
		struct lock_hold *h = lk->hold_free;

		lk->hold_free = h->next;
		free(h);
	}
}

static __thread uint32_t acting_owner;

void ddss_lock_act_for(uint32_t owner)
{
	acting_owner = owner;
}

uint32_t lock_owner(void)
{
	return acting_owner;
}

struct lock_hold *lock_holds_find(struct ddss_lock *lk, uint64_t key)
{
	for (struct lock_hold *h = lk->holds[bucket(key)]; h; h = h->next)
		if (h->key == key && h->owner == acting_owner)
			return h;
	return NULL;
}

struct lock_hold *lock_holds_any_of(struct ddss_lock *lk, uint32_t owner)
{
	for (unsigned b = 0; b < HOLD_BUCKETS; b++)
		for (struct lock_hold *h = lk->holds[b]; h; h = h->next)
			if (h->owner == owner && ((h->excl && !h->implicit) || h->shared))
				return h;
	return NULL;
}

int lock_user_mode(const struct lock_hold *h)
{
	if (!h)
		return 0;
	return h->excl && !h->implicit ? DDSS_LOCK_EXCLUSIVE :
	       h->shared		 ? DDSS_LOCK_SHARED : 0;
}

struct lock_hold *lock_holds_add(struct ddss_lock *lk, uint64_t key, uint32_t home,
				  uint64_t hdr, uint64_t epoch, int mode, int xslot)
{
	struct lock_hold *h = lock_holds_find(lk, key);

	if (!h) {
		/* Entries are recycled: a lock/unlock pair then costs no malloc. */
		h = lk->hold_free;
		if (h)
			lk->hold_free = h->next;
		else if (!(h = malloc(sizeof(*h))))
			return NULL;
		*h = (struct lock_hold){ 0 };
		h->key = key;
		h->owner = acting_owner;
		h->home = home;
		h->hdr = hdr;
		h->epoch = epoch; /* a later, stacked shared hold keeps the oldest: safe */
		h->xslot = -1;
		h->next = lk->holds[bucket(key)];
		lk->holds[bucket(key)] = h;
	}
	if (mode == DDSS_LOCK_EXCLUSIVE) {
		h->excl = true;
		h->xslot = xslot;
		h->xseq = ++lk->xseq;
		h->fence = 0;
	} else
		h->shared++;
	lk->nholds++;
	return h;
}

void lock_holds_drop(struct ddss_lock *lk, struct lock_hold *h, int mode)
{
	struct lock_hold **pp;

	if (mode == DDSS_LOCK_EXCLUSIVE) {
		h->excl = false;
		h->implicit = false;
		h->xslot = -1;
		h->fence = 0;
	} else {
		h->shared--;
	}
	lk->nholds--;
	if (h->excl || h->shared)
		return;
	for (pp = &lk->holds[bucket(h->key)]; *pp != h; pp = &(*pp)->next)
		;
	*pp = h->next;
	h->next = lk->hold_free;
	lk->hold_free = h;
}

bool lock_holds_shared_of(struct ddss_lock *lk, uint32_t home, uint64_t hdr)
{
	for (unsigned b = 0; b < HOLD_BUCKETS; b++)
		for (struct lock_hold *h = lk->holds[b]; h; h = h->next)
			if (h->shared && h->home == home && h->hdr == hdr)
				return true;
	return false;
}
