/*
 * A rank taken over by a new process (coordinator mode, net/readmit.c): the marks its old
 * process left on write and delta segments homed here are settled before the new process
 * is let in (docs/coherence.md, "A dead writer's mark").
 *
 * A mark names a rank, not a process (coh_slots.c). Once the rank is readmitted, the home
 * answers "alive" when another rank's put asks whether the mark's writer is over
 * (lock/lock_gone.c): until the new process itself put to that key, every other rank's
 * put on it returned -EIO. At this moment the home knows better. The old process is cut
 * off here (nothing of it can land any more), and the new one cannot have reached this
 * pool yet: its handshakes are refused until the door opens, after this runs. So every
 * unsettled mark naming the rank is the old process's, and over. Recording it in the
 * settled word, as the failed put's own settle would have, lets the next put repair it.
 */
#include "coherence/coherence.h"
#include "coherence/model.h"
#include "alloc/segtab.h"
#include "core/ctx.h"
#include "core/log.h"
#include "net/transport.h"

#include <errno.h>
#include <stdlib.h>

struct old_mark {
	uint64_t key;
	uint64_t hdr_off;
};

struct mark_scan {
	uint32_t rank;
	struct old_mark *marks;
	size_t n, cap;
	bool short_of_memory;
};

/*
 * Under the segment table's lock: a write or delta segment whose version word reads
 * marked by @s->rank and not settled. A look only (this process's view of its own pool);
 * the words are read again through the transport before anything changes.
 */
static void pick_old_mark(void *arg, const void *hdr, uint64_t hdr_off,
			  const struct ddss_seg_loc *loc)
{
	struct mark_scan *s = arg;
	const uint64_t *words = hdr;
	uint64_t word;

	if (loc->coherence != DDSS_COHERENCE_WRITE && loc->coherence != DDSS_COHERENCE_DELTA)
		return;
	word = __atomic_load_n(&words[COH_VERSION_OFF / 8], __ATOMIC_RELAXED);
	if (!(word & COH_WRITING) || word >> COH_WRITER_SHIFT != s->rank ||
	    __atomic_load_n(&words[COH_SETTLED_OFF / 8], __ATOMIC_RELAXED) == word)
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 8;
		struct old_mark *m = realloc(s->marks, cap * sizeof(*m));

		if (!m) {
			s->short_of_memory = true;
			return;
		}
		s->marks = m;
		s->cap = cap;
	}
	s->marks[s->n++] = (struct old_mark){ .key = loc->key, .hdr_off = hdr_off };
}

/*
 * How long the whole scan may wait on this rank's own pool. It runs on the heartbeat
 * thread, whose beats must not stop for an operation timeout (30 s by default, more than
 * the peer timeout). On tcp the operations run inline; on verbs they go through the
 * loopback QP, which answers in microseconds unless the device is broken.
 */
#define SCAN_BOUND_MS 1000

/*
 * One operation of this rank on its own pool, heap-held so that one still out at the
 * deadline is left to the transport rather than freed under it. A read left out is
 * harmless. A compare&swap left out is not: landing later, after the new process is in,
 * it could settle a mark of the new process's that is still in flight. So each is kept
 * on the coherence state's list, and no readmission goes ahead while one is still out
 * (ddss_coh_settle_readmitted says -EBUSY until the transport has ended it).
 */
struct coh_own_op {
	struct ddss_tp_req req;
	uint64_t word;
	struct coh_own_op *next; /* on ddss_coh.readmit_out while a compare&swap is out */
};

static int own_op(ddss_ctx_t *ctx, enum ddss_tp_op op, uint64_t off, uint64_t a, uint64_t b,
		  int64_t deadline, uint64_t *result_p)
{
	struct ddss_tp *tp = ctx->tp;
	int64_t left_ms = (deadline - ddss_now_ns()) / 1000000;
	struct coh_own_op *o;
	int r;

	if (left_ms <= 0)
		return -ETIMEDOUT;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	r = tp->ops->post_ex(tp, op, ctx->rank, off, op == DDSS_TP_OP_READ ? &o->word : NULL,
			     op == DDSS_TP_OP_READ ? 8 : 0, a, b, 0, &o->req);
	if (r) {
		free(o);
		return r;
	}
	r = ddss_tp_wait(tp, &o->req, (int)left_ms);
	if (r == -ETIMEDOUT) {
		DDSS_WARN("coherence: an operation on this rank's own pool is still out after "
			  "the readmission's %d ms: left to the transport", SCAN_BOUND_MS);
		if (op == DDSS_TP_OP_CAS) {
			o->next = ctx->coh->readmit_out;
			ctx->coh->readmit_out = o;
		}
		return r; /* @o stays with the transport */
	}
	if (!r)
		r = o->req.status;
	if (!r)
		*result_p = op == DDSS_TP_OP_READ ? o->word : o->req.result;
	free(o);
	return r;
}

