/*
 * Descriptor cache (see seg_cache.h). The bulletproof liburcu flavour (urcu-bp) is used
 * because application threads come and go without telling the library: they need no
 * registration. Each entry counts references: one for the table, one per operation in
 * flight; the table's is dropped a grace period after the entry is unlinked, so a reader
 * that found it has its own reference by then.
 */
#define _LGPL_SOURCE
#include "core/seg_cache.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <urcu/urcu-bp.h>
#include <urcu/rculfhash.h>

struct cache_entry {
	struct ddss_seg_desc d; /* first: the public view */
	struct cds_lfht_node node;
	int refs; /* atomic */
	struct ddss_seg_cache *cache;
	bool ack;
	uint32_t ack_to, ack_id;
	struct cache_entry *next_gone; /* ddss_seg_cache_drop_home's list */
};

struct ddss_seg_pending {
	struct ddss_seg_pending *next;
	uint64_t key;
	bool invalidated;
};

struct ddss_seg_cache {
	struct cds_lfht *ht;
	ddss_seg_ack_fn ack;
	void *arg;
	pthread_mutex_t mu; /* pending list; orders inserts against invalidations */
	struct ddss_seg_pending *pending;
	uint64_t id;
	uint64_t epoch; /* atomic: invalidations made (see ddss_seg_cache_epoch) */
};

static uint64_t cache_ids;

static unsigned long hash_key(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (unsigned long)key;
}

static int match_key(struct cds_lfht_node *node, const void *key)
{
	/* Acquire: pairs with the release in ddss_seg_cache_end, which TSan can see (it cannot
	 * see liburcu's own publication barriers). */
	return __atomic_load_n(&caa_container_of(node, struct cache_entry, node)->d.key,
			       __ATOMIC_ACQUIRE) == *(const uint64_t *)key;
}

int ddss_seg_cache_create(ddss_seg_ack_fn ack, void *arg, struct ddss_seg_cache **cache_p)
{
	struct ddss_seg_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->ht = cds_lfht_new_flavor(64, 64, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				    &urcu_bp_flavor, NULL);
	if (!c->ht) {
		free(c);
		return -ENOMEM;
	}
	c->ack = ack;
	c->arg = arg;
	c->id = __atomic_add_fetch(&cache_ids, 1, __ATOMIC_RELAXED);
	pthread_mutex_init(&c->mu, NULL);
	*cache_p = c;
	return 0;
}

void ddss_seg_cache_destroy(struct ddss_seg_cache *c)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	if (!c)
		return;
	urcu_bp_read_lock();
	cds_lfht_for_each(c->ht, &it, node)
		if (!cds_lfht_del(c->ht, node))
			free(caa_container_of(node, struct cache_entry, node));
	urcu_bp_read_unlock();
	urcu_bp_synchronize_rcu();
	cds_lfht_destroy(c->ht, NULL);
	for (struct ddss_seg_pending *p = c->pending, *next; p; p = next) {
		next = p->next;
		free(p);
	}
	pthread_mutex_destroy(&c->mu);
	free(c);
}

const struct ddss_seg_desc *ddss_seg_cache_get(struct ddss_seg_cache *c, uint64_t key)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	struct cache_entry *e = NULL;

	urcu_bp_read_lock();
	cds_lfht_lookup(c->ht, hash_key(key), match_key, &key, &it);
	node = cds_lfht_iter_get_node(&it);
	if (node) {
		e = caa_container_of(node, struct cache_entry, node);
		/* The table's reference lasts a grace period past unlinking: still > 0 here. */
		__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQUIRE);
	}
	urcu_bp_read_unlock();
	return e ? &e->d : NULL;
}

void ddss_seg_cache_put(const struct ddss_seg_desc *desc)
{
	struct cache_entry *e = (struct cache_entry *)desc;

	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (e->ack)
		e->cache->ack(e->cache->arg, e->ack_to, e->ack_id);
	free(e);
}

struct ddss_seg_pending *ddss_seg_cache_begin(struct ddss_seg_cache *c, uint64_t key)
{
	struct ddss_seg_pending *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->key = key;
	pthread_mutex_lock(&c->mu);
	p->next = c->pending;
	c->pending = p;
	pthread_mutex_unlock(&c->mu);
	return p;
}

/* mu held */
static void unlink_pending(struct ddss_seg_cache *c, struct ddss_seg_pending *p)
{
	struct ddss_seg_pending **pp = &c->pending;

	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
}

