/*
 * Sealed lock-record words (lock_int.h): a word that a peer's RDMA write is filling may be
 * seen with any subset of its 8 bytes landed, the rest still 0 (Soft-RoCE in a TCG guest
 * places them one at a time). For values that make the check hardest (bytes of 0x00 and
 * 0xff, waiter ids, counts) and for random ones, every one of the 256 subsets of landed
 * bytes must unseal exactly when all 8 landed, and then to the value.
 *
 * Before sealing, a release took the id 0x80ff, whose rank bytes had not landed, for its
 * successor. With the first seal, [~v : 32 | v : 32], a word unsealed as soon as every
 * byte whose final value is not 0 had landed: the write could still have a 0 byte to
 * store. The release went on, the slot was taken again and its record cleared, and that
 * byte landed in the next successor's id, which then never unsealed:
 * lock_posted_tcp_weak waited for ever (0xfffd7ffd00028000, the id 0x28002 missing its
 * low byte's 0x02 under the late 0x00 of seal(0x18000)). So no byte of a sealed word may
 * be 0 (the cleared value): whole means the write is over.
 */
#include "lock/lock_int.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

/* @w with only the bytes in @landed (bit i: byte i) arrived, the others still 0. */
static uint64_t partly(uint64_t w, unsigned landed)
{
	uint64_t seen = 0;

	for (unsigned i = 0; i < 8; i++)
		if (landed & (1u << i))
			seen |= w & (0xffull << (8 * i));
	return seen;
}

/* Every landing pattern of seal(@v); returns how many patterns unsealed. */
static unsigned check_value(uint32_t v)
{
	uint64_t w = lock_seal(v);
	unsigned whole = 0;

	for (unsigned landed = 0; landed < 256; landed++) {
		uint64_t seen = partly(w, landed);
		uint32_t got = 0xdeadbeef;
		bool ok = lock_unseal(seen, &got);

		if (ok != (landed == 0xff)) {
			fprintf(stderr, "value %#x, bytes %#x landed: seen %#llx %s\n", v, landed,
				(unsigned long long)seen, ok ? "unsealed" : "refused");
			CU_FAIL("a word with bytes still to land unsealed, or a whole one did not");
			return whole;
		}
		if (ok) {
			CU_ASSERT_EQUAL(got, v);
			whole++;
		} else {
			CU_ASSERT_EQUAL(got, 0xdeadbeef); /* untouched when refused */
		}
	}
	return whole;
}

static void test_torn_words_never_unseal(void)
{
	static const uint32_t edge[] = {
		0,          1,          0xff,       0x80ff, /* the id CI33 read torn */
		0x000380ff, 0x00048001, 0xffff00ff, 0xff00ff00, 0x00ffff00,
		0xfffffffe, 0xffffffff, 0x7fffffff, 0x80000000, 63,
		0x00018000, 0x00028002, /* the ids of the lost low byte (see the top) */
	};
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
		CU_ASSERT(check_value(edge[i]) == 1);
	for (int i = 0; i < 20000; i++) { /* splitmix64: reproducible */
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		CU_ASSERT(check_value((uint32_t)(z ^ (z >> 31))) == 1);
	}
}

/* 0 is an empty word; a flipped bit is never taken for a value either. */
static void test_empty_and_corrupt_refused(void)
{
	uint32_t got = 7;

	CU_ASSERT_FALSE(lock_unseal(0, &got));
	CU_ASSERT_EQUAL(got, 7);
	for (unsigned b = 0; b < 64; b++) {
		uint64_t w = lock_seal(0x00028005) ^ (1ull << b);

		CU_ASSERT_FALSE(lock_unseal(w, &got));
	}
	CU_ASSERT_TRUE(lock_unseal(lock_seal(0x00028005), &got));
	CU_ASSERT_EQUAL(got, 0x00028005);
	/* A count of 0 (next_s) is a sealed word like any other, never an empty one. */
	CU_ASSERT_NOT_EQUAL(lock_seal(0), 0);
	CU_ASSERT_TRUE(lock_unseal(lock_seal(0), &got));
	CU_ASSERT_EQUAL(got, 0);
}

int main(void)
{
	CU_pSuite s;
	unsigned fails;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("sealed lock-record words", NULL, NULL);
	CU_add_test(s, "a word unseals only once all 8 bytes landed", test_torn_words_never_unseal);
	CU_add_test(s, "empty and corrupt words are refused", test_empty_and_corrupt_refused);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	return fails ? 1 : 0;
}
