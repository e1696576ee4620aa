/*
 * The etcd client's HTTP side: one bounded POST per call, to the endpoints in turn, or to
 * all of them once the first is slow, for a call that must not wait on one silent member
 * (etcd_post_hedged).
 */
#include "coord/etcd_int.h"
#include "core/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An answer larger than this is not one of ours (a range of a whole big group is ~1 MB). */
#define ETCD_REPLY_MAX (64u << 20)
#define ETCD_DEFAULT_TIMEOUT_MS 2000
/* A hedged call asks the other members too after this long without an answer: a healthy
 * etcd answers a renewal in milliseconds, an election or a frozen member takes seconds. */
#define ETCD_HEDGE_MS 200

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

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

/* One POST under way: its handle, headers and the answer as it arrives. */
struct etcd_call {
	CURL *c;
	struct curl_slist *hdr;
	struct reply_buf b;
	char url[512];
};

static int call_setup(struct ddss_etcd *etcd, struct etcd_call *call, const char *endpoint,
		      const char *path, const char *body)
{
	memset(call, 0, sizeof(*call));
	snprintf(call->url, sizeof(call->url), "%s%s", endpoint, path);
	call->c = curl_easy_init();
	call->hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (!call->c || !call->hdr) {
		curl_easy_cleanup(call->c);
		curl_slist_free_all(call->hdr);
		call->c = NULL;
		call->hdr = NULL;
		return -ENOMEM;
	}
	curl_easy_setopt(call->c, CURLOPT_URL, call->url);
	curl_easy_setopt(call->c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(call->c, CURLOPT_HTTPHEADER, call->hdr);
	curl_easy_setopt(call->c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(call->c, CURLOPT_WRITEDATA, &call->b);
	curl_easy_setopt(call->c, CURLOPT_TIMEOUT_MS, (long)etcd->timeout_ms);
	curl_easy_setopt(call->c, CURLOPT_CONNECTTIMEOUT_MS, (long)etcd->timeout_ms);
	curl_easy_setopt(call->c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
	curl_easy_setopt(call->c, CURLOPT_PROXY, ""); /* never a proxy from the environment */
	return 0;
}

/* The call's outcome once curl ended it with @cr: 0 with *resp_p, or -errno. Frees it. */
static int call_finish(struct etcd_call *call, CURLcode cr, json_object **resp_p)
{
	long status = 0, os_errno = 0;
	json_object *resp, *err;
	char *data = call->b.data;
	bool too_big = call->b.too_big;
	int r;

	curl_easy_getinfo(call->c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(call->c, CURLINFO_OS_ERRNO, &os_errno);
	curl_slist_free_all(call->hdr);
	curl_easy_cleanup(call->c);
	call->c = NULL;
	call->hdr = NULL;
	call->b.data = NULL; /* ours now: freed or parsed below */
	switch (cr) {
	case CURLE_OK:
		break;
	case CURLE_OPERATION_TIMEDOUT:
		free(data);
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		/* Refused: nothing listens there. Unreachable (a route or link is down): the
		 * member may be running all the same, as after a timeout (see the top). */
		free(data);
		return os_errno == ECONNREFUSED ? -ECONNREFUSED : -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
		/* A name that does not resolve, a connection reset mid-request (a member killed
		 * then, or a proxy in between): nothing says etcd has no leader. The next
		 * request finds out (a killed member refuses it). */
		free(data);
		return -ETIMEDOUT;
	default:
		free(data);
		return too_big ? -EMSGSIZE : -EPROTO;
	}
	resp = data ? json_tokener_parse(data) : NULL;
	free(data);
	if (!resp || !json_object_is_type(resp, json_type_object)) {
		json_object_put(resp);
		DDSS_WARN("etcd: %s answered HTTP %ld with no JSON object", call->url, status);
		return -EPROTO;
	}
	if (status != 200 || json_object_object_get_ex(resp, "error", &err)) {
		r = etcd_error(resp);
		DDSS_DBG("etcd: %s: HTTP %ld: %s", call->url, status,
			 json_object_to_json_string_ext(resp, JSON_C_TO_STRING_PLAIN));
		json_object_put(resp);
		return r;
	}
	*resp_p = resp;
	return 0;
}

/* One POST to one endpoint. */
static int post_one(struct ddss_etcd *etcd, const char *endpoint, const char *path,
		    const char *body, json_object **resp_p)
{
	struct etcd_call call;
	int r = call_setup(etcd, &call, endpoint, path, body);

	if (r)
		return r;
	return call_finish(&call, curl_easy_perform(call.c), resp_p);
}

/* An answer that another member might better: it is down, cut off, or has no leader. */
static bool try_another(int r)
{
	return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -EAGAIN;
}

/* No member answered: "none runs or none has a leader" only if none timed out. */
static int none_answered(int r, bool timed_out)
{
	return timed_out && (r == -ECONNREFUSED || r == -EAGAIN) ? -ETIMEDOUT : r;
}

int etcd_post_endpoint(struct ddss_etcd *etcd, const char *endpoint, const char *path,
		       json_object *req, json_object **resp_p)
{
	int r = post_one(etcd, endpoint, path,
			 json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), resp_p);

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

		r = post_one(etcd, etcd->endpoints[at], path, body, resp_p);
		if (!try_another(r)) {
			__atomic_store_n(&etcd->good, at, __ATOMIC_RELAXED);
			break;
		}
		timed_out |= r == -ETIMEDOUT;
	}
	json_object_put(req);
	return none_answered(r, timed_out);
}

/* Drop every call still under way (the first answer came, or setting one up failed). */
static void calls_drop(CURLM *multi, struct etcd_call *calls, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!calls[i].c)
			continue;
		curl_multi_remove_handle(multi, calls[i].c);
		curl_slist_free_all(calls[i].hdr);
		curl_easy_cleanup(calls[i].c);
		free(calls[i].b.data);
	}
}

