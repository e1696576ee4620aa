/*
 * Temporal coherence (t): a get serves this context's copy while it is younger than t,
 * counted from the moment the transfer that brought it started (so the data is at least
 * that fresh). Puts write through and drop this context's copy, so a rank reads its own
 * writes; a get whose transfer began before such a drop does not keep its copy, which may
 * be of the bytes before the put.
 */
#include "coherence/model.h"

static int64_t now(struct coh_call *c)
{
	return coh_of(c)->now_ns(coh_of(c)->now_arg);
}

static int temporal_get(struct coh_call *c)
{
	int64_t t = (int64_t)c->d->param * 1000000, started = now(c);
	struct coh_want want = { .fetched_after = started - t + 1 };
	uint64_t forgets;
	int r;

	if (coh_cache_get(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, &want,
			  &c->version)) {
		coh_count(&coh_of(c)->hits);
		return 0;
	}
	forgets = coh_cache_forgets(coh_of(c)->cache, c->d->key);
	r = coh_fetch_copy(c, 0);
	if (r)
		return r;
	coh_cache_put_since(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, 0, started,
			    forgets);
	c->version = 0;
	return 0;
}

static int temporal_put(struct coh_call *c)
{
	int r = coh_write_copy(c, 0);

	coh_cache_forget(coh_of(c)->cache, c->d->key);
	return r;
}

static bool temporal_param_ok(uint32_t t_ms)
{
	return t_ms >= 1;
}

const struct coh_model coh_temporal = {
	.param_ok = temporal_param_ok, .copies = 1,
	.get = temporal_get, .put = temporal_put,
};
