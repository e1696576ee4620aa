/*
 * The etcd client's watch: one streaming POST /v3/watch on a thread of its own. The
 * gateway writes one JSON answer per line; each event goes to the callback in revision
 * order, and a broken stream is opened again from the revision after the last delivered.
 */
#include "coord/etcd_int.h"
#include "core/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_LINE_MAX (16u << 20)
#define WATCH_RETRY_MS 250
#define WATCH_PROBE_MS 3000 /* how long a silent stream's member may go unasked */

struct ddss_etcd_watch {
	struct ddss_etcd *etcd;
	char *prefix;
	int64_t next_rev; /* watch thread: the first revision not yet delivered */
	ddss_etcd_watch_fn fn;
	ddss_etcd_watch_state_fn state;
	ddss_etcd_watch_resync_fn resync;
	void *arg;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;        /* atomic; also under mu for the retry wait */
	bool up;          /* watch thread: the stream said "created" */
	int stream_err;   /* watch thread: why the stream ended (a canceled watch) */
	const char *endpoint;  /* watch thread: the member the stream comes from */
	int64_t next_probe_ms; /* watch thread: 3 s after its last byte (monotonic) */
	char *line;       /* watch thread: the partial line so far */
	size_t line_len, line_cap;
};

static json_object *new_i64(int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%lld", (long long)v);
	return json_object_new_string(s);
}

static void deliver(struct ddss_etcd_watch *w, json_object *result)
{
	json_object *events, *created, *canceled;
	int64_t from;

	if (json_object_object_get_ex(result, "created", &created) &&
	    json_object_get_boolean(created) && !w->up) {
		w->up = true;
		if (w->state)
			w->state(w->arg, 0);
	}
	if (json_object_object_get_ex(result, "canceled", &canceled) &&
	    json_object_get_boolean(canceled)) {
		/* Compacted past next_rev: changes are lost to us, the caller must read again. */
		w->stream_err = etcd_i64(result, "compact_revision") ? -ERANGE : -EPROTO;
		return;
	}
	if (!json_object_object_get_ex(result, "events", &events) ||
	    !json_object_is_type(events, json_type_array))
		return;
	/*
	 * One revision can change many keys (a transaction; a lease's expiry deletes all its
	 * keys at once), and etcd sends them in one response: each event is judged against
	 * where the stream stood before this response, never one twice after a reopen, and
	 * none of a revision's later keys dropped for its first.
	 */
	from = w->next_rev;
	for (size_t i = 0; i < json_object_array_length(events); i++) {
		json_object *ev = json_object_array_get_idx(events, i), *type, *kvo;
		struct ddss_etcd_kv kv;
		const char *t = json_object_object_get_ex(ev, "type", &type) ?
					json_object_get_string(type) : NULL;
		bool del = t && !strcmp(t, "DELETE"); /* "type": null has no string */

		if (!json_object_object_get_ex(ev, "kv", &kvo) || etcd_kv_parse(kvo, &kv))
			continue;
		if (kv.mod_rev >= from) {
			w->fn(w->arg, del ? DDSS_ETCD_DELETE : DDSS_ETCD_PUT, &kv);
			if (kv.mod_rev >= w->next_rev)
				w->next_rev = kv.mod_rev + 1;
		}
		etcd_kv_free(&kv);
	}
}

static int64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void take_line(struct ddss_etcd_watch *w, const char *line)
{
	json_object *o = json_tokener_parse(line), *result;

	if (!o) {
		DDSS_WARN("etcd watch: unreadable answer dropped");
		return;
	}
	if (json_object_object_get_ex(o, "result", &result))
		deliver(w, result);
	else if (json_object_object_get_ex(o, "error", &result))
		w->stream_err = etcd_error(result);
	json_object_put(o);
}

static size_t on_stream(char *ptr, size_t size, size_t n, void *arg)
{
	struct ddss_etcd_watch *w = arg;
	size_t len = size * n;

	/* Bytes from the member are news from its quorum: no probe while they come. */
	w->next_probe_ms = mono_ms() + WATCH_PROBE_MS;
	for (size_t i = 0; i < len; i++) {
		if (ptr[i] == '\n') {
			if (w->line_len) {
				w->line[w->line_len] = 0;
				take_line(w, w->line);
			}
			w->line_len = 0;
			/* A canceled watch (compacted) or an error: the gateway keeps the
			 * stream open, with nothing more to come on it. */
			if (w->stream_err)
				return 0;
			continue;
		}
		if (w->line_len + 2 > w->line_cap) {
			size_t cap = w->line_cap ? w->line_cap * 2 : 4096;
			char *l;

			if (cap > WATCH_LINE_MAX || !(l = realloc(w->line, cap)))
				return 0; /* ends the transfer: the stream is opened again */
			w->line = l;
			w->line_cap = cap;
		}
		w->line[w->line_len++] = ptr[i];
	}
	return len;
}

