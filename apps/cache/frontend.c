/*
 * ddss-cache: a front-end. It serves a seeded stream of document requests from its cache,
 * kept coherent two ways that take turns in blocks on the same stream:
 *
 *   DDSS: ddss_get_versioned on the document's version segment. The library keeps this
 *         context's copy: an unchanged document costs one remote 8-byte version read, a
 *         changed one the version read and one data transfer (docs/coherence.md).
 *   TCP:  ask the back-end "document d if its version differs from the one I hold"; it
 *         answers "unchanged" or sends the document.
 *
 * Every served document is checked: it must be one whole version of the right document
 * (a DDSS get that overlapped an update may be torn; it is read again and counted), not
 * older than the version the back-end had finished before the request began (read from
 * CACHE_SEG_DONE just before the request, outside the timing), not older than what this
 * front-end served before, and, for DDSS, not older than the version the library reported.
 */
#include "cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A get that keeps seeing a torn copy: an update stays in progress this many reads. */
#define MAX_TORN 100000u
/* Violations printed per front-end (all are counted). */
#define MAX_REPORTED 5

static const char *const way_names[WAY_COUNT] = { "ddss", "tcp" };

struct frontend {
	ddss_ctx_t *ctx;
	const struct cache_opts *o;
	uint32_t index;       /* 0..nfront-1: this front-end's slot */
	ddss_key_t *doc_key;
	ddss_key_t done_key, results_key;
	int fd;               /* the connection to the back-end's TCP server */
	struct zipf pop;
	unsigned *seq;        /* one point's requests */
	char *resp;           /* the document being served */
	uint64_t *label;      /* DDSS: the version the library last reported per document */
	uint64_t *served[WAY_COUNT]; /* the newest version served per document */
	uint64_t *tcp_ver;    /* TCP: the version of this front-end's copy (0: none) */
	char *tcp_copy;       /* TCP: this front-end's copies */
	uint64_t *raw_ver;    /* --no-version-check: a copy kept without the library (0: none) */
	char *raw_copy;
	char *slot;           /* counts and latencies of the current point, as put */
	struct cache_counts *counts; /* in slot */
	double *lat[WAY_COUNT];      /* in slot */
	uint64_t violations;
	unsigned reported;
};

static int failed(const struct frontend *fe, const char *what, int r)
{
	fprintf(stderr, "ddss-cache: front-end %u: %s: %s\n", fe->index + 1, what,
		ddss_strerror(r));
	return r;
}

static int lookup(struct frontend *fe, const char *name, ddss_key_t *key_p)
{
	int r = ddss_lookup_ss(fe->ctx, name, key_p);

	if (r)
		fprintf(stderr, "ddss-cache: front-end %u: segment %s: %s\n", fe->index + 1, name,
			ddss_strerror(r));
	return r;
}

int frontend_setup(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t index,
		   struct frontend **fe_p)
{
	struct frontend *fe = calloc(1, sizeof(*fe));
	char name[DDSS_NAME_MAX];
	struct cache_ctl ctl;
	ddss_key_t ctl_key;
	int r;

	if (!fe)
		return -ENOMEM;
	fe->ctx = ctx;
	fe->o = o;
	fe->index = index;
	fe->fd = -1;
	fe->doc_key = calloc(o->docs, sizeof(ddss_key_t));
	fe->seq = calloc(o->requests, sizeof(unsigned));
	fe->resp = malloc(o->size);
	fe->label = calloc(o->docs, sizeof(uint64_t));
	fe->tcp_ver = calloc(o->docs, sizeof(uint64_t));
	fe->tcp_copy = malloc(o->docs * o->size);
	fe->raw_ver = calloc(o->docs, sizeof(uint64_t));
	fe->raw_copy = o->no_version_check ? malloc(o->docs * o->size) : NULL;
	fe->slot = calloc(1, cache_slot_size(o));
	for (int w = 0; w < WAY_COUNT; w++)
		fe->served[w] = calloc(o->docs, sizeof(uint64_t));
	r = fe->doc_key && fe->seq && fe->resp && fe->label && fe->tcp_ver && fe->tcp_copy &&
	    fe->raw_ver && (fe->raw_copy || !o->no_version_check) && fe->slot &&
	    fe->served[WAY_DDSS] && fe->served[WAY_TCP] ? 0 : -ENOMEM;
	if (!r)
		r = zipf_init(&fe->pop, o->docs, o->zipf);
	if (r) {
		failed(fe, "setup", r);
		goto out_free;
	}
	fe->counts = (struct cache_counts *)fe->slot;
	fe->lat[WAY_DDSS] = (double *)(fe->slot + WAY_COUNT * sizeof(struct cache_counts));
	fe->lat[WAY_TCP] = fe->lat[WAY_DDSS] + o->requests;

