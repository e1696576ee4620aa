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

/* Lock, transfer, unlock: the transfer is still in flight when the release is posted. */
static int locked(struct coh_call *c, bool write)
{
	struct coh_pending p;
	bool taken;
	int r = coh_lock(c, &taken);

	if (r)
		return r;
	coh_pending_init(c, &p);
	return coh_unlock(c, taken, &p, coh_post_copy(c, &p, 0, write));
}

static int locked_get(struct coh_call *c)
{
	return locked(c, false);
}

static int locked_put(struct coh_call *c)
{
	return locked(c, true);
}

const struct coh_model coh_null = {
	.param_ok = coh_param_zero, .copies = 1, .plain = true,
	.get = plain_get, .put = plain_put,
};

const struct coh_model coh_strict = {
	.param_ok = coh_param_zero, .copies = 1,
	.get = locked_get, .put = locked_put,
};

const struct coh_model coh_read = {
	.param_ok = coh_param_zero, .copies = 1,
	.get = locked_get, .put = plain_put,
};
