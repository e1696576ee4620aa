/*
 * Daemon mode: the public calls forwarded to the daemon (client_api.h). Arguments the
 * client can check alone are checked here (a NULL pointer cannot cross); everything else
 * the daemon checks, exactly as in direct mode, and its answer is returned as it is.
 */
#include "daemon/client_api.h"
#include "daemon/chan.h"
#include "daemon/local.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

int ddss_cl_barrier(struct ddss_client *cl)
{
	struct dmsg_req q = { .op = DOP_BARRIER };
	struct dmsg_resp a;

	return ddss_client_call(cl, &q, NULL, 0, NULL, &a);
}

/* Copy @name into the message: -ENAMETOOLONG as the direct call would say. */
static int put_name(struct dmsg_req *q, const char *name)
{
	if (!name)
		return 0;
	if (strnlen(name, DDSS_NAME_MAX) >= DDSS_NAME_MAX)
		return -ENAMETOOLONG;
	strcpy(q->name, name);
	q->named = 1;
	return 0;
}

int ddss_cl_allocate(struct ddss_client *cl, size_t nbytes, const struct ddss_seg_attr *attr,
		     ddss_key_t *key_p)
{
	struct dmsg_req q = { .op = DOP_ALLOC, .len = nbytes };
	struct dmsg_resp a;
	int r;

	if (!key_p)
		return -EINVAL;
	if (attr) {
		q.mode = attr->placement;
		q.rank = attr->rank;
		q.coherence = attr->coherence;
		q.delta = attr->delta;
		q.temporal_ms = attr->temporal_ms;
		r = put_name(&q, attr->name);
		if (r)
			return r;
	}
	r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);
	if (!r)
		*key_p = a.key;
	return r;
}

int ddss_cl_lookup(struct ddss_client *cl, const char *name, ddss_key_t *key_p)
{
	struct dmsg_req q = { .op = DOP_LOOKUP };
	struct dmsg_resp a;
	int r;

	if (!name || !key_p)
		return -EINVAL;
	r = put_name(&q, name);
	if (!r)
		r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);
	if (!r)
		*key_p = a.key;
	return r;
}

int ddss_cl_release(struct ddss_client *cl, ddss_key_t key)
{
	struct dmsg_req q = { .op = DOP_RELEASE, .key = key };
	struct dmsg_resp a;

	return ddss_client_call(cl, &q, NULL, 0, NULL, &a);
}

int ddss_cl_stat(struct ddss_client *cl, ddss_key_t key, struct ddss_seg_info *info_p)
{
	struct dmsg_req q = { .op = DOP_STAT, .key = key };
	struct dmsg_resp a;
	int r;

	if (!info_p)
		return -EINVAL;
	r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);
	if (!r)
		*info_p = (struct ddss_seg_info){ .home = a.home, .size = a.size,
						  .coherence = a.coherence, .param = a.param };
	return r;
}

/*
 * A call's payload crosses its channel's data area, at most DDSS_CHAN_DATA_MAX: a longer
 * call gets the range error direct mode would give (asked of the daemon), else -EMSGSIZE.
 * 0 when @len fits.
 */
static int too_long(struct ddss_client *cl, ddss_key_t key, size_t offset, size_t len)
{
	struct ddss_seg_info info;
	int r;

	if (len <= DDSS_CHAN_DATA_MAX)
		return 0;
	r = ddss_cl_stat(cl, key, &info);
	if (r)
		return r;
	return offset > info.size || len > info.size - offset ? -ERANGE : -EMSGSIZE;
}

