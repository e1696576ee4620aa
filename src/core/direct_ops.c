/*
 * Direct mode (core/ops.h): this process is a rank, and each call runs here, in core,
 * lock and coherence.
 */
#include "coherence/coherence.h"
#include "core/access.h"
#include "core/ctx.h"
#include "core/ops.h"
#include "core/segment.h"
#include "lock/lock.h"
#include "net/transport.h"

static void direct_counters(ddss_ctx_t *ctx, struct ddss_stats *st)
{
	struct ddss_lock_recovery_stats rs;
	struct ddss_coh_stats cs;

	ddss_lock_recovery_stats(ctx, &rs);
	ddss_coh_counters(ctx, &cs);
	st->lock_contended = ddss_lock_contended(ctx);
	st->lock_recovered = rs.requeued;
	st->retries = cs.retries;
	st->timeouts = __atomic_load_n(&ctx->tp->timeouts, __ATOMIC_RELAXED);
	st->cache_hits = cs.hits;
	st->cache_misses = cs.fetches;
	st->home_polled = __atomic_load_n(&ctx->tp->home_polled, __ATOMIC_RELAXED);
	st->home_poll_yields = __atomic_load_n(&ctx->tp->home_poll_yields, __ATOMIC_RELAXED);
	st->sends_combined = __atomic_load_n(&ctx->tp->sends_combined, __ATOMIC_RELAXED);
	st->replies_batched = __atomic_load_n(&ctx->tp->replies_batched, __ATOMIC_RELAXED);
}

const struct ddss_ops ddss_direct_ops = {
	.name = "direct",
	.finalize = ddss_ctx_close,
	.barrier = ddss_ctx_barrier,
	.allocate = ddss_segment_allocate,
	.lookup = ddss_segment_lookup,
	.release = ddss_segment_release,
	.stat = ddss_segment_stat,
	.get = ddss_access_get,
	.put = ddss_access_put,
	.start = ddss_access_start,
	.wait = ddss_req_wait,
	.test = ddss_req_test,
	.lock = ddss_lock_acquire,
	.unlock = ddss_lock_release,
	.lock_fence = ddss_lock_fence,
	.counters = direct_counters,
	.coh_stats = ddss_coh_counters,
};
