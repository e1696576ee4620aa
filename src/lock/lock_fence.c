/*
 * Fencing numbers (docs/locks.md "Fencing"): each segment header has a generation word
 * (LOCK_G) next to the lock words, for every scheme. An exclusive holder that asks for a
 * number bumps it with one remote fetch&add and keeps the result in its hold, so asking
 * again is free and the acquire and release paths never touch the word. A shared holder
 * reads it (fetch&add 0: an atomic read that is ordered with the writers' atomics).
 *
 * Why the numbers only grow from holder to holder: an exclusive holder's fetch&add has
 * completed before it releases, so it reached the home before any later holder's; a hold
 * taken back from a rank (SRSL) is taken back only after the home declared that rank dead,
 * and from then on the home refuses its operations, so it cannot bump the word any more.
 */
#include "alloc/segtab.h"
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock_int.h"

#include <errno.h>

_Static_assert(LOCK_G == DDSS_SEG_HDR_FENCE, "the generation word is the header's");
_Static_assert(LOCK_G % 8 == 0 && LOCK_G + 8 <= DDSS_SEG_HDR_LEN, "an aligned header word");

/* mu held: the calling owner's user hold of @key, its mode, and a cached number. */
static int hold_state(struct ddss_lock *lk, ddss_key_t key, uint32_t *xseq_p, uint64_t *fence_p)
{
	struct lock_hold *h = lock_holds_find(lk, key);
	int mode = lock_user_mode(h);

	*xseq_p = mode == DDSS_LOCK_EXCLUSIVE ? h->xseq : 0;
	*fence_p = mode == DDSS_LOCK_EXCLUSIVE ? h->fence : 0;
	return mode;
}

static int fence(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence_p)
{
	struct ddss_lock *lk = ctx->lock;
	uint64_t hdr, old, cached;
	uint32_t home, xseq;
	int mode, r;

	/* First the key (-EINVAL, -ESTALE), as the other lock calls; the descriptor is
	 * normally cached since the acquire. */
	r = lock_word_of(ctx, key, &home, &hdr, NULL);
	if (r)
		return r;
	pthread_mutex_lock(&lk->mu);
	mode = hold_state(lk, key, &xseq, &cached);
	pthread_mutex_unlock(&lk->mu);
	if (!mode)
		return -ENOLCK;
	if (cached) {
		*fence_p = cached;
		return 0;
	}
	if (!lk->tp->atomics) {
		DDSS_ERR("fencing numbers need NIC atomics, which %s lacks",
			 lk->tp->device[0] ? lk->tp->device : lk->tp->ops->name);
		return -EOPNOTSUPP;
	}
	r = ddss_tp_fadd(lk->tp, home, hdr + LOCK_G, mode == DDSS_LOCK_EXCLUSIVE ? 1 : 0, &old);
	if (r)
		return r;
	if (mode == DDSS_LOCK_SHARED) {
		*fence_p = old;
		return 0;
	}
	/*
	 * Keep it in the hold. Another thread of this context may have asked meanwhile: the
	 * first number kept wins (a second bump only widens the gap to the next holder). If
	 * the hold was released meanwhile (by another thread), the number belongs to no hold.
	 */
	pthread_mutex_lock(&lk->mu);
	{
		struct lock_hold *h = lock_holds_find(lk, key);

		if (lock_user_mode(h) != DDSS_LOCK_EXCLUSIVE || h->xseq != xseq) {
			r = -ENOLCK;
		} else {
			if (!h->fence)
				h->fence = old + 1;
			*fence_p = h->fence;
		}
	}
	pthread_mutex_unlock(&lk->mu);
	return r;
}

int ddss_lock_fence(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence_p)
{
	if (!ctx || !fence_p)
		return -EINVAL;
	return fence(ctx, key, fence_p);
}
