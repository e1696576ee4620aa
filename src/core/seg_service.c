/*
 * The segment service: what a rank answers as a home (allocate, look up, release), as a
 * name directory, and as a holder of cached descriptors (invalidate). Runs on the
 * transport's progress thread, so nothing here blocks; every request is checked first.
 */
#include "core/ctx.h"
#include "core/log.h"
#include "core/proto.h"
#include "core/rpc.h"
#include "coherence/coherence.h"
#include "core/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A name field: DDSS_NAME_MAX bytes holding a NUL-terminated, non-empty string. */
static bool name_ok(const uint8_t *field)
{
	return field[0] && memchr(field, 0, DDSS_NAME_MAX);
}

static void put_loc(uint8_t *p, const struct ddss_seg_loc *loc)
{
	wire_put64(p, loc->key);
	wire_put64(p + 8, loc->data_off);
	wire_put64(p + 16, loc->size);
	wire_put32(p + 24, loc->coherence);
	wire_put32(p + 28, loc->param);
}

void ddss_seg_ack(void *arg, uint32_t to, uint32_t id)
{
	struct ddss_ctx *ctx = arg;

	pthread_mutex_lock(&ctx->ack_mu);
	if (!ctx->closing)
		ddss_rpc_reply(ctx->rpc, to, id, 0, NULL, 0);
	pthread_mutex_unlock(&ctx->ack_mu);
}

static void answer_waiters(struct ddss_ctx *ctx, struct ddss_name_waiter *w, size_t n,
			   int status, uint64_t key)
{
	uint8_t body[8];

	wire_put64(body, key);
	for (size_t i = 0; i < n; i++)
		ddss_rpc_reply(ctx->rpc, w[i].rank, w[i].id, status, body, status ? 0 : 8);
	free(w);
}

static int serve_home(struct ddss_ctx *ctx, uint32_t from, uint16_t op, const uint8_t *body,
		      size_t len, uint8_t *out, size_t *out_len)
{
	struct ddss_seg_loc loc;
	int r;

	switch (op) {
	case SEG_OP_ALLOC:
		if (len != SEG_ALLOC_LEN || (body[16] && !name_ok(body + 16)))
			return -EPROTO;
		r = ddss_segtab_alloc(ctx->segtab, wire_get64(body), wire_get32(body + 8),
				      wire_get32(body + 12), (const char *)body + 16, from, &loc);
		break;
	case SEG_OP_LOOKUP:
		if (len != 8)
			return -EPROTO;
		r = ddss_segtab_lookup(ctx->segtab, wire_get64(body), from, &loc);
		break;
	case SEG_OP_RELEASE_BEGIN: {
		size_t bitmap = (ctx->size + 7) / 8;

		if (len != 8 || DDSS_NAME_MAX + bitmap > DDSS_RPC_BODY_MAX)
			return -EPROTO; /* ddss_init refuses such groups; never overrun @out */
		r = ddss_segtab_release_begin(ctx->segtab, wire_get64(body), from, (char *)out,
					      out + DDSS_NAME_MAX, bitmap);
		if (!r)
			*out_len = DDSS_NAME_MAX + bitmap;
		return r;
	}
	case SEG_OP_RELEASE_END:
		if (len != 8)
			return -EPROTO;
		return ddss_segtab_release_end(ctx->segtab, wire_get64(body));
	default:
		return -EOPNOTSUPP;
	}
	if (!r) {
		put_loc(out, &loc);
		*out_len = SEG_DESC_LEN;
	}
	return r;
}

/* Name requests; returns -EINPROGRESS when the answer comes later (queued). */
static int serve_names(struct ddss_ctx *ctx, uint32_t from, uint32_t id, uint16_t op,
		       const uint8_t *body, size_t len, uint8_t *out, size_t *out_len)
{
	struct ddss_name_waiter *w = NULL;
	size_t n = 0;
	uint64_t key;
	int r;

	switch (op) {
	case SEG_OP_NAME_ACQUIRE:
		if (len != 4 + DDSS_NAME_MAX || !name_ok(body + 4))
			return -EPROTO;
		r = ddss_names_acquire(ctx->names, (const char *)body + 4, wire_get32(body) != 0,
				       from, id, &key);
		if (r == 0) {
			wire_put64(out, key);
			*out_len = 8;
		}
		return r;
	case SEG_OP_NAME_BIND:
		if (len != 8 + DDSS_NAME_MAX || !name_ok(body + 8))
			return -EPROTO;
		key = wire_get64(body);
		r = ddss_names_bind(ctx->names, (const char *)body + 8, from, key, &w, &n);
		if (!r)
			answer_waiters(ctx, w, n, 0, key);
		return r;
	case SEG_OP_NAME_ABANDON:
		if (len != DDSS_NAME_MAX || !name_ok(body))
			return -EPROTO;
		r = ddss_names_abandon(ctx->names, (const char *)body, from, &w, &n);
		if (!r) /* the queued callers try again: one of them creates it */
			answer_waiters(ctx, w, n, -EAGAIN, 0);
		return r;
	case SEG_OP_NAME_UNBIND:
		if (len != 8 + DDSS_NAME_MAX || !name_ok(body + 8))
			return -EPROTO;
		ddss_names_unbind(ctx->names, (const char *)body + 8, wire_get64(body));
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

void ddss_seg_serve(void *arg, uint32_t from, uint32_t id, uint16_t op, const uint8_t *body,
		    size_t len)
{
	struct ddss_ctx *ctx = arg;
	uint8_t out[DDSS_RPC_BODY_MAX];
	size_t out_len = 0;
	int r;

	if (op == SEG_OP_INVALIDATE) {
		if (len != 8) {
			ddss_rpc_reply(ctx->rpc, from, id, -EPROTO, NULL, 0);
			return;
		}
		/* Answered by the cache once nothing in flight can use the segment. */
		ddss_coh_forget(ctx->coh, wire_get64(body));
		ddss_seg_cache_invalidate(ctx->cache, wire_get64(body), from, id);
		return;
	}
	if (op >= SEG_OP_NAME_ACQUIRE)
		r = serve_names(ctx, from, id, op, body, len, out, &out_len);
	else
		r = serve_home(ctx, from, op, body, len, out, &out_len);
	if (r == -EINPROGRESS)
		return;
	if (r == -EPROTO)
		DDSS_WARN("segment service: malformed request %u (%zu bytes) from rank %u", op, len,
			  from);
	ddss_rpc_reply(ctx->rpc, from, id, r, out, r < 0 ? 0 : out_len);
}
