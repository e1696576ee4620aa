/*
 * The public lock calls: find the segment's lock word, run the context's scheme, remember
 * the hold. An acquire that times out after it joined a queue cannot leave it (peers may
 * already be writing to its record); a janitor thread finishes it and releases at once.
 */
#include "core/ctx.h"
#include "core/key.h"
#include "core/log.h"
#include "lock/lock_int.h"
#include "lock/srsl.h"

#include <errno.h>
#include <stdlib.h>

size_t ddss_lock_area_len(void)
{
	return (size_t)DDSS_LOCK_SLOTS * REC_LEN;
}

int ddss_lock_create(struct ddss_ctx *ctx, enum ddss_lock_scheme scheme, bool fair,
		     struct ddss_lock **lock_p)
{
	struct ddss_lock *lk = calloc(1, sizeof(*lk));
	int r;

	if (!lk)
		return -ENOMEM;
	lk->ctx = ctx;
	lk->tp = ctx->tp;
	lk->rank = ctx->rank;
	lk->scheme = scheme;
	lk->fair = fair;
	lk->poll = ctx->tp->cfg.completion == DDSS_TP_COMPLETION_POLL;
	lk->recs = ddss_pool_base(ctx->pool);
	pthread_mutex_init(&lk->mu, NULL);
	pthread_cond_init(&lk->cv, NULL);
	pthread_cond_init(&lk->fin_cv, NULL);
	lock_slots_init(lk);
	r = lock_holds_init(lk);
	if (!r)
		r = lock_recover_init(lk);
	if (!r)
		r = lock_agent_init(lk);
	if (!r)
		r = lock_census_init(lk);
	if (!r)
		r = ddss_srsl_create(ctx->net, &lk->srsl);
	if (r) {
		ddss_lock_destroy(lk);
		return r;
	}
	ddss_net_on_notify(ctx->net, lock_on_notify, lk);
	*lock_p = lk;
	return 0;
}

void ddss_lock_stop(struct ddss_lock *lk)
{
	if (!lk)
		return;
	lock_posted_drain(lk); /* before stopping: their successors are handed the lock */
	__atomic_store_n(&lk->stopping, true, __ATOMIC_RELEASE);
	ddss_srsl_stop(lk->srsl); /* its waiters return; nothing of it uses the net after */
	pthread_mutex_lock(&lk->mu);
	while (lk->janitors)
		pthread_cond_wait(&lk->cv, &lk->mu);
	pthread_mutex_unlock(&lk->mu);
	lock_posted_stop(lk);
}

void ddss_lock_flush_releases(struct ddss_lock *lk)
{
	if (!lk)
		return;
	lock_posted_drain(lk);
	ddss_srsl_flush(lk->srsl); /* nothing to do unless SRSL released: it logs failures */
}

void ddss_lock_destroy(struct ddss_lock *lk)
{
	if (!lk)
		return;
	ddss_srsl_destroy(lk->srsl);
	lock_agent_fini(lk);
	lock_census_fini(lk);
	lock_holds_fini(lk);
	pthread_cond_destroy(&lk->fin_cv);
	pthread_cond_destroy(&lk->cv);
	pthread_mutex_destroy(&lk->rc_mu);
	pthread_mutex_destroy(&lk->mu);
	free(lk);
}

