/*
 * The etcd client's calls: leases, range, put, transactions, delete (etcd_http.c posts).
 */
#include "coord/etcd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_object *new_i64(int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%lld", (long long)v);
	return json_object_new_string(s);
}

static json_object *key_obj(const char *key)
{
	return etcd_b64(key, strlen(key));
}

int ddss_etcd_lease_grant(struct ddss_etcd *etcd, int ttl_s, int64_t *id_p)
{
	json_object *req, *resp;
	int64_t id;
	int r;

	if (ttl_s < 1)
		return -EINVAL;
	req = json_object_new_object();
	json_object_object_add(req, "TTL", new_i64(ttl_s));
	r = etcd_post(etcd, "/v3/lease/grant", req, &resp);
	if (r)
		return r;
	id = etcd_i64(resp, "ID");
	json_object_put(resp);
	if (!id)
		return -EPROTO;
	*id_p = id;
	return 0;
}

int ddss_etcd_lease_keepalive(struct ddss_etcd *etcd, int64_t id, int *ttl_p)
{
	json_object *req = json_object_new_object(), *resp, *result;
	int64_t ttl;
	int r;

	json_object_object_add(req, "ID", new_i64(id));
	r = etcd_post_hedged(etcd, "/v3/lease/keepalive", req, &resp);
	if (r)
		return r;
	/* A stream of one answer: {"result": {"ID": .., "TTL": ..}}; no TTL: expired. */
	if (!json_object_object_get_ex(resp, "result", &result)) {
		json_object_put(resp);
		return -EPROTO;
	}
	ttl = etcd_i64(result, "TTL");
	json_object_put(resp);
	if (ttl <= 0)
		return -ENOENT;
	*ttl_p = (int)ttl;
	return 0;
}

int ddss_etcd_lease_revoke(struct ddss_etcd *etcd, int64_t id)
{
	json_object *req = json_object_new_object(), *resp;
	int r;

	json_object_object_add(req, "ID", new_i64(id));
	r = etcd_post(etcd, "/v3/lease/revoke", req, &resp);
	if (!r)
		json_object_put(resp);
	return r;
}

static int parse_kvs(json_object *range, struct ddss_etcd_kvs *out)
{
	json_object *kvs, *hdr;
	size_t n;

	memset(out, 0, sizeof(*out));
	if (json_object_object_get_ex(range, "header", &hdr))
		out->revision = etcd_i64(hdr, "revision");
	if (!json_object_object_get_ex(range, "kvs", &kvs))
		return 0; /* no key: the field is left out */
	if (!json_object_is_type(kvs, json_type_array))
		return -EPROTO;
	n = json_object_array_length(kvs);
	out->kv = calloc(n ? n : 1, sizeof(*out->kv));
	if (!out->kv)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int r = etcd_kv_parse(json_object_array_get_idx(kvs, i), &out->kv[i]);

		if (r) {
			ddss_etcd_kvs_free(out);
			return r;
		}
		out->count++;
	}
	return 0;
}

int ddss_etcd_get(struct ddss_etcd *etcd, const char *key, bool prefix,
		  struct ddss_etcd_kvs *out_p)
{
	json_object *req = json_object_new_object(), *resp;
	struct ddss_etcd_kvs out;
	int r;

	json_object_object_add(req, "key", key_obj(key));
	if (prefix)
		json_object_object_add(req, "range_end", etcd_prefix_end(key));
	r = etcd_post(etcd, "/v3/kv/range", req, &resp);
	if (r)
		return r;
	r = parse_kvs(resp, &out);
	json_object_put(resp);
	if (!r)
		*out_p = out;
	return r;
}

void ddss_etcd_kvs_free(struct ddss_etcd_kvs *kvs)
{
	for (size_t i = 0; i < kvs->count; i++)
		etcd_kv_free(&kvs->kv[i]);
	free(kvs->kv);
	memset(kvs, 0, sizeof(*kvs));
}

static json_object *put_obj(const char *key, const void *value, size_t len, int64_t lease)
{
	json_object *put = json_object_new_object();

	json_object_object_add(put, "key", key_obj(key));
	json_object_object_add(put, "value", etcd_b64(value, len));
	if (lease)
		json_object_object_add(put, "lease", new_i64(lease));
	return put;
}

