/*
 * The strategy each coherence model implements, and the helpers they share (coherence.c):
 *   coh_plain.c     null, strict, read: plain transfers, with or without the implicit lock
 *   coh_slots.c     write and delta: versioned copies read without a lock
 *   coh_version.c   version: a version word saves the transfer of an unchanged segment
 *   coh_temporal.c  temporal: the cached copy serves while it is younger than t
 *   coh_cache.c     the per-context cache of segment copies
 */
#ifndef DDSS_COHERENCE_MODEL_H
#define DDSS_COHERENCE_MODEL_H

#include "coherence/coh_cache.h"
#include "coherence/coherence.h"
#include "core/ctx.h"

/* One get or put in progress. */
struct coh_call {
	struct ddss_ctx *ctx;
	const struct ddss_seg_desc *d;
	uint64_t hdr;      /* the segment's header in the home's pool */
	size_t off, len;
	void *buf;         /* get: where the data goes; put: where it comes from */
	bool is_put;
	unsigned back;     /* get: versions back (delta only) */
	uint64_t version;  /* get: the version returned */
	bool inside;       /* runs inside the caller's hold (coh_lock; ddss_lock_inside_done) */
};

struct coh_model {
	bool (*param_ok)(uint32_t param);
	uint32_t copies;   /* copies of the data the home keeps; 0: the parameter + 1 */
	bool plain;        /* get/put are single RDMA operations */
	bool word_atomic;  /* the version word changes only by atomics (ddss_tp.fetch_by_fadd) */
	const char *name;  /* for messages */
	/* Puts change the version word with NIC atomics: refused without them (ddss_tp.atomics) */
	bool needs_atomics;
	int (*get)(struct coh_call *c);
	int (*put)(struct coh_call *c);
};

extern const struct coh_model coh_null, coh_strict, coh_read, coh_write, coh_version,
	coh_delta, coh_temporal;

#define COH_WORD_HINTS 256

struct coh_own_op; /* coh_readmit.c */

struct ddss_coh {
	struct coh_cache *cache;
	int64_t (*now_ns)(void *arg);
	void *now_arg;
	uint64_t fetches, hits, retries, locked; /* atomic counters */
	/* The version word this context last saw, by key (collisions cost a retry):
	 * the guess its compare&swap starts from (coh_slots.c, mark_writing). Atomic. */
	uint64_t word_hint[COH_WORD_HINTS];
	/* Write/delta puts of this context under way, by the same slots: from before their
	 * mark until their settle is over (coh_slots.c, own_mark_over). Atomic. */
	uint32_t putting[COH_WORD_HINTS];
	/* The last unsettled mark a put here was warned about, by slot (once each). Atomic. */
	uint64_t warned_mark[COH_WORD_HINTS];
	/* Marks of readmitted ranks' old processes settled here as their home (coh_readmit.c).
	 * Atomic. */
	uint64_t readmit_settled;
	/* Compare&swaps of those settles still out past the scan's bound (coh_readmit.c,
	 * own_op); the heartbeat thread's only. */
	struct coh_own_op *readmit_out;
};

/* The version word, in every segment's header: [completed puts : 63 | a put is writing : 1];
 * write and delta: [the writing rank : 16 | completed puts : 47 | writing : 1] (coh_slots.c). */
#define COH_VERSION_OFF DDSS_SEG_HDR_VERSION
#define COH_WRITING 1ull
#define COH_WRITER_SHIFT 48
#define COH_WRITER_MASK (0xffffull << COH_WRITER_SHIFT) /* ranks <= DDSS_KEY_MAX_RANK */
/* Write and delta: a marked version word whose put failed and whose transfers are known to
 * have landed or been dropped, which the next put may repair (coh_slots.c). Atomics only. */
#define COH_SETTLED_OFF DDSS_SEG_HDR_SETTLED

bool coh_param_zero(uint32_t param);

/*
 * Take the segment's exclusive lock for @c unless this context holds it already (then the
 * call runs inside the caller's critical section): *taken_p says whether coh_unlock must
 * release it. A put under the caller's shared hold cannot take the exclusive lock without
 * deadlocking on itself: -EDEADLK. Runs the inside hook on entering (coh_unlock on leaving).
 */