/* Free the compare&swaps left out that the transport has ended; how many are still out. */
static unsigned reap_left_out(ddss_ctx_t *ctx)
{
	struct coh_own_op **link = &ctx->coh->readmit_out;
	unsigned out = 0;

	while (*link) {
		struct coh_own_op *o = *link;

		if (ddss_tp_req_done(&o->req) || ddss_tp_test(ctx->tp, &o->req) == 0) {
			*link = o->next;
			free(o);
		} else {
			link = &o->next;
			out++;
		}
	}
	return out;
}

/* A header word: a fetch&add of 0 where the transport fetches faster that way (the two
 * words change only by atomics), else a read. */
static int own_word(ddss_ctx_t *ctx, uint64_t off, int64_t deadline, uint64_t *word_p)
{
	if (ctx->tp->fetch_by_fadd)
		return own_op(ctx, DDSS_TP_OP_FADD, off, 0, 0, deadline, word_p);
	return own_op(ctx, DDSS_TP_OP_READ, off, 0, 0, deadline, word_p);
}

/* Settle one old mark: a compare&swap of the settled word, through the transport (the
 * words are the NIC's: its atomics need not be atomic with the CPU's). 1 if settled, 0 if
 * nothing to do any more, else -errno (left unsettled). */
static int settle_old_mark(ddss_ctx_t *ctx, uint32_t rank, const struct old_mark *m,
			   int64_t deadline)
{
	uint64_t mark = 0, settled = 0, was = 0;
	int r = own_word(ctx, m->hdr_off + COH_VERSION_OFF, deadline, &mark);

	if (!r)
		r = own_word(ctx, m->hdr_off + COH_SETTLED_OFF, deadline, &settled);
	if (!r && (!(mark & COH_WRITING) || mark >> COH_WRITER_SHIFT != rank || settled == mark))
		return 0; /* moved meanwhile: another rank's put took it over (lock_gone.c) */
	if (!r)
		r = own_op(ctx, DDSS_TP_OP_CAS, m->hdr_off + COH_SETTLED_OFF, settled, mark,
			   deadline, &was);
	if (!r && was != settled) {
		/* A put that took the mark over settled its own meanwhile. Left unsettled, as
		 * before: puts on it fail with -EIO until that writer puts to the key. */
		DDSS_WARN("coherence: %#llx: cannot settle the mark rank %u's old process left: "
			  "the settled word moved", (unsigned long long)m->key, rank);
		return 0;
	}
	if (r) {
		DDSS_WARN("coherence: %#llx: cannot settle the mark rank %u's old process left: "
			  "%s", (unsigned long long)m->key, rank, ddss_strerror(r));
		return r;
	}
	DDSS_WARN("coherence: %#llx: rank %u's old process died in the put of version %llu; "
		  "settled as it is readmitted, the next put rewrites the copy",
		  (unsigned long long)m->key, rank,
		  (unsigned long long)((mark & ~COH_WRITER_MASK) >> 1) + 1);
	return 1;
}

int ddss_coh_settle_readmitted(ddss_ctx_t *ctx, uint32_t rank)
{
	struct mark_scan s = { .rank = rank };
	int64_t deadline = ddss_now_ns() + SCAN_BOUND_MS * 1000000ll;
	unsigned settled = 0;
	int r = 0;

	if (!ctx->segtab || !ctx->coh || rank == ctx->rank)
		return 0;
	if (!ddss_tp_peer_refused(ctx->tp, rank))
		return -EINVAL; /* not declared dead: ddss_tp_peer_readmit refuses it too */
	/* Only a cut process is over: the readmission waits (-EBUSY) otherwise, and while a
	 * compare&swap of an earlier scan is still out (own_op). */
	if (!ddss_tp_peer_cut(ctx->tp, rank) || reap_left_out(ctx))
		return -EBUSY;
	ddss_segtab_hold(ctx->segtab);
	ddss_segtab_each(ctx->segtab, pick_old_mark, &s);
	for (size_t i = 0; i < s.n && r != -ETIMEDOUT && !ctx->coh->readmit_out; i++) {
		int one = settle_old_mark(ctx, rank, &s.marks[i], deadline);

		if (one > 0)
			settled++;
		else if (one < 0)
			r = one;
	}
	ddss_segtab_unhold(ctx->segtab);
	free(s.marks);
	__atomic_fetch_add(&ctx->coh->readmit_settled, settled, __ATOMIC_RELAXED);
	if (s.short_of_memory) {
		DDSS_WARN("coherence: out of memory: some marks rank %u's old process left stay "
			  "unsettled (their puts fail with -EIO)", rank);
		return -ENOMEM;
	}
	return ctx->coh->readmit_out ? -EBUSY : r;
}

uint64_t ddss_coh_readmit_settled(ddss_ctx_t *ctx)
{
	return ctx->coh ? __atomic_load_n(&ctx->coh->readmit_settled, __ATOMIC_RELAXED) : 0;
}
