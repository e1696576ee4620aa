/* Inside the etcd client: the HTTP call, the codecs, shared by etcd_kv.c and etcd_watch.c. */
#ifndef DDSS_COORD_ETCD_INT_H
#define DDSS_COORD_ETCD_INT_H

#include "coord/etcd.h"

#include <json-c/json.h>

struct ddss_etcd {
	char **endpoints;  /* "http://host:port" */
	size_t count;
	int timeout_ms;
	unsigned good;     /* atomic: the endpoint that answered last, tried first */
};

/**
 * POST @req (consumed) to @path on the first endpoint that answers, trying each in turn
 * from the last good one. On 0, *resp_p is the parsed answer (json_object_put it).
 */
int etcd_post(struct ddss_etcd *etcd, const char *path, json_object *req, json_object **resp_p);

/**
 * The same as a hedged request: to the last good endpoint first and, when it has not
 * answered within ETCD_HEDGE_MS (or failed), to every other one as well; the first answer
 * that is not "down, cut off or no leader" wins and the others are dropped. Only for calls
 * that may land twice (a lease renewal): a frozen member then costs ETCD_HEDGE_MS, where
 * etcd_post waits its timeout out before it tries the next.
 */
int etcd_post_hedged(struct ddss_etcd *etcd, const char *path, json_object *req,
		     json_object **resp_p);

/** The same to @endpoint ("http://host:port") alone. */
int etcd_post_endpoint(struct ddss_etcd *etcd, const char *endpoint, const char *path,
		       json_object *req, json_object **resp_p);

/** libcurl, once per process. */
int etcd_curl_init(void);

/** A gateway error answer ({"code": n, ...}, or {"error": {"grpc_code": n, ...}} from a
 * stream) as -errno; -EPROTO without a numeric code. */
int etcd_error(json_object *err);

/** base64 of @len bytes as a new json string. */
json_object *etcd_b64(const void *buf, size_t len);
/** Decode base64 @s into a malloc'd NUL-terminated buffer. */
int etcd_unb64(const char *s, char **out_p, size_t *len_p);
/** The int64 in @o's @field (the gateway writes them as strings); 0 if absent. */
int64_t etcd_i64(json_object *o, const char *field);
/** Fill @kv from a gateway "kv" object. */
int etcd_kv_parse(json_object *o, struct ddss_etcd_kv *kv);
void etcd_kv_free(struct ddss_etcd_kv *kv);
/** The end of the range of keys starting with @prefix, as base64 json. */
json_object *etcd_prefix_end(const char *prefix);

#endif /* DDSS_COORD_ETCD_INT_H */
