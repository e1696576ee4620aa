/*
 * The etcd client's HTTP side: one bounded POST per call, to the endpoints in turn.
 */
#include "coord/etcd_int.h"
#include "core/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* An answer larger than this is not one of ours (a range of a whole big group is ~1 MB). */
#define ETCD_REPLY_MAX (64u << 20)
#define ETCD_DEFAULT_TIMEOUT_MS 2000

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_status;

static void curl_init_once(void)
{
	curl_status = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

int etcd_curl_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	return curl_status;
}

static void free_endpoints(struct ddss_etcd *etcd)
{
	for (size_t i = 0; i < etcd->count; i++)
		free(etcd->endpoints[i]);
	free(etcd->endpoints);
}

/* "host:port" with a non-empty host and a port of 1..65535 (IPv6 as [addr]:port). */
static bool endpoint_ok(const char *s, size_t len)
{
	const char *colon = NULL;
	unsigned long port = 0;

	for (size_t i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon || colon == s || colon + 1 == s + len || colon + 6 < s + len)
		return false;
	for (const char *p = colon + 1; p < s + len; p++) {
		if (*p < '0' || *p > '9')
			return false;
		port = port * 10 + (unsigned long)(*p - '0');
	}
	for (const char *p = s; p < colon; p++)
		if (*p == '/' || *p == ' ' || *p == '@')
			return false;
	return port >= 1 && port <= 65535;
}

int ddss_etcd_open(const char *endpoints, int timeout_ms, struct ddss_etcd **etcd_p)
{
	struct ddss_etcd *etcd;
	const char *p = endpoints;
	int r;

	if (!endpoints || !*endpoints || timeout_ms < 0)
		return -EINVAL;
	r = etcd_curl_init();
	if (r)
		return r;
	etcd = calloc(1, sizeof(*etcd));
	if (!etcd)
		return -ENOMEM;
	etcd->timeout_ms = timeout_ms ? timeout_ms : ETCD_DEFAULT_TIMEOUT_MS;
	while (*p) {
		size_t len = strcspn(p, ",");
		char **more;

		if (!endpoint_ok(p, len)) {
			DDSS_ERR("etcd: malformed endpoint '%.*s' (want host:port)", (int)len, p);
			r = -EINVAL;
			goto err;
		}
		more = realloc(etcd->endpoints, (etcd->count + 1) * sizeof(*more));
		if (!more) {
			r = -ENOMEM;
			goto err;
		}
		etcd->endpoints = more;
		etcd->endpoints[etcd->count] = malloc(len + 8);
		if (!etcd->endpoints[etcd->count]) {
			r = -ENOMEM;
			goto err;
		}
		memcpy(etcd->endpoints[etcd->count], "http://", 7);
		memcpy(etcd->endpoints[etcd->count] + 7, p, len);
		etcd->endpoints[etcd->count][len + 7] = 0;
		etcd->count++;
		p += len;
		if (*p == ',' && *++p == 0) {
			r = -EINVAL; /* a trailing comma */
			goto err;
		}
	}
	*etcd_p = etcd;
	return 0;
err:
	free_endpoints(etcd);
	free(etcd);
	return r;
}

void ddss_etcd_close(struct ddss_etcd *etcd)
{
	if (!etcd)
		return;
	free_endpoints(etcd);
	free(etcd);
}

struct reply_buf {
	char *data;
	size_t len, cap;
	bool too_big;
};

static size_t on_data(char *ptr, size_t size, size_t n, void *arg)
{
	struct reply_buf *b = arg;
	size_t add = size * n;

	if (b->len + add + 1 > ETCD_REPLY_MAX) {
		b->too_big = true;
		return 0;
	}
	if (b->len + add + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *d;

		while (cap < b->len + add + 1)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d)
			return 0;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, add);
	b->len += add;
	b->data[b->len] = 0;
	return add;
}

