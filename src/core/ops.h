/*
 * The one place where direct and daemon mode part ways.
 *
 * ddss_init chooses a mode once and gives the context one of two tables:
 *   ddss_direct_ops (core/direct_ops.c): this process is a rank; the calls run in core,
 *                   lock and coherence;
 *   ddss_daemon_ops (daemon/client_ops.c): the node's ddssd is the rank; every call is
 *                   forwarded to it over shared memory.
 * The public API (src/api) validates nothing of its own, calls through the table and
 * counts the result (ddss_stats_get). No code below the table asks which mode it runs in.
 */
#ifndef DDSS_CORE_OPS_H
#define DDSS_CORE_OPS_H

#include "ddss/ddss.h"

#include <stdbool.h>

struct ddss_coh_stats;

struct ddss_ops {
	const char *name; /* "direct" or "daemon", for messages */
	int (*finalize)(ddss_ctx_t *ctx); /* also frees @ctx */
	int (*barrier)(ddss_ctx_t *ctx);
	int (*allocate)(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
			ddss_key_t *key_p);
	int (*lookup)(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p);
	int (*release)(ddss_ctx_t *ctx, ddss_key_t key);
	int (*stat)(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p);
	/* @back, @version_p: ddss_get_versioned (0, NULL for a plain get). */
	int (*get)(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		   unsigned back, uint64_t *version_p);
	int (*put)(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf, size_t len);
	int (*start)(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		     bool is_put, ddss_req_t **req_p);
	int (*wait)(ddss_ctx_t *ctx, ddss_req_t *req);
	int (*test)(ddss_ctx_t *ctx, ddss_req_t *req);
	/* @try_only: ddss_try_lock_ss; @timeout_ms: -1 waits as long as it takes. */
	int (*lock)(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode, bool try_only,
		    int timeout_ms);
	int (*unlock)(ddss_ctx_t *ctx, ddss_key_t key);
	int (*lock_fence)(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence_p);
	/* The counters kept below the API (locks, retries, timeouts, cache) into *@st. */
	void (*counters)(ddss_ctx_t *ctx, struct ddss_stats *st);
	/* The coherence models' counters (tests and benchmarks; coherence/coherence.h). */
	void (*coh_stats)(ddss_ctx_t *ctx, struct ddss_coh_stats *st);
};

extern const struct ddss_ops ddss_direct_ops;
extern const struct ddss_ops ddss_daemon_ops;

/* core/ctx.c: open a rank of the group (direct mode); @attr already defaulted. */
int ddss_ctx_open(const struct ddss_attr *attr, ddss_ctx_t **ctx_p);
/* core/ctx.c: check @attr's fields as ddss_ctx_open would, starting nothing. */
int ddss_ctx_check_attr(const struct ddss_attr *attr);
/* daemon/client_ops.c: attach to the node's ddssd (daemon mode). */
int ddss_daemon_open(const struct ddss_attr *attr, ddss_ctx_t **ctx_p);

#endif /* DDSS_CORE_OPS_H */