int ddss_lock_scheme_set(ddss_ctx_t *ctx, enum ddss_lock_scheme scheme, bool fair)
{
	struct ddss_lock *lk;
	int r = 0;

	if (!ctx || scheme < DDSS_LOCK_NCOSED || scheme > DDSS_LOCK_SRSL)
		return -EINVAL;
	lk = ctx->lock;
	if (scheme != DDSS_LOCK_SRSL && !lk->tp->atomics) {
		DDSS_ERR("lock scheme %s needs NIC atomics, which %s lacks; only srsl runs here",
			 scheme == DDSS_LOCK_DQNL ? "dqnl" : "ncosed",
			 lk->tp->device[0] ? lk->tp->device : lk->tp->ops->name);
		return -EOPNOTSUPP;
	}
	lock_posted_drain(lk); /* a release that returned still counts its slot */
	pthread_mutex_lock(&lk->mu);
	if (lk->nholds || lk->slots_taken || lk->janitors) {
		r = -EBUSY;
	} else {
		__atomic_store_n(&lk->scheme, scheme, __ATOMIC_RELAXED);
		__atomic_store_n(&lk->fair, fair, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&lk->mu);
	return r;
}

/* Read without the mutex: it changes only while no lock is held or awaited. */
static enum ddss_lock_scheme lk_scheme(struct ddss_lock *lk)
{
	return __atomic_load_n(&lk->scheme, __ATOMIC_RELAXED);
}

/* ---- janitor: finish a timed-out request, then release it ---- */

int lock_janitor_spawn(struct ddss_lock *lk, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t th;
	int e;

	pthread_mutex_lock(&lk->mu);
	/* Under mu, as ddss_lock_stop reads the count after it set stopping. */
	if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&lk->mu);
		return -ESHUTDOWN;
	}
	lk->janitors++;
	pthread_mutex_unlock(&lk->mu);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	e = pthread_create(&th, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (e)
		lock_janitor_done(lk);
	return -e;
}

void lock_janitor_done(struct ddss_lock *lk)
{
	pthread_mutex_lock(&lk->mu);
	lk->janitors--;
	pthread_cond_broadcast(&lk->cv); /* ddss_lock_stop may wait for the last one */
	pthread_mutex_unlock(&lk->mu);
}

struct janitor_job {
	struct ddss_lock *lk;
	struct lock_req rq;
};

static void *janitor(void *arg)
{
	struct janitor_job *job = arg;
	struct ddss_lock *lk = job->lk;
	int r = lock_queue_acquire(lk, &job->rq, false, INT64_MAX);

	if (!r)
		r = lock_queue_release(lk, &job->rq);
	if (r)
		DDSS_WARN("lock: finishing a timed-out request failed: %s", ddss_strerror(r));
	lock_slot_put(lk, job->rq.slot, r ? SLOT_LOST : SLOT_FREE);
	if (r && r != -ESHUTDOWN)
		lock_stray_ask(lk, job->rq.home, job->rq.key);
	lock_janitor_done(lk);
	free(job);
	return NULL;
}

static void abandon(struct ddss_lock *lk, const struct lock_req *rq)
{
	struct janitor_job *job = malloc(sizeof(*job));
	int e = -ENOMEM;

	if (job) {
		job->lk = lk;
		job->rq = *rq;
		pthread_mutex_lock(&lk->mu);
		lk->slot[rq->slot].state = SLOT_ABANDONED;
		pthread_mutex_unlock(&lk->mu);
		/* Counted only while the lock layer is not stopping: ddss_lock_stop waits for
		 * the janitors it counted, and a later one would outlive the layer. */
		e = lock_janitor_spawn(lk, janitor, job);
		if (!e)
			return;
		free(job);
	}
	/* Without a janitor the queue behind this request is stuck: say so loudly (when
	 * stopping, the whole lock layer goes, and the slot's loss fails what waits). */
	if (e != -ESHUTDOWN)
		DDSS_ERR("lock: cannot finish a timed-out request (%s); its lock stays taken",
			 ddss_strerror(e));
	lock_slot_put(lk, rq->slot, SLOT_LOST);
}

/* ---- acquire / release ---- */

/*
 * What a lookup said about a few keys, per thread: a lock/unlock pair on a cached key then
 * costs no descriptor lookup at all (a hash lookup, an RCU read section and two reference
 * counts each, 10% of an uncontended lock in the rxe guest). Valid while the cache's epoch
 * has not moved, i.e. no segment was invalidated since the key was found.
 */
#define WORD_MEMOS 4
_Static_assert(WORD_MEMOS == 2 || WORD_MEMOS == 4 || WORD_MEMOS == 8,
	       "core_unit's ddss_key_spread test covers these sizes");
