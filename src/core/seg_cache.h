/*
 * The per-context cache of segment descriptors (key -> home, data offset, size), so that
 * get/put cost one RDMA operation and no message. A liburcu lock-free hash table: lookups
 * take no lock and any number of threads may run them.
 *
 * Invalidation: when a segment is released, the releaser asks every rank that was given
 * its descriptor to drop it. The answer goes back only when no operation that could have
 * seen the descriptor is still in flight (an RCU grace period, then the last reference),
 * so the home frees the memory only when nobody can still touch it. A lookup racing with
 * the invalidation is marked and its answer thrown away (-ESTALE), never cached.
 */
#ifndef DDSS_CORE_SEG_CACHE_H
#define DDSS_CORE_SEG_CACHE_H

#include "alloc/segtab.h"

#include <stdint.h>

struct ddss_seg_cache;
struct ddss_seg_pending;

struct ddss_seg_desc {
	uint64_t key;
	uint32_t home;
	uint64_t data_off; /* first data byte in the home's pool */
	uint64_t size;
	uint32_t coherence; /* enum ddss_coherence: how get/put behave (src/coherence) */
	uint32_t param;
};

/* Answer invalidation request @id from @to (the descriptor is gone, nothing in flight). */
typedef void (*ddss_seg_ack_fn)(void *arg, uint32_t to, uint32_t id);

int ddss_seg_cache_create(ddss_seg_ack_fn ack, void *arg, struct ddss_seg_cache **cache_p);
/** Free everything (no operation may be in flight; no acks are sent). */
void ddss_seg_cache_destroy(struct ddss_seg_cache *cache);

/** The cached descriptor of @key with a reference held, or NULL. */
const struct ddss_seg_desc *ddss_seg_cache_get(struct ddss_seg_cache *cache, uint64_t key);
/** Drop a reference taken by ddss_seg_cache_get / ddss_seg_cache_end. */
void ddss_seg_cache_put(const struct ddss_seg_desc *desc);

/** Announce a lookup of @key (NULL: out of memory). Finish it with ddss_seg_cache_end. */
struct ddss_seg_pending *ddss_seg_cache_begin(struct ddss_seg_cache *cache, uint64_t key);
/**
 * Finish a lookup (@pending may be NULL for a segment this rank just allocated): cache
 * @loc (homed on @home) and return it with a reference in *desc_p. -ESTALE if the segment
 * was invalidated meanwhile, -ENOMEM.
 */
int ddss_seg_cache_end(struct ddss_seg_cache *cache, struct ddss_seg_pending *pending,
		       const struct ddss_seg_loc *loc, uint32_t home,
		       const struct ddss_seg_desc **desc_p);
/** Give up a lookup (it failed). */
void ddss_seg_cache_cancel(struct ddss_seg_cache *cache, struct ddss_seg_pending *pending);

/**
 * Invalidations this cache has made so far. A key that a lookup found after the epoch was
 * read as e was valid then, and stays valid while the epoch is still e (the count goes up
 * only after an entry is unlinked): callers that keep what a lookup told them (the lock
 * layer: home and lock word) check this one load instead of looking the key up again.
 */
uint64_t ddss_seg_cache_epoch(const struct ddss_seg_cache *cache);
/** A number no other cache of this process had (a new cache may reuse an old address). */
uint64_t ddss_seg_cache_id(const struct ddss_seg_cache *cache);

/** Drop @key; answer request @id from @from through the ack function once drained. */
void ddss_seg_cache_invalidate(struct ddss_seg_cache *cache, uint64_t key, uint32_t from,
			       uint32_t id);

/**
 * Drop every descriptor of a segment homed at @home (its process was replaced: those
 * segments are gone, and the offsets would reach the new process's memory). Lookups in
 * flight are thrown away (-ESTALE); no acks are sent.
 */
void ddss_seg_cache_drop_home(struct ddss_seg_cache *cache, uint32_t home);

#endif /* DDSS_CORE_SEG_CACHE_H */