/*
 * Whether the stream's member answers a read that needs its quorum. An idle stream says
 * nothing either way: a frozen member keeps it open for good (the kernel answers TCP's
 * keepalives), and one cut off from the others has nothing to send on it.
 */
static bool member_answers(struct ddss_etcd_watch *w)
{
	json_object *req = json_object_new_object(), *resp = NULL;
	int r;

	json_object_object_add(req, "key", etcd_b64(w->prefix, strlen(w->prefix)));
	json_object_object_add(req, "count_only", json_object_new_boolean(1));
	r = etcd_post_endpoint(w->etcd, w->endpoint, "/v3/kv/range", req, &resp);
	json_object_put(resp);
	return r == 0;
}

/* libcurl calls this about once a second on an idle stream: 1 ends the stream. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct ddss_etcd_watch *w = arg;

	(void)dt, (void)dn, (void)ut, (void)un;
	if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
		return 1;
	if (mono_ms() < w->next_probe_ms)
		return 0;
	if (!member_answers(w)) {
		DDSS_WARN("etcd watch on %s: %s does not answer; following from another member",
			  w->prefix, w->endpoint);
		return 1;
	}
	w->next_probe_ms = mono_ms() + WATCH_PROBE_MS;
	return 0;
}

/* One stream, from w->next_rev, until it breaks or we stop. */
static int stream_once(struct ddss_etcd_watch *w, const char *endpoint)
{
	json_object *req = json_object_new_object(), *create = json_object_new_object();
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	char url[512];
	CURL *c = curl_easy_init();
	CURLcode cr;
	int r;

	json_object_object_add(create, "key", etcd_b64(w->prefix, strlen(w->prefix)));
	json_object_object_add(create, "range_end", etcd_prefix_end(w->prefix));
	json_object_object_add(create, "start_revision", new_i64(w->next_rev));
	json_object_object_add(req, "create_request", create);
	snprintf(url, sizeof(url), "%s/v3/watch", endpoint);
	if (!c) {
		json_object_put(req);
		curl_slist_free_all(hdr);
		return -ENOMEM;
	}
	w->up = false;
	w->stream_err = 0;
	w->line_len = 0;
	w->endpoint = endpoint;
	w->next_probe_ms = mono_ms() + WATCH_PROBE_MS;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS,
			 json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)w->etcd->timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	/* An idle stream is normal; a member that vanished without a FIN is found by TCP. */
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 2L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 1L);
	cr = curl_easy_perform(c);
	curl_easy_cleanup(c);
	curl_slist_free_all(hdr);
	json_object_put(req);
	if (w->stream_err)
		r = w->stream_err;
	else if (cr == CURLE_COULDNT_CONNECT || cr == CURLE_OPERATION_TIMEDOUT)
		r = -ECONNREFUSED;
	else
		r = -ECONNRESET; /* the stream ended: etcd went away, or we stopped */
	return r;
}

static void *watch_main(void *arg)
{
	struct ddss_etcd_watch *w = arg;
	unsigned at = 0;

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		int r = stream_once(w, w->etcd->endpoints[at % w->etcd->count]);
		struct timespec ts;

		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
			break;
		if ((w->up || r == -ERANGE) && w->state) /* it was up: say it broke */
			w->state(w->arg, r);
		if (r == -ERANGE) {
			int64_t rev = w->resync ? w->resync(w->arg) : -EOPNOTSUPP;

			DDSS_WARN("etcd watch on %s: revision %lld was compacted; %s",
				  w->prefix, (long long)w->next_rev,
				  rev >= 0 ? "read again" : rev == -EOPNOTSUPP ? "the watch ends" :
				  "reading again failed, trying again");
			if (rev == -EOPNOTSUPP)
				break;
			if (rev >= 0) {
				w->next_rev = rev + 1;
				continue;
			}
		}
		at++; /* another member next time */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += WATCH_RETRY_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&w->mu);
		while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
			;
		pthread_mutex_unlock(&w->mu);
	}
	return NULL;
}

int ddss_etcd_watch_start(struct ddss_etcd *etcd, const char *prefix, int64_t start_rev,
			  ddss_etcd_watch_fn fn, ddss_etcd_watch_state_fn state,
			  ddss_etcd_watch_resync_fn resync, void *arg,
			  struct ddss_etcd_watch **w_p)
{
	struct ddss_etcd_watch *w;
	pthread_condattr_t ca;
	int r;

	if (!prefix || !*prefix || prefix[strlen(prefix) - 1] != '/' || !fn || start_rev < 0)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w || !(w->prefix = strdup(prefix))) {
		free(w);
		return -ENOMEM;
	}
	w->etcd = etcd;
	w->next_rev = start_rev;
	w->fn = fn;
	w->state = state;
	w->resync = resync;
	w->arg = arg;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	r = pthread_create(&w->thread, NULL, watch_main, w);
	if (r) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		free(w->prefix);
		free(w);
		return -r;
	}
	*w_p = w;
	return 0;
}

void ddss_etcd_watch_stop(struct ddss_etcd_watch *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->line);
	free(w->prefix);
	free(w);
}