struct word_memo {
	uint64_t cache_id, key, epoch;
	uint64_t hdr;
	uint32_t home;
};
static __thread struct word_memo word_memo[WORD_MEMOS] __attribute__((tls_model("initial-exec")));

static struct word_memo *memo_of(ddss_key_t key)
{
	return &word_memo[ddss_key_spread(key) % WORD_MEMOS]; /* by slot and home */
}

int lock_word_of(struct ddss_ctx *ctx, ddss_key_t key, uint32_t *home_p, uint64_t *hdr_p,
		 uint64_t *epoch_p)
{
	uint64_t epoch = ddss_seg_cache_epoch(ctx->cache), id = ddss_seg_cache_id(ctx->cache);
	struct word_memo *m = memo_of(key);
	const struct ddss_seg_desc *d;
	int r;

	if (m->key == key && m->cache_id == id && m->epoch == epoch) {
		*home_p = m->home;
		*hdr_p = m->hdr;
	} else {
		r = ddss_ctx_desc(ctx, key, &d); /* after reading the epoch: see seg_cache.h */
		if (r)
			return r;
		*home_p = d->home;
		*hdr_p = d->data_off - DDSS_SEG_HDR_LEN;
		ddss_seg_cache_put(d);
		*m = (struct word_memo){ .cache_id = id, .key = key, .epoch = epoch,
					 .hdr = *hdr_p, .home = *home_p };
	}
	if (epoch_p)
		*epoch_p = epoch;
	return 0;
}

/* Is @key, found valid at cache epoch @epoch, still valid? 0 or -ESTALE (or -EINVAL). */
static int lock_key_valid(struct ddss_ctx *ctx, ddss_key_t key, uint64_t epoch)
{
	uint32_t home;
	uint64_t hdr;

	if (ddss_seg_cache_epoch(ctx->cache) == epoch)
		return 0;
	return lock_word_of(ctx, key, &home, &hdr, NULL);
}

static int queue_acquire(struct ddss_lock *lk, ddss_key_t key, struct lock_req *rq,
			 bool try_only, int timeout_ms, bool implicit)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX :
			   ddss_now_ns() + (int64_t)timeout_ms * 1000000ll;
	int r = lock_queue_acquire(lk, rq, try_only, deadline);
	if (r == 0) {
		bool x = rq->mode == DDSS_LOCK_EXCLUSIVE;

		struct lock_hold *h;

		pthread_mutex_lock(&lk->mu);
		h = lock_holds_add(lk, key, rq->home, rq->hdr, rq->epoch, rq->mode,
				   x ? (int)rq->slot : -1);
		if (h && x)
			h->implicit = implicit;
		if (h && !x && !rq->pred && rq->count >= LOCK_S_RESET)
			h->reset = true;
		if (h && !x)
			lock_slot_put_locked(lk, rq->slot, SLOT_FREE); /* shared holds need none */
		if (h && !implicit && (rq->pred || (x && rq->count)))
			__atomic_add_fetch(&lk->contended, 1, __ATOMIC_RELAXED);
		lock_posted_reap_locked(lk); /* our operations came after earlier releases' */
		pthread_mutex_unlock(&lk->mu);
		if (!h) {
			lock_queue_release(lk, rq);
			lock_slot_put(lk, rq->slot, SLOT_FREE);
			return -ENOMEM;
		}
		return 0;
	}
	/*
	 * Never published: nothing can write into the slot. A shared request's or a ticket's
	 * fetch&add that may have landed counts us anonymously (the drain and turn checks of
	 * lock_recover.c pass over it); a try-lock's CAS that may have landed may have put
	 * our id in the tail, where a successor would find it.
	 */
	if (r == -EBUSY || (rq->stage == STAGE_START && !rq->id_maybe_out))
		lock_slot_put(lk, rq->slot, SLOT_FREE);
	/* Out of time in a wait: the janitor goes on from there. Not after an atomic that
	 * may have landed: the janitor would run it again. */
	else if (r == -ETIMEDOUT && deadline != INT64_MAX && ddss_now_ns() >= deadline &&
		 !rq->unknown)
		abandon(lk, rq);
	else
		lock_slot_put(lk, rq->slot, SLOT_LOST);
	if (rq->id_maybe_out && r != -EBUSY)
		lock_stray_ask(lk, rq->home, rq->key);
	return r;
}

