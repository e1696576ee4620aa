/*
 * Segment locks (docs/locks.md): the context's lock module. The public calls live in
 * lock_api.c; this header is what the rest of the library and the benchmarks see.
 */
#ifndef DDSS_LOCK_LOCK_H
#define DDSS_LOCK_LOCK_H

#include "ddss/ddss.h"

#include <stdbool.h>
#include <stdint.h>

struct ddss_ctx;
struct ddss_lock;

/* Bytes each rank reserves at the start of its pool for its waiter records. */
size_t ddss_lock_area_len(void);

/** Create the context's lock module (before the net starts: it registers handlers). */
int ddss_lock_create(struct ddss_ctx *ctx, enum ddss_lock_scheme scheme, bool fair,
		     struct ddss_lock **lock_p);
/** Stop the background work (before the net closes); waiters get -ESHUTDOWN. */
void ddss_lock_stop(struct ddss_lock *lock);
/** Free (after the net is closed). */
void ddss_lock_destroy(struct ddss_lock *lock);
/**
 * Wait until every release of this context has taken effect at its home: exclusive
 * releases that returned before their CAS completed ("posted", docs/locks.md), and SRSL
 * release messages. ddss_barrier calls it first, so a lock released before a barrier is
 * free for every rank after it. A home that is down or does not answer is logged.
 */
void ddss_lock_flush_releases(struct ddss_lock *lock);

/**
 * How this context holds @key's lock: DDSS_LOCK_EXCLUSIVE, DDSS_LOCK_SHARED or 0 (not
 * held). get/put use it to skip their implicit locks inside the caller's critical section.
 * Holds taken by get/put themselves do not count: another thread's get must still wait.
 */
int ddss_lock_held(ddss_ctx_t *ctx, ddss_key_t key);

/*
 * Direct mode's lock calls, behind ddss_direct_ops (core/ops.h): ddss_acquire_lock_ss
 * (@timeout_ms -1), ddss_acquire_lock_timed_ss, ddss_try_lock_ss (@try_only),
 * ddss_release_lock_ss and ddss_lock_fence_ss, with their arguments and results.
 */
int ddss_lock_acquire(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode, bool try_only,
		      int timeout_ms);
int ddss_lock_release(ddss_ctx_t *ctx, ddss_key_t key);
int ddss_lock_fence(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence_p);
/* User acquisitions (not a get/put's own) that found the lock held and queued (NCOSED,
 * DQNL; SRSL's waits are its home's and are not counted). */
uint64_t ddss_lock_contended(ddss_ctx_t *ctx);

/*
 * The exclusive lock a get or put takes for itself (src/coherence), on the segment of @d
 * (which the caller keeps referenced until the release). The user's release calls do not
 * see it, and it does not see theirs. Returns 0 (taken), or, taking nothing, the mode in
 * which the user of this context already holds the lock (> 0; the call then runs inside
 * that hold), or -errno.
 */
struct ddss_seg_desc;
int ddss_lock_acquire_implicit(ddss_ctx_t *ctx, const struct ddss_seg_desc *d);

/*
 * The hold is the context's (or in the daemon, a client's), shared by its threads: when
 * ddss_lock_acquire_implicit returns > 0, the call is let in alone (another thread's get or
 * put inside the same hold waits, and so does the user's release, until it is done) and
 * must end with ddss_lock_inside_done once its transfers have completed.
 */
void ddss_lock_inside_done(ddss_ctx_t *ctx, ddss_key_t key);

/*
 * A transfer the holder posted to the segment's home just before releasing. The release
 * runs without waiting for it: operations from one rank to one peer execute in the order
 * posted, so the release's own atomic lands after it, and whoever takes the lock through
 * the word sees its data. Only before handing the lock to a waiter directly (a grant
 * reaches the waiter, not the home) must it be complete: then @wait(@arg) is called (the
 * callee waits for the transfer once, and keeps its result).
 */
struct ddss_lock_fence {
	void (*wait)(void *arg);
	void *arg;
};

/* Release an implicit hold; @fence (or NULL) as above. */
int ddss_lock_release_implicit(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_lock_fence *fence);

/*
 * Whether the lock words of the segment header at @hdr (the home's own memory) are idle:
 * no holder, no waiter, no request under way. A released segment's memory is freed only
 * then, so a holder or waiter of a released segment can still finish the protocol on its
 * words (src/alloc/segtab.c).
 */
bool ddss_lock_words_idle(const void *hdr);

