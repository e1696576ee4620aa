/*
 * Write and delta coherence: readers take no lock, writers are serialised by the
 * segment's exclusive lock, and the version word [writer : 16 | completed : 47 |
 * writing : 1] tells a reader whether what it read can have been overwritten meanwhile.
 * While a put writes, the word names its rank (writer), so that a later put can ask
 * whether the writer of a mark left behind is over (writer_gone); the fetch&add that
 * completes the put takes the name off again (completing_add).
 *
 * The home keeps x+1 copies (x = 0 for write, the parameter for delta). Version v lives in
 * copy v mod (x+1). A put, holding the lock: mark the word odd ("version v+1 is being
 * written") with a compare&swap from 2v, write copy (v+1) mod (x+1), add 1 (2(v+1)). A
 * compare&swap, so a put never touches the mark of one that died between its steps
 * (mark_writing).
 *
 * Only atomics change the word. It was once written with an RDMA write, and a reader that
 * sampled it while the write's bytes were landing (Soft-RoCE in a TCG guest and the tcp
 * weak mode place them one at a time) saw 0x800 between 0x8ff and 0x900: version 1024 for
 * 1151, and its check, torn the same way, passed, so a delta get returned version 1023
 * holding 1151's data (CI34, coh_models_tcp_weak). An atomic's write-back is one store, and
 * where atomics fetch a word sooner than a read (tcp, rxe) readers fetch it with one, which
 * the NIC orders against the writers' atomics.
 *
 * A get of version u = v - back (v read from the word) reads copy u mod (x+1), then reads
 * the word again. That copy is next overwritten by the put of version u+x+1, which marks
 * the word before it writes; so the copy was intact if the second read shows fewer than
 * u+x+1 puts started (completed + writing). Otherwise the get reads again. With x = 0 this
 * is a sequence lock: any put started meanwhile forces a retry. With x >= 1 the newest
 * copy cannot be touched before x more puts complete, so readers do not wait for a writer;
 * the version returned was the newest complete one when the get started, and at most x
 * newer puts had started when it checked its copy.
 *
 * A reader that keeps losing to writers (a long read, writers flat out) would retry for
 * ever: after OPTIMISTIC_TRIES it takes the segment's exclusive lock, which queues it among
 * the writers (FIFO), and reads the copy with no put in progress.
 *
 * A copy labelled with its version goes into the cache; a get that finds the word still at
 * that version serves it without moving the data.
 */
#include "coherence/model.h"
#include "core/log.h"
#include "lock/lock.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t extra_copies(const struct coh_call *c)
{
	return c->d->coherence == DDSS_COHERENCE_DELTA ? c->d->param : 0;
}

#define OPTIMISTIC_TRIES 16

/* The word as this context last saw it: where the next put's mark starts from (a get and
 * then a put, the usual read-modify-write, then costs the put no extra compare&swap). */
static uint64_t *word_hint(struct coh_call *c)
{
	return &coh_of(c)->word_hint[c->d->key % COH_WORD_HINTS];
}

static void note_word(struct coh_call *c, uint64_t word)
{
	if (!(word & COH_WRITING))
		__atomic_store_n(word_hint(c), word, __ATOMIC_RELAXED);
}

static uint64_t started(uint64_t word)
{
	return (word >> 1) + (word & COH_WRITING);
}

/* The word as readers count it: without the writer's name (0 in a complete word). */
static uint64_t unnamed(uint64_t word)
{
	return word & ~COH_WRITER_MASK;
}

static int read_word(struct coh_call *c, uint64_t *word_p)
{
	int r = coh_read_version(c, word_p);

	*word_p = unnamed(*word_p);
	return r;
}

/* This put's mark on the complete word @old: writing, and naming this rank. */
static uint64_t mark_of(const struct coh_call *c, uint64_t old)
{
	return old | COH_WRITING | (uint64_t)c->ctx->rank << COH_WRITER_SHIFT;
}

/* What the fetch&add that completes our mark adds: 2v+1 named -> 2(v+1), the name taken
 * off (the sum wraps, as a NIC's does). */
static uint64_t completing_add(const struct coh_call *c)
{
	return 1 - ((uint64_t)c->ctx->rank << COH_WRITER_SHIFT);
}

/*
 * Read the copy and then the word, both posted at once, the word's read fenced: the home
 * samples it after the copy, which is all the check needs. One round trip (a fence on a
 * NIC costs the second READ's start waiting for the first's data).
 */
