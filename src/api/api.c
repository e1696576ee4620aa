/*
 * The public calls of ddss.h that depend on the mode: each goes through the context's
 * table (core/ops.h) and is counted for ddss_stats_get (stats.h). Nothing else here: the
 * implementations check their arguments, exactly as before there was a table.
 */
#include "api/stats.h"
#include "core/ops.h"
#include "net/net.h"

#include <errno.h>

/*
 * Every call starts here: no context is -EINVAL; in coordinator mode, a process whose
 * lease was not renewed in time (or that the group reported) does nothing at all, so it
 * stops before its slot and locks can be given away (net/coordinator.h).
 */
static inline int api_enter(ddss_ctx_t *ctx)
{
	if (!ctx)
		return -EINVAL;
	return ctx->net ? ddss_net_acting(ctx->net) : 0;
}

#define API_ENTER(ctx)                                                                       \
	do {                                                                                 \
		int enter_r_ = api_enter(ctx);                                               \
		if (enter_r_)                                                                \
			return enter_r_;                                                     \
	} while (0)

int ddss_barrier(ddss_ctx_t *ctx)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_BARRIER, 0, ctx->ops->barrier(ctx));
}

int ddss_allocate_ss(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
		     ddss_key_t *key_p)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_ALLOCATE, 0, ctx->ops->allocate(ctx, nbytes, attr, key_p));
}

int ddss_lookup_ss(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_LOOKUP, 0, ctx->ops->lookup(ctx, name, key_p));
}

int ddss_release_ss(ddss_ctx_t *ctx, ddss_key_t key)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_RELEASE, 0, ctx->ops->release(ctx, key));
}

int ddss_stat_ss(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p)
{
	API_ENTER(ctx);
	return ctx->ops->stat(ctx, key, info_p); /* a local question: not counted */
}

int ddss_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_GET, len,
			 ctx->ops->get(ctx, key, offset, buf, len, 0, NULL));
}

int ddss_get_versioned(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		       unsigned back, uint64_t *version_p)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_GET, len,
			 ctx->ops->get(ctx, key, offset, buf, len, back, version_p));
}

int ddss_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf, size_t len)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_PUT, len, ctx->ops->put(ctx, key, offset, buf, len));
}

int ddss_async_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		   ddss_req_t **req_p)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_ASYNC_GET, len,
			 ctx->ops->start(ctx, key, offset, buf, len, false, req_p));
}

int ddss_async_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf, size_t len,
		   ddss_req_t **req_p)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_ASYNC_PUT, len,
			 ctx->ops->start(ctx, key, offset, (void *)buf, len, true, req_p));
}

/* A request's end is counted with its start (a failed wait shows in errors[] only). */
int ddss_wait_ss(ddss_ctx_t *ctx, ddss_req_t *req)
{
	int r;

	API_ENTER(ctx);
	r = ctx->ops->wait(ctx, req);
	return api_count_error(ctx, r);
}

int ddss_test_ss(ddss_ctx_t *ctx, ddss_req_t *req)
{
	int r;

	API_ENTER(ctx);
	r = ctx->ops->test(ctx, req);
	return r == -EAGAIN ? r : api_count_error(ctx, r);
}

int ddss_acquire_lock_ss(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_LOCK, 0, ctx->ops->lock(ctx, key, mode, false, -1));
}

int ddss_acquire_lock_timed_ss(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode,
			       int timeout_ms)
{
	if (!ctx || timeout_ms < 0)
		return -EINVAL;
	return api_count(ctx, DDSS_STAT_LOCK, 0,
			 ctx->ops->lock(ctx, key, mode, false, timeout_ms));
}

int ddss_try_lock_ss(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_TRY_LOCK, 0, ctx->ops->lock(ctx, key, mode, true, 0));
}

int ddss_release_lock_ss(ddss_ctx_t *ctx, ddss_key_t key)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_UNLOCK, 0, ctx->ops->unlock(ctx, key));
}

int ddss_lock_fence_ss(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence)
{
	API_ENTER(ctx);
	return api_count(ctx, DDSS_STAT_FENCE, 0, ctx->ops->lock_fence(ctx, key, fence));
}
