/*
 * The cache of segment copies (coh_cache.h). Sixteen shards, each a small hash table with
 * its own LRU list and an equal share of the capacity: threads reading different segments
 * rarely meet on a mutex. No large copy is made under one: a get of COPY_UNLOCKED_MIN bytes
 * or more takes a reference to its entry, copies out after unlocking (an entry's bytes
 * never change once it is in), and the last reference frees an entry that was dropped
 * meanwhile. Copying under the mutex let a
 * thread that keeps getting a large segment from the cache starve the other threads of
 * its context (a put's forget, a small get): a 512 KiB reader beside a put-and-get loop
 * took the loop from 1.7 to 8 ms a round (coh_temporal_own_writes_tcp outran its 30 s
 * barrier, 2026-12-07).
 */
#include "coherence/coh_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SHARDS 16u
#define BUCKETS 64u /* per shard */
/* A get copies this much or more after unlocking; less, under the mutex (the second lock
 * round costs an uncontended 1-byte hit 10 ns, 0.09 -> 0.10 us in ddss-coh-bench). */
#define COPY_UNLOCKED_MIN 4096u

struct entry {
	struct entry *hnext;            /* hash chain */
	struct entry *older, *newer;    /* LRU list */
	uint64_t key;
	size_t off, len;
	uint64_t version;
	int64_t fetched_ns;
	unsigned refs;    /* gets copying out of it, the mutex released */
	bool unlinked;    /* dropped while referenced: the last reference frees it */
	unsigned char data[];
};

struct shard {
	pthread_mutex_t mu;
	struct entry *buckets[BUCKETS];
	struct entry *newest, *oldest;
	size_t bytes, cap;
	uint64_t forgets; /* coh_cache_forget calls on the shard's keys */
};

struct coh_cache {
	struct shard shards[SHARDS];
};

static uint64_t mix(uint64_t key)
{
	key ^= key >> 31;
	key *= 0x9e3779b97f4a7c15ull;
	return key ^ (key >> 29);
}

static struct shard *shard_of(struct coh_cache *c, uint64_t key)
{
	return &c->shards[mix(key) % SHARDS];
}

static struct entry **slot_of(struct shard *s, uint64_t key)
{
	struct entry **p = &s->buckets[(mix(key) >> 8) % BUCKETS];

	while (*p && (*p)->key != key)
		p = &(*p)->hnext;
	return p;
}

int coh_cache_create(size_t capacity, struct coh_cache **cache_p)
{
	struct coh_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	for (unsigned i = 0; i < SHARDS; i++) {
		pthread_mutex_init(&c->shards[i].mu, NULL);
		c->shards[i].cap = capacity / SHARDS;
	}
	*cache_p = c;
	return 0;
}

void coh_cache_destroy(struct coh_cache *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < SHARDS; i++) {
		struct entry *e = c->shards[i].newest;

		while (e) {
			struct entry *next = e->older;

			free(e);
			e = next;
		}
		pthread_mutex_destroy(&c->shards[i].mu);
	}
	free(c);
}

static void lru_unlink(struct shard *s, struct entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		s->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		s->oldest = e->newer;
}

static void lru_push(struct shard *s, struct entry *e)
{
	e->newer = NULL;
	e->older = s->newest;
	if (s->newest)
		s->newest->newer = e;
	else
		s->oldest = e;
	s->newest = e;
}

/* mu held: take @e (found at *@slot) out of the shard and free it, or leave that to the
 * last get still copying out of it. */
static void drop(struct shard *s, struct entry **slot, struct entry *e)
{
	*slot = e->hnext;
	lru_unlink(s, e);
	s->bytes -= e->len;
	if (e->refs)
		e->unlinked = true;
	else
		free(e);
}

