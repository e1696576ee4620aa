/*
 * Dispatch to the segment's model, and what the models share: the implicit lock, reading
 * and writing one copy of the data, the version word, the context's state.
 */
#include "coherence/model.h"
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock.h"

#include <errno.h>
#include <stdlib.h>

void (*ddss_coh_inside_hook)(ddss_ctx_t *ctx, ddss_key_t key, bool is_put, bool enter);

static const struct coh_model *const models[] = {
	[DDSS_COHERENCE_NULL] = &coh_null,
	[DDSS_COHERENCE_STRICT] = &coh_strict,
	[DDSS_COHERENCE_READ] = &coh_read,
	[DDSS_COHERENCE_WRITE] = &coh_write,
	[DDSS_COHERENCE_VERSION] = &coh_version,
	[DDSS_COHERENCE_DELTA] = &coh_delta,
	[DDSS_COHERENCE_TEMPORAL] = &coh_temporal,
};
#define NMODELS (sizeof(models) / sizeof(models[0]))

/* The model of a checked coherence number (descriptors come from the home, which checked). */
static const struct coh_model *model_of(uint32_t coherence)
{
	return coherence < NMODELS ? models[coherence] : NULL;
}

bool coh_param_zero(uint32_t param)
{
	return param == 0;
}

int ddss_coh_choose(const struct ddss_seg_attr *attr, struct coh_choice *choice_p)
{
	uint32_t param = 0;

	/* A parameter given to a model that has none is a mistake worth reporting. */
	switch (attr->coherence) {
	case DDSS_COHERENCE_DELTA:
		if (attr->temporal_ms)
			return -EINVAL;
		param = attr->delta;
		break;
	case DDSS_COHERENCE_TEMPORAL:
		if (attr->delta)
			return -EINVAL;
		param = attr->temporal_ms;
		break;
	default:
		if (attr->delta || attr->temporal_ms)
			return -EINVAL;
	}
	if ((unsigned)attr->coherence >= NMODELS || !models[attr->coherence]->param_ok(param))
		return -EINVAL;
	choice_p->coherence = attr->coherence;
	choice_p->param = param;
	return 0;
}

int ddss_coh_check_caps(uint32_t coherence, bool atomics, const char *device)
{
	const struct coh_model *m = model_of(coherence);

	if (!m || atomics || !m->needs_atomics)
		return 0;
	DDSS_ERR("the %s coherence model needs NIC atomics (its puts fetch&add a version word), "
		 "which %s lacks; use strict, read, temporal or null here", m->name, device);
	return -EOPNOTSUPP;
}

int ddss_coh_data_len(uint32_t coherence, uint32_t param, uint64_t size, uint64_t *len_p)
{
	const struct coh_model *m = model_of(coherence);
	uint64_t copies, stride;

	if (!m || !m->param_ok(param) || size == 0)
		return -EINVAL;
	copies = m->copies ? m->copies : (uint64_t)param + 1;
	if (copies == 1) {
		*len_p = size;
		return 0;
	}
	if (size > UINT64_MAX / 2 / copies)
		return -ENOMEM;
	stride = (size + 63) & ~63ull; /* each copy starts on a cache line */
	*len_p = stride * copies;
	return 0;
}

uint64_t coh_copy_off(const struct ddss_seg_desc *d, uint32_t copy)
{
	return d->data_off + (uint64_t)copy * ((d->size + 63) & ~63ull);
}

/* ---- the context's state ---- */

static int64_t monotonic(void *arg)
{
	(void)arg;
	return ddss_now_ns();
}

int ddss_coh_create(size_t cache_bytes, struct ddss_coh **coh_p)
{
	struct ddss_coh *coh = calloc(1, sizeof(*coh));
	int r;

	if (!coh)
		return -ENOMEM;
	r = coh_cache_create(cache_bytes, &coh->cache);
	if (r) {
		free(coh);
		return r;
	}
	coh->now_ns = monotonic;
	*coh_p = coh;
	return 0;
}

void ddss_coh_destroy(struct ddss_coh *coh)
{
	if (!coh)
		return;
	coh_cache_destroy(coh->cache);
	free(coh);
}

void ddss_coh_forget(struct ddss_coh *coh, uint64_t key)
{
	coh_cache_forget(coh->cache, key);
}

