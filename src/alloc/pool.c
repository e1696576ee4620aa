/*
 * The registered pool (see pool.h): one anonymous mapping (a shared memfd one for ddssd), one
 * jemalloc arena over it.
 *
 * The arena is created with jemalloc's default extent hooks and only then given ours. jemalloc
 * allocates an arena's metadata (its "base") through the hooks it was created with, so this
 * order keeps that metadata in ordinary memory, out of the pool the NIC exposes to peers.
 *
 * Our hooks: alloc bumps a pointer through the pool; dalloc opts out, so jemalloc keeps every
 * extent it ever got (as "retained") and reuses it; there is no decommit and no purge, so no
 * pool page is ever unmapped or madvise'd while the pool exists. The pool only grows (the
 * bump is the high-water mark) until the arena is destroyed with it.
 *
 * jemalloc asks the hook for memory in growing steps (2 MiB, 2.5, 3, 3.5, 4, 5, ... MiB, each
 * at least the request in hand) and, once the next step no longer fits, for exactly what it
 * needs. It never merges memory that came from two different hook calls (with opt.retain it
 * treats each as a separate mapping), so a freed pool is not one free run: one allocation
 * can only be as large as the free part of one step, or the never-handed-out rest.
 *
 * Allocations pass MALLOCX_TCACHE_NONE: a thread cache would hold freed regions back from
 * other threads and make the arena's statistics lag behind the truth.
 */
#include "alloc/pool.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef F_SEAL_FUTURE_WRITE
#define POOL_SEAL_FUTURE_WRITE F_SEAL_FUTURE_WRITE
#else
#define POOL_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

#define POOL_ALIGN ((size_t)2 << 20)
#define POOL_MIN_ALIGN 8u
#define POOL_MAX_ALIGN 4096u

struct ddss_pool {
	extent_hooks_t hooks;    /* first: the hooks find their pool with container_of */
	uint8_t *base;           /* the whole pool: what peers reach */
	size_t len;
	int fd;                  /* shared pools: the memfd behind it (daemon mode); else -1 */
	size_t reserve;          /* [base, base + reserve) is not the allocator's */
	uint8_t *abase;          /* the allocator's part: base + reserve, len - reserve bytes */
	size_t alen;
	unsigned arena;
	int flags;               /* mallocx/dallocx flags naming our arena */
	pthread_mutex_t bump_mu; /* the alloc hook may run on any thread */
	size_t bump;             /* bytes handed to jemalloc: stored under bump_mu, read atomic */
	uint64_t live;           /* atomic */
	pthread_mutex_t prime_mu; /* see prime() */
	bool primed;              /* atomic */
};

static struct ddss_pool *hooks_pool(extent_hooks_t *hooks)
{
	return (struct ddss_pool *)((char *)hooks - offsetof(struct ddss_pool, hooks));
}

/* Is [addr, addr + size) inside the pool? */
static bool pool_holds(const struct ddss_pool *pool, const void *addr, size_t size)
{
	uintptr_t a = (uintptr_t)addr, b = (uintptr_t)pool->abase;

	return a >= b && a - b <= pool->alen && size <= pool->alen - (a - b);
}

/* ---- extent hooks (called by jemalloc, possibly with its locks held: no malloc, no log) ---- */

static void *pool_extent_alloc(extent_hooks_t *hooks, void *new_addr, size_t size,
			       size_t alignment, bool *zero, bool *commit, unsigned arena_ind)
{
	struct ddss_pool *pool = hooks_pool(hooks);
	uintptr_t base = (uintptr_t)pool->abase;
	uintptr_t cur, start;
	void *p = NULL;

	if (!size || !alignment || (alignment & (alignment - 1)))
		return NULL;
	pthread_mutex_lock(&pool->bump_mu);
	cur = base + pool->bump;
	if (new_addr) {
		/* jemalloc names an address only to grow an extent in place: only the bump can. */
		if ((uintptr_t)new_addr != cur || (cur & (alignment - 1)))
			goto out;
		start = cur;
	} else {
		if (cur > UINTPTR_MAX - (alignment - 1))
			goto out;
		start = (cur + (alignment - 1)) & ~(uintptr_t)(alignment - 1);
	}
	if (start - base > pool->alen || size > pool->alen - (start - base))
		goto out;
	__atomic_store_n(&pool->bump, start - base + size, __ATOMIC_RELEASE);
	p = (void *)start;
	/* Never handed out before, and fresh anonymous memory reads as zero. */
	*zero = true;
	*commit = true;
out:
	pthread_mutex_unlock(&pool->bump_mu);
	return p;
}

