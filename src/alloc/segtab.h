/*
 * The home rank's table of the segments in its pool. Slot i holds the segment whose key
 * has slot i; its generation is bumped when the segment is released, so old keys miss.
 * Each live segment remembers which ranks were given its descriptor (they may cache it and
 * must be told when it goes away). Thread-safe (one mutex: this is the control path).
 *
 * In the pool, a segment is a 128-byte header followed by its bytes:
 *   [lock word 8 | version 8 | key 8 | size 8 | lock words 24 | model 4 | param 4]
 *   [lock generation 8 | settled mark 8 | reserved 48] [data ...]
 * The lock word, version and generation are 8-byte aligned for the NIC's atomics. The
 * generation (fencing numbers, docs/locks.md) has a second cache line because the first
 * was full; it keeps the data 64-byte aligned. The data part holds as many copies of the
 * segment as its coherence model keeps (src/coherence).
 */
#ifndef DDSS_ALLOC_SEGTAB_H
#define DDSS_ALLOC_SEGTAB_H

#include "alloc/pool.h"
#include "ddss/ddss.h"

#include <stdbool.h>
#include <stdint.h>

#define DDSS_SEG_HDR_LEN 128u
#define DDSS_SEG_HDR_LOCK 0u
#define DDSS_SEG_HDR_VERSION 8u
#define DDSS_SEG_HDR_FENCE 64u /* the lock's generation: fetch&add only */
/* write/delta: the mark of a failed put known to be final (src/coherence/coh_slots.c) */
#define DDSS_SEG_HDR_SETTLED 72u

struct ddss_segtab;

/* What a rank needs to reach a live segment. */
struct ddss_seg_loc {
	uint64_t key;
	uint64_t data_off; /* offset of the first data byte in the home's pool */
	uint64_t size;
	uint32_t coherence; /* enum ddss_coherence */
	uint32_t param;     /* the model's parameter (delta x, temporal t) */
};

/*
 * What the table needs to know from the layers above it (coherence, lock), which register
 * it when they create the table: the table never calls upward by name.
 */
struct ddss_segtab_hooks {
	/* Pool bytes for the data of a segment of @size under model @coherence / @param;
	 * -EINVAL for a model or parameter the layer above refuses. */
	int (*data_len)(uint32_t coherence, uint32_t param, uint64_t size, uint64_t *len_p);
	/* Whether the lock words of the header at @hdr are idle: a released segment's memory
	 * is freed only then, so late lock traffic never lands in a new segment. */
	bool (*words_idle)(const void *hdr);
};

int ddss_segtab_create(struct ddss_pool *pool, uint32_t rank, uint32_t group_size,
		       const struct ddss_segtab_hooks *hooks, struct ddss_segtab **tab_p);
void ddss_segtab_destroy(struct ddss_segtab *tab);

/*
 * Limit what one rank may hold at this home: live segments (not yet fully released) and
 * the pool bytes they take (header included); 0: no limit. An allocation past either
 * fails with -EDQUOT and changes nothing.
 */
void ddss_segtab_set_quota(struct ddss_segtab *tab, uint32_t max_segments, uint64_t max_bytes);
/**
 * Where every slot's generations start (before any segment exists). Coordinator mode
 * starts at a random one: a process that takes over a rank then issues keys that the old
 * process's keys match only by chance (about one in 2^20 per key), so an old key gets
 * -ESTALE from the new home instead of reaching a new segment (so does a key of a table
 * index the new process has not reached yet).
 */
void ddss_segtab_set_first_generation(struct ddss_segtab *tab, uint32_t gen);

/**
 * Carve a segment of @size bytes under coherence model @coherence / @param for @requester
 * (who becomes a cacher). -EINVAL (bad size or model), -ENOMEM, -ENOSPC, -EDQUOT
 * (@requester's quota here is used up).
 */
int ddss_segtab_alloc(struct ddss_segtab *tab, uint64_t size, uint32_t coherence,
		      uint32_t param, const char *name, uint32_t requester,
		      struct ddss_seg_loc *loc_p);

/** The live segment @key names; @requester becomes a cacher. -ESTALE, -EINVAL. */
int ddss_segtab_lookup(struct ddss_segtab *tab, uint64_t key, uint32_t requester,
		       struct ddss_seg_loc *loc_p);

/**
 * Start releasing @key for rank @requester: from now on it is stale for lookups. Writes its
 * name (or "") to @name and its cachers' bitmap to @cachers (@cachers_len bytes, zeroed
 * first). An unnamed segment may be released only by the rank that allocated it and by
 * the home itself, a named one by any rank (ddss_release_ss(3)): -EPERM for any other,
 * and nothing changes. -ESTALE (not live, or
 * already being released), -EINVAL.
 */
int ddss_segtab_release_begin(struct ddss_segtab *tab, uint64_t key, uint32_t requester,
			      char name[DDSS_NAME_MAX], uint8_t *cachers, size_t cachers_len);

/**
 * End the release begun for @key: the key is gone; the memory is freed now, or, while the
 * lock words are still in use, once they are idle. -ESTALE if there is none.
 */
int ddss_segtab_release_end(struct ddss_segtab *tab, uint64_t key);

/*
 * Released segments whose memory is not yet freed: their lock words were still in use (a
 * holder or waiter had yet to finish). Each is freed once its words are idle, checked on
 * every allocation and release and by this call.
 */
uint32_t ddss_segtab_draining(struct ddss_segtab *tab);

/*
 * Count releases in *@epoch (in the pool, so that ddssd's clients, which read segments
 * homed on their node straight from the pool, see that one began): bumped as each release
 * begins, before the segment's memory can be freed.
 */
void ddss_segtab_watch_releases(struct ddss_segtab *tab, uint64_t *epoch);

/*
 * Keep every segment's memory, released ones' included, until the matching unhold: a
 * caller that found a header by ddss_segtab_each may then post to it after the table's
 * lock is dropped, and never reach another segment's memory. Holds nest.
 */
void ddss_segtab_hold(struct ddss_segtab *tab);
void ddss_segtab_unhold(struct ddss_segtab *tab);

/*
 * Call @fn for every segment not yet freed (live or being released), with its header
 * (@hdr in this process, @hdr_off in the pool) and its location, under the table's lock:
 * @fn must not call back into the table, nor wait for a peer.
 */
typedef void (*ddss_segtab_each_fn)(void *arg, const void *hdr, uint64_t hdr_off,
				    const struct ddss_seg_loc *loc);
void ddss_segtab_each(struct ddss_segtab *tab, ddss_segtab_each_fn fn, void *arg);

/** Segments not yet freed (live or being released). */
uint64_t ddss_segtab_count(struct ddss_segtab *tab);

#endif /* DDSS_ALLOC_SEGTAB_H */