void ddss_seg_cache_cancel(struct ddss_seg_cache *c, struct ddss_seg_pending *p)
{
	pthread_mutex_lock(&c->mu);
	unlink_pending(c, p);
	pthread_mutex_unlock(&c->mu);
	free(p);
}

int ddss_seg_cache_end(struct ddss_seg_cache *c, struct ddss_seg_pending *p,
		       const struct ddss_seg_loc *loc, uint32_t home,
		       const struct ddss_seg_desc **desc_p)
{
	struct cache_entry *e = calloc(1, sizeof(*e));
	struct cds_lfht_node *got;
	int r = 0;

	pthread_mutex_lock(&c->mu);
	if (p) {
		unlink_pending(c, p);
		if (p->invalidated)
			r = -ESTALE;
	}
	if (!r && !e)
		r = -ENOMEM;
	if (r) {
		pthread_mutex_unlock(&c->mu);
		free(p);
		free(e);
		return r;
	}
	e->d = (struct ddss_seg_desc){ .home = home, .data_off = loc->data_off, .size = loc->size,
				     .coherence = loc->coherence, .param = loc->param };
	e->cache = c;
	e->refs = 2; /* the table's and the caller's */
	__atomic_store_n(&e->d.key, loc->key, __ATOMIC_RELEASE); /* last: see match_key */
	urcu_bp_read_lock();
	got = cds_lfht_add_unique(c->ht, hash_key(loc->key), match_key, &loc->key, &e->node);
	if (got != &e->node) {
		/* Another thread cached it first: use that one. */
		free(e);
		e = caa_container_of(got, struct cache_entry, node);
		__atomic_fetch_add(&e->refs, 1, __ATOMIC_ACQUIRE);
	}
	urcu_bp_read_unlock();
	pthread_mutex_unlock(&c->mu);
	free(p);
	*desc_p = &e->d;
	return 0;
}

uint64_t ddss_seg_cache_epoch(const struct ddss_seg_cache *c)
{
	return __atomic_load_n(&c->epoch, __ATOMIC_SEQ_CST);
}

uint64_t ddss_seg_cache_id(const struct ddss_seg_cache *c)
{
	return c->id;
}

void ddss_seg_cache_invalidate(struct ddss_seg_cache *c, uint64_t key, uint32_t from,
			       uint32_t id)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	struct cache_entry *e = NULL;

	pthread_mutex_lock(&c->mu);
	for (struct ddss_seg_pending *p = c->pending; p; p = p->next)
		if (p->key == key)
			p->invalidated = true;
	urcu_bp_read_lock();
	cds_lfht_lookup(c->ht, hash_key(key), match_key, &key, &it);
	node = cds_lfht_iter_get_node(&it);
	if (node && !cds_lfht_del(c->ht, node)) {
		e = caa_container_of(node, struct cache_entry, node);
		e->ack_to = from;
		e->ack_id = id;
		e->ack = true;
	}
	urcu_bp_read_unlock();
	/* After the unlink: a lookup that still found the entry read the old epoch first. */
	__atomic_add_fetch(&c->epoch, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->mu);
	if (!e) {
		c->ack(c->arg, from, id);
		return;
	}
	/*
	 * Wait out readers that may have found the entry but not yet counted themselves: a
	 * read-side section covers only a lookup and an increment, never a transfer, so this
	 * is short. (call_rcu would batch callbacks for ~10 ms: too slow for release.)
	 */
	urcu_bp_synchronize_rcu();
	ddss_seg_cache_put(&e->d);
}

void ddss_seg_cache_drop_home(struct ddss_seg_cache *c, uint32_t home)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	struct cache_entry *gone = NULL;

	pthread_mutex_lock(&c->mu);
	/* A lookup in flight may have asked the old process: its answer is thrown away. */
	for (struct ddss_seg_pending *p = c->pending; p; p = p->next)
		p->invalidated = true;
	urcu_bp_read_lock();
	cds_lfht_for_each(c->ht, &it, node) {
		struct cache_entry *e = caa_container_of(node, struct cache_entry, node);

		if (e->d.home == home && !cds_lfht_del(c->ht, node)) {
			e->ack = false;
			e->next_gone = gone;
			gone = e;
		}
	}
	urcu_bp_read_unlock();
	__atomic_add_fetch(&c->epoch, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->mu);
	if (!gone)
		return;
	urcu_bp_synchronize_rcu(); /* lookups that found one have counted themselves */
	while (gone) {
		struct cache_entry *next = gone->next_gone;

		ddss_seg_cache_put(&gone->d);
		gone = next;
	}
}