static int read_and_check(struct coh_call *c, uint32_t copy, uint64_t *after_p)
{
	uint64_t off = c->hdr + COH_VERSION_OFF;
	bool by_fadd = coh_word_by_fadd(c);
	struct coh_pending p;
	unsigned at = 0;
	int r, r2;

	coh_count(&coh_of(c)->fetches);
	coh_pending_init(c, &p);
	r = coh_post_copy(c, &p, copy, false);
	if (!r) {
		/* Fenced: a READ does not keep a later request back (net/transport.h). */
		at = p.n;
		r = by_fadd ? coh_post(c, &p, DDSS_TP_OP_FADD, off, NULL, 0, 0, DDSS_TP_FENCE) :
			      coh_post(c, &p, DDSS_TP_OP_READ, off, after_p, 8, 0, DDSS_TP_FENCE);
	}
	r2 = coh_pending_wait(&p); /* even after a failed post: the first may be in flight */
	if (!r && !r2 && by_fadd)
		*after_p = p.req[at].result;
	if (!r && !r2)
		*after_p = unnamed(*after_p);
	return r2 ? r2 : r;
}

/*
 * The get under the writers' lock: nothing can change the word or the copies meanwhile.
 * The copy's read is still in flight at the release, like a strict get's.
 */
static int read_locked(struct coh_call *c, uint64_t x)
{
	struct coh_pending p;
	uint64_t word, v;
	bool taken;
	int r = coh_lock(c, &taken);

	if (r)
		return r;
	coh_pending_init(c, &p);
	coh_count(&coh_of(c)->locked);
	r = read_word(c, &word);
	v = word >> 1;
	if (!r)
		note_word(c, word);
	if (!r && (word & COH_WRITING))
		r = -EIO; /* a put died mid-way (see post_put) */
	else if (!r && c->back > v)
		r = -ENOENT;
	if (!r) {
		c->version = v - c->back;
		coh_count(&coh_of(c)->fetches);
		r = coh_post_copy(c, &p, (uint32_t)(c->version % (x + 1)), false);
	}
	r = coh_unlock(c, taken, &p, r);
	if (!r && c->back == 0)
		coh_cache_put(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, v, 0);
	return r;
}

static int slots_get(struct coh_call *c)
{
	uint64_t x = extra_copies(c), word, after, v, u, cached = 0;
	int64_t deadline = 0;
	unsigned tries = 0;
	bool have = false;
	int r;

	for (;;) {
		/* (Unless this context holds the lock: then its own put is what runs.) */
		if (++tries > OPTIMISTIC_TRIES && !ddss_lock_held(c->ctx, c->d->key))
			return read_locked(c, x);
		/* The newest version may be the cached one: copy it out meanwhile. */
		r = c->back ? coh_read_version(c, &word) :
			      coh_version_read_with_copy(c, &word, &have, &cached);
		if (r)
			return r;
		word = unnamed(word);
		note_word(c, word);
		v = word >> 1;
		if (c->back > v)
			return -ENOENT;
		u = v - c->back;
		if (have && cached == v) {
			coh_count(&coh_of(c)->hits);
			c->version = v;
			return 0;
		}
		/* With one copy, a put in progress is writing the very bytes we want. */
		if (!(x == 0 && (word & COH_WRITING))) {
			r = read_and_check(c, (uint32_t)(u % (x + 1)), &after);
			if (r)
				return r;
			if (started(after) < u + x + 1)
				break;
		}
		coh_count(&coh_of(c)->retries);
		if (!deadline)
			deadline = coh_deadline(c);
		else if (ddss_now_ns() > deadline)
			return -ETIMEDOUT; /* a writer that never finishes (issue: failures) */
		sched_yield(); /* the writer may be a thread of this process */
	}
	if (c->back == 0)
		coh_cache_put(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, u, 0);
	c->version = u;
	return 0;
}

/*
 * Delta: a put of part of the segment still makes a whole new version, so the rest comes
 * from version v. Returns the new copy's bytes in *whole_p (to free), or NULL if the put
 * covers the whole segment.
 */
static int merge_with_previous(struct coh_call *c, uint32_t from, unsigned char **whole_p)
{
	unsigned char *whole;
	int r;

	*whole_p = NULL;
	if (c->off == 0 && c->len == c->d->size)
		return 0;
	whole = malloc(c->d->size);
	if (!whole)
		return -ENOMEM;
	r = ddss_tp_read(c->ctx->tp, c->d->home, coh_copy_off(c->d, from), whole, c->d->size);
	if (r) {
		free(whole);
		return r;
	}
	memcpy(whole + c->off, c->buf, c->len);
	*whole_p = whole;
	return 0;
}

