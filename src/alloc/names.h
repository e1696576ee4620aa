/*
 * The directory of segment names that hash to this rank. A name is absent, pending (one
 * rank is creating its segment; others asking meanwhile are queued) or bound to a key.
 * The caller (core/seg_service.c) turns the results into replies. Thread-safe.
 */
#ifndef DDSS_ALLOC_NAMES_H
#define DDSS_ALLOC_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ddss_names;

/* A queued request, answered when the name is bound or abandoned. */
struct ddss_name_waiter {
	uint32_t rank, id;
};

int ddss_names_create(struct ddss_names **names_p);
void ddss_names_destroy(struct ddss_names *names);

/** At most @max_per_rank names (pending or bound) created by any one rank here; 0: none. */
void ddss_names_set_quota(struct ddss_names *names, uint32_t max_per_rank);

/** The directory rank for @name in a group of @size ranks. */
uint32_t ddss_name_home(const char *name, uint32_t size);

/**
 * Ask for @name on behalf of request @id from @rank. Returns 0 with *key_p (bound),
 * SEG_NAME_CREATE (absent, @create: @rank is now its creator), -ENOENT (absent, !@create),
 * -EINPROGRESS (pending: the request is queued), -EDQUOT (@rank created its quota of names
 * here already), -ENOMEM.
 */
int ddss_names_acquire(struct ddss_names *names, const char *name, bool create, uint32_t rank,
		       uint32_t id, uint64_t *key_p);

/**
 * Bind @name to @key; only its creator @rank may. The queued requests are returned in
 * *waiters_p (malloc'd, *count_p entries) to be answered with @key. -EINVAL otherwise.
 */
int ddss_names_bind(struct ddss_names *names, const char *name, uint32_t rank, uint64_t key,
		    struct ddss_name_waiter **waiters_p, size_t *count_p);

/** The creator @rank gives up: the name is absent again; queued requests are returned. */
int ddss_names_abandon(struct ddss_names *names, const char *name, uint32_t rank,
		       struct ddss_name_waiter **waiters_p, size_t *count_p);

/** @name's segment @key was released: forget the name (if still bound to @key). */
void ddss_names_unbind(struct ddss_names *names, const char *name, uint64_t key);

#endif /* DDSS_ALLOC_NAMES_H */