/* Opt out: jemalloc keeps the extent as retained and reuses it; the pool never shrinks. */
static bool pool_extent_dalloc(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
			       unsigned arena_ind)
{
	return true;
}

/* Called for retained extents when the arena is destroyed; the munmap that follows frees them. */
static void pool_extent_destroy(extent_hooks_t *hooks, void *addr, size_t size, bool committed,
				unsigned arena_ind)
{
}

/* Pool memory is always committed. */
static bool pool_extent_commit(extent_hooks_t *hooks, void *addr, size_t size, size_t offset,
			       size_t length, unsigned arena_ind)
{
	return false;
}

/*
 * Splitting and merging are bookkeeping for jemalloc; any contiguous range of the pool is
 * fine. The range checks are defensive: jemalloc only merges extents of one arena.
 */
static bool pool_extent_split(extent_hooks_t *hooks, void *addr, size_t size, size_t size_a,
			      size_t size_b, bool committed, unsigned arena_ind)
{
	return !pool_holds(hooks_pool(hooks), addr, size);
}

static bool pool_extent_merge(extent_hooks_t *hooks, void *addr_a, size_t size_a, void *addr_b,
			      size_t size_b, bool committed, unsigned arena_ind)
{
	struct ddss_pool *pool = hooks_pool(hooks);

	return !pool_holds(pool, addr_a, size_a) || !pool_holds(pool, addr_b, size_b) ||
	       (uint8_t *)addr_a + size_a != (uint8_t *)addr_b;
}

/* decommit, purge_lazy and purge_forced are NULL: jemalloc must never drop pool pages. */
static const extent_hooks_t pool_hooks_template = {
	.alloc = pool_extent_alloc,
	.dalloc = pool_extent_dalloc,
	.destroy = pool_extent_destroy,
	.commit = pool_extent_commit,
	.decommit = NULL,
	.purge_lazy = NULL,
	.purge_forced = NULL,
	.split = pool_extent_split,
	.merge = pool_extent_merge,
};

/* ---- the arena ---- */

static int arena_ctl_write(unsigned arena, const char *what, void *val, size_t len)
{
	char name[64];

	snprintf(name, sizeof(name), "arena.%u.%s", arena, what);
	return mallctl(name, NULL, NULL, val, len);
}

static int arena_destroy(unsigned arena)
{
	int r = arena_ctl_write(arena, "destroy", NULL, 0);

	if (r)
		DDSS_ERR("jemalloc arena.%u.destroy: %s", arena, strerror(r));
	return -r;
}

