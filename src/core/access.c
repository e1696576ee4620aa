/*
 * get / put: the descriptor comes from the cache (a lock-free lookup) and the segment's
 * coherence model does the rest (src/coherence). The descriptor's reference is held until
 * the transfer is over, so a release waits for it (see core/seg_cache.h).
 */
#include "core/access.h"
#include "coherence/coherence.h"
#include "core/ctx.h"

#include <errno.h>
#include <stdlib.h>

struct ddss_req {
	struct ddss_tp_req tp;
	const struct ddss_seg_desc *desc; /* NULL: finished at the call, with result @status */
	int status;
};

/* Validate and find: a descriptor reference and the pool offset of [offset, offset+len). */
static int prepare(struct ddss_ctx *ctx, ddss_key_t key, size_t offset, const void *buf,
		   size_t len, const struct ddss_seg_desc **desc_p, uint64_t *at_p)
{
	const struct ddss_seg_desc *d;
	int r;

	if (!ctx || !buf || len == 0)
		return -EINVAL;
	r = ddss_ctx_desc(ctx, key, &d);
	if (r)
		return r;
	if (offset > d->size || len > d->size - offset) {
		ddss_seg_cache_put(d);
		return -ERANGE;
	}
	*desc_p = d;
	*at_p = d->data_off + offset;
	return 0;
}

static int transfer(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		    bool is_put, unsigned back, uint64_t *version_p)
{
	const struct ddss_seg_desc *d;
	uint64_t at;
	int r = prepare(ctx, key, offset, buf, len, &d, &at);

	if (r)
		return r;
	r = is_put ? ddss_coh_put(ctx, d, offset, buf, len) :
		     ddss_coh_get(ctx, d, offset, buf, len, back, version_p);
	ddss_seg_cache_put(d);
	return r;
}

int ddss_access_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		    unsigned back, uint64_t *version_p)
{
	return transfer(ctx, key, offset, buf, len, false, back, version_p);
}

int ddss_access_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf, size_t len)
{
	return transfer(ctx, key, offset, (void *)buf, len, true, 0, NULL);
}

int ddss_req_completed(int status, ddss_req_t **req_p)
{
	struct ddss_req *req = malloc(sizeof(*req));

	if (!req)
		return -ENOMEM;
	*req = (struct ddss_req){ .desc = NULL, .status = status };
	*req_p = req;
	return 0;
}

int ddss_access_start(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		      bool is_put, ddss_req_t **req_p)
{
	struct ddss_req *req;
	uint64_t at;
	int r;

	if (!req_p)
		return -EINVAL;
	req = malloc(sizeof(*req));
	if (!req)
		return -ENOMEM;
	r = prepare(ctx, key, offset, buf, len, &req->desc, &at);
	if (!r && !ddss_coh_is_plain(req->desc)) {
		/* The model's steps (lock, version word, cache) run in order: do them now. */
		req->status = is_put ? ddss_coh_put(ctx, req->desc, offset, buf, len) :
				       ddss_coh_get(ctx, req->desc, offset, buf, len, 0, NULL);
		ddss_seg_cache_put(req->desc);
		req->desc = NULL;
	} else if (!r) {
		r = is_put ? ddss_tp_post_write(ctx->tp, req->desc->home, at, buf, len, &req->tp) :
			     ddss_tp_post_read(ctx->tp, req->desc->home, at, buf, len, &req->tp);
		if (r)
			ddss_seg_cache_put(req->desc);
	}
	if (r) {
		free(req);
		return r;
	}
	*req_p = req;
	return 0;
}

static int finish(struct ddss_req *req)
{
	int r = req->desc ? req->tp.status : req->status;

	if (req->desc)
		ddss_seg_cache_put(req->desc);
	free(req);
	return r;
}

int ddss_req_wait(ddss_ctx_t *ctx, ddss_req_t *req)
{
	int r;

	if (!ctx || !req)
		return -EINVAL;
	if (!req->desc)
		return finish(req);
	r = ddss_tp_wait(ctx->tp, &req->tp, DDSS_TP_TIMEOUT_DEFAULT);
	/*
	 * -ETIMEDOUT here means even failing the peer did not complete the request: the
	 * transport still owns it, so it is left alone (leaked) rather than freed under it.
	 */
	return r ? r : finish(req);
}

int ddss_req_test(ddss_ctx_t *ctx, ddss_req_t *req)
{
	int r;

	if (!ctx || !req)
		return -EINVAL;
	if (!req->desc)
		return finish(req);
	r = ddss_tp_test(ctx->tp, &req->tp);
	return r ? r : finish(req);
}