int etcd_error(json_object *err)
{
	json_object *code, *inner;

	/* Unary calls answer {"code": n, ...}; the streaming ones (lease keepalive, watch)
	 * {"error": {"grpc_code": n, ...}}. */
	if (json_object_object_get_ex(err, "error", &inner) &&
	    json_object_is_type(inner, json_type_object))
		err = inner;
	if (!json_object_object_get_ex(err, "code", &code) &&
	    !json_object_object_get_ex(err, "grpc_code", &code))
		return -EPROTO;
	if (!json_object_is_type(code, json_type_int))
		return -EPROTO;
	/* gRPC status codes, as the gateway passes them on. */
	switch (json_object_get_int(code)) {
	case 3: return -EINVAL;     /* INVALID_ARGUMENT */
	case 4: return -ETIMEDOUT;  /* DEADLINE_EXCEEDED */
	case 5: return -ENOENT;     /* NOT_FOUND (a lease) */
	case 8: return -ENOSPC;     /* RESOURCE_EXHAUSTED */
	case 9: return -ESTALE;     /* FAILED_PRECONDITION */
	case 11: return -ERANGE;    /* OUT_OF_RANGE (a compacted revision) */
	case 14: return -EAGAIN;    /* UNAVAILABLE: no leader, try another member */
	case 16: return -EACCES;    /* UNAUTHENTICATED */
	default: return -EPROTO;
	}
}

/* One POST to one endpoint. */
static int post_one(struct ddss_etcd *etcd, const char *url, const char *body,
		    json_object **resp_p)
{
	struct reply_buf b = { 0 };
	struct curl_slist *hdr = NULL;
	CURL *c = curl_easy_init();
	long status = 0, os_errno = 0;
	CURLcode cr;
	json_object *resp, *err;
	int r;

	if (!c)
		return -ENOMEM;
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)etcd->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)etcd->timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
	curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never a proxy from the environment */
	cr = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	switch (cr) {
	case CURLE_OK:
		break;
	case CURLE_OPERATION_TIMEDOUT:
		free(b.data);
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		/* Refused: nothing listens there. Unreachable (a route or link is down): the
		 * member may be running all the same, as after a timeout (see the top). */
		free(b.data);
		return os_errno == ECONNREFUSED ? -ECONNREFUSED : -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
		/* A name that does not resolve, a connection reset mid-request (a member killed
		 * then, or a proxy in between): nothing says etcd has no leader. The next
		 * request finds out (a killed member refuses it). */
		free(b.data);
		return -ETIMEDOUT;
	default:
		free(b.data);
		return b.too_big ? -EMSGSIZE : -EPROTO;
	}
	resp = b.data ? json_tokener_parse(b.data) : NULL;
	free(b.data);
	if (!resp || !json_object_is_type(resp, json_type_object)) {
		json_object_put(resp);
		DDSS_WARN("etcd: %s answered HTTP %ld with no JSON object", url, status);
		return -EPROTO;
	}
	if (status != 200 || json_object_object_get_ex(resp, "error", &err)) {
		r = etcd_error(resp);
		DDSS_DBG("etcd: %s: HTTP %ld: %s", url, status,
			 json_object_to_json_string_ext(resp, JSON_C_TO_STRING_PLAIN));
		json_object_put(resp);
		return r;
	}
	*resp_p = resp;
	return 0;
}

int etcd_post_endpoint(struct ddss_etcd *etcd, const char *endpoint, const char *path,
		       json_object *req, json_object **resp_p)
{
	char url[512];
	int r;

	snprintf(url, sizeof(url), "%s%s", endpoint, path);
	r = post_one(etcd, url, json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN),
		     resp_p);
	json_object_put(req);
	return r;
}

int etcd_post(struct ddss_etcd *etcd, const char *path, json_object *req, json_object **resp_p)
{
	const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	unsigned first = __atomic_load_n(&etcd->good, __ATOMIC_RELAXED);
	bool timed_out = false;
	int r = -ECONNREFUSED;

	for (size_t i = 0; i < etcd->count; i++) {
		unsigned at = (unsigned)((first + i) % etcd->count);
		char url[512];

		snprintf(url, sizeof(url), "%s%s", etcd->endpoints[at], path);
		r = post_one(etcd, url, body, resp_p);
		/* Another member may answer where this one cannot (down, cut off, no leader). */
		if (r != -ECONNREFUSED && r != -ETIMEDOUT && r != -EAGAIN) {
			__atomic_store_n(&etcd->good, at, __ATOMIC_RELAXED);
			break;
		}
		timed_out |= r == -ETIMEDOUT;
	}
	/* No member answered: "none runs or none has a leader" only if none timed out. */
	if (timed_out && (r == -ECONNREFUSED || r == -EAGAIN))
		r = -ETIMEDOUT;
	json_object_put(req);
	return r;
}
