/*
 * Shared by the fuzz targets (tests/fuzz, built by scripts/fuzz.sh with clang and
 * -fsanitize=fuzzer,address,undefined).
 *
 * FUZZ_CHECK states an invariant beyond "no crash": a violation prints what failed and
 * aborts, which libFuzzer reports as a crash and saves the input. fuzz_in is a cursor over
 * the input that hands out fixed-size fields, zeros once the input runs out, so a short
 * input is still a whole (if dull) test case.
 */
#ifndef DDSS_TESTS_FUZZ_COMMON_H
#define DDSS_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__,    \
				__LINE__, #cond);                                     \
			abort();                                                      \
		}                                                                     \
	} while (0)

struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline void fuzz_bytes(struct fuzz_in *in, void *out, size_t n)
{
	size_t k = n < in->left ? n : in->left;

	memcpy(out, in->p, k);
	memset((uint8_t *)out + k, 0, n - k);
	in->p += k;
	in->left -= k;
}

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	uint8_t v;

	fuzz_bytes(in, &v, 1);
	return v;
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
	uint16_t v;

	fuzz_bytes(in, &v, 2);
	return v;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t v;

	fuzz_bytes(in, &v, 4);
	return v;
}

static inline uint64_t fuzz_u64(struct fuzz_in *in)
{
	uint64_t v;

	fuzz_bytes(in, &v, 8);
	return v;
}

/* True when @n bytes of @s hold a NUL, i.e. it is a C string within the field. */
static inline int fuzz_has_nul(const void *s, size_t n)
{
	return memchr(s, 0, n) != NULL;
}

#endif /* DDSS_TESTS_FUZZ_COMMON_H */
