/*
 * Daemon mode (core/ops.h): the node's ddssd is the rank, and each call of this process is
 * forwarded to it (client_api.c). Only this file reads ctx->client.
 */
#include "core/access.h"
#include "core/config.h"
#include "core/ctx.h"
#include "core/log.h"
#include "core/ops.h"
#include "coherence/coherence.h"
#include "daemon/client_api.h"
#include "daemon/sock_path.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int ddss_daemon_open(const struct ddss_attr *attr, ddss_ctx_t **ctx_p)
{
	const char *path = getenv("DDSS_DAEMON_SOCKET");
	char dflt[PATH_MAX];
	struct ddss_ctx *ctx;
	long timeout;
	int r;

	if ((!path || !*path) && attr->daemon_socket)
		path = attr->daemon_socket;
	if (!path || !*path) {
		r = ddss_daemon_socket_default(dflt, sizeof(dflt));
		if (r)
			return r;
		path = dflt;
	}
	r = ddss_env_long("DDSS_CONNECT_TIMEOUT_MS", 1, INT32_MAX,
			  attr->connect_timeout_ms ? attr->connect_timeout_ms : 30000, &timeout);
	if (r)
		return r;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	r = ddss_client_attach(path, (int)timeout, &ctx->client);
	if (r) {
		free(ctx);
		return r;
	}
	ctx->ops = &ddss_daemon_ops;
	ctx->rank = ddss_client_rank(ctx->client);
	ctx->size = ddss_client_size(ctx->client);
	ddss_log_set_rank(ctx->rank);
	*ctx_p = ctx;
	return 0;
}

static int daemon_finalize(ddss_ctx_t *ctx)
{
	ddss_client_detach(ctx->client);
	free(ctx);
	return 0;
}

static int daemon_barrier(ddss_ctx_t *ctx)
{
	return ddss_cl_barrier(ctx->client); /* the daemon's own barrier flushes */
}

static int daemon_allocate(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
			   ddss_key_t *key_p)
{
	return ddss_cl_allocate(ctx->client, nbytes, attr, key_p);
}

static int daemon_lookup(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p)
{
	return ddss_cl_lookup(ctx->client, name, key_p);
}

static int daemon_release(ddss_ctx_t *ctx, ddss_key_t key)
{
	return ddss_cl_release(ctx->client, key);
}

static int daemon_stat(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p)
{
	return ddss_cl_stat(ctx->client, key, info_p);
}

static int daemon_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		      unsigned back, uint64_t *version_p)
{
	return ddss_cl_get(ctx->client, key, offset, buf, len, back, version_p);
}

static int daemon_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf,
		      size_t len)
{
	return ddss_cl_put(ctx->client, key, offset, buf, len);
}

/* The daemon runs the call now (docs/daemon.md): its result waits in the request. */
static int daemon_start(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
			bool is_put, ddss_req_t **req_p)
{
	int r;

	if (!req_p)
		return -EINVAL;
	r = is_put ? ddss_cl_put(ctx->client, key, offset, buf, len) :
		     ddss_cl_get(ctx->client, key, offset, buf, len, 0, NULL);
	if (r == -EINVAL || r == -ESTALE || r == -ERANGE || r == -EMSGSIZE)
		return r; /* found before anything started, as in direct mode */
	return ddss_req_completed(r, req_p);
}

static int daemon_lock(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode, bool try_only,
		       int timeout_ms)
{
	uint32_t op = try_only ? DOP_TRY_LOCK : timeout_ms < 0 ? DOP_LOCK : DOP_LOCK_TIMED;

	return ddss_cl_lock(ctx->client, key, mode, op, try_only ? 0 : timeout_ms);
}

static int daemon_unlock(ddss_ctx_t *ctx, ddss_key_t key)
{
	return ddss_cl_unlock(ctx->client, key);
}

static int daemon_lock_fence(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence_p)
{
	if (!fence_p)
		return -EINVAL;
	return ddss_cl_lock_fence(ctx->client, key, fence_p);
}

/* Locks, retries, timeouts, the cache, the home's poll and the tcp sends are the daemon's:
 * its totals over its clients. */
static void daemon_counters(ddss_ctx_t *ctx, struct ddss_stats *st)
{
	struct ddss_stats d;

	if (ddss_cl_stats(ctx->client, &d))
		return; /* the daemon cannot tell (gone, or an older one): zeros */
	st->lock_contended = d.lock_contended;
	st->lock_recovered = d.lock_recovered;
	st->retries = d.retries;
	st->timeouts = d.timeouts;
	st->cache_hits = d.cache_hits;
	st->cache_misses = d.cache_misses;
	st->home_polled = d.home_polled;
	st->home_poll_yields = d.home_poll_yields;
	st->sends_combined = d.sends_combined;
	st->replies_batched = d.replies_batched;
	st->lane_calls = d.lane_calls;
}

/* The cache and its counters are the daemon's (shared by its clients); zeros if it cannot
 * tell. */
static void daemon_coh_stats(ddss_ctx_t *ctx, struct ddss_coh_stats *st)
{
	uint64_t v[5] = { 0 };

	ddss_cl_coh_stats(ctx->client, v);
	*st = (struct ddss_coh_stats){ .fetches = v[0], .hits = v[1], .retries = v[2],
				       .locked = v[3], .cached = v[4] };
}

const struct ddss_ops ddss_daemon_ops = {
	.name = "daemon",
	.finalize = daemon_finalize,
	.barrier = daemon_barrier,
	.allocate = daemon_allocate,
	.lookup = daemon_lookup,
	.release = daemon_release,
	.stat = daemon_stat,
	.get = daemon_get,
	.put = daemon_put,
	.start = daemon_start,
	.wait = ddss_req_wait,
	.test = ddss_req_test,
	.lock = daemon_lock,
	.unlock = daemon_unlock,
	.lock_fence = daemon_lock_fence,
	.counters = daemon_counters,
	.coh_stats = daemon_coh_stats,
};
