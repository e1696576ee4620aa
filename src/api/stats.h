/* Counting the public calls into a context's struct ddss_stats (api.c, stats.c). */
#ifndef DDSS_API_STATS_H
#define DDSS_API_STATS_H

#include "core/ctx.h"

/*
 * Count one call of kind @op that returned @r: a success in ops[] and its @bytes in
 * bytes[], a failure in errors[] by its errno. Relaxed atomic adds on the context's
 * counters: a few nanoseconds beside a microseconds-long call. Returns @r.
 */
static inline int api_count(ddss_ctx_t *ctx, enum ddss_stat_op op, size_t bytes, int r)
{
	struct ddss_stats *st = &ctx->stats;

	if (r == 0) {
		__atomic_add_fetch(&st->ops[op], 1, __ATOMIC_RELAXED);
		if (bytes)
			__atomic_add_fetch(&st->bytes[op], bytes, __ATOMIC_RELAXED);
	} else if (r < 0) {
		__atomic_add_fetch(&st->errors[-r < DDSS_STAT_NERRNO ? -r : 0], 1,
				   __ATOMIC_RELAXED);
	}
	return r;
}

/* Count a failure that belongs to no one kind (a request's wait). Returns @r. */
static inline int api_count_error(ddss_ctx_t *ctx, int r)
{
	return r < 0 ? api_count(ctx, DDSS_STAT_GET, 0, r) : r;
}

#endif /* DDSS_API_STATS_H */
