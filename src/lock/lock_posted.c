/*
 * Exclusive releases that return before their CAS completes ("posted" releases), and the
 * finisher thread that completes them; it also fails whoever queued behind a lost slot
 * (fail_behind, below).
 *
 * Why: an uncontended exclusive release is one CAS on W ([me | 0] -> [0 | 0]). Waiting for
 * its round trip doubles the cost of a lock/unlock pair (and of a strict put), although
 * its result matters only when it fails: a successor or a shared request arrived in the
 * window. The N-CoSED paper hides the unlock latency the same way (its unlock costs the
 * caller 1.1 us).
 *
 * How: the release posts the CAS from its waiter slot and returns. The slot stays taken
 * (peers may still write its record) until someone has seen the result:
 *  - success, the common case: the next lock call of this context that finds the CAS
 *    complete frees the slot (lock_posted_reap_locked); nobody was owed anything;
 *  - failure: whoever changed W from [me | 0] writes our record and then notifies our slot
 *    (a successor announcing itself, a shared request registering). The progress thread's
 *    handler finds the slot posted and hands it to the finisher thread, which waits for the
 *    CAS and runs the rest of the release as a blocking release would
 *    (lock_queue_release_after).
 * A notification handled before the slot was marked posted is caught by the release
 * itself: it marks the slot, then looks at its wake word and its record again and, if
 * anything came, claims the CAS back and waits for it. (The handler bumps the wake word,
 * then reads the mark; the release writes the mark, then reads the wake word: one of the
 * two sees the other.) Exactly one of the releaser, the reaper, the handler and the drain
 * claims a posted slot: a CAS on its `posted` state.
 *
 * The protocol on the words is unchanged (docs/locks.md): the same operations in the same
 * order, only finished by another thread. The slot, i.e. the waiter id, is not reused
 * before they end, so the releasing thread's next acquire is simply another waiter; its
 * operations to the same home execute after the CAS (one ordered channel per peer), so a
 * lock/unlock loop finds the word free.
 *
 * The CAS of a plain release is posted DDSS_TP_LATER: tcp holds it until this thread's
 * next request to the home (a lock loop's next lock) and sends both in one write, or sends
 * it alone within TCP_LATER_NS. One behind a get's or put's transfer (fenced, below) goes
 * at once with the transfer, as before: a put's data is not kept back in this process
 * after the put returned. On loopback a write of its own cost the next lock about half a round trip
 * (docs/locks.md, "What the posted release costs the next lock"). A waiter that arrives
 * meanwhile finds the lock held a little longer; one that notifies us has the finisher
 * wait for the CAS, which sends it at once.
 *
 * Fence (a get/put's transfer still in flight, lock_int.h): the posted CAS goes to the
 * segment's home after the transfer, on the same ordered channel and fenced (a READ does
 * not keep a later atomic back on its own: net/transport.h), so once the CAS has
 * completed the transfer has too, and nothing is handed to anyone before that.
 */
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock_int.h"
#include "net/thread_files.h"

#include <errno.h>

void (*ddss_lock_test_hook)(ddss_ctx_t *ctx, enum ddss_lock_test_point point);
bool ddss_lock_test_always_post;