/* Start endpoint @i's call of etcd_post_hedged. */
static int call_start(struct ddss_etcd *etcd, CURLM *multi, struct etcd_call *calls, size_t i,
		      const char *path, const char *body)
{
	int r = call_setup(etcd, &calls[i], etcd->endpoints[i], path, body);

	if (!r && curl_multi_add_handle(multi, calls[i].c) != CURLM_OK) {
		curl_slist_free_all(calls[i].hdr);
		curl_easy_cleanup(calls[i].c);
		calls[i].c = NULL;
		r = -ENOMEM;
	}
	return r;
}

int etcd_post_hedged(struct ddss_etcd *etcd, const char *path, json_object *req,
		     json_object **resp_p)
{
	const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	size_t first = __atomic_load_n(&etcd->good, __ATOMIC_RELAXED) % etcd->count;
	CURLM *multi = curl_multi_init();
	struct etcd_call *calls = calloc(etcd->count, sizeof(*calls));
	int64_t hedge_at = mono_ns() + (int64_t)ETCD_HEDGE_MS * 1000000;
	size_t left = 0;
	bool timed_out = false, answered = false, hedged = etcd->count == 1;
	int r = -ENOMEM, running;

	if (!multi || !calls)
		goto out;
	r = call_start(etcd, multi, calls, first, path, body);
	if (r)
		goto out;
	left = 1;
	r = -ECONNREFUSED;
	/* Every call has its own time bound (call_setup), so this loop ends. */
	while (left && !answered) {
		CURLMsg *msg;
		int queued;
		int64_t now;

		if (curl_multi_perform(multi, &running) != CURLM_OK) {
			r = -EPROTO;
			goto out;
		}
		while (!answered && (msg = curl_multi_info_read(multi, &queued))) {
			CURL *done = msg->easy_handle;
			CURLcode cr = msg->data.result; /* msg goes with the handle's removal */
			size_t i = 0;

			if (msg->msg != CURLMSG_DONE)
				continue;
			while (calls[i].c != done)
				i++;
			curl_multi_remove_handle(multi, done);
			r = call_finish(&calls[i], cr, resp_p);
			left--;
			timed_out |= r == -ETIMEDOUT;
			answered = !try_another(r);
			if (answered)
				__atomic_store_n(&etcd->good, (unsigned)i, __ATOMIC_RELAXED);
			else
				hedge_at = 0; /* that one failed: ask the others now */
		}
		now = mono_ns();
		if (!answered && !hedged && now >= hedge_at) {
			hedged = true;
			for (size_t i = 0; i < etcd->count; i++) {
				if (i == first)
					continue;
				if (call_start(etcd, multi, calls, i, path, body) == 0)
					left++;
				else /* not asked: it may have a leader, so never "all refused" */
					timed_out = true;
			}
			continue;
		}
		if (left && !answered &&
		    curl_multi_poll(multi, NULL, 0,
				    hedged ? 100 : (int)((hedge_at - now) / 1000000) + 1,
				    NULL) != CURLM_OK) {
			r = -EPROTO;
			goto out;
		}
	}
	if (!answered)
		r = none_answered(r, timed_out);
out:
	if (calls && multi)
		calls_drop(multi, calls, etcd->count);
	free(calls);
	if (multi)
		curl_multi_cleanup(multi);
	json_object_put(req);
	return r;
}
