/*
 * The home rank's segment table (see segtab.h). Free slots are reused in FIFO order, so a
 * slot's generation (20 bits) advances only once per trip through the whole free list:
 * an old key would need a million reuses of its own slot to alias a new segment.
 */
#include "alloc/segtab.h"
#include "core/key.h"
#include "core/log.h"
#include "core/wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum slot_state { SLOT_FREE, SLOT_LIVE, SLOT_RELEASING };

struct slot {
	enum slot_state state;
	uint32_t gen;        /* generation of the current (or last) segment */
	uint32_t next_free;  /* FIFO link, SLOT_NONE at the tail */
	uint64_t hdr_off;
	uint64_t size;
	uint32_t coherence, param;
	char *name;          /* NULL when unnamed */
	uint8_t *cachers;    /* bitmap: bit r-1 = rank r was given the descriptor */
	uint32_t owner;      /* the rank that allocated it (its quota pays for it) */
	uint64_t charged;    /* pool bytes charged to the owner */
};

/* What one rank holds at this home, against the quota (ddss_segtab_set_quota). */
struct rank_use {
	uint32_t segments;
	uint64_t bytes;
};

#define SLOT_NONE UINT32_MAX

struct ddss_segtab {
	pthread_mutex_t mu;
	struct ddss_pool *pool;
	struct ddss_segtab_hooks hooks;
	uint32_t rank, group_size;
	size_t cachers_len;
	struct slot *slots;
	uint32_t nslots, cap;
	uint32_t first_gen; /* a new slot's generation before its first segment */
	bool had_earlier;   /* coordinator mode: earlier processes of this rank issued keys */
	uint32_t free_head, free_tail;
	uint64_t count; /* not FREE */
	/* Released segments whose lock words are still in use: freed once idle (sweep). */
	uint64_t *draining;
	uint32_t ndraining, draining_cap;
	uint64_t *epoch;   /* bumped as each release begins (ddss_segtab_watch_releases) */
	struct rank_use *use;        /* [rank], 1..group_size */
	uint32_t max_segments;       /* per rank; 0: no limit */
	uint64_t max_bytes;          /* per rank; 0: no limit */
	uint32_t holds;              /* ddss_segtab_hold: while set, no memory is freed */
};