/*
 * A compare&swap of a put's header word (@at: the version or the settled word), posted
 * bound like the put's transfers (DDSS_TP_BOUND): one that failed in transport must not
 * land after settle has asked the home on a new connection, or it would move the word
 * under the next writer's repair.
 */
static int word_cas(struct coh_call *c, uint64_t at, uint64_t compare, uint64_t swap,
		    uint64_t *old_p)
{
	return ddss_tp_cas_ex(c->ctx->tp, c->d->home, c->hdr + at, compare, swap, DDSS_TP_BOUND,
			      old_p);
}

/*
 * The settled word (COH_SETTLED_OFF) names the one marked version word whose failed put is
 * known to be over: every transfer of it has landed or been dropped at the home, and none
 * can land later. Only then may another put take the mark over and rewrite the copy
 * (mark_writing): a copy write or fetch&add of the failed put landing after that repair
 * would overwrite the new version's bytes or complete, or mark, its word. A settled mark
 * is only ever left by the repair that completes it (2v+1 -> 2(v+1)), so a settled word
 * left from an earlier failure never matches a later mark.
 */
static int read_settled(struct coh_call *c, uint64_t *settled_p)
{
	uint64_t off = c->hdr + COH_SETTLED_OFF;

	if (coh_word_by_fadd(c))
		return ddss_tp_fadd(c->ctx->tp, c->d->home, off, 0, settled_p);
	return ddss_tp_read(c->ctx->tp, c->d->home, off, settled_p, 8);
}

/*
 * A put that may have left its mark (@old | COH_WRITING) failed with @r, the outcome of its
 * transfers unknown. Ask the home for the word: a round trip on a working connection, so
 * on tcp a new one if the old failed, and the home then drops whatever of the old it had
 * not served yet (tcp_serve.c, "Superseded connections"; verbs drains the old QP before it
 * connects again). What the word says then is final:
 *  - old + 2: the put landed whole (its copy goes before its fetch&add, on one connection):
 *    it succeeded, 0;
 *  - the mark: recorded as settled, so that the next put may repair it; @r;
 *  - old (taken back), or moved: @r.
 * If the home cannot be asked, the mark stays unsettled: puts on it fail with -EIO, and a
 * late fetch&add of this put may still complete it with its own copy. Only this put's own
 * fetch&add can make the word old + 2: nobody repairs a mark while it is unsettled, and a
 * put that takes a settled mark over unsettles it first (mark_writing).
 */
static int settle(struct coh_call *c, uint64_t old, int r)
{
	uint64_t mark = mark_of(c, old), now = 0, settled = 0, was = 0;
	int r2 = coh_read_version(c, &now);

	if (!r2 && now == old + 2) {
		DDSS_INFO("coherence: a put of %#llx that failed in transport (%s) landed whole",
			  (unsigned long long)c->d->key, ddss_strerror(r));
		note_word(c, now);
		return 0;
	}
	if (!r2 && now != mark) {
		note_word(c, now);
		if (now != old)
			DDSS_WARN("coherence: the version word of %#llx moved under a put's lock "
				  "(%#llx, the put's mark %#llx): a peer misbehaves",
				  (unsigned long long)c->d->key, (unsigned long long)now,
				  (unsigned long long)mark);
		return r;
	}
	/* A compare&swap: a late write of an earlier settle can never tear this one. */
	if (!r2)
		r2 = read_settled(c, &settled);
	if (!r2 && settled != mark)
		r2 = word_cas(c, COH_SETTLED_OFF, settled, mark, &was);
	if (!r2 && settled != mark && was != settled)
		r2 = -EAGAIN; /* another settle raced ours: left unsettled, safe */
	if (r2)
		DDSS_WARN("coherence: a put of %#llx failed (%s) and its version word stays marked: "
			  "the home could not confirm it (%s), and later puts fail with -EIO",
			  (unsigned long long)c->d->key, ddss_strerror(r), ddss_strerror(r2));
	else
		DDSS_WARN("coherence: a put of %#llx failed (%s) before completing version %llu; "
			  "the next put rewrites its copy", (unsigned long long)c->d->key,
			  ddss_strerror(r), (unsigned long long)(old >> 1) + 1);
	return r;
}

/* settle() for a put that failed before anything of its data was posted: it cannot have
 * landed whole, whatever the word says. Returns @r. */
static int settle_unposted(struct coh_call *c, uint64_t old, int r)
{
	(void)settle(c, old, r);
	return r;
}