int ddss_etcd_put(struct ddss_etcd *etcd, const char *key, const void *value, size_t len,
		  int64_t lease, int64_t *rev_p)
{
	json_object *resp, *hdr;
	int r;

	r = etcd_post(etcd, "/v3/kv/put", put_obj(key, value, len, lease), &resp);
	if (r)
		return r;
	if (rev_p)
		*rev_p = json_object_object_get_ex(resp, "header", &hdr) ?
				 etcd_i64(hdr, "revision") : 0;
	json_object_put(resp);
	return 0;
}

/* One compare on @key's create revision, for a transaction. */
static json_object *compare_create(const char *key, int64_t create_rev)
{
	json_object *cmp = json_object_new_object(), *list = json_object_new_array();

	json_object_object_add(cmp, "key", key_obj(key));
	json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
	json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
	json_object_object_add(cmp, "create_revision", new_i64(create_rev));
	json_object_array_add(list, cmp);
	return list;
}

static json_object *one_op(const char *kind, json_object *op)
{
	json_object *o = json_object_new_object(), *list = json_object_new_array();

	json_object_object_add(o, kind, op);
	json_object_array_add(list, o);
	return list;
}

/* Post a transaction; whether it succeeded in *ok_p, its revision in *rev_p. */
static int txn(struct ddss_etcd *etcd, json_object *req, bool *ok_p, int64_t *rev_p)
{
	json_object *resp, *ok, *hdr;
	int r = etcd_post(etcd, "/v3/kv/txn", req, &resp);

	if (r)
		return r;
	/* "succeeded": false is left out of the answer. */
	*ok_p = json_object_object_get_ex(resp, "succeeded", &ok) && json_object_get_boolean(ok);
	*rev_p = json_object_object_get_ex(resp, "header", &hdr) ? etcd_i64(hdr, "revision") : 0;
	json_object_put(resp);
	return 0;
}

int ddss_etcd_create(struct ddss_etcd *etcd, const char *key, const void *value, size_t len,
		     int64_t lease, int64_t *rev_p)
{
	return ddss_etcd_create_and_put(etcd, key, value, len, lease, NULL, NULL, 0, rev_p);
}

int ddss_etcd_create_and_put(struct ddss_etcd *etcd, const char *key, const void *value,
			     size_t len, int64_t lease, const char *key2, const void *value2,
			     size_t len2, int64_t *rev_p)
{
	json_object *req = json_object_new_object(), *ops;
	int64_t rev;
	bool ok;
	int r;

	json_object_object_add(req, "compare", compare_create(key, 0));
	ops = one_op("request_put", put_obj(key, value, len, lease));
	if (key2) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "request_put", put_obj(key2, value2, len2, 0));
		json_object_array_add(ops, o);
	}
	json_object_object_add(req, "success", ops);
	r = txn(etcd, req, &ok, &rev);
	if (r)
		return r;
	if (!ok)
		return -EEXIST;
	if (rev_p)
		*rev_p = rev; /* the transaction's revision is the key's create revision */
	return 0;
}

int ddss_etcd_put_unless(struct ddss_etcd *etcd, const char *key, const void *value,
			 size_t len, int64_t lease, const char *guard)
{
	json_object *req = json_object_new_object();
	int64_t rev;
	bool ok;
	int r;

	json_object_object_add(req, "compare", compare_create(guard, 0));
	json_object_object_add(req, "success", one_op("request_put",
						       put_obj(key, value, len, lease)));
	r = txn(etcd, req, &ok, &rev);
	if (r)
		return r;
	return ok ? 0 : -EEXIST;
}

int ddss_etcd_delete_if(struct ddss_etcd *etcd, const char *key, int64_t create_rev)
{
	json_object *req, *del;
	int64_t rev;
	bool ok;
	int r;

	if (create_rev <= 0)
		return -EINVAL;
	req = json_object_new_object();
	del = json_object_new_object();
	json_object_object_add(del, "key", key_obj(key));
	json_object_object_add(req, "compare", compare_create(key, create_rev));
	json_object_object_add(req, "success", one_op("request_delete_range", del));
	r = txn(etcd, req, &ok, &rev);
	if (r)
		return r;
	return ok ? 0 : -ESTALE;
}

int ddss_etcd_delete(struct ddss_etcd *etcd, const char *key, bool prefix)
{
	json_object *req = json_object_new_object(), *resp;
	int r;

	json_object_object_add(req, "key", key_obj(key));
	if (prefix)
		json_object_object_add(req, "range_end", etcd_prefix_end(key));
	r = etcd_post(etcd, "/v3/kv/deleterange", req, &resp);
	if (!r)
		json_object_put(resp);
	return r;
}
