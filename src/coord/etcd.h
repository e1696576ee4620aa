/*
 * A small etcd v3 client: the handful of calls group membership needs (leases, keep-alive,
 * range, put, compare-and-swap transactions, delete, watch), over etcd's documented JSON
 * gateway (POST /v3/...). HTTP is libcurl's and JSON is json-c's; keys and values travel
 * base64-encoded (libsodium's codec), as the gateway wants them.
 *
 * Every call is bounded in time (the client's request timeout) and returns 0 or -errno:
 *   -ECONNREFUSED                  every endpoint refused the connection (nothing runs
 *                                  there)
 *   -EAGAIN                        the last endpoint tried has no leader
 *   -ETIMEDOUT                     an endpoint took longer than the request timeout, or
 *                                  could not be reached (no route): it may be running
 *                                  and have a leader that goes on without us
 *   -EEXIST                        ddss_etcd_create: the key exists
 *   -ESTALE                        ddss_etcd_delete_if: the key is not at that revision
 *   -ENOENT                        a lease or key that does not exist (or expired)
 *   -EPROTO                        an answer this client cannot read
 * A handle may be used by several threads; each call takes its own connection.
 */
#ifndef DDSS_COORD_ETCD_H
#define DDSS_COORD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ddss_etcd;

/** One key of a range answer. Key and value are NUL-terminated copies (values may hold
 * bytes; len says how many). */
struct ddss_etcd_kv {
	char *key;
	char *value;
	size_t value_len;
	int64_t create_rev; /* the revision that created it: unique per creation */
	int64_t mod_rev;
	int64_t lease;
};

struct ddss_etcd_kvs {
	struct ddss_etcd_kv *kv;
	size_t count;
	int64_t revision; /* the store's revision the answer was read at */
};

/**
 * Open a client for @endpoints, "host:port[,host:port...]" (http). No request is made.
 * @timeout_ms bounds each request (0: 2000). -EINVAL on a malformed list.
 */
int ddss_etcd_open(const char *endpoints, int timeout_ms, struct ddss_etcd **etcd_p);
void ddss_etcd_close(struct ddss_etcd *etcd);

/** Grant a lease of @ttl_s seconds; its id in *id_p. */
int ddss_etcd_lease_grant(struct ddss_etcd *etcd, int ttl_s, int64_t *id_p);
/** Renew lease @id once; the TTL it now has in *ttl_p. -ENOENT if it has expired. */
int ddss_etcd_lease_keepalive(struct ddss_etcd *etcd, int64_t id, int *ttl_p);
/** Revoke lease @id: the keys attached to it go at once. */
int ddss_etcd_lease_revoke(struct ddss_etcd *etcd, int64_t id);

/** Read @key, or every key starting with it if @prefix. Free with ddss_etcd_kvs_free. */
int ddss_etcd_get(struct ddss_etcd *etcd, const char *key, bool prefix,
		  struct ddss_etcd_kvs *out_p);
void ddss_etcd_kvs_free(struct ddss_etcd_kvs *kvs);

/** Write @key (attached to lease @lease unless 0). The new revision in *rev_p if not NULL. */
int ddss_etcd_put(struct ddss_etcd *etcd, const char *key, const void *value, size_t len,
		  int64_t lease, int64_t *rev_p);
/** Create @key only if it does not exist (one transaction): -EEXIST if it does. Its
 * create revision in *rev_p. */
int ddss_etcd_create(struct ddss_etcd *etcd, const char *key, const void *value, size_t len,
		     int64_t lease, int64_t *rev_p);
/** The same, and in the same transaction (only if @key was created) write @key2 (no lease). */
int ddss_etcd_create_and_put(struct ddss_etcd *etcd, const char *key, const void *value,
			     size_t len, int64_t lease, const char *key2, const void *value2,
			     size_t len2, int64_t *rev_p);
/** Write @key only if @guard does not exist (one transaction): -EEXIST if it does. */
int ddss_etcd_put_unless(struct ddss_etcd *etcd, const char *key, const void *value,
			 size_t len, int64_t lease, const char *guard);
/** Delete @key only if its create revision is @create_rev: -ESTALE if not (or gone). */
int ddss_etcd_delete_if(struct ddss_etcd *etcd, const char *key, int64_t create_rev);
/** Delete @key (or every key under it if @prefix); absent keys are no error. */
int ddss_etcd_delete(struct ddss_etcd *etcd, const char *key, bool prefix);

enum ddss_etcd_event { DDSS_ETCD_PUT, DDSS_ETCD_DELETE };

/**
 * Called by the watch thread for each change, in revision order. For a delete, @kv has
 * the key and mod_rev (the deleting revision) only. Must not block for long.
 */
typedef void (*ddss_etcd_watch_fn)(void *arg, enum ddss_etcd_event ev, const struct ddss_etcd_kv *kv);
/** Called by the watch thread when the stream breaks (@err) or is back (0). */
typedef void (*ddss_etcd_watch_state_fn)(void *arg, int err);
/**
 * Called by the watch thread when etcd compacted the revisions it was to deliver (the
 * stream was down meanwhile): those changes are lost, so the consumer reads again what it
 * follows. Returns the store's revision it read at, from which the watch goes on, or
 * -errno (asked again after a pause).
 */
typedef int64_t (*ddss_etcd_watch_resync_fn)(void *arg);

struct ddss_etcd_watch;

/**
 * Watch every key under @prefix from revision @start_rev on, on a thread of its own. A
 * broken stream is opened again from the revision after the last one delivered, so no
 * change is missed or repeated. If etcd compacted that revision meanwhile, @state gets
 * -ERANGE and @resync is asked to read again; without @resync the watch ends there.
 */
int ddss_etcd_watch_start(struct ddss_etcd *etcd, const char *prefix, int64_t start_rev,
			  ddss_etcd_watch_fn fn, ddss_etcd_watch_state_fn state,
			  ddss_etcd_watch_resync_fn resync, void *arg,
			  struct ddss_etcd_watch **w_p);
/** Stop the watch thread and wait for it; no callback runs after it returns. */
void ddss_etcd_watch_stop(struct ddss_etcd_watch *w);

#endif /* DDSS_COORD_ETCD_H */
