/* Segment keys: packing and the CRC-8 check byte (see key.h). */
#include "core/key.h"

#include <errno.h>

/* CRC-8, polynomial x^8 + x^2 + x + 1: catches every single-bit and every 8-bit burst error. */
static uint8_t crc8(uint64_t bits, unsigned nbytes)
{
	uint8_t crc = 0;

	for (unsigned i = 0; i < nbytes; i++) {
		crc ^= (uint8_t)(bits >> (8 * (nbytes - 1 - i)));
		for (int b = 0; b < 8; b++)
			crc = (uint8_t)(crc & 0x80 ? (crc << 1) ^ 0x07 : crc << 1);
	}
	return crc;
}

uint64_t ddss_key_make(uint32_t rank, uint32_t slot, uint32_t gen)
{
	uint64_t top = ((uint64_t)(rank & DDSS_KEY_MAX_RANK) << 40) |
		       ((uint64_t)(slot & DDSS_KEY_MAX_SLOT) << DDSS_KEY_GEN_BITS) |
		       (gen & DDSS_KEY_GEN_MASK);

	return (top << 8) | crc8(top, 7);
}

int ddss_key_parse(uint64_t key, struct ddss_key_parts *parts_p)
{
	uint64_t top = key >> 8;
	struct ddss_key_parts p = {
		.rank = (uint32_t)(top >> 40),
		.slot = (uint32_t)(top >> DDSS_KEY_GEN_BITS) & DDSS_KEY_MAX_SLOT,
		.gen = (uint32_t)top & DDSS_KEY_GEN_MASK,
	};

	if ((uint8_t)key != crc8(top, 7) || p.rank == 0 || p.gen == 0)
		return -EINVAL;
	*parts_p = p;
	return 0;
}
