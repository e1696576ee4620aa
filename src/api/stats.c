/*
 * ddss_stats_get: the counters of the public calls (counted in api.c) and those kept
 * below them, which the mode's table collects (core/ops.h).
 */
#include "api/stats.h"
#include "coherence/coherence.h"
#include "core/ops.h"

#include <errno.h>
#include <string.h>

static const char *const op_names[DDSS_STAT_NOPS] = {
	[DDSS_STAT_GET] = "get",
	[DDSS_STAT_PUT] = "put",
	[DDSS_STAT_ASYNC_GET] = "async_get",
	[DDSS_STAT_ASYNC_PUT] = "async_put",
	[DDSS_STAT_ALLOCATE] = "allocate",
	[DDSS_STAT_LOOKUP] = "lookup",
	[DDSS_STAT_RELEASE] = "release",
	[DDSS_STAT_LOCK] = "lock",
	[DDSS_STAT_TRY_LOCK] = "try_lock",
	[DDSS_STAT_UNLOCK] = "unlock",
	[DDSS_STAT_FENCE] = "fence",
	[DDSS_STAT_BARRIER] = "barrier",
};

const char *ddss_stat_op_name(int op)
{
	return op >= 0 && op < DDSS_STAT_NOPS ? op_names[op] : "?";
}

int ddss_stats_get(ddss_ctx_t *ctx, struct ddss_stats *stats_p)
{
	const uint64_t *from;
	uint64_t *to;

	if (!ctx || !stats_p)
		return -EINVAL;
	memset(stats_p, 0, sizeof(*stats_p));
	/* Word by word: every counter is a uint64_t that other threads add to. */
	from = (const uint64_t *)&ctx->stats;
	to = (uint64_t *)stats_p;
	for (size_t i = 0; i < sizeof(*stats_p) / sizeof(uint64_t); i++)
		to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
	ctx->ops->counters(ctx, stats_p);
	return 0;
}

void ddss_coh_stats_get(ddss_ctx_t *ctx, struct ddss_coh_stats *stats_p)
{
	ctx->ops->coh_stats(ctx, stats_p);
}
