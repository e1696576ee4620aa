/*
 * ddss_init and ddss_finalize: the mode is chosen here, once, and the context gets that
 * mode's table of calls (core/ops.h).
 */
#include "core/ctx.h"
#include "core/log.h"
#include "core/ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The mode @attr asks for, overridden by DDSS_MODE. */
static int choose_mode(const struct ddss_attr *attr, enum ddss_mode *mode_p)
{
	const char *s = getenv("DDSS_MODE");

	if (attr->mode > DDSS_MODE_DAEMON)
		return -EINVAL;
	*mode_p = attr->mode ? attr->mode : DDSS_MODE_DIRECT;
	if (s && *s) {
		if (!strcmp(s, "direct"))
			*mode_p = DDSS_MODE_DIRECT;
		else if (!strcmp(s, "daemon"))
			*mode_p = DDSS_MODE_DAEMON;
		else {
			DDSS_ERR("DDSS_MODE=%s: expected direct or daemon", s);
			return -EINVAL;
		}
	}
	return 0;
}

int ddss_init(const struct ddss_attr *attr, ddss_ctx_t **ctx_p)
{
	static const struct ddss_attr dflt = { 0 };
	enum ddss_mode mode;
	int r;

	if (!ctx_p)
		return -EINVAL;
	if (!attr)
		attr = &dflt;
	r = choose_mode(attr, &mode);
	if (r)
		return r;
	if (mode == DDSS_MODE_DAEMON) {
		/* The daemon has its own settings; the caller's are still checked. */
		r = ddss_ctx_check_attr(attr);
		return r ? r : ddss_daemon_open(attr, ctx_p);
	}
	return ddss_ctx_open(attr, ctx_p);
}

int ddss_finalize(ddss_ctx_t *ctx)
{
	if (!ctx)
		return -EINVAL;
	return ctx->ops->finalize(ctx);
}

uint32_t ddss_rank(const ddss_ctx_t *ctx)
{
	return ctx ? ctx->rank : 0;
}

uint32_t ddss_size(const ddss_ctx_t *ctx)
{
	return ctx ? ctx->size : 0;
}
