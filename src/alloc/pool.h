/*
 * The rank's registered memory pool and the allocator that carves segments from it.
 *
 * The pool is one anonymous mapping made at start-up; it is registered with the NIC, so it
 * never moves, shrinks or loses pages while it exists. Allocations come from a jemalloc arena
 * of its own whose extent hooks hand out pool memory with a bump pointer and refuse to give
 * any back: freed memory stays in jemalloc's caches for reuse. jemalloc's own metadata for
 * the arena lives in ordinary memory, never in the pool peers can reach.
 *
 * Several pools may exist at once (one per context, and in tests); each has its own arena.
 */
#ifndef DDSS_ALLOC_POOL_H
#define DDSS_ALLOC_POOL_H

#include <stddef.h>
#include <stdint.h>

struct ddss_pool;

struct ddss_pool_stats {
	size_t allocated; /* bytes in live allocations (jemalloc's accounting for this arena) */
	size_t mapped;    /* bytes of the pool handed to jemalloc so far (high-water mark) */
	uint64_t live;    /* allocations not yet freed */
};

/**
 * Map @len bytes (rounded up to 2 MiB, base 2 MiB-aligned, MAP_PRIVATE|MAP_ANONYMOUS, so
 * zeroed) and make an arena over all but the first @reserve bytes (rounded up to 4 KiB),
 * which stay the caller's (the lock module's waiter records, at the same offset on every
 * rank). -EINVAL for @len 0 or @reserve over half the pool, -ENOMEM.
 */
int ddss_pool_create(size_t len, size_t reserve, struct ddss_pool **pool_p);

/*
 * The same over a memfd mapped shared, so that other processes can map it too (ddssd: its
 * clients read segments homed on their node from it directly, docs/daemon.md).
 */
int ddss_pool_create_shared(size_t len, size_t reserve, struct ddss_pool **pool_p);

/** The shared pool's memfd (owned by the pool), or -1 for a private pool. */
int ddss_pool_fd(const struct ddss_pool *pool);

/**
 * Destroy the arena and unmap. NULL is fine. Every allocation dies with it; no other thread
 * may use the pool any more.
 */
void ddss_pool_destroy(struct ddss_pool *pool);

/** First byte of the pool (2 MiB-aligned). */
void *ddss_pool_base(const struct ddss_pool *pool);

/** Length of the pool in bytes (a multiple of 2 MiB). */
size_t ddss_pool_len(const struct ddss_pool *pool);

/**
 * Allocate @size bytes aligned to @align (power of two, >= 8, <= 4096) inside the pool;
 * *off_p = offset from base. Memory is zeroed. -EINVAL (size 0, bad align), -ENOMEM (pool
 * full, or no free run that long: freed memory is not one run, see pool.c). Thread-safe.
 */
int ddss_pool_alloc(struct ddss_pool *pool, size_t size, size_t align, uint64_t *off_p);

/**
 * Free an allocation by its offset. -EINVAL if @off is not inside the pool, or lies where
 * no allocation can be (past the part handed to jemalloc, or not 8-byte aligned). It must
 * be an offset returned by ddss_pool_alloc and not yet freed; that part is the caller's
 * contract. Thread-safe.
 */
int ddss_pool_free(struct ddss_pool *pool, uint64_t off);

/**
 * Fill *st_p. -ENOTSUP if this jemalloc was built without statistics. Thread-safe; with
 * other threads allocating the numbers are a snapshot, not taken at one instant.
 */
int ddss_pool_stats(struct ddss_pool *pool, struct ddss_pool_stats *st_p);

#endif /* DDSS_ALLOC_POOL_H */