	r = lookup(fe, CACHE_SEG_CTL, &ctl_key);
	if (!r)
		r = ddss_get(ctx, ctl_key, 0, &ctl, sizeof(ctl));
	for (unsigned d = 0; !r && d < o->docs; d++) {
		snprintf(name, sizeof(name), CACHE_SEG_DOC, d);
		r = lookup(fe, name, &fe->doc_key[d]);
	}
	if (!r)
		r = lookup(fe, CACHE_SEG_DONE, &fe->done_key);
	if (!r)
		r = lookup(fe, CACHE_SEG_RESULTS, &fe->results_key);
	if (r)
		goto out_free;
	ctl.host[CACHE_HOST_MAX - 1] = '\0';
	fe->fd = tcp_connect(ctl.host, (uint16_t)ctl.port);
	if (fe->fd < 0) {
		r = fe->fd;
		fprintf(stderr, "ddss-cache: front-end %u: cannot connect to the back-end at %s "
			"port %u: %s\n", index + 1, ctl.host, ctl.port, ddss_strerror(r));
		goto out_free;
	}
	*fe_p = fe;
	return 0;

out_free:
	frontend_teardown(fe);
	return r;
}

/* DDSS: the library's cache, or (deliberately broken) a copy served without asking. */
static int via_ddss(struct frontend *fe, unsigned d, uint64_t *served_p, bool *hit_p,
		    double *us_p)
{
	const struct cache_opts *o = fe->o;
	struct cache_counts *c = &fe->counts[WAY_DDSS];
	uint64_t label = 0, v = 0;
	double t0, us = 0;

	if (o->no_version_check && fe->raw_ver[d]) {
		t0 = now_us();
		memcpy(fe->resp, fe->raw_copy + (size_t)d * o->size, o->size);
		*us_p = now_us() - t0;
		*served_p = fe->raw_ver[d];
		*hit_p = true;
		return 0;
	}
	for (unsigned tries = 0;; tries++) {
		int r;

		t0 = now_us();
		r = ddss_get_versioned(fe->ctx, fe->doc_key[d], 0, fe->resp, o->size, 0, &label);
		us += now_us() - t0;
		if (r)
			return failed(fe, "get a document", r);
		if (!doc_check(fe->resp, o->size, d, &v))
			break;
		/* Overlapped an update (the version model takes no lock): read it again. */
		c->torn++;
		if (tries == MAX_TORN) {
			fprintf(stderr, "ddss-cache: front-end %u: document %u still torn after "
				"%u reads\n", fe->index + 1, d, MAX_TORN);
			return -EIO;
		}
	}
	*hit_p = label == fe->label[d];
	fe->label[d] = label;
	if (label > v && fe->reported++ < MAX_REPORTED)
		fprintf(stderr, "ddss-cache: front-end %u: document %u: the library reported "
			"version %llu, the data is version %llu\n", fe->index + 1, d,
			(unsigned long long)label, (unsigned long long)v);
	if (label > v) {
		c->label++;
		fe->violations++;
	}
	if (o->no_version_check) {
		memcpy(fe->raw_copy + (size_t)d * o->size, fe->resp, o->size);
		fe->raw_ver[d] = v;
	}
	*served_p = v;
	*us_p = us;
	return 0;
}

/* TCP: ask the back-end whether this front-end's copy is current. */
static int via_tcp(struct frontend *fe, unsigned d, uint64_t *served_p, bool *hit_p,
		   double *us_p)
{
	const struct cache_opts *o = fe->o;
	char *copy = fe->tcp_copy + (size_t)d * o->size;
	uint64_t v = 0, have = fe->tcp_ver[d];
	bool changed = false;
	double t0 = now_us();
	int r = 0;

	if (o->no_version_check && have) {
		v = have;
	} else {
		r = tcp_fetch(fe->fd, d, have, copy, o->size, &v, &changed);
		if (!r && !changed && v != have)
			r = -EPROTO;
	}
	if (!r)
		memcpy(fe->resp, copy, o->size);
	*us_p = now_us() - t0;
	if (r)
		return failed(fe, "TCP request", r);
	if (doc_check(fe->resp, o->size, d, served_p) || *served_p != v) {
		fprintf(stderr, "ddss-cache: front-end %u: document %u from the TCP server is not "
			"version %llu of it\n", fe->index + 1, d, (unsigned long long)v);
		return -EPROTO;
	}
	fe->tcp_ver[d] = v;
	*hit_p = !changed;
	return 0;
}

