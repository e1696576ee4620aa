/* The context: one rank's membership of the group and everything it owns. */
#ifndef DDSS_CORE_CTX_H
#define DDSS_CORE_CTX_H

#include "alloc/names.h"
#include "alloc/pool.h"
#include "alloc/segtab.h"
#include "core/rpc.h"
#include "core/seg_cache.h"
#include "lock/lock.h"
#include "ddss/ddss.h"
#include "net/net.h"

#include <pthread.h>
#include <stdbool.h>

struct ddss_coh;

struct ddss_ops;

struct ddss_ctx {
	const struct ddss_ops *ops;     /* the mode's calls, chosen once (core/ops.h) */
	struct ddss_stats stats;        /* counted by the public API (src/api): ops, bytes,
					 * errors; relaxed atomic adds */
	/* Daemon mode: the attachment to the node's ddssd, used by daemon/client_ops.c only;
	 * nothing below is used then. NULL in direct mode. */
	struct ddss_client *client;
	struct ddss_net *net;
	struct ddss_tp *tp;
	struct ddss_rpc *rpc;
	struct ddss_pool *pool;         /* this rank's shared memory */
	struct ddss_segtab *segtab;     /* the segments homed here */
	struct ddss_names *names;       /* the names whose directory is here */
	struct ddss_seg_cache *cache;   /* descriptors of segments anywhere */
	struct ddss_lock *lock;         /* segment locks (src/lock) */
	struct ddss_coh *coh;           /* coherence models' cache and counters (src/coherence) */
	uint32_t rank, size;
	uint32_t next_home;             /* atomic: round-robin placement */
	int connect_timeout_ms;
	pthread_mutex_t ack_mu;         /* invalidation answers vs. closing the transport */
	bool closing;                   /* under ack_mu: no more answers */
};

/*
 * ddssd only, set before ddss_init: make the pool a shared memfd its clients can map
 * (docs/daemon.md "Local reads").
 */
extern bool ddss_ctx_share_pool;

/* What the segment table asks of coherence and lock (alloc/segtab.h), registered by the
 * context when it creates the table. */
extern const struct ddss_segtab_hooks ddss_segtab_hooks;

/* core/ctx.c: direct mode's finalize (frees @ctx) and barrier, behind ddss_direct_ops. */
int ddss_ctx_close(struct ddss_ctx *ctx);
int ddss_ctx_barrier(struct ddss_ctx *ctx);

/* The pool offset of the release epoch word (ddss_segtab_watch_releases): right after the
 * lock module's waiter records, in the pool's reserved head. */
size_t ddss_ctx_epoch_off(void);

/* core/seg_service.c: answer the segment service's requests (an rpc serve function). */
void ddss_seg_serve(void *arg, uint32_t from, uint32_t id, uint16_t op, const uint8_t *body,
		    size_t len);
/* core/seg_service.c: the cache's invalidation answer. */
void ddss_seg_ack(void *arg, uint32_t to, uint32_t id);

/* core/segment.c: @key's descriptor with a reference (ddss_seg_cache_put it). */
int ddss_ctx_desc(struct ddss_ctx *ctx, uint64_t key, const struct ddss_seg_desc **desc_p);

#endif /* DDSS_CORE_CTX_H */