static int pool_arena_create(struct ddss_pool *pool)
{
	extent_hooks_t *hooks = &pool->hooks;
	ssize_t now = 0;
	size_t len = sizeof(pool->arena);
	int r;

	/* Default hooks here: the arena's metadata is allocated now, through them. */
	r = mallctl("arenas.create", &pool->arena, &len, NULL, 0);
	if (r) {
		DDSS_ERR("jemalloc arenas.create: %s", strerror(r));
		return -ENOMEM;
	}
	/*
	 * Decay 0: a freed extent goes at once through the (opted-out) purge path to "retained",
	 * where jemalloc merges neighbours eagerly and will split any free extent for any request.
	 * With decay off (-1) it would stay "dirty", where jemalloc neither merges small extents
	 * nor splits one more than 64 times the request: a pool of freed 64 KiB pieces then
	 * refused 64-byte allocations after 7% of it (tests/alloc). No page is purged either way.
	 */
	if (arena_ctl_write(pool->arena, "dirty_decay_ms", &now, sizeof(now)) ||
	    arena_ctl_write(pool->arena, "muzzy_decay_ms", &now, sizeof(now)))
		DDSS_WARN("cannot set decay to 0 for jemalloc arena %u", pool->arena);
	r = arena_ctl_write(pool->arena, "extent_hooks", &hooks, sizeof(hooks));
	if (r) {
		DDSS_ERR("jemalloc arena.%u.extent_hooks: %s", pool->arena, strerror(r));
		arena_destroy(pool->arena);
		return -ENOMEM;
	}
	pool->flags = (int)MALLOCX_ARENA(pool->arena) | MALLOCX_TCACHE_NONE;
	return 0;
}

/* ---- the mapping ---- */

/*
 * DDSS_HUGEPAGES=1: back the pool with huge pages. Registering memory pins it page by page,
 * so 2 MiB pages cut the time ibv_reg_mr takes (docs/transport.md, "Capabilities and
 * fallbacks", measured) and the NIC's translation entries. A private pool tries MAP_HUGETLB
 * (needs pages reserved in /proc/sys/vm/nr_hugepages, of the 2 MiB default size), else asks
 * for transparent huge pages (MADV_HUGEPAGE); a shared one (daemon mode) only the latter.
 */
static bool want_hugepages(void)
{
	const char *s = getenv("DDSS_HUGEPAGES");

	return s && *s && strcmp(s, "0") != 0;
}

static bool map_hugetlb(size_t len, uint8_t **base_p)
{
#ifdef MAP_HUGETLB
	/* The kernel aligns a hugetlb mapping to its page size (POOL_ALIGN or more). */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
		       -1, 0);

	if (p == MAP_FAILED)
		return false;
	if ((uintptr_t)p & (POOL_ALIGN - 1)) {
		munmap(p, len);
		return false;
	}
	*base_p = p;
	return true;
#else
	return false;
#endif
}

/* @fd >= 0: map that memfd shared (it reads as zeros too: a fresh file has no data). */
static int pool_map(size_t len, int fd, uint8_t **base_p)
{
	size_t span = len + POOL_ALIGN, head, tail;
	bool huge = want_hugepages();
	uint8_t *raw;

	if (huge && fd < 0 && map_hugetlb(len, base_p)) {
		DDSS_INFO("pool: %zu MiB of hugetlb pages (MAP_HUGETLB)", len >> 20);
		return 0;
	}

	/* Map a little more and trim both ends to get a 2 MiB-aligned base. */
	raw = mmap(NULL, span, fd < 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		DDSS_ERR("cannot map a pool of %zu bytes: %s", len, strerror(errno));
		return -ENOMEM;
	}
	head = (POOL_ALIGN - ((uintptr_t)raw & (POOL_ALIGN - 1))) & (POOL_ALIGN - 1);
	tail = span - head - len;
	if (fd >= 0 && mmap(raw + head, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
			    0) == MAP_FAILED) {
		DDSS_ERR("cannot map a shared pool of %zu bytes: %s", len, strerror(errno));
		munmap(raw, span);
		return -ENOMEM;
	}
	if (head)
		munmap(raw, head);
	if (tail)
		munmap(raw + head + len, tail);
	*base_p = raw + head;
	if (huge) {
		/* 2 MiB-aligned, so every page of it can be a huge one. */
		if (madvise(*base_p, len, MADV_HUGEPAGE))
			DDSS_WARN("pool: DDSS_HUGEPAGES: no hugetlb pages, and MADV_HUGEPAGE "
				  "failed: %s", strerror(errno));
		else
			DDSS_INFO("pool: %zu MiB, transparent huge pages asked for (MADV_HUGEPAGE; "
				  "no hugetlb pages)", len >> 20);
	}
	return 0;
}

