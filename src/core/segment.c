/*
 * The segment API: allocate (placed, optionally named), look up by name, release, stat.
 * Each is a few requests to the home rank, the name directory (core/name_dir.h) and, on
 * release, the ranks that cache the segment's descriptor (see core/seg_cache.h).
 */
#include "core/ctx.h"
#include "core/key.h"
#include "core/log.h"
#include "core/name_dir.h"
#include "core/proto.h"
#include "core/segment.h"
#include "core/wire.h"
#include "coherence/coherence.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int check_name(const char *name)
{
	size_t n = strnlen(name, DDSS_NAME_MAX);

	if (n == 0)
		return -EINVAL;
	return n < DDSS_NAME_MAX ? 0 : -ENAMETOOLONG;
}

static void get_loc(const uint8_t *p, struct ddss_seg_loc *loc)
{
	loc->key = wire_get64(p);
	loc->data_off = wire_get64(p + 8);
	loc->size = wire_get64(p + 16);
	loc->coherence = wire_get32(p + 24);
	loc->param = wire_get32(p + 28);
}

/*
 * A descriptor from @home is input: its key must be a key of @home's, its model and
 * parameter ones this build knows, its data past a header. Cached only then.
 */
static bool loc_ok(const struct ddss_seg_loc *loc, uint32_t home)
{
	struct ddss_key_parts k;
	uint64_t len;

	return !ddss_key_parse(loc->key, &k) && k.rank == home && loc->size >= 1 &&
	       loc->data_off >= DDSS_SEG_HDR_LEN &&
	       !ddss_coh_data_len(loc->coherence, loc->param, loc->size, &len);
}

/* Only the calls that define a code may be answered with one. */
static int no_code(int r)
{
	return r > 0 ? -EPROTO : r;
}

int ddss_ctx_desc(struct ddss_ctx *ctx, uint64_t key, const struct ddss_seg_desc **desc_p)
{
	struct ddss_key_parts k;
	struct ddss_seg_pending *pend;
	struct ddss_seg_loc loc;
	uint8_t body[8], reply[SEG_DESC_LEN];
	size_t got = 0;
	int r;

	/* A cached key was checked when it was cached: the CRC is only worth it on a miss. */
	*desc_p = ddss_seg_cache_get(ctx->cache, key);
	if (*desc_p)
		return 0;
	if (ddss_key_parse(key, &k) || k.rank > ctx->size)
		return -EINVAL;
	pend = ddss_seg_cache_begin(ctx->cache, key);
	if (!pend)
		return -ENOMEM;
	wire_put64(body, key);
	r = no_code(ddss_rpc_call(ctx->rpc, k.rank, SEG_OP_LOOKUP, body, 8, reply, sizeof(reply),
				  &got, -1));
	if (r == 0 && got != SEG_DESC_LEN)
		r = -EPROTO;
	if (r) {
		ddss_seg_cache_cancel(ctx->cache, pend);
		return r;
	}
	get_loc(reply, &loc);
	if (loc.key != key || !loc_ok(&loc, k.rank)) {
		ddss_seg_cache_cancel(ctx->cache, pend);
		return -EPROTO;
	}
	return ddss_seg_cache_end(ctx->cache, pend, &loc, k.rank, desc_p);
}

