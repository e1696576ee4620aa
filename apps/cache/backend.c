/*
 * ddss-cache: the back-end. It owns the documents: one version-coherence segment each,
 * homed on its own rank, and a copy of each that its TCP server answers from. An updater
 * thread rewrites a document now and then (popular documents more often, same zipf as the
 * requests): the DDSS put (which bumps the segment's version), then the TCP copy, then the
 * finished version in the null segment CACHE_SEG_DONE, which the front-ends read to check
 * that nothing they serve is older. Compute threads burn the back-end's CPU meanwhile.
 */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_COMPUTE 256

struct backend {
	ddss_ctx_t *ctx;
	const struct cache_opts *o;
	uint32_t nfront;
	ddss_key_t *doc_key; /* 0: not allocated */
	ddss_key_t done_key, ctl_key, results_key;
	struct tcp_doc *docs;
	struct tcp_server *srv;
	struct zipf pop;
	uint64_t rng;
	char *scratch;          /* the updater's next payload */
	pthread_t updater, burners[MAX_COMPUTE];
	unsigned nburners;
	bool updater_running;
	atomic_bool stop_update, stop_compute;
	uint64_t updates;       /* made by the updater during the current point */
	int update_err;
};

/* The TCP server's and the updater's lock on one document's copy (one back-end per
 * process, so the callbacks find it here). */
static pthread_mutex_t *doc_mu;

static void doc_lock(unsigned d)
{
	pthread_mutex_lock(&doc_mu[d]);
}

static void doc_unlock(unsigned d)
{
	pthread_mutex_unlock(&doc_mu[d]);
}

static int failed(const char *what, int r)
{
	fprintf(stderr, "ddss-cache: back-end: %s: %s\n", what, ddss_strerror(r));
	return r;
}

/* The host part of this rank's DDSS_NODES entry ("host:port" or "[v6]:port"), if any. */
static int own_host(uint32_t rank, char *host, size_t n)
{
	const char *nodes = getenv("DDSS_NODES"), *p, *end, *colon;
	size_t len;

	if (!nodes)
		return -1;
	p = nodes;
	for (uint32_t i = 1; i < rank && p; i++) {
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}
	if (!p || !*p)
		return -1;
	end = strchr(p, ',');
	if (!end)
		end = p + strlen(p);
	if (*p == '[') {
		colon = memchr(p, ']', (size_t)(end - p));
		p++;
	} else {
		colon = NULL;
		for (const char *q = p; q < end; q++)
			if (*q == ':')
				colon = q;
	}
	if (!colon || colon <= p || (size_t)(colon - p) >= n)
		return -1;
	len = (size_t)(colon - p);
	memcpy(host, p, len);
	host[len] = '\0';
	return 0;
}

static int alloc_local(ddss_ctx_t *ctx, const char *name, size_t size, enum ddss_coherence m,
		       ddss_key_t *key_p)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_LOCAL, .name = name, .coherence = m };
	int r = ddss_allocate_ss(ctx, size, &sa, key_p);

	if (r)
		fprintf(stderr, "ddss-cache: back-end: allocate %s (%zu B): %s\n", name, size,
			ddss_strerror(r));
	return r;
}

