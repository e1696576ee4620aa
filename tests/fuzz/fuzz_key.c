/*
 * Segment keys (src/core/key.c): ddss_key_parse checks keys that come from peers, from
 * daemon clients and from users.
 *
 * Input: [key 8][rank 4][slot 4][gen 4].
 * Invariants: an accepted key has its fields in the documented ranges and is exactly what
 * ddss_key_make builds from them; flipping any one bit of an accepted key makes it refused
 * (CRC-8 catches every single-bit error); make then parse gives the fields back for any
 * in-range fields; the next generation is never 0.
 */
#include "fuzz_common.h"
#include "core/key.h"

#include <errno.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint64_t key = fuzz_u64(&in);
	uint32_t rank = fuzz_u32(&in), slot = fuzz_u32(&in), gen = fuzz_u32(&in);
	struct ddss_key_parts k, k2;
	int r;

	r = ddss_key_parse(key, &k);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r == 0) {
		FUZZ_CHECK(k.rank >= 1 && k.rank <= DDSS_KEY_MAX_RANK);
		FUZZ_CHECK(k.slot <= DDSS_KEY_MAX_SLOT);
		FUZZ_CHECK(k.gen >= 1 && k.gen <= DDSS_KEY_GEN_MASK);
		FUZZ_CHECK(ddss_key_make(k.rank, k.slot, k.gen) == key);
		for (int b = 0; b < 64; b++)
			FUZZ_CHECK(ddss_key_parse(key ^ (1ull << b), &k2) == -EINVAL);
	}

	rank &= DDSS_KEY_MAX_RANK;
	slot &= DDSS_KEY_MAX_SLOT;
	gen &= DDSS_KEY_GEN_MASK;
	key = ddss_key_make(rank, slot, gen);
	r = ddss_key_parse(key, &k);
	if (rank == 0 || gen == 0) {
		FUZZ_CHECK(r == -EINVAL);
	} else {
		FUZZ_CHECK(r == 0 && k.rank == rank && k.slot == slot && k.gen == gen);
	}
	gen = ddss_key_next_gen(gen);
	FUZZ_CHECK(gen >= 1 && gen <= DDSS_KEY_GEN_MASK);
	return 0;
}