/*
 * Daemon mode: the calling thread acts for client @owner (0: the context itself, as in
 * direct mode) until called again. Lock holds belong to the owner that took them; see
 * lock_holds.c.
 */
void ddss_lock_act_for(uint32_t owner);

/*
 * Release every lock @owner holds (a client that went away). Returns how many holds were
 * released; failures are logged. Holds the owner's requests still take later must be
 * released by calling this again once those requests are over.
 */
int ddss_lock_release_owner(ddss_ctx_t *ctx, uint32_t owner);

/**
 * Switch the scheme (benchmarks only). Collective in spirit: every rank must switch while no
 * lock is held or awaited anywhere (barrier before and after). -EBUSY if this context
 * holds or waits for a lock.
 */
int ddss_lock_scheme_set(ddss_ctx_t *ctx, enum ddss_lock_scheme scheme, bool fair);

/*
 * Exclusive releases that return before their CAS completes (lock_posted.c): what became
 * of them so far in this context. Every posted release ends exactly one way, so
 * posted == reaped + finished + drained + (those still out).
 */
struct ddss_lock_posted_stats {
	uint64_t posted;   /* returned to the caller with the CAS still out */
	uint64_t reaped;   /* the CAS succeeded; a later call freed the slot */
	uint64_t finished; /* the CAS failed; the finisher thread handed the lock over */
	uint64_t drained;  /* finished by a drain (scheme switch, out of slots, shutdown) */
	uint64_t taken_back; /* not posted after all: a peer wrote to the slot meanwhile */
};
void ddss_lock_posted_stats(ddss_ctx_t *ctx, struct ddss_lock_posted_stats *st);

/*
 * Lock recovery (lock_recover.c, lock_agent.c, docs/failure.md): what this context did so
 * far. Counters only grow.
 */
struct ddss_lock_recovery_stats {
	uint64_t agents;     /* recovery agents run here, as the home of a lock */
	uint64_t agents_took; /* ... that took the lock because nothing live was ahead */
	uint64_t drains;     /* closers here that entered without dead holders' releases */
	uint64_t successors_lost; /* releases here whose successor died before announcing */
	uint64_t requeued;   /* requests here that failed behind a dead one and queued again */
	uint64_t turns_passed; /* fair mode: dead ranks' tickets whose turn was passed on here */
	uint64_t writers_asked;   /* the home: whether a put's writer is cut off (RC_GONE) */
	uint64_t writers_vouched; /* ... answered yes */
};
void ddss_lock_recovery_stats(ddss_ctx_t *ctx, struct ddss_lock_recovery_stats *st);
/* Waiter slots never reused any more (lost mid-queue, or retired after a recovered drain):
 * of DDSS_LOCK_SLOTS, what deaths have cost this context so far. */
unsigned ddss_lock_slots_retired(ddss_ctx_t *ctx);
/**
 * Whether @home has cut @rank off for good: declared it dead and closed its channels, so
 * nothing @rank sent can land in @home's memory any more (lock/lock_gone.c). 0 if so;
 * -EBUSY if @home counts it alive (a readmitted rank is a new process: alive); or the
 * question's error (-EHOSTDOWN, -ETIMEDOUT, ...). Waits while @home is still cutting it off,
 * up to the operation timeout. Any application thread.
 */
int ddss_lock_home_cut_off(ddss_ctx_t *ctx, uint32_t home, uint32_t rank);
/* Test: ask @key's home to run a recovery agent now, as a failed request would. */
int ddss_lock_test_recover(ddss_ctx_t *ctx, ddss_key_t key);

/* Test hooks (NULL in production): called at these points with no lock module mutex held. */
enum ddss_lock_test_point {
	DDSS_LOCK_TP_RELEASE_CAS, /* an exclusive release is about to post its first CAS */
	DDSS_LOCK_TP_SWAPPED,     /* an exclusive request swapped in, before announcing */
	DDSS_LOCK_TP_NOTED,       /* (progress thread) a lock notification was handled */
	DDSS_LOCK_TP_TICKET,      /* fair mode: an exclusive request took its ticket */
};
extern void (*ddss_lock_test_hook)(ddss_ctx_t *ctx, enum ddss_lock_test_point point);
/* Test knob: post even a CAS that completed at once (Soft-RoCE completes inside the post),
 * so the posted paths can be tested on every device. */
extern bool ddss_lock_test_always_post;

#endif /* DDSS_LOCK_LOCK_H */