static void count(uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

void ddss_lock_posted_stats(ddss_ctx_t *ctx, struct ddss_lock_posted_stats *st)
{
	const struct ddss_lock_posted_stats *c = &ctx->lock->stats;

	st->posted = __atomic_load_n(&c->posted, __ATOMIC_RELAXED);
	st->reaped = __atomic_load_n(&c->reaped, __ATOMIC_RELAXED);
	st->finished = __atomic_load_n(&c->finished, __ATOMIC_RELAXED);
	st->drained = __atomic_load_n(&c->drained, __ATOMIC_RELAXED);
	st->taken_back = __atomic_load_n(&c->taken_back, __ATOMIC_RELAXED);
}

/* Claim the posting @seen (a value of sl->posted in state POSTED_OUT). */
static bool claim(struct lock_slot *sl, uint32_t seen)
{
	if (POSTED_STATE(seen) != POSTED_OUT)
		return false;
	return __atomic_compare_exchange_n(&sl->posted, &seen, (seen & ~3u) | POSTED_CLAIMED,
					   false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static uint32_t posted_now(const struct lock_slot *sl)
{
	return __atomic_load_n(&sl->posted, __ATOMIC_SEQ_CST);
}

static void set_state(struct lock_slot *sl, enum lock_posted_state st)
{
	uint32_t v = __atomic_load_n(&sl->posted, __ATOMIC_RELAXED);

	__atomic_store_n(&sl->posted, (v & ~3u) | st, __ATOMIC_RELEASE);
}

static void unlist_locked(struct ddss_lock *lk, unsigned slot)
{
	for (unsigned i = 0; i < lk->nposted; i++) {
		if (lk->posted[i] == slot) {
			lk->posted[i] = lk->posted[--lk->nposted];
			return;
		}
	}
}

/* The claimer's last step: the slot is free again, or retired after an error. */
static void end_locked(struct ddss_lock *lk, unsigned slot, int r)
{
	set_state(&lk->slot[slot], POSTED_NONE);
	lock_slot_put_locked(lk, slot, r ? SLOT_LOST : SLOT_FREE);
}

/* Wait for the posted CAS of @slot (claimed by the caller): 0 with its old value, or -errno. */
static int wait_cas(struct ddss_lock *lk, unsigned slot, uint64_t *old_p)
{
	struct lock_slot *sl = &lk->slot[slot];
	int r = ddss_tp_wait(lk->tp, &sl->posted_req, DDSS_TP_TIMEOUT_DEFAULT);

	if (!r)
		r = sl->posted_req.status;
	if (!r)
		*old_p = sl->posted_req.result;
	return r;
}

/* Complete the release of a claimed slot, then free it (no mu held); @counter: by whom. */
static void finish(struct ddss_lock *lk, unsigned slot, uint64_t *counter)
{
	struct lock_slot *sl = &lk->slot[slot];
	uint64_t old = 0;
	int r = wait_cas(lk, slot, &old);

	if (!r && old != sl->posted_cmp)
		r = lock_queue_release_after(lk, &sl->posted_rq, old);
	if (r)
		DDSS_WARN("lock: finishing a release at rank %u failed: %s", sl->posted_rq.home,
			  ddss_strerror(r));
	/* A CAS that never completed keeps its request in the slot: never reuse it. */
	pthread_mutex_lock(&lk->mu);
	end_locked(lk, slot, r);
	pthread_mutex_unlock(&lk->mu);
	if (r && r != -ESHUTDOWN) /* our id may still stand in the tail */
		lock_stray_ask(lk, sl->posted_rq.home, sl->posted_rq.key);
	count(counter);
}

int lock_posted_cas(struct ddss_lock *lk, const struct lock_req *rq, uint64_t cmp,
		    uint64_t swp, uint64_t *old_p)
{
	struct lock_slot *sl = &lk->slot[rq->slot];
	uint32_t mark = sl->wake_mark, tag = 0;
	int r;

	if (!rq->may_post)
		return ddss_tp_cas(lk->tp, rq->home, rq->hdr + LOCK_W, cmp, swp, old_p);
	if (ddss_lock_test_hook)
		ddss_lock_test_hook(lk->ctx, DDSS_LOCK_TP_RELEASE_CAS);
	sl->posted_rq = *rq;
	sl->posted_rq.fence = NULL; /* implied by the CAS's completion (see the top) */
	sl->posted_rq.may_post = false;
	sl->posted_cmp = cmp;
	/* LATER: tcp holds it for this thread's next request to the home, the next lock
	 * most often, so that both leave in one write (see the top). Not behind a put's
	 * data (fenced): that goes now, as the put's caller was told it was done. */
	r = lk->tp->ops->post_ex(lk->tp, DDSS_TP_OP_CAS, rq->home, rq->hdr + LOCK_W, NULL, 0, cmp,
				 swp, lock_fenced(rq) ? DDSS_TP_FENCE : DDSS_TP_LATER,
				 &sl->posted_req);
	if (r)
		return r;
	/* Done at once (our own pool on tcp; Soft-RoCE runs the whole round trip inside the
	 * post): take the result now, as a blocking release would. Posting it on would only
	 * make the next call handle its completion besides its own. A provider that holds
	 * the CAS is not asked: a test would send it alone. */
	if (!ddss_lock_test_always_post &&
	    (ddss_tp_req_done(&sl->posted_req) ||
	     ((lock_fenced(rq) || !lk->tp->holds_later) &&
	      ddss_tp_test(lk->tp, &sl->posted_req) == 0)))
		return wait_cas(lk, rq->slot, old_p);
	/* Mark and list under mu: a claimer unlists under mu, so never before we listed. */
	pthread_mutex_lock(&lk->mu);
	if (lk->nposted < LOCK_POSTED_MAX) {
		lk->posted[lk->nposted++] = rq->slot;
		tag = ((__atomic_load_n(&sl->posted, __ATOMIC_RELAXED) & ~3u) + 4u) | POSTED_OUT;
		__atomic_store_n(&sl->posted, tag, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&lk->mu);
	if (tag) {
		/*
		 * From the mark on, the slot may be claimed, finished and even taken by another
		 * request at any moment: touch only atomics, and claim by number. @mark is
		 * our wake_mark from before, when the slot was still ours alone.
		 */
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the mark before the looks below */
		/* Any byte of next at all: a successor is announcing (sealed words). */
		bool quiet = __atomic_load_n(&sl->wake, __ATOMIC_SEQ_CST) == mark &&
			     !lock_rec_load(lk, rq->slot, REC_NEXT);

		/* Someone wrote to us meanwhile: claim it back and finish as a blocking release,
		 * unless the handler was first (then the finisher has it). */
		if (quiet || !claim(sl, tag)) {
			count(&lk->stats.posted);
			return LOCK_RELEASE_POSTED;
		}
		pthread_mutex_lock(&lk->mu);
		unlist_locked(lk, rq->slot);
		pthread_mutex_unlock(&lk->mu);
		count(&lk->stats.taken_back);
	}
	r = wait_cas(lk, rq->slot, old_p);
	set_state(sl, POSTED_NONE);
	return r;
}

static void fin_push_locked(struct ddss_lock *lk, unsigned job);

void lock_posted_reap_locked(struct ddss_lock *lk)
{
	for (unsigned i = 0; i < lk->nposted;) {
		unsigned slot = lk->posted[i];
		struct lock_slot *sl = &lk->slot[slot];
		const struct ddss_tp_req *req = &sl->posted_req;

		/* A failed CAS is left alone: its notification is on the way to the handler. */
		uint32_t seen = posted_now(sl);

		if (POSTED_STATE(seen) == POSTED_OUT && ddss_tp_req_done(req) &&
		    (req->status || req->result == sl->posted_cmp) && claim(sl, seen)) {
			lk->posted[i] = lk->posted[--lk->nposted];
			if (req->status) {
				/* Lost with its connection (or never sent: a held one): our id may
				 * still stand in the word. The finisher ends it as a failed
				 * release, asking the home to take the lock past it. */
				fin_push_locked(lk, slot);
				continue;
			}
			end_locked(lk, slot, 0);
			count(&lk->stats.reaped);
			continue;
		}
		i++;
	}
}

#define FIN_RING (2 * DDSS_LOCK_SLOTS)

static void *finisher(void *arg);

/* Queue a job for the finisher thread, starting it on first need (mu held). */
static void fin_push_locked(struct ddss_lock *lk, unsigned job)
{
	lk->fin_queue[(lk->fin_head + lk->fin_len) % FIN_RING] = job;
	lk->fin_len++;
	if (!lk->fin_started && !lk->fin_exit) {
		if (pthread_create(&lk->fin_thread, NULL, finisher, lk) == 0)
			lk->fin_started = true;
		else /* the drain at shutdown runs it; until then its waiters wait */
			DDSS_ERR("lock: cannot start the finisher thread; a handover is delayed");
	}
	pthread_cond_signal(&lk->fin_cv);
}

static unsigned fin_pop_locked(struct ddss_lock *lk)
{
	unsigned job = lk->fin_queue[lk->fin_head];

	lk->fin_head = (lk->fin_head + 1) % FIN_RING;
	lk->fin_len--;
	return job;
}

/*
 * A lost slot will never hand anything on: fail whoever queued behind it (its announced
 * successor, the shared requests registered with it), so they return -EHOSTDOWN instead of
 * waiting for ever; they in turn become lost and fail theirs. A request that queues behind
 * it later announces itself with a WAKE, which queues this job again.
 */
static void fail_behind(struct ddss_lock *lk, unsigned slot)
{
	struct lock_slot *sl = &lk->slot[slot];
	uint32_t next;

	/* Running before no longer queued: lock_reclaim.c frees the slot only after both. */
	__atomic_add_fetch(&sl->fail_running, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sl->fail_queued, 0, __ATOMIC_SEQ_CST); /* before looking */
	next = 0; /* not whole yet: its notification queues this job again */
	lock_rec_sealed(lk, slot, REC_NEXT, &next);
	if (next && next != __atomic_load_n(&sl->failed_next, __ATOMIC_ACQUIRE)) {
		lock_fail(lk, next);
		__atomic_store_n(&sl->failed_next, next, __ATOMIC_RELEASE);
	}
	lock_fail_registered(lk, slot);
	__atomic_sub_fetch(&sl->fail_running, 1, __ATOMIC_SEQ_CST);
}

static void run_job(struct ddss_lock *lk, unsigned job, uint64_t *counter)
{
	if (job & FIN_FAIL)
		fail_behind(lk, job & ~FIN_FAIL);
	else
		finish(lk, job, counter);
}

void lock_lost_locked(struct ddss_lock *lk, unsigned slot)
{
	struct lock_slot *sl = &lk->slot[slot];

	__atomic_store_n(&sl->lost, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_exchange_n(&sl->fail_queued, 1, __ATOMIC_SEQ_CST))
		fin_push_locked(lk, FIN_FAIL | slot);
}

void lock_lost_noted(struct ddss_lock *lk, unsigned slot)
{
	struct lock_slot *sl = &lk->slot[slot];

	if (!__atomic_load_n(&sl->lost, __ATOMIC_SEQ_CST) ||
	    __atomic_exchange_n(&sl->fail_queued, 1, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&lk->mu);
	fin_push_locked(lk, FIN_FAIL | slot);
	pthread_mutex_unlock(&lk->mu);
}

static void *finisher(void *arg)
{
	struct ddss_lock *lk = arg;

	ddss_tp_thread_files(lk->tp);
	pthread_mutex_lock(&lk->mu);
	for (;;) {
		unsigned slot;

		while (!lk->fin_len && !lk->fin_exit)
			pthread_cond_wait(&lk->fin_cv, &lk->mu);
		if (!lk->fin_len)
			break;
		slot = fin_pop_locked(lk);
		lk->fin_busy = true;
		pthread_mutex_unlock(&lk->mu);
		run_job(lk, slot, &lk->stats.finished);
		pthread_mutex_lock(&lk->mu);
		lk->fin_busy = false;
		pthread_cond_broadcast(&lk->cv);
	}
	pthread_mutex_unlock(&lk->mu);
	return NULL;
}

/* Progress thread: must not block (mu is only ever held briefly). */
void lock_posted_noted(struct ddss_lock *lk, unsigned slot)
{
	struct lock_slot *sl = &lk->slot[slot];

	if (!claim(sl, posted_now(sl)))
		return;
	pthread_mutex_lock(&lk->mu);
	unlist_locked(lk, slot);
	/* A slot's posting is claimed once, its fail job queued once: the ring has room. */
	fin_push_locked(lk, slot);
	pthread_mutex_unlock(&lk->mu);
}

void lock_posted_drain(struct ddss_lock *lk)
{
	pthread_mutex_lock(&lk->mu);
	for (;;) {
		unsigned slot;

		if (lk->nposted) {
			slot = lk->posted[--lk->nposted];
			if (claim(&lk->slot[slot], posted_now(&lk->slot[slot]))) {
				pthread_mutex_unlock(&lk->mu);
				finish(lk, slot, &lk->stats.drained);
				pthread_mutex_lock(&lk->mu);
			}
			continue;
		}
		if (!lk->fin_len && !lk->fin_busy)
			break;
		if (lk->fin_started) {
			pthread_cond_wait(&lk->cv, &lk->mu);
			continue;
		}
		slot = fin_pop_locked(lk); /* no finisher thread: do its work here */
		pthread_mutex_unlock(&lk->mu);
		run_job(lk, slot, &lk->stats.drained);
		pthread_mutex_lock(&lk->mu);
	}
	pthread_mutex_unlock(&lk->mu);
}

void lock_posted_stop(struct ddss_lock *lk)
{
	bool started;

	pthread_mutex_lock(&lk->mu);
	lk->fin_exit = true;
	started = lk->fin_started;
	pthread_cond_broadcast(&lk->fin_cv);
	pthread_mutex_unlock(&lk->mu);
	if (started)
		pthread_join(lk->fin_thread, NULL);
}
