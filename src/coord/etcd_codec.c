/*
 * The etcd client's codecs: base64 (libsodium), the gateway's int64-as-string fields, and
 * its "kv" objects.
 */
#include "coord/etcd_int.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

json_object *etcd_b64(const void *buf, size_t len)
{
	size_t n = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(n);
	json_object *o;

	if (!s)
		return NULL;
	sodium_bin2base64(s, n, buf, len, sodium_base64_VARIANT_ORIGINAL);
	o = json_object_new_string(s);
	free(s);
	return o;
}

int etcd_unb64(const char *s, char **out_p, size_t *len_p)
{
	size_t slen = strlen(s), len = 0;
	char *out = malloc(slen / 4 * 3 + 4);

	if (!out)
		return -ENOMEM;
	if (sodium_base642bin((unsigned char *)out, slen / 4 * 3 + 3, s, slen, NULL, &len, NULL,
			      sodium_base64_VARIANT_ORIGINAL)) {
		free(out);
		return -EPROTO;
	}
	out[len] = 0;
	*out_p = out;
	*len_p = len;
	return 0;
}

int64_t etcd_i64(json_object *o, const char *field)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, field, &v))
		return 0;
	if (json_object_is_type(v, json_type_string))
		return strtoll(json_object_get_string(v), NULL, 10);
	return json_object_get_int64(v);
}

int etcd_kv_parse(json_object *o, struct ddss_etcd_kv *kv)
{
	json_object *k, *v;
	size_t len;
	int r;

	memset(kv, 0, sizeof(*kv));
	if (!json_object_object_get_ex(o, "key", &k) || !json_object_is_type(k, json_type_string))
		return -EPROTO;
	r = etcd_unb64(json_object_get_string(k), &kv->key, &len);
	if (r)
		return r;
	/* An empty value is left out of the answer (proto3 defaults are). */
	if (json_object_object_get_ex(o, "value", &v) && json_object_is_type(v, json_type_string))
		r = etcd_unb64(json_object_get_string(v), &kv->value, &kv->value_len);
	else
		r = (kv->value = calloc(1, 1)) ? 0 : -ENOMEM;
	if (r) {
		etcd_kv_free(kv);
		return r;
	}
	kv->create_rev = etcd_i64(o, "create_revision");
	kv->mod_rev = etcd_i64(o, "mod_revision");
	kv->lease = etcd_i64(o, "lease");
	return 0;
}

void etcd_kv_free(struct ddss_etcd_kv *kv)
{
	free(kv->key);
	free(kv->value);
	kv->key = kv->value = NULL;
}

json_object *etcd_prefix_end(const char *prefix)
{
	size_t len = strlen(prefix);
	char *end = malloc(len + 1);
	json_object *o;

	if (!end || !len) {
		free(end);
		return NULL;
	}
	/* Our prefixes end in '/': the next byte value closes the range. */
	memcpy(end, prefix, len);
	end[len - 1]++;
	o = etcd_b64(end, len);
	free(end);
	return o;
}