static int create(size_t len, size_t reserve, bool shared, struct ddss_pool **pool_p)
{
	struct ddss_pool *pool;
	int r;

	if (!len)
		return -EINVAL;
	if (len > SIZE_MAX - 2 * POOL_ALIGN)
		return -ENOMEM;
	len = (len + POOL_ALIGN - 1) & ~(POOL_ALIGN - 1);
	reserve = (reserve + POOL_MAX_ALIGN - 1) & ~(size_t)(POOL_MAX_ALIGN - 1);
	if (reserve > len / 2)
		return -EINVAL;

	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->hooks = pool_hooks_template;
	pool->fd = -1;
	pool->len = len;
	pool->reserve = reserve;
	pool->alen = len - reserve;
	r = pthread_mutex_init(&pool->bump_mu, NULL);
	pthread_mutex_init(&pool->prime_mu, NULL);
	if (r) {
		r = -r;
		goto free_pool;
	}
	if (shared) {
		pool->fd = memfd_create("ddss-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (pool->fd < 0 || ftruncate(pool->fd, (off_t)len) < 0) {
			r = -errno;
			DDSS_ERR("cannot make a shared pool of %zu bytes: %s", len, strerror(errno));
			goto destroy_mutex;
		}
	}
	r = pool_map(len, pool->fd, &pool->base);
	if (r)
		goto destroy_mutex;
	/*
	 * Sealed once mapped: no fd of it, ours or a client's (even one reopened through
	 * /proc), can shrink it under the mappings (SIGBUS), grow it, write it or map it
	 * writable again; our own mapping stays writable (docs/security.md, "Daemon mode").
	 */
	if (shared && fcntl(pool->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
			    POOL_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
		r = -errno;
		DDSS_ERR("cannot seal the shared pool: %s", strerror(errno));
		goto unmap;
	}
	pool->abase = pool->base + reserve;
	r = pool_arena_create(pool);
	if (r)
		goto unmap;
	*pool_p = pool;
	return 0;

unmap:
	munmap(pool->base, pool->len);
destroy_mutex:
	if (pool->fd >= 0)
		close(pool->fd);
	pthread_mutex_destroy(&pool->bump_mu);
	pthread_mutex_destroy(&pool->prime_mu);
free_pool:
	free(pool);
	return r;
}

int ddss_pool_create(size_t len, size_t reserve, struct ddss_pool **pool_p)
{
	return create(len, reserve, false, pool_p);
}

int ddss_pool_create_shared(size_t len, size_t reserve, struct ddss_pool **pool_p)
{
	return create(len, reserve, true, pool_p);
}

int ddss_pool_fd(const struct ddss_pool *pool)
{
	return pool->fd;
}

void ddss_pool_destroy(struct ddss_pool *pool)
{
	if (!pool)
		return;
	/*
	 * If jemalloc keeps the arena, it still points at the pool and at our hooks: leak both
	 * rather than let it touch unmapped or freed memory later.
	 */
	if (arena_destroy(pool->arena))
		return;
	munmap(pool->base, pool->len);
	if (pool->fd >= 0)
		close(pool->fd);
	pthread_mutex_destroy(&pool->bump_mu);
	pthread_mutex_destroy(&pool->prime_mu);
	free(pool);
}

void *ddss_pool_base(const struct ddss_pool *pool)
{
	return pool->base;
}

size_t ddss_pool_len(const struct ddss_pool *pool)
{
	return pool->len;
}

/* ---- allocations ---- */

/*
 * jemalloc takes memory from the hooks in growing steps and never merges memory from two
 * hook calls, so after churn a mostly free pool could not serve one large allocation (a
 * 1 GiB pool then refused 128 MiB). So the first allocation first takes (and frees) the
 * largest block that fits: nearly the whole pool comes from one hook call, and what is
 * freed later merges back into it.
 */
static void prime(struct ddss_pool *pool)
{
	if (__atomic_load_n(&pool->primed, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&pool->prime_mu);
	/* Size classes round up by up to 25% (plus a page): start below that, then halve. */
	for (size_t want = pool->alen / 8 * 6; !pool->primed && want >= (2u << 20); want /= 2) {
		void *p = mallocx(want, pool->flags);

		if (p) {
			dallocx(p, MALLOCX_TCACHE_NONE);
			break;
		}
	}
	__atomic_store_n(&pool->primed, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->prime_mu);
}

int ddss_pool_alloc(struct ddss_pool *pool, size_t size, size_t align, uint64_t *off_p)
{
	uint8_t *p;

	if (!size || align < POOL_MIN_ALIGN || align > POOL_MAX_ALIGN || (align & (align - 1))) {
		DDSS_ERR("bad request: %zu bytes aligned to %zu", size, align);
		return -EINVAL;
	}
	/* Cannot fit, and would only send jemalloc asking the hooks for it. */
	if (size > pool->alen)
		return -ENOMEM;
	prime(pool);
	p = mallocx(size, pool->flags | MALLOCX_ALIGN(align) | MALLOCX_ZERO);
	if (!p) {
		DDSS_DBG("pool full: %zu bytes aligned to %zu", size, align);
		return -ENOMEM;
	}
	if (!pool_holds(pool, p, size)) {
		DDSS_ERR("jemalloc arena %u returned %p, outside the pool %p+%zu", pool->arena,
			 (void *)p, (void *)pool->base, pool->len);
		dallocx(p, MALLOCX_TCACHE_NONE);
		return -ENOMEM;
	}
	__atomic_add_fetch(&pool->live, 1, __ATOMIC_RELAXED);
	*off_p = (uint64_t)(p - pool->base);
	return 0;
}

int ddss_pool_free(struct ddss_pool *pool, uint64_t off)
{
	/* Nothing at or past the high-water mark was ever allocated (it covers off >= len). */
	size_t mapped = __atomic_load_n(&pool->bump, __ATOMIC_ACQUIRE);

	if (off < pool->reserve || off - pool->reserve >= mapped || off % POOL_MIN_ALIGN) {
		DDSS_ERR("offset %#" PRIx64 " is no allocation (%zu of %zu bytes used)", off,
			 mapped, pool->len);
		return -EINVAL;
	}
	dallocx(pool->base + off, MALLOCX_TCACHE_NONE);
	__atomic_sub_fetch(&pool->live, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---- statistics ---- */

static int stats_read(unsigned arena, const char *what, size_t *val_p)
{
	char name[80];
	size_t len = sizeof(*val_p);
	int r;

	snprintf(name, sizeof(name), "stats.arenas.%u.%s", arena, what);
	r = mallctl(name, val_p, &len, NULL, 0);
	if (r == ENOENT)
		return -ENOTSUP;
	if (r) {
		DDSS_ERR("jemalloc %s: %s", name, strerror(r));
		return -r;
	}
	return 0;
}

int ddss_pool_stats(struct ddss_pool *pool, struct ddss_pool_stats *st_p)
{
	uint64_t epoch = 1;
	size_t len = sizeof(epoch), small, large;
	int r;

	/* jemalloc's statistics are a snapshot taken at the last "epoch" write. */
	r = mallctl("epoch", &epoch, &len, &epoch, len);
	if (r == ENOENT)
		return -ENOTSUP;
	if (r) {
		DDSS_ERR("jemalloc epoch: %s", strerror(r));
		return -r;
	}
	r = stats_read(pool->arena, "small.allocated", &small);
	if (r)
		return r;
	r = stats_read(pool->arena, "large.allocated", &large);
	if (r)
		return r;
	st_p->allocated = small + large;
	st_p->mapped = __atomic_load_n(&pool->bump, __ATOMIC_ACQUIRE);
	st_p->live = __atomic_load_n(&pool->live, __ATOMIC_RELAXED);
	return 0;
}
