/* Helpers shared by the test programs. */
#ifndef DDSS_TEST_UTIL_H
#define DDSS_TEST_UTIL_H

#include <CUnit/CUnit.h>
#include <stddef.h>
#include <stdint.h>

/* Exit status that ctest reports as SKIP (SKIP_RETURN_CODE). */
#define TEST_SKIP_EXIT 77

/** Fill @buf with bytes derived from @seed and each byte's position. */
void test_fill(void *buf, size_t len, uint64_t seed);
/** Index of the first byte that differs from test_fill(seed), or SIZE_MAX if none. */
size_t test_check(const void *buf, size_t len, uint64_t seed);

/**
 * Run every registered CUnit suite (verbose), print the summary, and return the number of
 * failed assertions plus failed suite set-ups; 0 means all passed.
 */
unsigned test_run_all(void);

/** Allocate @len bytes aligned to 4096, zeroed; aborts on failure (tests only). */
void *test_alloc_pool(size_t len);

struct ddss_net;
/** Join the group described by the environment (ddssrun), or exit(1) saying why. */
struct ddss_net *test_net_open_or_exit(void);
/**
 * Group barrier, or exit(1) at once: a rank that cannot synchronise must not leave the
 * others waiting (ddssrun stops them when this rank fails).
 */
void test_barrier_or_exit(struct ddss_net *net, int timeout_ms);

#endif