int ddss_cl_get(struct ddss_client *cl, ddss_key_t key, size_t offset, void *buf, size_t len,
		unsigned back, uint64_t *version_p)
{
	struct dmsg_req q = { .op = DOP_GET, .key = key, .offset = offset, .len = len,
			      .back = back, .versioned = version_p != NULL };
	struct ddss_local *lv = ddss_client_local(cl);
	struct dmsg_resp a;
	uint64_t epoch = 0;
	int r;

	if (!buf || !len)
		return -EINVAL;
	r = too_long(cl, key, offset, len);
	if (r)
		return r;
	if (lv && back == 0) {
		/* A null segment of this node: straight from the pool (version 0, as always). */
		if (ddss_local_get(lv, key, offset, buf, len)) {
			if (version_p)
				*version_p = 0;
			return 0;
		}
		epoch = ddss_local_epoch(lv);
		q.want_desc = !ddss_local_known(lv, key);
	}
	r = ddss_client_call(cl, &q, NULL, 0, buf, &a);
	if (!r && version_p)
		*version_p = a.version;
	if (!r && q.want_desc && a.has_desc)
		ddss_local_learn(lv, key, epoch, a.data_off, a.size);
	return r;
}

int ddss_cl_put(struct ddss_client *cl, ddss_key_t key, size_t offset, const void *buf,
		size_t len)
{
	struct dmsg_req q = { .op = DOP_PUT, .key = key, .offset = offset, .len = len };
	struct dmsg_resp a;
	int r;

	if (!buf || !len)
		return -EINVAL;
	r = too_long(cl, key, offset, len);
	return r ? r : ddss_client_call(cl, &q, buf, len, NULL, &a);
}

int ddss_cl_lock(struct ddss_client *cl, ddss_key_t key, enum ddss_lock_mode mode,
		 uint32_t op, int timeout_ms)
{
	struct dmsg_req q = { .op = op, .key = key,
			      .mode = mode, .timeout_ms = timeout_ms };
	struct dmsg_resp a;

	return ddss_client_call(cl, &q, NULL, 0, NULL, &a);
}

int ddss_cl_unlock(struct ddss_client *cl, ddss_key_t key)
{
	struct dmsg_req q = { .op = DOP_UNLOCK, .key = key };
	struct dmsg_resp a;

	return ddss_client_call(cl, &q, NULL, 0, NULL, &a);
}

/* The hold is the daemon's, on this client's behalf: the daemon asks and answers. */
int ddss_cl_lock_fence(struct ddss_client *cl, ddss_key_t key, uint64_t *fence_p)
{
	struct dmsg_req q = { .op = DOP_LOCK_FENCE, .key = key };
	struct dmsg_resp a;
	int r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);

	if (!r)
		*fence_p = a.fence;
	return r;
}

int ddss_cl_bench(struct ddss_client *cl, uint32_t what, ddss_key_t key, uint32_t iters,
		  uint64_t *ns_median_p, uint64_t *ns_p99_p)
{
	struct dmsg_req q = { .op = DOP_BENCH, .mode = what, .key = key, .iters = iters };
	struct dmsg_resp a;
	int r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);

	if (!r) {
		*ns_median_p = a.ns_median;
		*ns_p99_p = a.ns_p99;
	}
	return r;
}

int ddss_cl_coh_stats(struct ddss_client *cl, uint64_t stats[5])
{
	struct dmsg_req q = { .op = DOP_COH_STATS };
	struct dmsg_resp a;
	int r = ddss_client_call(cl, &q, NULL, 0, NULL, &a);

	if (!r)
		memcpy(stats, a.stats, sizeof(a.stats));
	return r;
}

int ddss_cl_stats(struct ddss_client *cl, struct ddss_stats *st)
{
	struct dmsg_req q = { .op = DOP_STATS, .len = sizeof(*st) };
	struct dmsg_resp a;

	return ddss_client_call(cl, &q, NULL, 0, st, &a);
}

int ddss_daemon_stats_read(const char *socket_path, int timeout_ms, struct ddss_stats *out)
{
	struct ddss_client *cl;
	int r;

	if (!socket_path || !out)
		return -EINVAL;
	r = ddss_client_attach(socket_path, timeout_ms, &cl);
	if (r)
		return r;
	r = ddss_cl_stats(cl, out);
	ddss_client_detach(cl);
	return r;
}
