/*
 * Daemon mode: one client call run in the daemon (serve.h). The calls are the public ones,
 * on the daemon's own (direct) context: results are exactly what direct mode gives.
 */
#include "daemon/serve.h"
#include "alloc/pool.h"
#include "coherence/coherence.h"
#include "core/ctx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Both ends copy whole structs in and out of one channel slot (server.c, client.c). */
_Static_assert(sizeof(struct dmsg_req) <= DDSS_CHAN_MSG, "a request fits a channel slot");
_Static_assert(sizeof(struct dmsg_resp) <= DDSS_CHAN_MSG, "a response fits a channel slot");

static int payload(struct ddss_chan *chan, const struct dmsg_req *q, void **p)
{
	if (!q->len)
		return -EINVAL;
	return ddss_chan_data_peer(chan, q->data_off, q->len, p);
}

/* A null segment homed here can be read by the client from the shared pool itself. */
void ddss_serve_describe(ddss_ctx_t *ctx, const struct ddss_seg_desc *d, struct dmsg_resp *a)
{
	if (ddss_pool_fd(ctx->pool) >= 0 && d->home == ctx->rank &&
	    d->coherence == DDSS_COHERENCE_NULL) {
		a->has_desc = 1;
		a->data_off = d->data_off;
		a->size = d->size;
	}
}

static void describe_local(ddss_ctx_t *ctx, uint64_t key, struct dmsg_resp *a)
{
	const struct ddss_seg_desc *d;

	if (ddss_ctx_desc(ctx, key, &d))
		return;
	ddss_serve_describe(ctx, d, a);
	ddss_seg_cache_put(d);
}

static int alloc(ddss_ctx_t *ctx, const struct dmsg_req *q, struct dmsg_resp *a)
{
	struct ddss_seg_attr attr = { .placement = q->mode, .rank = q->rank,
				      .coherence = q->coherence, .delta = q->delta,
				      .temporal_ms = q->temporal_ms };

	if (!memchr(q->name, 0, sizeof(q->name)))
		return -ENAMETOOLONG;
	if (q->named)
		attr.name = q->name;
	return ddss_allocate_ss(ctx, q->len, &attr, &a->key);
}

static int stat_seg(ddss_ctx_t *ctx, const struct dmsg_req *q, struct dmsg_resp *a)
{
	struct ddss_seg_info info;
	int r = ddss_stat_ss(ctx, q->key, &info);

	if (!r) {
		a->home = info.home;
		a->size = info.size;
		a->coherence = info.coherence;
		a->param = info.param;
	}
	return r;
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The same call as the client measures, timed inside the daemon: direct mode's cost. */
static int bench(ddss_ctx_t *ctx, const struct dmsg_req *q, struct dmsg_resp *a)
{
	uint64_t *ns;
	uint8_t byte = 1;
	int r = 0;

	if (q->iters == 0 || q->iters > 1000000)
		return -EINVAL;
	ns = malloc(q->iters * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	for (uint32_t i = 0; i < q->iters && !r; i++) {
		uint64_t t0 = now_ns();

		switch (q->mode) {
		case DBENCH_GET:
			r = ddss_get(ctx, q->key, 0, &byte, 1);
			break;
		case DBENCH_PUT:
			r = ddss_put(ctx, q->key, 0, &byte, 1);
			break;
		case DBENCH_LOCK:
			r = ddss_acquire_lock_ss(ctx, q->key, DDSS_LOCK_EXCLUSIVE);
			if (!r)
				r = ddss_release_lock_ss(ctx, q->key);
			break;
		case DBENCH_STAT: {
			struct ddss_seg_info info;

			r = ddss_stat_ss(ctx, q->key, &info);
			break;
		}
		default:
			r = -EINVAL;
		}
		ns[i] = now_ns() - t0;
	}
	if (!r) {
		qsort(ns, q->iters, sizeof(*ns), cmp_u64);
		a->ns_median = ns[q->iters / 2];
		a->ns_p99 = ns[(uint64_t)q->iters * 99 / 100];
	}
	free(ns);
	return r;
}

void ddss_serve_call(struct ddss_server *srv, ddss_ctx_t *ctx, struct ddss_chan *chan,
		     const struct dmsg_req *q, struct dmsg_resp *a)
{
	void *p = NULL;
	int r;

	memset(a, 0, sizeof(*a));
	switch (q->op) {
	case DOP_ALLOC:
		r = alloc(ctx, q, a);
		break;
	case DOP_LOOKUP:
		r = memchr(q->name, 0, sizeof(q->name)) ? ddss_lookup_ss(ctx, q->name, &a->key) :
							  -ENAMETOOLONG;
		break;
	case DOP_RELEASE:
		r = ddss_release_ss(ctx, q->key);
		break;
	case DOP_STAT:
		r = stat_seg(ctx, q, a);
		break;
	case DOP_GET:
		r = payload(chan, q, &p);
		if (!r)
			r = ddss_get_versioned(ctx, q->key, q->offset, p, q->len, q->back,
					       q->versioned ? &a->version : NULL);
		if (!r && q->want_desc)
			describe_local(ctx, q->key, a);
		break;
	case DOP_PUT:
		r = payload(chan, q, &p);
		if (!r)
			r = ddss_put(ctx, q->key, q->offset, p, q->len);
		break;
	case DOP_LOCK:
		r = ddss_acquire_lock_ss(ctx, q->key, q->mode);
		break;
	case DOP_LOCK_TIMED:
		r = ddss_acquire_lock_timed_ss(ctx, q->key, q->mode, q->timeout_ms);
		break;
	case DOP_TRY_LOCK:
		r = ddss_try_lock_ss(ctx, q->key, q->mode);
		break;
	case DOP_UNLOCK:
		r = ddss_release_lock_ss(ctx, q->key);
		break;
	case DOP_LOCK_FENCE:
		r = ddss_lock_fence_ss(ctx, q->key, &a->fence);
		break;
	case DOP_BARRIER:
		r = ddss_server_barrier(srv);
		break;
	case DOP_BENCH:
		r = bench(ctx, q, a);
		break;
	case DOP_COH_STATS: {
		struct ddss_coh_stats s;

		ddss_coh_stats_get(ctx, &s);
		a->stats[0] = s.fetches;
		a->stats[1] = s.hits;
		a->stats[2] = s.retries;
		a->stats[3] = s.locked;
		a->stats[4] = s.cached;
		r = 0;
		break;
	}
	case DOP_STATS:
		r = q->len == sizeof(struct ddss_stats) ? payload(chan, q, &p) : -EINVAL;
		if (!r)
			r = ddss_stats_get(ctx, p);
		if (!r)
			((struct ddss_stats *)p)->lane_calls = ddss_server_lane_calls(srv);
		break;
	default:
		r = -EPROTO;
	}
	a->rc = r;
}