void ddss_coh_counters(ddss_ctx_t *ctx, struct ddss_coh_stats *stats_p)
{
	struct ddss_coh *coh = ctx->coh;

	stats_p->fetches = __atomic_load_n(&coh->fetches, __ATOMIC_RELAXED);
	stats_p->hits = __atomic_load_n(&coh->hits, __ATOMIC_RELAXED);
	stats_p->retries = __atomic_load_n(&coh->retries, __ATOMIC_RELAXED);
	stats_p->locked = __atomic_load_n(&coh->locked, __ATOMIC_RELAXED);
	stats_p->cached = coh_cache_bytes(coh->cache);
}

void ddss_coh_set_clock(ddss_ctx_t *ctx, int64_t (*now_ns)(void *arg), void *arg)
{
	ctx->coh->now_arg = arg;
	ctx->coh->now_ns = now_ns ? now_ns : monotonic;
}

/* ---- dispatch ---- */

bool ddss_coh_is_plain(const struct ddss_seg_desc *d)
{
	return model_of(d->coherence)->plain;
}

int ddss_coh_get(struct ddss_ctx *ctx, const struct ddss_seg_desc *d, size_t off, void *buf,
		 size_t len, unsigned back, uint64_t *version_p)
{
	const struct coh_model *m = model_of(d->coherence);
	struct coh_call c = { .ctx = ctx, .d = d, .hdr = d->data_off - DDSS_SEG_HDR_LEN,
			      .off = off, .len = len, .buf = buf, .back = back };
	int r;

	/* Only delta keeps older versions, x of them. */
	if (back && (m != &coh_delta || back > d->param))
		return -EINVAL;
	r = m->get(&c);
	if (!r && version_p)
		*version_p = c.version;
	return r;
}

int ddss_coh_put(struct ddss_ctx *ctx, const struct ddss_seg_desc *d, size_t off,
		 const void *buf, size_t len)
{
	struct coh_call c = { .ctx = ctx, .d = d, .hdr = d->data_off - DDSS_SEG_HDR_LEN,
			      .off = off, .len = len, .buf = (void *)buf, .is_put = true };

	return model_of(d->coherence)->put(&c);
}

/* ---- shared steps ---- */

int coh_lock(struct coh_call *c, bool *taken_p)
{
	int r = ddss_lock_acquire_implicit(c->ctx, c->d);

	*taken_p = r == 0;
	c->inside = r > 0;
	if (r == DDSS_LOCK_SHARED && c->is_put) {
		ddss_lock_inside_done(c->ctx, c->d->key);
		c->inside = false;
		return -EDEADLK;
	}
	if (r > 0)
		r = 0; /* inside the user's hold */
	if (!r && ddss_coh_inside_hook)
		ddss_coh_inside_hook(c->ctx, c->d->key, c->is_put, true);
	return r;
}

void coh_pending_init(struct coh_call *c, struct coh_pending *p)
{
	p->tp = c->ctx->tp;
	p->n = 0;
	p->waited = false;
	p->status = 0;
	p->on_fail = NULL;
}

int coh_post(struct coh_call *c, struct coh_pending *p, enum ddss_tp_op op, uint64_t at,
	     void *buf, size_t len, uint64_t add, unsigned flags)
{
	int r;

	if (p->n == COH_PENDING_MAX)
		return -EOVERFLOW; /* a bug: every caller posts at most two */
	r = p->tp->ops->post_ex(p->tp, op, c->d->home, at, buf, len, add, 0, flags,
				&p->req[p->n]);
	if (!r)
		p->n++;
	return r;
}

int coh_post_write_at(struct coh_call *c, struct coh_pending *p, uint64_t at, const void *buf,
		      size_t len)
{
	return coh_post(c, p, DDSS_TP_OP_WRITE, at, (void *)buf, len, 0,
			DDSS_TP_MORE | DDSS_TP_BOUND);
}

int (*ddss_coh_complete_hook)(ddss_ctx_t *ctx, ddss_key_t key);
void (*ddss_coh_posted_hook)(ddss_ctx_t *ctx, ddss_key_t key);
void (*ddss_coh_marked_hook)(ddss_ctx_t *ctx, ddss_key_t key);
int (*ddss_coh_waited_hook)(int status);

int coh_post_fadd_at(struct coh_call *c, struct coh_pending *p, uint64_t at, uint64_t add)
{
	int r = ddss_coh_complete_hook ? ddss_coh_complete_hook(c->ctx, c->d->key) : 0;

	/* Held like the copy's write: both leave with the release (one sendmsg on tcp). */
	return r ? r : coh_post(c, p, DDSS_TP_OP_FADD, at, NULL, 0, add,
				DDSS_TP_MORE | DDSS_TP_BOUND);
}