/* coh_pending's on_fail for a put whose copy and fetch&add were both posted. */
static int settle_pending(struct coh_pending *p, int r)
{
	return settle(p->fail_call, p->fail_word, r);
}

/* Take our mark back (nothing of the put landed): version v is still the newest. */
static void unmark(struct coh_call *c, uint64_t old, int r)
{
	uint64_t was = 0;
	int r2 = word_cas(c, COH_VERSION_OFF, mark_of(c, old), old, &was);

	if (r2)
		settle_unposted(c, old, r); /* the swap's outcome is unknown: look */
	else if (was != mark_of(c, old))
		DDSS_WARN("coherence: taking back the mark of a failed put: moved (word %#llx)",
			  (unsigned long long)was);
}

/*
 * Whether this put may take over the mark of a put that failed (mark_writing). It rewrites
 * the copy that put was writing, (v+1) mod (x+1), whole: with delta always, the rest of a
 * partial put coming from version v's intact copy (merge_with_previous); with write only a
 * put of the whole segment, since the one copy may hold part of the failed put's bytes
 * where this one does not write.
 */
static bool may_repair(const struct coh_call *c)
{
	return extra_copies(c) > 0 || (c->off == 0 && c->len == c->d->size);
}


/*
 * Whether a mark named by this rank belongs to a put that is over: no other put of this
 * context on the key is under way (the caller's own is counted). A put that failed may
 * release the lock before it settles (its release can go out on a new connection first):
 * its mark must then wait for that settle, which would otherwise find the word completed
 * by this put and take it for its own (a review of the first version). Puts that are over
 * sent their transfers before this put's compare&swap, on the same connection or on one
 * the home dropped when a newer one replaced it (settle), so none can land any more; a
 * mark named by an earlier process of this rank is over too, since a rank is readmitted
 * only once its old process is cut off (ddss_tp_peer_readmit). While other puts are under
 * way (the failed one settling, or another key's in the same slot) it waits for them, up
 * to the operation timeout: a counted put holds no lock it could wait for on us (it is
 * counted once it holds its own, and settling only asks the home).
 */
