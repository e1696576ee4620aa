/*
 * Daemon mode: each public call of a context attached to a daemon, forwarded to it
 * (client_api.c). Same arguments and results as the ddss_* call of the same name; the
 * daemon mode's table (client_ops.c, core/ops.h) calls them.
 */
#ifndef DDSS_DAEMON_CLIENT_API_H
#define DDSS_DAEMON_CLIENT_API_H

#include "daemon/client.h"

int ddss_cl_barrier(struct ddss_client *cl);
int ddss_cl_allocate(struct ddss_client *cl, size_t nbytes, const struct ddss_seg_attr *attr,
		     ddss_key_t *key_p);
int ddss_cl_lookup(struct ddss_client *cl, const char *name, ddss_key_t *key_p);
int ddss_cl_release(struct ddss_client *cl, ddss_key_t key);
int ddss_cl_stat(struct ddss_client *cl, ddss_key_t key, struct ddss_seg_info *info_p);
int ddss_cl_get(struct ddss_client *cl, ddss_key_t key, size_t offset, void *buf, size_t len,
		unsigned back, uint64_t *version_p);
int ddss_cl_put(struct ddss_client *cl, ddss_key_t key, size_t offset, const void *buf,
		size_t len);
/* @op: DOP_LOCK, DOP_LOCK_TIMED (with @timeout_ms) or DOP_TRY_LOCK. */
int ddss_cl_lock(struct ddss_client *cl, ddss_key_t key, enum ddss_lock_mode mode,
		 uint32_t op, int timeout_ms);
int ddss_cl_unlock(struct ddss_client *cl, ddss_key_t key);
int ddss_cl_lock_fence(struct ddss_client *cl, ddss_key_t key, uint64_t *fence_p);
/* The daemon's coherence counters (fetches, hits, retries, locked, cached). */
int ddss_cl_coh_stats(struct ddss_client *cl, uint64_t stats[5]);
/* The daemon's statistics: its clients' totals (DOP_STATS). */
int ddss_cl_stats(struct ddss_client *cl, struct ddss_stats *st);
/* The same from outside a group (ddss-info --daemon): attach to the ddssd at
 * @socket_path for the one call. -ENOENT / -ECONNREFUSED: no daemon there. */
int ddss_daemon_stats_read(const char *socket_path, int timeout_ms, struct ddss_stats *out);
/* The daemon times @iters of call @what (enum dbench_what) itself: ddss-daemon-bench. */
int ddss_cl_bench(struct ddss_client *cl, uint32_t what, ddss_key_t key, uint32_t iters,
		  uint64_t *ns_median_p, uint64_t *ns_p99_p);

#endif /* DDSS_DAEMON_CLIENT_API_H */