/*
 * A waiter slot for a request on @key. An implicit request is not made if the user already
 * holds the lock (*held_p says how; no slot taken): checked in the same mutex section.
 */
static int take_slot(struct ddss_lock *lk, ddss_key_t key, bool implicit, unsigned *slot_p,
		     int *held_p)
{
	bool drained = false, reclaimed = false;
	int r = 0;

	pthread_mutex_lock(&lk->mu);
	for (;;) {
		struct lock_hold *h = implicit ? lock_holds_find(lk, key) : NULL;

		*held_p = lock_user_mode(h);
		if (*held_p && h->inside_busy) {
			/* Another thread's get/put runs inside the hold: one at a time. */
			pthread_cond_wait(&lk->cv, &lk->mu);
			continue;
		}
		if (*held_p)
			h->inside_busy = true;
		else
			r = lock_slot_take_locked(lk, slot_p);
		if (r == -ENOLCK && !reclaimed &&
		    __atomic_load_n(&lk->quarantined, __ATOMIC_ACQUIRE)) {
			/* Out of slots: some a failure took out may be free again. Only here,
			 * so the common path never scans them. */
			pthread_mutex_unlock(&lk->mu);
			lock_slots_reclaim(lk);
			reclaimed = true;
			pthread_mutex_lock(&lk->mu);
			continue;
		}
		if (r != -ENOLCK || drained || !(lk->nposted || lk->fin_len || lk->fin_busy))
			break;
		/* Every slot taken, some by releases that returned already: wait for those. */
		pthread_mutex_unlock(&lk->mu);
		lock_posted_drain(lk);
		drained = true;
		pthread_mutex_lock(&lk->mu);
	}
	pthread_mutex_unlock(&lk->mu);
	return r;
}

/*
 * A request that failed behind a dead or failed one (-EHOSTDOWN, -ECONNRESET from a peer
 * that is not the home): ask the home to take the lock back (lock_agent.c), then queue
 * again behind its agent. A few rounds at most: each failed request retires its slot.
 */
#define REQUEUE_ROUNDS 4

/* An error that says a peer failed under the request (not the caller's doing). */
static bool peer_failure(int r)
{
	return r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED || r == -ENOTCONN ||
	       r == -EPIPE;
}

/*
 * What a lock call tells its caller when a peer failed under it (ddss.h): -EHOSTDOWN if
 * the lock's home is down (the segment is gone: every later call on the key fails the
 * same), else -EAGAIN (a dead or cut-off rank was ahead and the lock could not be taken
 * back in time: calling again queues again).
 */
static int peer_failure_errno(struct ddss_lock *lk, uint32_t home, int r)
{
	if (!peer_failure(r))
		return r;
	/* A home down but alive is connected again by the next call. */
	return lock_peer_gone(lk, home) ? -EHOSTDOWN : -EAGAIN;
}

static int requeue(struct ddss_lock *lk, ddss_key_t key, struct lock_req *rq, int timeout_ms,
		   bool implicit, int r)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX :
			   ddss_now_ns() + (int64_t)timeout_ms * 1000000ll;

	for (int round = 0; round < REQUEUE_ROUNDS && peer_failure(r); round++) {
		int held, left_ms = -1;

		int asked = lock_agent_ask(lk, rq->home, key, deadline);

		DDSS_INFO("lock: a request failed behind a dead or failed one (%s); the home "
			  "says %s", ddss_strerror(r), ddss_strerror(asked));
		if (asked)
			break; /* the home is gone too, or cannot help: the first error stands */
		if (take_slot(lk, key, false, &rq->slot, &held))
			break;
		if (timeout_ms >= 0) {
			int64_t left = deadline - ddss_now_ns();

			left_ms = left > 0 ? (int)(left / 1000000ll) : 0;
		}
		LOCK_RSTAT(lk, requeued);
		rq->stage = STAGE_START;
		rq->pred = rq->count = rq->drain = 0;
		rq->unknown = rq->id_maybe_out = false;
		r = queue_acquire(lk, key, rq, false, left_ms, implicit);
	}
	return r;
}