static bool own_mark_over(struct coh_call *c)
{
	const uint32_t *putting = &coh_of(c)->putting[c->d->key % COH_WORD_HINTS];
	int64_t deadline = coh_deadline(c);

	while (__atomic_load_n(putting, __ATOMIC_ACQUIRE) != 1) {
		if (ddss_now_ns() >= deadline)
			return false;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	return true;
}

/* Warn once about puts failing on @mark (each put on it asks the home again). */
static bool first_warning(struct coh_call *c, uint64_t mark)
{
	uint64_t *last = &coh_of(c)->warned_mark[c->d->key % COH_WORD_HINTS];

	return __atomic_exchange_n(last, mark, __ATOMIC_RELAXED) != mark;
}

/*
 * Holding the lock, on a mark @mark that nobody settled: whether the writer it names is
 * over, so that this put may take the mark over as if it were settled.
 *  - This rank: own_mark_over. That covers a put that could not reach the home to settle,
 *    and one whose marking compare&swap failed in transport but landed.
 *  - Another rank: only if the home has cut it off (ddss_lock_home_cut_off): declared
 *    dead, and nothing of it lands there any more.
 *  - Nobody (0: a mark made by hand, as a test does): never.
 */
static bool writer_gone(struct coh_call *c, uint64_t mark)
{
	uint32_t writer = (uint32_t)(mark >> COH_WRITER_SHIFT);
	int r;

	if (!writer || writer == c->ctx->rank)
		return writer && own_mark_over(c);
	r = ddss_lock_home_cut_off(c->ctx, c->d->home, writer);
	if (r) {
		if (first_warning(c, mark))
			DDSS_WARN("coherence: %#llx: the put of version %llu by rank %u did not "
				  "finish, and the home does not vouch that it is over (%s): puts "
				  "fail with -EIO", (unsigned long long)c->d->key,
				  (unsigned long long)(unnamed(mark) >> 1) + 1, writer,
				  ddss_strerror(r));
		return false;
	}
	DDSS_WARN("coherence: %#llx: the writer of version %llu, rank %u, died mid-put and is "
		  "cut off", (unsigned long long)c->d->key,
		  (unsigned long long)(unnamed(mark) >> 1) + 1, writer);
	return true;
}

/*
 * Take over @mark, the mark of a failed put that is over (settled, or writer_gone): this
 * put's transfers are in flight from now on, and only its own settle may declare them
 * over. So the mark must read unsettled and name this rank. Another rank's: swap our name
 * in (the settled word, naming the old mark, no longer matches). Our own settled one:
 * unsettle it. *old_p: the complete word before it.
 */
static int take_over(struct coh_call *c, uint64_t mark, bool settled, uint64_t *old_p)
{
	uint64_t old = unnamed(mark) & ~COH_WRITING, was = 0, now;
	int r;

	if (mark != mark_of(c, old)) {
		r = word_cas(c, COH_VERSION_OFF, mark, mark_of(c, old), &was);
		if (r) {
			/* Either mark stands, both safe: a round trip, as for a failed mark. */
			(void)coh_read_version(c, &now);
			return r;
		}
	} else if (settled) {
		r = word_cas(c, COH_SETTLED_OFF, mark, 0, &was);
		if (r)
			return settle_unposted(c, old, r);
	} else {
		was = mark; /* ours, unsettled: as it must be */
	}
	if (was != mark)
		return -EIO; /* another repairer: a peer misbehaves */
	DDSS_WARN("coherence: %#llx: repairing version %llu, whose put failed: this put "
		  "rewrites its copy", (unsigned long long)c->d->key,
		  (unsigned long long)(old >> 1) + 1);
	*old_p = old;
	return 0;
}

/*
 * Holding the lock: mark the word "writing" with a compare&swap from the even value it
 * holds, the guess being the word as this context last saw it (a wrong guess costs one
 * more compare&swap). A fetch&add of 1 could not tell: on the mark of a writer that died
 * between its steps it made the word read "version v+1 complete" until a second one took
 * it back, and a get in that round trip returned the dead writer's half-written copy.
 * *old_p: the word before, unmarked.
 *
 * A word found marked under our exclusive lock belongs to a put that failed. If its writer
 * settled it (settle: none of its transfers can land any more) and this put rewrites the
 * whole copy it was writing (may_repair), this put takes the mark over (*repair_p) and
 * completes that version with its own bytes; so it does if the mark is unsettled but the
 * writer it names is over (writer_gone). It unsettles the mark first (take_over), so that
 * should it fail in turn, the next put waits for its settle as for any other. Otherwise
 * -EIO, and nothing changed: a writer that is alive but could not reach the home, or one
 * the home does not vouch for, leaves an unsettled mark.
 */
#define MARK_TRIES 3 /* the word moves under our exclusive lock only if a peer misbehaves */

static int mark_writing(struct coh_call *c, uint64_t *old_p, bool *repair_p)
{
	uint64_t guess = __atomic_load_n(word_hint(c), __ATOMIC_RELAXED) & ~COH_WRITING, old = 0;
	uint64_t settled = 0;

	for (unsigned tries = 0; tries < MARK_TRIES; tries++) {
		int r = word_cas(c, COH_VERSION_OFF, guess, mark_of(c, guess), &old);

		/* A round trip to the home first: on a new connection it drops the swap if
		 * it was not served yet, which it could otherwise be after the lock passed on
		 * (a hand-over never reaches the home). If the swap landed, the word shows
		 * our mark and nothing else of this put was posted: take it back, but only
		 * if this hold saw the word at @guess (a later try: the first guess is the
		 * hint, and an earlier failed put of ours, over, leaves the same mark on
		 * bytes it may have written in part), and no other put of ours is under
		 * way. Else it names us, and our next put takes it over (writer_gone). */
		if (r) {
			uint64_t now, was;

			if (!coh_read_version(c, &now) && tries > 0 && now == mark_of(c, guess) &&
			    own_mark_over(c))
				(void)word_cas(c, COH_VERSION_OFF, now, guess, &was);
			return r;
		}
		if (old == guess) {
			*old_p = old;
			return 0;
		}
		if (old & COH_WRITING) {
			if (!may_repair(c))
				return -EIO;
			r = read_settled(c, &settled);
			if (r)
				return r;
			if (settled != old && !writer_gone(c, old))
				return -EIO;
			r = take_over(c, old, settled == old, old_p);
			if (!r)
				*repair_p = true;
			return r;
		}
		guess = old;
		note_word(c, old);
	}
	return -EIO;
}

/*
 * The copy is posted but the fetch&add that completes it could not be (@r). The copy may
 * have landed, over version v-x's bytes (delta) or the only copy (write), so the mark must
 * not be taken back: the word would then label those bytes v-x (a delta get x back
 * returned the new data as the oldest version) or v. Once the copy's write completed, a
 * compare&swap finishes the put (2v+1 -> 2(v+1)) and it succeeds; otherwise the put is
 * settled (settle): a later put repairs the mark, and meanwhile gets of the copy it was
 * writing fail with -EIO (docs/coherence.md, "Errors and failures").
 */
static int finish_or_keep_mark(struct coh_call *c, struct coh_pending *p, uint64_t old, int r)
{
	uint64_t was = 0;
	int r2 = coh_pending_wait(p);

	if (!r2) {
		r2 = word_cas(c, COH_VERSION_OFF, mark_of(c, old), old + 2, &was);
		if (!r2 && was == mark_of(c, old)) {
			note_word(c, old + 2);
			return 0;
		}
		if (!r2) {
			DDSS_WARN("coherence: the version word of %#llx moved under a put's lock "
				  "(%#llx, the put's mark %#llx): a peer misbehaves",
				  (unsigned long long)c->d->key, (unsigned long long)was,
				  (unsigned long long)mark_of(c, old));
			return r;
		}
	}
	return settle(c, old, r); /* the copy or the swap failed in transport: look */
}

/*
 * Holding the lock: mark the word, then post the new copy and the new word back to back
 * (executed in that order at the home) and leave them in flight for the release. Should
 * they fail, the put is settled (settle) when they are waited for, which is before the
 * lock is handed to a waiter (coh_unlock's fence).
 * *whole_p: a merged copy to free once the transfers are done.
 */
static int post_put(struct coh_call *c, struct coh_pending *p, unsigned char **whole_p)
{
	uint64_t x = extra_copies(c), old = 0, v;
	struct coh_call all = *c;
	bool repair = false;
	uint32_t copy;
	int r = mark_writing(c, &old, &repair);

	if (r)
		return r;
	if (ddss_coh_marked_hook)
		ddss_coh_marked_hook(c->ctx, c->d->key);
	v = old >> 1;
	copy = (uint32_t)((v + 1) % (x + 1));
	if (x)
		r = merge_with_previous(c, (uint32_t)(v % (x + 1)), whole_p);
	if (!r && *whole_p) {
		all.off = 0;
		all.len = c->d->size;
		all.buf = *whole_p;
	}
	if (r) {
		/* Nothing was posted: version v is still the newest complete one. A mark taken
		 * over was unsettled (mark_writing): settled again, for the next put. */
		if (repair)
			return settle_unposted(c, old, r);
		unmark(c, old, r);
		return r;
	}
	/* A copy that fails to post may have been posted in part (verbs splits one larger
	 * than the NIC's message size into several work requests): the mark stays. */
	r = coh_post_copy(&all, p, copy, true);
	if (r)
		return settle_unposted(c, old, r);
	/* Behind the copy's write (RC executes them in order): 2v+1 -> 2(v+1). */
	r = coh_post_fadd_at(c, p, c->hdr + COH_VERSION_OFF, completing_add(c));
	if (r)
		return finish_or_keep_mark(c, p, old, r);
	p->on_fail = settle_pending;
	p->fail_call = c;
	p->fail_word = old;
	note_word(c, old + 2);
	if (ddss_coh_posted_hook)
		ddss_coh_posted_hook(c->ctx, c->d->key);
	return 0;
}

static int slots_put(struct coh_call *c)
{
	uint32_t *putting = &coh_of(c)->putting[c->d->key % COH_WORD_HINTS];
	unsigned char *whole = NULL;
	struct coh_pending p;
	bool taken;
	int r = coh_lock(c, &taken);

	if (r)
		return r;
	/* Counted from before the mark to after the settle (coh_unlock waits for both). */
	__atomic_add_fetch(putting, 1, __ATOMIC_ACQ_REL);
	coh_pending_init(c, &p);
	r = coh_unlock(c, taken, &p, post_put(c, &p, &whole));
	__atomic_sub_fetch(putting, 1, __ATOMIC_ACQ_REL);
	free(whole);
	return r;
}

static bool delta_param_ok(uint32_t x)
{
	return x >= 1 && x <= DDSS_DELTA_MAX;
}

const struct coh_model coh_write = {
	.param_ok = coh_param_zero, .copies = 1, .word_atomic = true, .name = "write",
	.needs_atomics = true,
	.get = slots_get, .put = slots_put,
};

const struct coh_model coh_delta = {
	.param_ok = delta_param_ok, .copies = 0, .word_atomic = true, .name = "delta",
	.needs_atomics = true,
	.get = slots_get, .put = slots_put,
};
