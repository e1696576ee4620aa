/* Little-endian field access for control messages (fixed layouts, no padding games). */
#ifndef DDSS_CORE_WIRE_H
#define DDSS_CORE_WIRE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void wire_put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void wire_put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static inline uint32_t wire_get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t wire_get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

#endif /* DDSS_CORE_WIRE_H */