int coh_lock(struct coh_call *c, bool *taken_p);
/*
 * Transfers posted inside a critical section and left in flight across the release:
 * operations to one peer execute in the order posted, so the release's atomic lands after
 * them; the lock module waits for them only before granting a waiter directly (struct
 * ddss_lock_fence). Saves the round trip between the last transfer and the release.
 */
#define COH_PENDING_MAX 2
struct coh_pending {
	struct ddss_tp *tp;
	struct ddss_tp_req req[COH_PENDING_MAX];
	unsigned n;
	bool waited;
	int status;    /* the first transfer error, once waited */
	/* If set, called once with that error; what it returns becomes the status (a put
	 * that failed in transport may learn from the home that it landed whole). */
	int (*on_fail)(struct coh_pending *p, int r);
	struct coh_call *fail_call; /* for on_fail */
	uint64_t fail_word;         /* for on_fail */
};

void coh_pending_init(struct coh_call *c, struct coh_pending *p);
/*
 * Post a read / write of the call's range of copy @copy, or of @len bytes at pool offset @at.
 * Its doorbell waits for the caller's next operation to the home (ddss_tp_post_*_more): every
 * caller follows it with one (the release, the version word, coh_pending_wait), and both then
 * go out in one system call or one chain of work requests.
 */
int coh_post_copy(struct coh_call *c, struct coh_pending *p, uint32_t copy, bool write);
int coh_post_write_at(struct coh_call *c, struct coh_pending *p, uint64_t at, const void *buf,
		      size_t len);
/* Post a fetch&add of @add to the word at pool offset @at, held the same way (a hint on
 * verbs, which posts an atomic at once). */
int coh_post_fadd_at(struct coh_call *c, struct coh_pending *p, uint64_t at, uint64_t add);
/* Any of them: post_ex of @op to the home into @p's next request (-EOVERFLOW if full). */
int coh_post(struct coh_call *c, struct coh_pending *p, enum ddss_tp_op op, uint64_t at,
	     void *buf, size_t len, uint64_t add, unsigned flags);
/* Wait for every posted transfer (once); their first error. */
int coh_pending_wait(struct coh_pending *p);
/*
 * Release what coh_lock took (with @p's transfers still in flight), then wait for them.
 * Returns @r, else the transfers' error, else the release's.
 */
int coh_unlock(struct coh_call *c, bool taken, struct coh_pending *p, int r);

/* Data of copy @copy (0 for single-copy models) at the call's range. */
int coh_read_copy(struct coh_call *c, uint32_t copy);
/* The same, counted as a transfer a cache hit would have saved (ddss_coh_stats.fetches). */
int coh_fetch_copy(struct coh_call *c, uint32_t copy);
int coh_write_copy(struct coh_call *c, uint32_t copy);
/* Where copy @copy of the segment starts in the home's pool. */
uint64_t coh_copy_off(const struct ddss_seg_desc *d, uint32_t copy);

/* Whether the version word is fetched with a fetch&add of 0 (ddss_tp.fetch_by_fadd, and a
 * model whose word changes only by atomics), else read. */
bool coh_word_by_fadd(const struct coh_call *c);
int coh_read_version(struct coh_call *c, uint64_t *word_p);
/*
 * Read the version word into *word_p and, while that read is in flight, copy the cached
 * copy of the call's range (of whatever version) into the call's buffer: *have_p says
 * whether there was one, *cached_p its version. The read is a fetch&add of 0 when the
 * model's word changes only by atomics and the transport fetches faster that way.
 */
int coh_version_read_with_copy(struct coh_call *c, uint64_t *word_p, bool *have_p,
			       uint64_t *cached_p);

static inline struct ddss_coh *coh_of(struct coh_call *c)
{
	return c->ctx->coh;
}

static inline void coh_count(uint64_t *counter)
{
	__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

/* The call's deadline for lock-free retries: the operation timeout from now. */
int64_t coh_deadline(struct coh_call *c);

#endif /* DDSS_COHERENCE_MODEL_H */
