/*
 * Version coherence: a put writes the data, then adds 2 to the version word (one
 * fetch&add; the low bit is the writing flag of coh_slots.c, unused here). A get reads the
 * word and moves the data only when the cache holds no copy of that version.
 *
 * Never stale after a put completed: the put bumped the word after its data landed, so a
 * later get sees a newer version than any copy cached before the put, and fetches. A get
 * overlapping a put may see the data half written (the model takes no lock); its copy is
 * labelled with the version read before the transfer, so the next get after the put
 * fetches again.
 *
 * The version word's read is in flight while the cached copy is copied out (whatever its
 * version): an unchanged segment then costs one 8-byte read, the copy hidden behind it.
 * Only fetch&adds change the word, so where the transport fetches a word faster with a
 * fetch&add of 0 than with a read (ddss_tp.fetch_by_fadd: tcp, rxe), the read is one.
 */
#include "coherence/model.h"

static int version_get(struct coh_call *c)
{
	uint64_t word, cached;
	bool have;
	int r = coh_version_read_with_copy(c, &word, &have, &cached);

	if (r)
		return r;
	if (have && cached == word >> 1) {
		coh_count(&coh_of(c)->hits);
		c->version = cached;
		return 0;
	}
	r = coh_fetch_copy(c, 0);
	if (r)
		return r;
	coh_cache_put(coh_of(c)->cache, c->d->key, c->off, c->len, c->buf, word >> 1, 0);
	c->version = word >> 1;
	return 0;
}

/* The fetch&add is posted behind the write (same peer: executed after it), not after its
 * completion: one round trip for both. */
static int version_put(struct coh_call *c)
{
	struct coh_pending p;
	uint64_t old;
	int r, r2;

	coh_pending_init(c, &p);
	r = coh_post_copy(c, &p, 0, true);
	if (r)
		return r;
	r = ddss_tp_fadd(c->ctx->tp, c->d->home, c->hdr + COH_VERSION_OFF, 2, &old);
	r2 = coh_pending_wait(&p);
	return r2 ? r2 : r;
}

const struct coh_model coh_version = {
	.param_ok = coh_param_zero, .copies = 1, .word_atomic = true, .name = "version",
	.needs_atomics = true,
	.get = version_get, .put = version_put,
};
