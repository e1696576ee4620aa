/* The name directory (see names.h): a chained hash table under one mutex (control path). */
#include "alloc/names.h"
#include "core/proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NAME_BUCKETS 1024

struct name_entry {
	struct name_entry *next;
	char name[DDSS_NAME_MAX];
	bool bound;
	uint64_t key;
	uint32_t creator;
	struct ddss_name_waiter *waiters;
	size_t nwaiters, cap;
};

struct ddss_names {
	pthread_mutex_t mu;
	struct name_entry *bucket[NAME_BUCKETS];
	uint32_t max_per_rank;  /* names one rank may create here; 0: no limit */
	uint32_t *per_rank;     /* [rank]: names it created that are pending or bound */
	uint32_t per_rank_len;
};

void ddss_names_set_quota(struct ddss_names *names, uint32_t max_per_rank)
{
	pthread_mutex_lock(&names->mu);
	names->max_per_rank = max_per_rank;
	pthread_mutex_unlock(&names->mu);
}

/* mu held: @rank's count of names here, the array grown to hold it; NULL if out of memory. */
static uint32_t *count_of(struct ddss_names *n, uint32_t rank)
{
	if (rank >= n->per_rank_len) {
		uint32_t len = rank + 64;
		uint32_t *p = realloc(n->per_rank, len * sizeof(*p));

		if (!p)
			return NULL;
		memset(p + n->per_rank_len, 0, (len - n->per_rank_len) * sizeof(*p));
		n->per_rank = p;
		n->per_rank_len = len;
	}
	return &n->per_rank[rank];
}

/* mu held: @e leaves the directory; its creator's count drops. */
static void uncount(struct ddss_names *n, const struct name_entry *e)
{
	if (e->creator < n->per_rank_len && n->per_rank[e->creator])
		n->per_rank[e->creator]--;
}

/* FNV-1a: the directory rank must be the same function of the name on every rank. */
static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

uint32_t ddss_name_home(const char *name, uint32_t size)
{
	return name_hash(name) % size + 1;
}

int ddss_names_create(struct ddss_names **names_p)
{
	struct ddss_names *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->mu, NULL);
	*names_p = n;
	return 0;
}

void ddss_names_destroy(struct ddss_names *names)
{
	if (!names)
		return;
	for (int b = 0; b < NAME_BUCKETS; b++)
		for (struct name_entry *e = names->bucket[b], *next; e; e = next) {
			next = e->next;
			free(e->waiters);
			free(e);
		}
	pthread_mutex_destroy(&names->mu);
	free(names->per_rank);
	free(names);
}

static struct name_entry **slot_of(struct ddss_names *n, const char *name)
{
	struct name_entry **pp = &n->bucket[name_hash(name) % NAME_BUCKETS];

	while (*pp && strcmp((*pp)->name, name))
		pp = &(*pp)->next;
	return pp;
}

int ddss_names_acquire(struct ddss_names *names, const char *name, bool create, uint32_t rank,
		       uint32_t id, uint64_t *key_p)
{
	struct name_entry **pp, *e;
	uint32_t *count;
	int r;

	pthread_mutex_lock(&names->mu);
	pp = slot_of(names, name);
	e = *pp;
	if (e && e->bound) {
		*key_p = e->key;
		r = 0;
	} else if (e) {
		if (e->nwaiters == e->cap) {
			size_t cap = e->cap ? 2 * e->cap : 4;
			struct ddss_name_waiter *w = realloc(e->waiters, cap * sizeof(*w));

			if (!w) {
				pthread_mutex_unlock(&names->mu);
				return -ENOMEM;
			}
			e->waiters = w;
			e->cap = cap;
		}
		e->waiters[e->nwaiters++] = (struct ddss_name_waiter){ rank, id };
		r = -EINPROGRESS;
	} else if (!create) {
		r = -ENOENT;
	} else if (!(count = count_of(names, rank)) || !(e = calloc(1, sizeof(*e)))) {
		r = -ENOMEM;
	} else if (names->max_per_rank && *count >= names->max_per_rank) {
		free(e);
		r = -EDQUOT;
	} else {
		strncpy(e->name, name, DDSS_NAME_MAX - 1);
		e->creator = rank;
		(*count)++;
		*pp = e;
		r = SEG_NAME_CREATE;
	}
	pthread_mutex_unlock(&names->mu);
	return r;
}

/* mu held: hand the queue over to the caller. */
static void take_waiters(struct name_entry *e, struct ddss_name_waiter **waiters_p,
			 size_t *count_p)
{
	*waiters_p = e->waiters;
	*count_p = e->nwaiters;
	e->waiters = NULL;
	e->nwaiters = e->cap = 0;
}

int ddss_names_bind(struct ddss_names *names, const char *name, uint32_t rank, uint64_t key,
		    struct ddss_name_waiter **waiters_p, size_t *count_p)
{
	struct name_entry *e;
	int r = -EINVAL;

	pthread_mutex_lock(&names->mu);
	e = *slot_of(names, name);
	if (e && !e->bound && e->creator == rank) {
		e->bound = true;
		e->key = key;
		take_waiters(e, waiters_p, count_p);
		r = 0;
	}
	pthread_mutex_unlock(&names->mu);
	return r;
}

int ddss_names_abandon(struct ddss_names *names, const char *name, uint32_t rank,
		       struct ddss_name_waiter **waiters_p, size_t *count_p)
{
	struct name_entry **pp, *e;
	int r = -EINVAL;

	pthread_mutex_lock(&names->mu);
	pp = slot_of(names, name);
	e = *pp;
	if (e && !e->bound && e->creator == rank) {
		take_waiters(e, waiters_p, count_p);
		*pp = e->next;
		uncount(names, e);
		free(e);
		r = 0;
	}
	pthread_mutex_unlock(&names->mu);
	return r;
}

void ddss_names_unbind(struct ddss_names *names, const char *name, uint64_t key)
{
	struct name_entry **pp, *e;

	pthread_mutex_lock(&names->mu);
	pp = slot_of(names, name);
	e = *pp;
	if (e && e->bound && e->key == key) {
		*pp = e->next;
		uncount(names, e);
		free(e->waiters);
		free(e);
	}
	pthread_mutex_unlock(&names->mu);
}
