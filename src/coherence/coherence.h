/*
 * Coherence models (docs/coherence.md): what get and put do on a segment, chosen at
 * allocation. The rest of the library calls only these functions; each model is one small
 * strategy in this folder (model.h), so nothing outside it branches on the model.
 */
#ifndef DDSS_COHERENCE_COHERENCE_H
#define DDSS_COHERENCE_COHERENCE_H

#include "core/seg_cache.h"
#include "ddss/ddss.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ddss_coh;

/* A segment's model as it travels in messages and descriptors. */
struct coh_choice {
	uint32_t coherence; /* enum ddss_coherence */
	uint32_t param;     /* delta: x; temporal: t in ms; else 0 */
};

/** The model @attr asks for; -EINVAL for an unknown model or a bad or misplaced parameter. */
int ddss_coh_choose(const struct ddss_seg_attr *attr, struct coh_choice *choice_p);

/**
 * 0 if this rank can run @coherence's model on a transport with (@atomics) or without NIC
 * atomics; else -EOPNOTSUPP, logged with the model and @device named (version, write and
 * delta change their version word with NIC atomics: docs/transport.md, "Capabilities and
 * fallbacks").
 */
int ddss_coh_check_caps(uint32_t coherence, bool atomics, const char *device);

/**
 * Bytes of pool a segment of @size needs under @coherence / @param (more than @size when
 * the model keeps several copies). -EINVAL for a bad model, -ENOMEM if it overflows.
 */
int ddss_coh_data_len(uint32_t coherence, uint32_t param, uint64_t size, uint64_t *len_p);

/** The context's coherence state: the cache of segment copies (@cache_bytes), counters. */
int ddss_coh_create(size_t cache_bytes, struct ddss_coh **coh_p);
void ddss_coh_destroy(struct ddss_coh *coh);

/** @key's segment is gone: drop its cached copy. */
void ddss_coh_forget(struct ddss_coh *coh, uint64_t key);

/**
 * get / put of [off, off+len) of segment @d (range already checked) under its model.
 * @back and *version_p as ddss_get_versioned().
 */
int ddss_coh_get(struct ddss_ctx *ctx, const struct ddss_seg_desc *d, size_t off, void *buf,
		 size_t len, unsigned back, uint64_t *version_p);
int ddss_coh_put(struct ddss_ctx *ctx, const struct ddss_seg_desc *d, size_t off,
		 const void *buf, size_t len);

/** True if @d's get and put are single RDMA operations, which async requests can overlap. */
bool ddss_coh_is_plain(const struct ddss_seg_desc *d);

/*
 * Coordinator mode, the heartbeat thread, before @rank's new process is let in
 * (net/readmit.c): settle the marks its old process left unfinished on write and delta
 * segments homed here, so that other ranks' next puts repair them (coh_readmit.c). 0, or
 * -EBUSY if the old process is not cut off here yet or a compare&swap of a settle is still
 * out (the readmission must wait), -EINVAL if @rank was not declared dead, -ETIMEDOUT or
 * -ENOMEM (some marks left unsettled), or a transport error.
 */
int ddss_coh_settle_readmitted(ddss_ctx_t *ctx, uint32_t rank);

/* ---- for tests and benchmarks ---- */

/* Marks settled here by ddss_coh_settle_readmitted so far. */
uint64_t ddss_coh_readmit_settled(ddss_ctx_t *ctx);

struct ddss_coh_stats {
	uint64_t fetches;  /* data transfers made by caching gets (version, write, delta, temporal) */
	uint64_t hits;     /* gets served from the cache */
	uint64_t retries;  /* lock-free reads retried because a writer overlapped */
	uint64_t locked;   /* lock-free gets that gave up retrying and took the lock */
	uint64_t cached;   /* bytes in the cache now */
};

/* This context's counters, or in daemon mode the daemon's, shared by its clients (defined
 * with the public API, src/api/stats.c, which asks the mode's table). */
void ddss_coh_stats_get(ddss_ctx_t *ctx, struct ddss_coh_stats *stats_p);
/* Direct mode: this context's own counters. */
void ddss_coh_counters(ddss_ctx_t *ctx, struct ddss_coh_stats *stats_p);

/** Replace the clock temporal segments age their copies with (NULL: CLOCK_MONOTONIC). */
void ddss_coh_set_clock(ddss_ctx_t *ctx, int64_t (*now_ns)(void *arg), void *arg);

/*
 * Called, when set, as a model's get or put enters (@enter) and leaves the critical section
 * of its implicit lock (or of the caller's hold, which it runs inside), so tests can count
 * who is inside at once. Tests only: set it before any get/put runs.
 */
extern void (*ddss_coh_inside_hook)(ddss_ctx_t *ctx, ddss_key_t key, bool is_put, bool enter);

/*
 * Called, when set, where a write or delta put posts the fetch&add that completes its
 * version: a nonzero return fails that post with it, as a transport would (the copy's write
 * is already posted). Tests only: set it between calls.
 */
extern int (*ddss_coh_complete_hook)(ddss_ctx_t *ctx, ddss_key_t key);
/* Called, when set, once a write or delta put's mark has landed, before its copy is posted
 * (a test kills the writer there: a dead writer's mark). Tests only, as above. */
extern void (*ddss_coh_marked_hook)(ddss_ctx_t *ctx, ddss_key_t key);
/* Called, when set, right after a write or delta put posted that fetch&add (a test may
 * break the connection under the transfers in flight). Tests only, as above. */
extern void (*ddss_coh_posted_hook)(ddss_ctx_t *ctx, ddss_key_t key);
/* Called, when set, once a get's or put's posted transfers have been waited for, with what
 * they gave: its return replaces that. A test turns a success into a transport's failure,
 * as when the connection failed after the transfers landed but before their completions
 * came back. Tests only, as above. */
extern int (*ddss_coh_waited_hook)(int status);

#endif /* DDSS_COHERENCE_COHERENCE_H */