int ddss_segtab_create(struct ddss_pool *pool, uint32_t rank, uint32_t group_size,
		       const struct ddss_segtab_hooks *hooks, struct ddss_segtab **tab_p)
{
	struct ddss_segtab *tab = calloc(1, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	pthread_mutex_init(&tab->mu, NULL);
	tab->pool = pool;
	tab->hooks = *hooks;
	tab->rank = rank;
	tab->group_size = group_size;
	tab->cachers_len = (group_size + 7) / 8;
	tab->free_head = tab->free_tail = SLOT_NONE;
	tab->use = calloc((size_t)group_size + 1, sizeof(*tab->use));
	if (!tab->use) {
		pthread_mutex_destroy(&tab->mu);
		free(tab);
		return -ENOMEM;
	}
	*tab_p = tab;
	return 0;
}

void ddss_segtab_set_quota(struct ddss_segtab *tab, uint32_t max_segments, uint64_t max_bytes)
{
	pthread_mutex_lock(&tab->mu);
	tab->max_segments = max_segments;
	tab->max_bytes = max_bytes;
	pthread_mutex_unlock(&tab->mu);
}

void ddss_segtab_set_first_generation(struct ddss_segtab *tab, uint32_t gen)
{
	pthread_mutex_lock(&tab->mu);
	tab->first_gen = gen & DDSS_KEY_GEN_MASK;
	tab->had_earlier = true;
	pthread_mutex_unlock(&tab->mu);
}

/* mu held: whether @rank may hold one more segment of @bytes here (-EDQUOT if not). */
static int quota_check(struct ddss_segtab *tab, uint32_t rank, uint64_t bytes)
{
	const struct rank_use *u;

	if (rank < 1 || rank > tab->group_size)
		return 0; /* not a rank of the group: the service refused it already */
	u = &tab->use[rank];
	if (tab->max_segments && u->segments >= tab->max_segments)
		return -EDQUOT;
	if (tab->max_bytes && (bytes > tab->max_bytes || u->bytes > tab->max_bytes - bytes))
		return -EDQUOT;
	return 0;
}

/* mu held: charge (@sign 1) or credit (-1) @s's owner for it. */
static void quota_charge(struct ddss_segtab *tab, const struct slot *s, int sign)
{
	struct rank_use *u;

	if (s->owner < 1 || s->owner > tab->group_size)
		return;
	u = &tab->use[s->owner];
	u->segments += (uint32_t)sign;
	u->bytes += sign > 0 ? s->charged : -s->charged;
}

void ddss_segtab_destroy(struct ddss_segtab *tab)
{
	if (!tab)
		return;
	for (uint32_t i = 0; i < tab->nslots; i++) {
		free(tab->slots[i].name);
		free(tab->slots[i].cachers);
	}
	free(tab->slots);
	free(tab->draining);
	free(tab->use);
	pthread_mutex_destroy(&tab->mu);
	free(tab);
}

/* mu held: a free slot index, or SLOT_NONE when the table cannot grow. */
static uint32_t take_slot(struct ddss_segtab *tab)
{
	uint32_t i = tab->free_head;

	if (i != SLOT_NONE) {
		tab->free_head = tab->slots[i].next_free;
		if (tab->free_head == SLOT_NONE)
			tab->free_tail = SLOT_NONE;
		return i;
	}
	if (tab->nslots > DDSS_KEY_MAX_SLOT)
		return SLOT_NONE;
	if (tab->nslots == tab->cap) {
		uint32_t cap = tab->cap ? tab->cap * 2 : 64;
		struct slot *s;

		if (cap > DDSS_KEY_MAX_SLOT + 1)
			cap = DDSS_KEY_MAX_SLOT + 1;
		s = realloc(tab->slots, cap * sizeof(*s));
		if (!s)
			return SLOT_NONE;
		tab->slots = s;
		tab->cap = cap;
	}
	tab->slots[tab->nslots] = (struct slot){ .state = SLOT_FREE, .gen = tab->first_gen };
	return tab->nslots++;
}

static void put_slot(struct ddss_segtab *tab, uint32_t i)
{
	tab->slots[i].next_free = SLOT_NONE;
	if (tab->free_tail == SLOT_NONE)
		tab->free_head = i;
	else
		tab->slots[tab->free_tail].next_free = i;
	tab->free_tail = i;
}

static void add_cacher(struct ddss_segtab *tab, struct slot *s, uint32_t rank)
{
	if (rank >= 1 && rank <= tab->group_size)
		s->cachers[(rank - 1) / 8] |= (uint8_t)(1u << ((rank - 1) % 8));
}

static void fill_loc(struct ddss_segtab *tab, uint32_t i, struct ddss_seg_loc *loc)
{
	struct slot *s = &tab->slots[i];

	loc->key = ddss_key_make(tab->rank, i, s->gen);
	loc->data_off = s->hdr_off + DDSS_SEG_HDR_LEN;
	loc->size = s->size;
	loc->coherence = s->coherence;
	loc->param = s->param;
}

static bool words_idle(struct ddss_segtab *tab, uint64_t hdr_off)
{
	return tab->hooks.words_idle((uint8_t *)ddss_pool_base(tab->pool) + hdr_off);
}

/* mu held: free the draining segments whose lock words have gone idle. */
static void sweep(struct ddss_segtab *tab)
{
	uint32_t kept = 0;

	if (tab->holds)
		return;
	for (uint32_t j = 0; j < tab->ndraining; j++) {
		if (words_idle(tab, tab->draining[j]))
			ddss_pool_free(tab->pool, tab->draining[j]);
		else
			tab->draining[kept++] = tab->draining[j];
	}
	tab->ndraining = kept;
}

/* mu held: keep @hdr_off until its lock words are idle. */
static void add_draining(struct ddss_segtab *tab, uint64_t hdr_off)
{
	if (tab->ndraining == tab->draining_cap) {
		uint32_t cap = tab->draining_cap ? 2 * tab->draining_cap : 8;
		uint64_t *d = realloc(tab->draining, cap * sizeof(*d));

		if (!d) {
			/* Freeing it could let a late holder's atomics hit someone else's data. */
			DDSS_WARN("segment table: out of memory, segment at %#llx is never freed",
				  (unsigned long long)hdr_off);
			return;
		}
		tab->draining = d;
		tab->draining_cap = cap;
	}
	tab->draining[tab->ndraining++] = hdr_off;
}

void ddss_segtab_watch_releases(struct ddss_segtab *tab, uint64_t *epoch)
{
	tab->epoch = epoch;
}

uint32_t ddss_segtab_draining(struct ddss_segtab *tab)
{
	uint32_t n;

	pthread_mutex_lock(&tab->mu);
	sweep(tab);
	n = tab->ndraining;
	pthread_mutex_unlock(&tab->mu);
	return n;
}

int ddss_segtab_alloc(struct ddss_segtab *tab, uint64_t size, uint32_t coherence,
		      uint32_t param, const char *name, uint32_t requester,
		      struct ddss_seg_loc *loc_p)
{
	uint64_t off, data_len;
	uint32_t i;
	struct slot *s;
	uint8_t *hdr;
	int r;

	if (size == 0)
		return -EINVAL;
	r = tab->hooks.data_len(coherence, param, size, &data_len);
	if (r)
		return r;
	if (data_len > ddss_pool_len(tab->pool))
		return -ENOMEM;
	pthread_mutex_lock(&tab->mu);
	sweep(tab); /* first: what it frees may be what this allocation needs */
	r = quota_check(tab, requester, DDSS_SEG_HDR_LEN + data_len);
	pthread_mutex_unlock(&tab->mu);
	if (r)
		return r;
	r = ddss_pool_alloc(tab->pool, DDSS_SEG_HDR_LEN + data_len, 64, &off);
	if (r)
		return r;
	pthread_mutex_lock(&tab->mu);
	/* Again, held: a concurrent allocation of the same rank may have taken the room. */
	r = quota_check(tab, requester, DDSS_SEG_HDR_LEN + data_len);
	i = r ? SLOT_NONE : take_slot(tab);
	if (r) {
		pthread_mutex_unlock(&tab->mu);
		ddss_pool_free(tab->pool, off);
		return r;
	}
	if (i == SLOT_NONE) {
		pthread_mutex_unlock(&tab->mu);
		ddss_pool_free(tab->pool, off);
		return -ENOSPC;
	}
	s = &tab->slots[i];
	s->cachers = calloc(1, tab->cachers_len);
	s->name = name && name[0] ? strdup(name) : NULL;
	if (!s->cachers || (name && name[0] && !s->name)) {
		free(s->cachers);
		free(s->name);
		s->cachers = NULL;
		s->name = NULL;
		put_slot(tab, i);
		pthread_mutex_unlock(&tab->mu);
		ddss_pool_free(tab->pool, off);
		return -ENOMEM;
	}
	s->state = SLOT_LIVE;
	s->gen = ddss_key_next_gen(s->gen);
	s->hdr_off = off;
	s->size = size;
	s->coherence = coherence;
	s->param = param;
	s->owner = requester;
	s->charged = DDSS_SEG_HDR_LEN + data_len;
	quota_charge(tab, s, 1);
	add_cacher(tab, s, requester);
	tab->count++;
	fill_loc(tab, i, loc_p);
	/* Header: lock word, version and generation start at 0 (the pool zeroes); key and
	 * size for tools. */
	hdr = (uint8_t *)ddss_pool_base(tab->pool) + off;
	wire_put64(hdr + 16, loc_p->key);
	wire_put64(hdr + 24, size);
	wire_put32(hdr + 56, coherence);
	wire_put32(hdr + 60, param);
	pthread_mutex_unlock(&tab->mu);
	return 0;
}

/* mu held: the slot @key names, or -EINVAL / -ESTALE. */
static int find(struct ddss_segtab *tab, uint64_t key, enum slot_state want, uint32_t *i_p)
{
	struct ddss_key_parts k;

	if (ddss_key_parse(key, &k) || k.rank != tab->rank)
		return -EINVAL;
	if (k.slot >= tab->nslots) /* never issued here: by an earlier process of the rank? */
		return tab->had_earlier ? -ESTALE : -EINVAL;
	if (tab->slots[k.slot].state != want || tab->slots[k.slot].gen != k.gen)
		return -ESTALE;
	*i_p = k.slot;
	return 0;
}

int ddss_segtab_lookup(struct ddss_segtab *tab, uint64_t key, uint32_t requester,
		       struct ddss_seg_loc *loc_p)
{
	uint32_t i;
	int r;

	pthread_mutex_lock(&tab->mu);
	r = find(tab, key, SLOT_LIVE, &i);
	if (!r) {
		add_cacher(tab, &tab->slots[i], requester);
		fill_loc(tab, i, loc_p);
	}
	pthread_mutex_unlock(&tab->mu);
	return r;
}

int ddss_segtab_release_begin(struct ddss_segtab *tab, uint64_t key, uint32_t requester,
			      char name[DDSS_NAME_MAX], uint8_t *cachers, size_t cachers_len)
{
	uint32_t i;
	int r;

	memset(name, 0, DDSS_NAME_MAX);
	memset(cachers, 0, cachers_len);
	pthread_mutex_lock(&tab->mu);
	r = find(tab, key, SLOT_LIVE, &i);
	/* The authenticated rank a request came from (net/auth.h): a member cannot pull an
	 * unnamed segment from under its owner. A name shares a segment with the group. */
	if (!r && !tab->slots[i].name && requester != tab->slots[i].owner &&
	    requester != tab->rank)
		r = -EPERM;
	if (!r) {
		struct slot *s = &tab->slots[i];

		s->state = SLOT_RELEASING;
		/* Before the memory can be reused: a reader that copied from it sees the bump. */
		if (tab->epoch)
			__atomic_add_fetch(tab->epoch, 1, __ATOMIC_SEQ_CST);
		if (s->name)
			strncpy(name, s->name, DDSS_NAME_MAX - 1);
		memcpy(cachers, s->cachers,
		       cachers_len < tab->cachers_len ? cachers_len : tab->cachers_len);
	}
	pthread_mutex_unlock(&tab->mu);
	return r;
}

int ddss_segtab_release_end(struct ddss_segtab *tab, uint64_t key)
{
	uint32_t i;
	int r;

	pthread_mutex_lock(&tab->mu);
	r = find(tab, key, SLOT_RELEASING, &i);
	if (!r) {
		struct slot *s = &tab->slots[i];

		free(s->name);
		free(s->cachers);
		s->name = NULL;
		s->cachers = NULL;
		s->state = SLOT_FREE;
		quota_charge(tab, s, -1);
		put_slot(tab, i);
		tab->count--;
		/* A holder or queued waiter may still run the lock protocol on the words. */
		if (!tab->holds && words_idle(tab, s->hdr_off))
			ddss_pool_free(tab->pool, s->hdr_off);
		else
			add_draining(tab, s->hdr_off);
		sweep(tab);
	}
	pthread_mutex_unlock(&tab->mu);
	return r;
}

void ddss_segtab_hold(struct ddss_segtab *tab)
{
	pthread_mutex_lock(&tab->mu);
	tab->holds++;
	pthread_mutex_unlock(&tab->mu);
}

void ddss_segtab_unhold(struct ddss_segtab *tab)
{
	pthread_mutex_lock(&tab->mu);
	tab->holds--;
	sweep(tab);
	pthread_mutex_unlock(&tab->mu);
}

void ddss_segtab_each(struct ddss_segtab *tab, ddss_segtab_each_fn fn, void *arg)
{
	struct ddss_seg_loc loc;

	pthread_mutex_lock(&tab->mu);
	for (uint32_t i = 0; i < tab->nslots; i++) {
		if (tab->slots[i].state == SLOT_FREE)
			continue;
		fill_loc(tab, i, &loc);
		fn(arg, (const uint8_t *)ddss_pool_base(tab->pool) + tab->slots[i].hdr_off,
		   tab->slots[i].hdr_off, &loc);
	}
	pthread_mutex_unlock(&tab->mu);
}

uint64_t ddss_segtab_count(struct ddss_segtab *tab)
{
	uint64_t n;

	pthread_mutex_lock(&tab->mu);
	n = tab->count;
	pthread_mutex_unlock(&tab->mu);
	return n;
}
