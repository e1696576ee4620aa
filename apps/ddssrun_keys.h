/*
 * ddssrun's keys files (DDSS_KEYS_FILE, src/net/auth.h): a random key for every pair of
 * ranks; rank r's file holds only the keys of r's own pairs, so no rank can prove itself
 * to be another (docs/security.md, "Rank identity").
 */
#ifndef DDSSRUN_KEYS_H
#define DDSSRUN_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* "DIR/rank-R.keys" into @out (@cap bytes); false if it does not fit. */
bool keys_path(char *out, size_t cap, const char *dir, int rank);

/*
 * Write DIR/rank-1.keys .. DIR/rank-N.keys, mode 0600, none of which may exist yet. DIR must
 * exist. False (said on stderr, files written so far removed) on any error.
 */
bool keys_write(const char *dir, int nranks);

/* Remove what keys_write made in DIR, then DIR itself. */
void keys_remove(const char *dir, int nranks);

#endif /* DDSSRUN_KEYS_H */
