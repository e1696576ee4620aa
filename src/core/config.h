/* Reading configuration values from the environment, with range checks. */
#ifndef DDSS_CORE_CONFIG_H
#define DDSS_CORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

/**
 * Read integer @name into *out_p: @dflt when unset or empty, -EINVAL (logged) when it is
 * not a whole number in [min, max]. Accepts decimal or 0x-prefixed hex.
 */
int ddss_env_long(const char *name, long min, long max, long dflt, long *out_p);

/** Read a 64-bit hex value (with or without 0x): @dflt when unset, -EINVAL when malformed. */
int ddss_env_hex64(const char *name, uint64_t dflt, uint64_t *out_p);

/**
 * Environment variable @name as one of two words: *@second_p = false for @first (or unset
 * or empty: the default), true for @second. -EINVAL (logged) for anything else.
 */
int ddss_env_either(const char *name, const char *first, const char *second, bool *second_p);

#endif /* DDSS_CORE_CONFIG_H */