/* Documents at version 1: the DDSS segment (its first put), the TCP copy, done[d] = 1. */
static int create_docs(struct backend *be)
{
	const struct cache_opts *o = be->o;
	uint64_t *done = calloc(o->docs, sizeof(uint64_t));
	char name[DDSS_NAME_MAX];
	int r = done ? 0 : -ENOMEM;

	for (unsigned d = 0; !r && d < o->docs; d++) {
		uint64_t v;

		snprintf(name, sizeof(name), CACHE_SEG_DOC, d);
		r = alloc_local(be->ctx, name, o->size, DDSS_COHERENCE_VERSION, &be->doc_key[d]);
		if (r)
			break;
		be->docs[d].data = malloc(o->size);
		if (!be->docs[d].data) {
			r = -ENOMEM;
			break;
		}
		doc_fill(be->docs[d].data, o->size, d, 1);
		be->docs[d].version = 1;
		r = ddss_put(be->ctx, be->doc_key[d], 0, be->docs[d].data, o->size);
		if (r) {
			failed("first put of a document", r);
			break;
		}
		/* The library's version must be the number of puts: the front-ends rely on it. */
		r = ddss_get_versioned(be->ctx, be->doc_key[d], 0, be->scratch, o->size, 0, &v);
		if (r) {
			failed("get of a new document", r);
			break;
		}
		if (v != 1 || memcmp(be->scratch, be->docs[d].data, o->size)) {
			fprintf(stderr, "ddss-cache: back-end: document %u reads back as version "
				"%llu (want 1)%s\n", d, (unsigned long long)v,
				memcmp(be->scratch, be->docs[d].data, o->size) ? ", wrong data" : "");
			r = -EPROTO;
		}
		done[d] = 1;
	}
	if (!r)
		r = alloc_local(be->ctx, CACHE_SEG_DONE, o->docs * sizeof(uint64_t),
				DDSS_COHERENCE_NULL, &be->done_key);
	if (!r) {
		r = ddss_put(be->ctx, be->done_key, 0, done, o->docs * sizeof(uint64_t));
		if (r)
			failed("put the finished versions", r);
	}
	free(done);
	return r;
}

int backend_setup(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t nfront,
		  struct backend **be_p)
{
	struct backend *be = calloc(1, sizeof(*be));
	struct cache_ctl ctl = { .nfront = nfront };
	char host[CACHE_HOST_MAX];
	const char *bind_host = NULL;
	uint16_t port;
	int r;

	if (!be)
		return -ENOMEM;
	be->ctx = ctx;
	be->o = o;
	be->nfront = nfront;
	be->rng = o->seed * 0x9e3779b97f4a7c15ull + 0xbac7e4d;
	be->doc_key = calloc(o->docs, sizeof(ddss_key_t));
	be->docs = calloc(o->docs, sizeof(struct tcp_doc));
	doc_mu = calloc(o->docs, sizeof(pthread_mutex_t));
	be->scratch = malloc(o->size);
	r = be->doc_key && be->docs && doc_mu && be->scratch ? 0 : -ENOMEM;
	if (!r)
		r = zipf_init(&be->pop, o->docs, o->zipf);
	if (r) {
		failed("setup", r);
		goto out_free;
	}
	for (unsigned d = 0; d < o->docs; d++)
		pthread_mutex_init(&doc_mu[d], NULL);
	r = create_docs(be);
	if (!r)
		r = alloc_local(ctx, CACHE_SEG_RESULTS, nfront * cache_slot_size(o),
				DDSS_COHERENCE_NULL, &be->results_key);
	if (r)
		goto out_free;

	/* The TCP server listens where this rank's DDSS traffic goes, unless told otherwise. */
	if (o->tcp_host)
		snprintf(host, sizeof(host), "%s", o->tcp_host);
	else if (!own_host(ddss_rank(ctx), host, sizeof(host)))
		bind_host = host;
	else
		snprintf(host, sizeof(host), "127.0.0.1");
	if (o->tcp_host)
		bind_host = host;
	r = tcp_server_start(bind_host, be->docs, o->docs, o->size, doc_lock, doc_unlock,
			     &be->srv, &port);
	if (r) {
		fprintf(stderr, "ddss-cache: back-end: cannot listen on %s: %s\n",
			bind_host ? bind_host : "any address", ddss_strerror(r));
		goto out_free;
	}
	snprintf(ctl.host, sizeof(ctl.host), "%s", host);
	ctl.port = port;
	r = alloc_local(ctx, CACHE_SEG_CTL, sizeof(ctl), DDSS_COHERENCE_NULL, &be->ctl_key);
	if (!r) {
		r = ddss_put(ctx, be->ctl_key, 0, &ctl, sizeof(ctl));
		if (r)
			failed("publish the TCP address", r);
	}
	if (r) {
		tcp_server_stop(be->srv);
		be->srv = NULL;
		goto out_free;
	}
	*be_p = be;
	return 0;

out_free:
	backend_teardown(be);
	return r;
}