/*
 * @implicit: the hold is a get/put's own, invisible to ddss_lock_held and user releases;
 * returns the user's mode (> 0) instead of queueing if the user holds the lock.
 * @d: the segment's descriptor if the caller has it (saves a lookup), else NULL.
 */
static int acquire(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode, bool try_only,
		   int timeout_ms, bool implicit, const struct ddss_seg_desc *d)
{
	struct lock_req rq = { .mode = mode, .key = key };
	enum ddss_lock_scheme scheme;
	struct ddss_lock *lk;
	int r, held;

	if (!ctx || (mode != DDSS_LOCK_SHARED && mode != DDSS_LOCK_EXCLUSIVE))
		return -EINVAL;
	lk = ctx->lock;
	if (d) {
		/* The caller's reference keeps the key valid until it releases (implicit). */
		rq.home = d->home;
		rq.hdr = d->data_off - DDSS_SEG_HDR_LEN;
		rq.epoch = ddss_seg_cache_epoch(ctx->cache);
	} else {
		r = lock_word_of(ctx, key, &rq.home, &rq.hdr, &rq.epoch);
		if (r)
			return r;
	}
	/* The lock went with its home: fail before taking a waiter slot (a request that
	 * failed after its first atomic retires its slot for good, and a caller retrying
	 * would use them all up). A home that is down only because an operation to it timed
	 * out, while its connection to us stays open, is alive: connect to it again. */
	if (lock_peer_down(lk, rq.home) && !lock_peer_reconnect(lk, rq.home))
		return -EHOSTDOWN;
	/* SRSL needs no record, but takes a slot all the same: the same limit
	 * (DDSS_LOCK_SLOTS) then holds for every scheme. */
	r = take_slot(lk, key, implicit, &rq.slot, &held);
	if (r || held)
		return r ? r : held;
	scheme = lk_scheme(lk);
	if (scheme == DDSS_LOCK_SRSL) {
		r = ddss_srsl_acquire(lk->srsl, rq.home, key, mode, try_only,
				      try_only ? 0 : timeout_ms);
		pthread_mutex_lock(&lk->mu);
		if (!r) {
			bool x = mode == DDSS_LOCK_EXCLUSIVE;
			struct lock_hold *h = lock_holds_add(lk, key, rq.home, rq.hdr, rq.epoch,
							     mode, x ? (int)rq.slot : -1);

			if (h) {
				h->srsl = true;
				h->implicit = x && implicit;
			} else {
				r = -ENOMEM;
			}
			if (!h || !x)
				lock_slot_put_locked(lk, rq.slot, SLOT_FREE);
		} else {
			lock_slot_put_locked(lk, rq.slot, SLOT_FREE);
		}
		pthread_mutex_unlock(&lk->mu);
		if (r == -ENOMEM)
			ddss_srsl_release(lk->srsl, rq.home, key, mode);
	} else {
		if (scheme == DDSS_LOCK_DQNL)
			rq.mode = DDSS_LOCK_EXCLUSIVE; /* the baseline has no shared mode */
		r = queue_acquire(lk, key, &rq, try_only, timeout_ms, implicit);
		if (!try_only)
			r = requeue(lk, key, &rq, timeout_ms, implicit, r);
	}
	return peer_failure_errno(lk, rq.home, r);
}