static int pick_home(struct ddss_ctx *ctx, const struct ddss_seg_attr *attr, uint32_t *home_p)
{
	switch (attr->placement) {
	case DDSS_PLACE_ANY:
		/* The next rank in turn that is not refused: dead, or a free slot of a group
		 * that can grow (coordinator mode). If every other one is, this rank. */
		for (uint32_t i = 0; i < ctx->size; i++) {
			*home_p = __atomic_fetch_add(&ctx->next_home, 1, __ATOMIC_RELAXED) %
					  ctx->size + 1;
			if (*home_p == ctx->rank || !ddss_tp_peer_refused(ctx->tp, *home_p))
				return 0;
		}
		*home_p = ctx->rank;
		return 0;
	case DDSS_PLACE_LOCAL:
		*home_p = ctx->rank;
		return 0;
	case DDSS_PLACE_RANK:
		if (attr->rank < 1 || attr->rank > ctx->size)
			return -EINVAL;
		*home_p = attr->rank;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Allocate at @home; the new descriptor goes straight into this rank's cache. */
static int alloc_at(struct ddss_ctx *ctx, uint32_t home, size_t nbytes,
		    const struct coh_choice *model, const char *name, uint64_t *key_p)
{
	uint8_t body[SEG_ALLOC_LEN] = { 0 }, reply[SEG_DESC_LEN];
	const struct ddss_seg_desc *d;
	struct ddss_seg_loc loc;
	size_t got = 0;
	int r;

	wire_put64(body, nbytes);
	wire_put32(body + 8, model->coherence);
	wire_put32(body + 12, model->param);
	if (name)
		strcpy((char *)body + 16, name);
	r = no_code(ddss_rpc_call(ctx->rpc, home, SEG_OP_ALLOC, body, sizeof(body), reply,
				  sizeof(reply), &got, -1));
	if (r == 0 && got != SEG_DESC_LEN)
		r = -EPROTO;
	if (r)
		return r;
	get_loc(reply, &loc);
	if (!loc_ok(&loc, home))
		return -EPROTO;
	if (ddss_seg_cache_end(ctx->cache, NULL, &loc, home, &d) == 0)
		ddss_seg_cache_put(d);
	*key_p = loc.key;
	return 0;
}

static int alloc_named(struct ddss_ctx *ctx, uint32_t home, size_t nbytes,
		       const struct coh_choice *model, const char *name, uint64_t *key_p)
{
	uint64_t key;
	int r = ddss_name_dir_acquire(ctx, name, true, key_p);

	if (r != SEG_NAME_CREATE)
		return r;
	r = alloc_at(ctx, home, nbytes, model, name, &key);
	if (r) {
		ddss_name_dir_abandon(ctx, name);
		return r;
	}
	r = ddss_name_dir_bind(ctx, name, key);
	if (r) {
		DDSS_WARN("named segment '%s': the name directory (rank %u; 0: etcd) did not "
			  "take it: %s", name, ddss_name_dir_rank(ctx, name), ddss_strerror(r));
		ddss_segment_release(ctx, key);
		return r;
	}
	*key_p = key;
	return 0;
}

int ddss_segment_allocate(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
			  ddss_key_t *key_p)
{
	struct ddss_seg_attr dflt = { 0 };
	struct coh_choice model;
	uint64_t data_len;
	uint32_t home;
	int r;

	if (!ctx || !key_p || nbytes == 0)
		return -EINVAL;
	if (!attr)
		attr = &dflt;
	if (attr->name && (r = check_name(attr->name)))
		return r;
	/* Refuse a bad model here, before any message (the home checks again). */
	r = ddss_coh_choose(attr, &model);
	if (!r)
		r = ddss_coh_check_caps(model.coherence, ctx->tp->atomics,
					ctx->tp->device[0] ? ctx->tp->device : ctx->tp->ops->name);
	if (!r)
		r = ddss_coh_data_len(model.coherence, model.param, nbytes, &data_len);
	if (r)
		return r;
	r = pick_home(ctx, attr, &home);
	if (r)
		return r;
	if (attr->name)
		return alloc_named(ctx, home, nbytes, &model, attr->name, key_p);
	return alloc_at(ctx, home, nbytes, &model, NULL, key_p);
}

int ddss_segment_lookup(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p)
{
	int r;

	if (!ctx || !name || !key_p)
		return -EINVAL;
	r = check_name(name);
	/* Asked not to create, the directory has no business answering "create it". */
	return r ? r : no_code(ddss_name_dir_acquire(ctx, name, false, key_p));
}

/* Every rank the home gave the descriptor to drops it; they answer once drained. */
static void invalidate_cachers(struct ddss_ctx *ctx, uint64_t key, const uint8_t *bitmap)
{
	uint8_t body[8];

	wire_put64(body, key);
	for (uint32_t rank = 1; rank <= ctx->size; rank++) {
		int r;

		if (!(bitmap[(rank - 1) / 8] & (1u << ((rank - 1) % 8))))
			continue;
		r = no_code(ddss_rpc_call(ctx->rpc, rank, SEG_OP_INVALIDATE, body, 8, NULL, 0, NULL,
					  -1));
		if (r)
			DDSS_WARN("release: rank %u did not confirm dropping segment %#llx: %s",
				  rank, (unsigned long long)key, ddss_strerror(r));
	}
}

int ddss_segment_release(ddss_ctx_t *ctx, ddss_key_t key)
{
	struct ddss_key_parts k;
	uint8_t body[8], reply[DDSS_RPC_BODY_MAX];
	size_t got = 0;
	int r;

	if (!ctx)
		return -EINVAL;
	if (ddss_key_parse(key, &k) || k.rank > ctx->size)
		return -EINVAL;
	wire_put64(body, key);
	r = no_code(ddss_rpc_call(ctx->rpc, k.rank, SEG_OP_RELEASE_BEGIN, body, 8, reply,
				  sizeof(reply), &got, -1));
	if (r == 0 && (got != DDSS_NAME_MAX + (ctx->size + 7) / 8 ||
		       !memchr(reply, 0, DDSS_NAME_MAX)))
		r = -EPROTO;
	if (r)
		return r;
	invalidate_cachers(ctx, key, reply + DDSS_NAME_MAX);
	if (reply[0])
		ddss_name_dir_unbind(ctx, (const char *)reply, key);
	return no_code(ddss_rpc_call(ctx->rpc, k.rank, SEG_OP_RELEASE_END, body, 8, NULL, 0, NULL,
				     -1));
}

int ddss_segment_stat(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p)
{
	const struct ddss_seg_desc *d;
	int r;

	if (!ctx || !info_p)
		return -EINVAL;
	r = ddss_ctx_desc(ctx, key, &d);
	if (r)
		return r;
	info_p->home = d->home;
	info_p->size = d->size;
	info_p->coherence = (enum ddss_coherence)d->coherence;
	info_p->param = d->param;
	ddss_seg_cache_put(d);
	return 0;
}
