/*
 * The per-context cache of segment copies used by the version, write, delta and temporal
 * models: at most one copy (of one byte range) per segment, each labelled with the version
 * it is and the time its transfer started. Bounded in bytes, least recently used out
 * first; thread-safe (sharded by key, one mutex per shard).
 */
#ifndef DDSS_COHERENCE_COH_CACHE_H
#define DDSS_COHERENCE_COH_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct coh_cache;

/* Which copy a get may use: the exact version, or one fetched at or after a time. */
struct coh_want {
	bool by_version;
	uint64_t version;
	int64_t fetched_after; /* when !by_version */
};

int coh_cache_create(size_t capacity, struct coh_cache **cache_p);
void coh_cache_destroy(struct coh_cache *cache);

/**
 * Copy [off, off+len) of @key's copy into @buf if a copy covers that range and is what @want
 * asks for; its version goes to *version_p. False (nothing copied) otherwise.
 */
bool coh_cache_get(struct coh_cache *cache, uint64_t key, size_t off, size_t len, void *buf,
		   const struct coh_want *want, uint64_t *version_p);

/**
 * Keep @data as @key's copy of [off, off+len), of @version, fetched at @fetched_ns. It
 * replaces the copy held unless that one is of the same range and newer. Copies larger
 * than a shard's share of the capacity are not kept.
 */
void coh_cache_put(struct coh_cache *cache, uint64_t key, size_t off, size_t len,
		   const void *data, uint64_t version, int64_t fetched_ns);

/**
 * The same, unless @key was forgotten (coh_cache_forget) since coh_cache_forgets returned
 * @forgets: a copy whose transfer began before a forget may hold the bytes the forget was
 * for (temporal: a put of this context). Counted per shard, so a forget of another key
 * can cost a copy, never keep a stale one.
 */
void coh_cache_put_since(struct coh_cache *cache, uint64_t key, size_t off, size_t len,
			 const void *data, uint64_t version, int64_t fetched_ns, uint64_t forgets);
/** Where @key's forgets stand, for coh_cache_put_since: read before the transfer. */
uint64_t coh_cache_forgets(struct coh_cache *cache, uint64_t key);

/** Drop @key's copy. */
void coh_cache_forget(struct coh_cache *cache, uint64_t key);

/** Bytes of copies held. */
size_t coh_cache_bytes(struct coh_cache *cache);

#endif /* DDSS_COHERENCE_COH_CACHE_H */