int ddss_lock_held(ddss_ctx_t *ctx, ddss_key_t key)
{
	struct ddss_lock *lk = ctx->lock;
	int mode;

	pthread_mutex_lock(&lk->mu);
	mode = lock_user_mode(lock_holds_find(lk, key));
	pthread_mutex_unlock(&lk->mu);
	return mode;
}

int ddss_lock_acquire(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode, bool try_only,
		      int timeout_ms)
{
	return acquire(ctx, key, mode, try_only, try_only ? 0 : timeout_ms, false, NULL);
}

int ddss_lock_acquire_implicit(ddss_ctx_t *ctx, const struct ddss_seg_desc *d)
{
	return acquire(ctx, d->key, DDSS_LOCK_EXCLUSIVE, false, -1, true, d);
}

uint64_t ddss_lock_contended(ddss_ctx_t *ctx)
{
	return __atomic_load_n(&ctx->lock->contended, __ATOMIC_RELAXED);
}

void ddss_lock_inside_done(ddss_ctx_t *ctx, ddss_key_t key)
{
	struct ddss_lock *lk = ctx->lock;
	struct lock_hold *h;

	pthread_mutex_lock(&lk->mu);
	h = lock_holds_find(lk, key);
	if (h)
		h->inside_busy = false;
	pthread_cond_broadcast(&lk->cv);
	pthread_mutex_unlock(&lk->mu);
}

/* An empty exclusive acquire and release: swaps S out and resets D (see LOCK_S_RESET). */
static void reset_word(struct ddss_lock *lk, const struct lock_req *held)
{
	struct lock_req rq = { .home = held->home, .hdr = held->hdr,
			       .mode = DDSS_LOCK_EXCLUSIVE };
	int r = lock_slot_take(lk, &rq.slot);

	if (!r)
		r = lock_queue_acquire(lk, &rq, false, INT64_MAX);
	if (!r)
		r = lock_queue_release(lk, &rq);
	if (r)
		DDSS_WARN("lock: resetting a lock word's shared count failed: %s", ddss_strerror(r));
	if (r != -ENOLCK)
		lock_slot_put(lk, rq.slot, r ? SLOT_LOST : SLOT_FREE);
}

