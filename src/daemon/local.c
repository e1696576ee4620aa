/*
 * Daemon mode, local reads (local.h). The descriptors are kept in a small direct-mapped
 * table: a client reads few segments of its own node often, and a miss only costs the
 * call to the daemon it would have made anyway.
 */
#include "daemon/local.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LOCAL_SLOTS 256u

struct local_desc {
	uint64_t key;      /* 0: empty */
	uint64_t epoch;    /* the release epoch it was learnt at */
	uint64_t data_off, size;
};

struct ddss_local {
	const uint8_t *pool;
	uint64_t len;
	const uint64_t *epoch; /* in the pool: bumped by the daemon as a release begins */
	pthread_mutex_t mu;
	struct local_desc slot[LOCAL_SLOTS];
	uint64_t reads;        /* atomic */
};

static unsigned slot_of(uint64_t key)
{
	key ^= key >> 31;
	key *= 0x9E3779B97F4A7C15ull;
	return (unsigned)(key >> 56) % LOCAL_SLOTS;
}

int ddss_local_open(int fd, uint64_t len, uint64_t epoch_off, struct ddss_local **lv_p)
{
	struct ddss_local *lv;
	void *p;

	if (len == 0 || epoch_off > len - sizeof(uint64_t) || epoch_off % 8)
		return -EPROTO;
	lv = calloc(1, sizeof(*lv));
	if (!lv)
		return -ENOMEM;
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int r = -errno;

		free(lv);
		return r;
	}
	lv->pool = p;
	lv->len = len;
	lv->epoch = (const uint64_t *)(lv->pool + epoch_off);
	pthread_mutex_init(&lv->mu, NULL);
	*lv_p = lv;
	return 0;
}

void ddss_local_close(struct ddss_local *lv)
{
	if (!lv)
		return;
	munmap((void *)lv->pool, lv->len);
	pthread_mutex_destroy(&lv->mu);
	free(lv);
}

uint64_t ddss_local_epoch(const struct ddss_local *lv)
{
	return __atomic_load_n(lv->epoch, __ATOMIC_ACQUIRE);
}

int ddss_local_known(struct ddss_local *lv, uint64_t key)
{
	int known;

	pthread_mutex_lock(&lv->mu);
	known = lv->slot[slot_of(key)].key == key;
	pthread_mutex_unlock(&lv->mu);
	return known;
}

void ddss_local_learn(struct ddss_local *lv, uint64_t key, uint64_t epoch, uint64_t data_off,
		      uint64_t size)
{
	if (!key || data_off > lv->len || size > lv->len - data_off)
		return;
	pthread_mutex_lock(&lv->mu);
	lv->slot[slot_of(key)] = (struct local_desc){ .key = key, .epoch = epoch,
						      .data_off = data_off, .size = size };
	pthread_mutex_unlock(&lv->mu);
}

int ddss_local_get(struct ddss_local *lv, uint64_t key, size_t offset, void *buf, size_t len)
{
	struct local_desc d;
	uint64_t e0;

	pthread_mutex_lock(&lv->mu);
	d = lv->slot[slot_of(key)];
	pthread_mutex_unlock(&lv->mu);
	if (d.key != key || offset > d.size || len > d.size - offset)
		return 0;
	e0 = ddss_local_epoch(lv);
	if (e0 != d.epoch) {
		/* Some release began since: this one, perhaps. Ask the daemon again. */
		pthread_mutex_lock(&lv->mu);
		if (lv->slot[slot_of(key)].key == key)
			lv->slot[slot_of(key)].key = 0;
		pthread_mutex_unlock(&lv->mu);
		return 0;
	}
	memcpy(buf, lv->pool + d.data_off + offset, len);
	/* The copy is done before the epoch is read again (a seqlock's read side). */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(lv->epoch, __ATOMIC_RELAXED) != e0)
		return 0;
	__atomic_add_fetch(&lv->reads, 1, __ATOMIC_RELAXED);
	return 1;
}

uint64_t ddss_local_reads(const struct ddss_local *lv)
{
	return __atomic_load_n(&lv->reads, __ATOMIC_RELAXED);
}