static int request(struct frontend *fe, enum cache_way w, unsigned d, double *us_p)
{
	struct cache_counts *c = &fe->counts[w];
	uint64_t floor, served = 0;
	bool hit = false;
	int r;

	/* The newest version the back-end had finished before this request began. */
	r = ddss_get(fe->ctx, fe->done_key, d * sizeof(uint64_t), &floor, sizeof(floor));
	if (r)
		return failed(fe, "read the finished versions", r);
	r = w == WAY_DDSS ? via_ddss(fe, d, &served, &hit, us_p) :
			    via_tcp(fe, d, &served, &hit, us_p);
	if (r)
		return r;
	c->requests++;
	c->hits += hit;
	if (served < floor) {
		c->stale++;
		fe->violations++;
		if (fe->reported++ < MAX_REPORTED)
			fprintf(stderr, "ddss-cache: front-end %u: STALE: %s served document %u "
				"version %llu, but version %llu was finished before the request\n",
				fe->index + 1, way_names[w], d, (unsigned long long)served,
				(unsigned long long)floor);
	}
	if (served < fe->served[w][d]) {
		c->backwards++;
		fe->violations++;
		if (fe->reported++ < MAX_REPORTED)
			fprintf(stderr, "ddss-cache: front-end %u: %s served document %u version "
				"%llu after version %llu\n", fe->index + 1, way_names[w], d,
				(unsigned long long)served, (unsigned long long)fe->served[w][d]);
	} else {
		fe->served[w][d] = served;
	}
	return 0;
}

int frontend_warmup(struct frontend *fe)
{
	double us;
	int r = 0;

	for (unsigned d = 0; !r && d < fe->o->docs; d++)
		for (int w = 0; !r && w < WAY_COUNT; w++)
			r = request(fe, (enum cache_way)w, d, &us);
	return r;
}

int frontend_point(struct frontend *fe, unsigned point)
{
	const struct cache_opts *o = fe->o;
	uint64_t rng = o->seed ^ ((uint64_t)(fe->index + 1) << 32) ^ ((uint64_t)point << 16);
	int r;

	for (int i = 0; i < 16; i++)
		rng_next(&rng);
	for (unsigned i = 0; i < o->requests; i++)
		fe->seq[i] = zipf_draw(&fe->pop, &rng);
	memset(fe->counts, 0, WAY_COUNT * sizeof(*fe->counts));
	/* The ways take turns on the same requests; who goes first alternates. */
	for (unsigned b = 0; b < o->requests; b += o->block) {
		unsigned end = b + o->block < o->requests ? b + o->block : o->requests;

		for (int k = 0; k < WAY_COUNT; k++) {
			enum cache_way w = (enum cache_way)((k + b / o->block) % WAY_COUNT);

			for (unsigned i = b; i < end; i++) {
				r = request(fe, w, fe->seq[i], &fe->lat[w][i]);
				if (r)
					return r;
			}
		}
	}
	r = ddss_put(fe->ctx, fe->results_key, fe->index * cache_slot_size(o), fe->slot,
		     cache_slot_size(o));
	return r ? failed(fe, "put the results", r) : 0;
}

uint64_t frontend_violations(const struct frontend *fe)
{
	return fe->violations;
}

void frontend_teardown(struct frontend *fe)
{
	if (fe->fd >= 0)
		close(fe->fd);
	zipf_fini(&fe->pop);
	for (int w = 0; w < WAY_COUNT; w++)
		free(fe->served[w]);
	free(fe->slot);
	free(fe->raw_copy);
	free(fe->raw_ver);
	free(fe->tcp_copy);
	free(fe->tcp_ver);
	free(fe->label);
	free(fe->resp);
	free(fe->seq);
	free(fe->doc_key);
	free(fe);
}
