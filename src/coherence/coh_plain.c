/*
 * The models whose get and put are plain transfers: null (no lock), strict (both under the
 * exclusive lock) and read (gets under the exclusive lock, so readers are serialised;
 * puts take none).
 */
#include "coherence/model.h"

static int plain_get(struct coh_call *c)
{
	return coh_read_copy(c, 0);
}

static int plain_put(struct coh_call *c)
{
	return coh_write_copy(c, 0);
}

static int locked(struct coh_call *c, int (*transfer)(struct coh_call *c))
{
	bool taken;
	int r = coh_lock(c, &taken);

	if (r)
		return r;
	return coh_unlock(c, taken, transfer(c));
}

static int locked_get(struct coh_call *c)
{
	return locked(c, plain_get);
}

static int locked_put(struct coh_call *c)
{
	return locked(c, plain_put);
}

const struct coh_model coh_null = {
	.name = "null", .param_ok = coh_param_zero, .copies = 1, .plain = true,
	.get = plain_get, .put = plain_put,
};

const struct coh_model coh_strict = {
	.name = "strict", .param_ok = coh_param_zero, .copies = 1,
	.get = locked_get, .put = locked_put,
};

const struct coh_model coh_read = {
	.name = "read", .param_ok = coh_param_zero, .copies = 1,
	.get = locked_get, .put = plain_put,
};