static int release(ddss_ctx_t *ctx, ddss_key_t key, bool implicit, struct ddss_lock_fence *fence)
{
	struct lock_req rq = { .stage = STAGE_DONE, .fence = fence, .may_post = true, .key = key };
	struct ddss_key_parts parts;
	struct ddss_lock *lk;
	struct lock_hold *h;
	uint64_t epoch;
	bool srsl, reset;
	int r, stale;

	if (!ctx)
		return -EINVAL;
	lk = ctx->lock;
	pthread_mutex_lock(&lk->mu);
	h = lock_holds_find(lk, key);
	/* A get/put that runs inside the user's hold finishes before the hold is given up. */
	while (!implicit && h && h->inside_busy) {
		pthread_cond_wait(&lk->cv, &lk->mu);
		h = lock_holds_find(lk, key);
	}
	/* A get/put's own hold and the user's holds are released only by their owners. */
	if (h && (implicit ? !(h->excl && h->implicit) : h->excl && h->implicit))
		h = NULL;
	if (!h) {
		pthread_mutex_unlock(&lk->mu);
		return ddss_key_parse(key, &parts) ? -EINVAL : -EPERM;
	}
	/* Take the hold out first: a concurrent second release then finds nothing (-EPERM). */
	rq.mode = h->excl ? DDSS_LOCK_EXCLUSIVE : DDSS_LOCK_SHARED;
	rq.slot = h->xslot >= 0 ? (unsigned)h->xslot : 0;
	srsl = h->srsl;
	rq.home = h->home;
	rq.hdr = h->hdr;
	epoch = h->epoch;
	/* The reset is an exclusive acquire: it waits for every shared hold, ours too, so
	 * only the last of this context's holds runs it (a thread holding twice waited on
	 * itself for good). */
	reset = rq.mode == DDSS_LOCK_SHARED && h->reset && h->shared == 1;
	if (reset)
		h->reset = false;
	lock_holds_drop(lk, h, rq.mode);
	if (rq.mode == DDSS_LOCK_SHARED && !srsl) /* a drain survey sees it until it landed */
		lock_srel_begin_locked(lk, rq.home, rq.hdr);
	pthread_mutex_unlock(&lk->mu);

	/* An implicit hold's caller keeps the descriptor referenced: it cannot go stale. */
	stale = implicit ? 0 : lock_key_valid(ctx, key, epoch);
	if (stale && stale != -ESTALE)
		stale = 0; /* could not tell (e.g. home unreachable): the release says */
	if (srsl) {
		/* The release is a message, which no fence holds back behind a READ in flight
		 * (docs/transport.md, "Ordering and fences"): wait for the transfer first. */
		if (fence)
			fence->wait(fence->arg);
		/* The home's CPU keeps SRSL state by key: release it even for a stale key. */
		r = ddss_srsl_release(lk->srsl, rq.home, key, rq.mode);
		if (rq.mode == DDSS_LOCK_EXCLUSIVE)
			lock_slot_put(lk, rq.slot, SLOT_FREE);
		return stale ? stale : r;
	}
	/* Even for a released segment: its home keeps the words' memory until they are idle
	 * (src/alloc/segtab.c), so a successor that queued behind us is still handed over to. */
	r = lock_queue_release(lk, &rq);
	if (rq.mode == DDSS_LOCK_SHARED) {
		pthread_mutex_lock(&lk->mu);
		lock_srel_end_locked(lk, rq.home, rq.hdr);
		pthread_mutex_unlock(&lk->mu);
	}
	if (r == LOCK_RELEASE_POSTED)
		return stale; /* finished in the background; the slot is no longer ours */
	if (!r && reset && !stale) /* a stale word may be freed as soon as we left it */
		reset_word(lk, &rq);
	if (rq.mode == DDSS_LOCK_EXCLUSIVE)
		lock_slot_put(lk, rq.slot, r ? SLOT_LOST : SLOT_FREE);
	if (rq.mode == DDSS_LOCK_EXCLUSIVE && r && r != -ESHUTDOWN)
		lock_stray_ask(lk, rq.home, key); /* our id may still stand in the tail */
	if (peer_failure(r)) {
		/* A peer died under the hand-over: the hold is given up all the same, and what
		 * it owed is recovered (docs/failure.md), as for a posted release. A dead
		 * successor is nothing the caller can act on; a dead home is (ddss.h). */
		DDSS_WARN("lock: release of %#llx: %s (the hold is given up)",
			  (unsigned long long)key, ddss_strerror(r));
		r = lock_peer_gone(lk, rq.home) ? -EHOSTDOWN : 0;
	}
	return r ? r : stale;
}

int ddss_lock_release(ddss_ctx_t *ctx, ddss_key_t key)
{
	return release(ctx, key, false, NULL);
}

int ddss_lock_release_implicit(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_lock_fence *fence)
{
	return release(ctx, key, true, fence);
}

int ddss_lock_release_owner(ddss_ctx_t *ctx, uint32_t owner)
{
	struct ddss_lock *lk = ctx->lock;
	uint32_t saved = lock_owner();
	int n = 0;

	ddss_lock_act_for(owner);
	for (;;) {
		struct lock_hold *h;
		uint64_t key;
		int r;

		pthread_mutex_lock(&lk->mu);
		h = lock_holds_any_of(lk, owner);
		key = h ? h->key : 0;
		pthread_mutex_unlock(&lk->mu);
		if (!h)
			break;
		r = release(ctx, key, false, NULL);
		if (r && r != -ESTALE)
			DDSS_WARN("lock: releasing lock %#llx of departed client %u: %s",
				  (unsigned long long)key, owner, ddss_strerror(r));
		if (r == -EPERM)
			break; /* someone else released it meanwhile and nothing is left */
		n++;
	}
	ddss_lock_act_for(saved);
	return n;
}