bool coh_cache_get(struct coh_cache *c, uint64_t key, size_t off, size_t len, void *buf,
		   const struct coh_want *want, uint64_t *version_p)
{
	struct shard *s = shard_of(c, key);
	struct entry *e;

	pthread_mutex_lock(&s->mu);
	e = *slot_of(s, key);
	if (!e || off < e->off || off - e->off > e->len || len > e->len - (off - e->off) ||
	    (want->by_version ? e->version != want->version :
				e->fetched_ns < want->fetched_after)) {
		pthread_mutex_unlock(&s->mu);
		return false;
	}
	*version_p = e->version;
	lru_unlink(s, e);
	lru_push(s, e);
	if (len < COPY_UNLOCKED_MIN) {
		memcpy(buf, e->data + (off - e->off), len);
		pthread_mutex_unlock(&s->mu);
		return true;
	}
	e->refs++;
	pthread_mutex_unlock(&s->mu);
	memcpy(buf, e->data + (off - e->off), len);
	pthread_mutex_lock(&s->mu);
	if (--e->refs == 0 && e->unlinked)
		free(e);
	pthread_mutex_unlock(&s->mu);
	return true;
}

uint64_t coh_cache_forgets(struct coh_cache *c, uint64_t key)
{
	struct shard *s = shard_of(c, key);
	uint64_t n;

	pthread_mutex_lock(&s->mu);
	n = s->forgets;
	pthread_mutex_unlock(&s->mu);
	return n;
}

void coh_cache_put(struct coh_cache *c, uint64_t key, size_t off, size_t len, const void *data,
		   uint64_t version, int64_t fetched_ns)
{
	coh_cache_put_since(c, key, off, len, data, version, fetched_ns, UINT64_MAX);
}

void coh_cache_put_since(struct coh_cache *c, uint64_t key, size_t off, size_t len,
			 const void *data, uint64_t version, int64_t fetched_ns, uint64_t forgets)
{
	struct shard *s = shard_of(c, key);
	struct entry **slot, *e;

	if (len > s->cap)
		return;
	/* Copy before taking the mutex; most puts replace an entry and free the old one. */
	e = malloc(sizeof(*e) + len);
	if (!e)
		return; /* a cache may forget */
	*e = (struct entry){ .key = key, .off = off, .len = len, .version = version,
			     .fetched_ns = fetched_ns };
	memcpy(e->data, data, len);

	pthread_mutex_lock(&s->mu);
	if (forgets != UINT64_MAX && s->forgets != forgets) {
		/* Forgotten since the caller's transfer began: the copy may predate that. */
		pthread_mutex_unlock(&s->mu);
		free(e);
		return;
	}
	slot = slot_of(s, key);
	if (*slot) {
		struct entry *old = *slot;

		if (old->off == off && old->len == len &&
		    (old->version > version ||
		     (old->version == version && old->fetched_ns >= fetched_ns))) {
			/* A concurrent get stored a newer copy of the same range: keep it. */
			pthread_mutex_unlock(&s->mu);
			free(e);
			return;
		}
		drop(s, slot, old);
	}
	while (s->bytes + len > s->cap && s->oldest) {
		struct entry *victim = s->oldest;

		drop(s, slot_of(s, victim->key), victim);
	}
	slot = slot_of(s, key); /* evictions may have moved the chain's end */
	e->hnext = NULL;
	*slot = e;
	lru_push(s, e);
	s->bytes += len;
	pthread_mutex_unlock(&s->mu);
}

void coh_cache_forget(struct coh_cache *c, uint64_t key)
{
	struct shard *s = shard_of(c, key);
	struct entry **slot;

	pthread_mutex_lock(&s->mu);
	s->forgets++;
	slot = slot_of(s, key);
	if (*slot)
		drop(s, slot, *slot);
	pthread_mutex_unlock(&s->mu);
}

size_t coh_cache_bytes(struct coh_cache *c)
{
	size_t n = 0;

	for (unsigned i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&c->shards[i].mu);
		n += c->shards[i].bytes;
		pthread_mutex_unlock(&c->shards[i].mu);
	}
	return n;
}