static void *burn(void *arg)
{
	struct backend *be = arg;
	volatile uint64_t x = 1;

	while (!atomic_load_explicit(&be->stop_compute, memory_order_relaxed))
		for (int i = 0; i < 4096; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	return NULL;
}

/* One update of document @d: DDSS first, then the TCP copy, then the finished version. */
static int update(struct backend *be, unsigned d)
{
	const struct cache_opts *o = be->o;
	uint64_t k = be->docs[d].version + 1; /* only this thread changes versions */
	int r;

	doc_fill(be->scratch, o->size, d, k);
	r = ddss_put(be->ctx, be->doc_key[d], 0, be->scratch, o->size);
	if (r)
		return failed("put a document", r);
	doc_lock(d);
	memcpy(be->docs[d].data, be->scratch, o->size);
	be->docs[d].version = k;
	doc_unlock(d);
	r = ddss_put(be->ctx, be->done_key, d * sizeof(uint64_t), &k, sizeof(k));
	if (r)
		return failed("publish a finished version", r);
	return 0;
}

static void *updater_main(void *arg)
{
	struct backend *be = arg;
	struct timespec pause = { .tv_sec = be->o->update_us / 1000000,
				  .tv_nsec = (long)(be->o->update_us % 1000000) * 1000 };

	while (!atomic_load(&be->stop_update)) {
		nanosleep(&pause, NULL);
		if (atomic_load(&be->stop_update))
			break;
		be->update_err = update(be, zipf_draw(&be->pop, &be->rng));
		if (be->update_err)
			break;
		be->updates++;
	}
	return NULL;
}

int backend_point_start(struct backend *be, unsigned compute)
{
	int r;

	atomic_store(&be->stop_compute, false);
	atomic_store(&be->stop_update, false);
	be->updates = 0;
	be->update_err = 0;
	for (be->nburners = 0; be->nburners < compute && be->nburners < MAX_COMPUTE;
	     be->nburners++) {
		r = pthread_create(&be->burners[be->nburners], NULL, burn, be);
		if (r)
			return failed("start a compute thread", -r);
	}
	if (be->o->update_us) {
		r = pthread_create(&be->updater, NULL, updater_main, be);
		if (r)
			return failed("start the updater", -r);
		be->updater_running = true;
	}
	return 0;
}

int backend_point_stop(struct backend *be, uint64_t *updates_p)
{
	atomic_store(&be->stop_update, true);
	if (be->updater_running)
		pthread_join(be->updater, NULL);
	be->updater_running = false;
	atomic_store(&be->stop_compute, true);
	for (unsigned i = 0; i < be->nburners; i++)
		pthread_join(be->burners[i], NULL);
	be->nburners = 0;
	*updates_p = be->updates;
	return be->update_err;
}

int backend_teardown(struct backend *be)
{
	ddss_key_t keys[3] = { be->done_key, be->ctl_key, be->results_key };
	int rc = 0, r;

	if (be->srv)
		tcp_server_stop(be->srv);
	for (unsigned d = 0; be->doc_key && d < be->o->docs; d++) {
		if (be->doc_key[d] && (r = ddss_release_ss(be->ctx, be->doc_key[d])))
			rc = failed("release a document", r);
		if (be->docs)
			free(be->docs[d].data);
		if (doc_mu)
			pthread_mutex_destroy(&doc_mu[d]);
	}
	for (int i = 0; i < 3; i++)
		if (keys[i] && (r = ddss_release_ss(be->ctx, keys[i])))
			rc = failed("release a segment", r);
	zipf_fini(&be->pop);
	free(be->scratch);
	free(doc_mu);
	doc_mu = NULL;
	free(be->docs);
	free(be->doc_key);
	free(be);
	return rc;
}