int coh_post_copy(struct coh_call *c, struct coh_pending *p, uint32_t copy, bool write)
{
	uint64_t at = coh_copy_off(c->d, copy) + c->off;

	/* A put's data never lands after its failure was settled (DDSS_TP_BOUND, coh_slots.c). */
	return coh_post(c, p, write ? DDSS_TP_OP_WRITE : DDSS_TP_OP_READ, at, c->buf, c->len, 0,
			write ? DDSS_TP_MORE | DDSS_TP_BOUND : DDSS_TP_MORE);
}

int coh_pending_wait(struct coh_pending *p)
{
	if (p->waited)
		return p->status;
	p->waited = true;
	for (unsigned i = 0; i < p->n; i++) {
		int r = ddss_tp_wait(p->tp, &p->req[i], DDSS_TP_TIMEOUT_DEFAULT);

		if (!r)
			r = p->req[i].status;
		if (r && !p->status)
			p->status = r;
	}
	if (ddss_coh_waited_hook)
		p->status = ddss_coh_waited_hook(p->status);
	if (p->status && p->on_fail)
		p->status = p->on_fail(p, p->status);
	return p->status;
}

static void fence_wait(void *arg)
{
	coh_pending_wait(arg);
}

int coh_unlock(struct coh_call *c, bool taken, struct coh_pending *p, int r)
{
	struct ddss_lock_fence fence = { .wait = fence_wait, .arg = p };
	int r2 = 0, r3;

	if (ddss_coh_inside_hook)
		ddss_coh_inside_hook(c->ctx, c->d->key, c->is_put, false);
	if (taken)
		r2 = ddss_lock_release_implicit(c->ctx, c->d->key, &fence);
	r3 = coh_pending_wait(p);
	if (c->inside) /* after the transfers: the next call inside sees them done */
		ddss_lock_inside_done(c->ctx, c->d->key);
	return r ? r : r3 ? r3 : r2;
}

int coh_read_copy(struct coh_call *c, uint32_t copy)
{
	return ddss_tp_read(c->ctx->tp, c->d->home, coh_copy_off(c->d, copy) + c->off, c->buf,
			    c->len);
}

int coh_fetch_copy(struct coh_call *c, uint32_t copy)
{
	coh_count(&coh_of(c)->fetches);
	return coh_read_copy(c, copy);
}

int coh_write_copy(struct coh_call *c, uint32_t copy)
{
	return ddss_tp_write(c->ctx->tp, c->d->home, coh_copy_off(c->d, copy) + c->off, c->buf,
			     c->len);
}

bool coh_word_by_fadd(const struct coh_call *c)
{
	return c->ctx->tp->fetch_by_fadd && model_of(c->d->coherence)->word_atomic;
}

int coh_read_version(struct coh_call *c, uint64_t *word_p)
{
	if (coh_word_by_fadd(c))
		return ddss_tp_fadd(c->ctx->tp, c->d->home, c->hdr + COH_VERSION_OFF, 0, word_p);
	return ddss_tp_read(c->ctx->tp, c->d->home, c->hdr + COH_VERSION_OFF, word_p, 8);
}

int coh_version_read_with_copy(struct coh_call *c, uint64_t *word_p, bool *have_p,
			       uint64_t *cached_p)
{
	static const struct coh_want any = { .fetched_after = INT64_MIN };
	struct ddss_tp *tp = c->ctx->tp;
	bool by_fadd = coh_word_by_fadd(c);
	uint64_t off = c->hdr + COH_VERSION_OFF;
	struct ddss_tp_req req;
	int r = by_fadd ? ddss_tp_post_fadd(tp, c->d->home, off, 0, &req) :
			  ddss_tp_post_read(tp, c->d->home, off, word_p, 8, &req);

	if (r)
		return r;
	*have_p = coh_cache_get(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, &any,
				cached_p);
	r = ddss_tp_wait(tp, &req, DDSS_TP_TIMEOUT_DEFAULT);
	if (!r)
		r = req.status;
	if (!r && by_fadd)
		*word_p = req.result;
	return r;
}

int64_t coh_deadline(struct coh_call *c)
{
	int ms = c->ctx->tp->cfg.op_timeout_ms;

	return ms > 0 ? ddss_now_ns() + (int64_t)ms * 1000000 : INT64_MAX; /* 0: never */
}
