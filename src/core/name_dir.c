/* The name directory: static (a directory rank) or coordinator mode (etcd). name_dir.h. */
#include "core/name_dir.h"

#include "alloc/names.h"
#include "coord/member.h"
#include "core/ctx.h"
#include "core/key.h"
#include "core/proto.h"
#include "core/wire.h"

#include <errno.h>
#include <string.h>

/* Only the calls that define a code may be answered with one. */
static int no_code_status(int r)
{
	return r > 0 ? -EPROTO : r;
}

uint32_t ddss_name_dir_rank(struct ddss_ctx *ctx, const char *name)
{
	return ddss_net_member(ctx->net) ? 0 : ddss_name_home(name, ctx->size);
}

static int rank_acquire(struct ddss_ctx *ctx, const char *name, bool create, uint64_t *key_p)
{
	uint8_t body[4 + DDSS_NAME_MAX] = { 0 }, reply[8];
	size_t got = 0;
	int r;

	wire_put32(body, create);
	strcpy((char *)body + 4, name);
	r = ddss_rpc_call(ctx->rpc, ddss_name_home(name, ctx->size), SEG_OP_NAME_ACQUIRE, body,
			  sizeof(body), reply, sizeof(reply), &got, ctx->connect_timeout_ms);
	if (r > 0 && r != SEG_NAME_CREATE)
		return -EPROTO;
	if (r == 0) {
		if (got != 8)
			return -EPROTO;
		*key_p = wire_get64(reply);
	}
	return r;
}

int ddss_name_dir_acquire(struct ddss_ctx *ctx, const char *name, bool create, uint64_t *key_p)
{
	struct ddss_member *m = ddss_net_member(ctx->net);
	int64_t deadline = ddss_now_ns() + (int64_t)ctx->connect_timeout_ms * 1000000;
	uint64_t key = 0;
	int r;

	/* -EAGAIN: another creator gave up, or is still at work (etcd): ask again. */
	do
		r = m ? ddss_member_name_acquire(m, name, create, &key) :
			rank_acquire(ctx, name, create, &key);
	while (r == -EAGAIN && ddss_now_ns() < deadline);
	if (r == DDSS_MEMBER_NAME_CREATE)
		r = SEG_NAME_CREATE;
	if (r == 0) {
		struct ddss_key_parts k;

		if (ddss_key_parse(key, &k) || k.rank > ctx->size)
			return -EPROTO; /* the directory's answer goes to the user: check it */
		*key_p = key;
	}
	return r;
}

static int rank_send(struct ddss_ctx *ctx, uint16_t op, const char *name, const uint64_t *key)
{
	uint8_t body[8 + DDSS_NAME_MAX] = { 0 };
	size_t at = key ? 8 : 0;

	if (key)
		wire_put64(body, *key);
	strcpy((char *)body + at, name);
	return no_code_status(ddss_rpc_call(ctx->rpc, ddss_name_home(name, ctx->size), op, body,
				     at + DDSS_NAME_MAX, NULL, 0, NULL, -1));
}

int ddss_name_dir_bind(struct ddss_ctx *ctx, const char *name, uint64_t key)
{
	struct ddss_member *m = ddss_net_member(ctx->net);
	struct ddss_key_parts k;

	if (!m)
		return rank_send(ctx, SEG_OP_NAME_BIND, name, &key);
	if (ddss_key_parse(key, &k))
		return -EINVAL;
	return ddss_member_name_bind(m, name, key, k.rank);
}

int ddss_name_dir_abandon(struct ddss_ctx *ctx, const char *name)
{
	struct ddss_member *m = ddss_net_member(ctx->net);

	return m ? ddss_member_name_abandon(m, name) :
		   rank_send(ctx, SEG_OP_NAME_ABANDON, name, NULL);
}

int ddss_name_dir_unbind(struct ddss_ctx *ctx, const char *name, uint64_t key)
{
	struct ddss_member *m = ddss_net_member(ctx->net);

	return m ? ddss_member_name_unbind(m, name, key) :
		   rank_send(ctx, SEG_OP_NAME_UNBIND, name, &key);
}
