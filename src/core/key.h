/*
 * Segment keys. 64 bits, self-describing, safe to pass around as integers:
 *
 *   [ home rank : 16 | slot : 20 | generation : 20 | check : 8 ]
 *
 * The slot indexes the home rank's segment table; the generation changes every time the
 * slot is reused, so an old key is recognised (-ESTALE) instead of reaching the slot's new
 * segment; the check byte is a CRC-8 of the other 56 bits, so a corrupted or made-up key is
 * refused (-EINVAL) before any message is sent, except with probability 1/256.
 */
#ifndef DDSS_CORE_KEY_H
#define DDSS_CORE_KEY_H

#include <stdbool.h>
#include <stdint.h>

#define DDSS_KEY_SLOT_BITS 20
#define DDSS_KEY_GEN_BITS 20
#define DDSS_KEY_MAX_RANK 0xffffu
#define DDSS_KEY_MAX_SLOT ((1u << DDSS_KEY_SLOT_BITS) - 1)
#define DDSS_KEY_GEN_MASK ((1u << DDSS_KEY_GEN_BITS) - 1)

struct ddss_key_parts {
	uint32_t rank; /* 1..DDSS_KEY_MAX_RANK */
	uint32_t slot; /* 0..DDSS_KEY_MAX_SLOT */
	uint32_t gen;  /* 1..DDSS_KEY_GEN_MASK (0 is never issued) */
};

uint64_t ddss_key_make(uint32_t rank, uint32_t slot, uint32_t gen);

/** Split @key; -EINVAL if its check byte is wrong or a field is out of range. */
int ddss_key_parse(uint64_t key, struct ddss_key_parts *parts_p);

/*
 * Bits that tell a process's keys apart, for small direct-mapped per-thread caches: the
 * slot, folded with the home rank. Not the generation, which is the same for every slot's
 * first segment (1; in coordinator mode a random start, one for all of a home's slots):
 * indexed by it, a thread's fresh keys would all share one entry.
 */
static inline uint32_t ddss_key_spread(uint64_t key)
{
	uint64_t slot_up = key >> (8 + DDSS_KEY_GEN_BITS); /* [ rank : 16 | slot : 20 ] */

	return (uint32_t)(slot_up ^ (slot_up >> DDSS_KEY_SLOT_BITS));
}

/** The next generation after @gen (skips 0). */
static inline uint32_t ddss_key_next_gen(uint32_t gen)
{
	gen = (gen + 1) & DDSS_KEY_GEN_MASK;
	return gen ? gen : 1;
}

#endif /* DDSS_CORE_KEY_H */
