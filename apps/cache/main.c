/*
 * ddss-cache: a front-end document cache whose authoritative versions live in DDSS, after
 * the DDSS paper's strong cache coherence evaluation (section 5.2, Figure 5b).
 *
 *   ddssrun -n 3 ddss-cache [--docs D] [--size B] [--requests N] [--zipf S | --uniform]
 *                           [--seed X] [--update-us U] [--compute C,C,...] [--block K]
 *                           [--tcp-host H] [--no-pin] [--csv] [--no-version-check]
 *
 * Rank 1 is the back-end: it owns D documents (default 64 of 4096 B), each a
 * version-coherence segment on its own rank, updates one every U us (default 1000; 0: never)
 * and also serves them over a plain TCP socket server. Every other rank (in daemon mode:
 * every other client) is a front-end serving N requests per point (default 300) from its
 * cache, both ways in turns on the same seeded stream (zipf s = 0.99 by default): with
 * DDSS (ddss_get_versioned: one remote version read on a hit, one data transfer on a miss)
 * and with TCP request/response ("document d if its version differs from v"). For each C of
 * --compute (default 0,1,2,4,8) the back-end runs C busy threads meanwhile; the program
 * prints per C the median and mean request latency both ways, their ratio and the hit ratio.
 *
 * Freshness is checked on every request: a front-end never serves a document version older
 * than the newest one the back-end had finished writing before the request began (the
 * back-end publishes it per document in a null segment), never a torn one, never one older
 * than it served before. --no-version-check breaks the cache on purpose (a front-end keeps
 * its own copy and serves it without asking, both ways), to show the check catches it.
 *
 * The back-end pins itself (all its threads, the compute threads included) to CPU 0, the
 * front-ends to the other CPUs, unless --no-pin. Exit status: 0; 1 if a check failed or an
 * operation failed; 2 on bad usage.
 */
#include "cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The back-end waits in a barrier while the front-ends run a point. */
#define BARRIER_TIMEOUT_MS (10 * 60 * 1000)

static const char *const way_names[WAY_COUNT] = { "ddss", "tcp" };

struct way_stat {
	double med, mean, p99;
	struct cache_counts sum;
};

struct row {
	unsigned compute;
	uint64_t updates;
	struct way_stat way[WAY_COUNT];
};

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: ddssrun -n N (N >= 2) %s [--docs D] [--size B] [--requests N] "
		"[--zipf S | --uniform] [--seed X] [--update-us U] [--compute C,C,...] "
		"[--block K] [--tcp-host H] [--no-pin] [--csv] [--no-version-check]\n", argv0);
}

static int parse_ul(const char *s, unsigned long lo, unsigned long hi, unsigned long *v)
{
	char *end;

	errno = 0;
	*v = strtoul(s, &end, 0);
	return errno || end == s || *end || *v < lo || *v > hi ? -1 : 0;
}

static int parse_compute(const char *s, struct cache_opts *o)
{
	char *copy = strdup(s), *save = NULL, *tok;
	unsigned long v;
	int r = copy ? 0 : -1;

	o->npoints = 0;
	for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !r;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->npoints == CACHE_MAX_POINTS || parse_ul(tok, 0, 256, &v))
			r = -1;
		else
			o->compute[o->npoints++] = (unsigned)v;
	}
	free(copy);
	return r || !o->npoints ? -1 : 0;
}

static int parse(int argc, char **argv, struct cache_opts *o)
{
	unsigned long v;
	char *end;

	*o = (struct cache_opts){ .docs = 64, .size = 4096, .requests = 300, .block = 25,
				  .update_us = 1000, .zipf = 0.99, .seed = 1, .pin = true };
	parse_compute("0,1,2,4,8", o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!strcmp(a, "--csv")) {
			o->csv = true;
			continue;
		} else if (!strcmp(a, "--no-pin")) {
			o->pin = false;
			continue;
		} else if (!strcmp(a, "--uniform")) {
			o->zipf = 0;
			continue;
		} else if (!strcmp(a, "--no-version-check")) {
			o->no_version_check = true;
			continue;
		}
		if (!val)
			return -1;
		i++;
		if (!strcmp(a, "--docs"))
			bad = parse_ul(val, 1, CACHE_MAX_DOCS, &v), o->docs = (unsigned)v;
		else if (!strcmp(a, "--size"))
			bad = parse_ul(val, CACHE_MIN_SIZE, CACHE_MAX_SIZE, &v) || v % 8,
			o->size = v;
		else if (!strcmp(a, "--requests"))
			bad = parse_ul(val, 1, 10000000, &v), o->requests = (unsigned)v;
		else if (!strcmp(a, "--block"))
			bad = parse_ul(val, 1, 1000000, &v), o->block = (unsigned)v;
		else if (!strcmp(a, "--update-us"))
			bad = parse_ul(val, 0, 10000000, &v), o->update_us = (unsigned)v;
		else if (!strcmp(a, "--seed"))
			bad = parse_ul(val, 0, ~0ul, &v), o->seed = v;
		else if (!strcmp(a, "--zipf"))
			o->zipf = strtod(val, &end), bad = *end || end == val || o->zipf < 0 ||
							   o->zipf > 10;
		else if (!strcmp(a, "--compute"))
			bad = parse_compute(val, o);
		else if (!strcmp(a, "--tcp-host"))
			o->tcp_host = val, bad = strlen(val) >= CACHE_HOST_MAX;
		else
			return -1;
		if (bad)
			return -1;
	}
	/* The back-end's pool (64 MiB by default) holds the documents and the results. */
	if ((uint64_t)o->docs * o->size > (32u << 20) ||
	    (uint64_t)o->requests * 8 * WAY_COUNT > (8u << 20))
		return -1;
	return 0;
}

static unsigned env_uint(const char *name, unsigned dflt)
{
	const char *s = getenv(name);

	return s && *s ? (unsigned)strtoul(s, NULL, 10) : dflt;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Read every front-end's slot and reduce one point to a row. */
static int collect(ddss_ctx_t *ctx, ddss_key_t results, const struct cache_opts *o,
		   uint32_t nfront, struct row *row)
{
	size_t slot = cache_slot_size(o), n = (size_t)nfront * o->requests;
	char *all = malloc(nfront * slot);
	double *lat = malloc(n * sizeof(double));
	int r = all && lat ? 0 : -ENOMEM;

	if (!r)
		r = ddss_get(ctx, results, 0, all, nfront * slot);
	for (int w = 0; !r && w < WAY_COUNT; w++) {
		struct way_stat *s = &row->way[w];
		double sum = 0;

		memset(&s->sum, 0, sizeof(s->sum));
		for (uint32_t f = 0; f < nfront; f++) {
			const char *base = all + f * slot;
			const struct cache_counts *c = (const struct cache_counts *)base + w;
			const double *l = (const double *)(base + WAY_COUNT * sizeof(*c)) +
					  (size_t)w * o->requests;

			memcpy(lat + (size_t)f * o->requests, l, o->requests * sizeof(double));
			s->sum.requests += c->requests;
			s->sum.hits += c->hits;
			s->sum.stale += c->stale;
			s->sum.backwards += c->backwards;
			s->sum.label += c->label;
			s->sum.torn += c->torn;
		}
		qsort(lat, n, sizeof(double), cmp_double);
		for (size_t i = 0; i < n; i++)
			sum += lat[i];
		s->med = lat[n / 2];
		s->p99 = lat[n * 99 / 100];
		s->mean = sum / (double)n;
	}
	free(lat);
	free(all);
	if (r)
		fprintf(stderr, "ddss-cache: back-end: collect the results: %s\n", ddss_strerror(r));
	return r;
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static uint64_t violations(const struct way_stat *s)
{
	return s->sum.stale + s->sum.backwards + s->sum.label;
}

static void report(const struct cache_opts *o, uint32_t nfront, const struct row *rows)
{
	const char *tp = getenv("DDSS_TRANSPORT"), *mode = getenv("DDSS_MODE");
	uint64_t checked = 0, bad[3] = { 0 };

	tp = tp && *tp ? tp : "tcp";
	mode = mode && *mode ? mode : "direct";
	for (unsigned p = 0; p < o->npoints; p++)
		for (int w = 0; w < WAY_COUNT; w++) {
			checked += rows[p].way[w].sum.requests;
			bad[0] += rows[p].way[w].sum.stale;
			bad[1] += rows[p].way[w].sum.backwards;
			bad[2] += rows[p].way[w].sum.label;
		}
	if (o->csv) {
		printf("transport,mode,compute,way,requests,median_us,mean_us,p99_us,hit_ratio,"
		       "updates,stale,backwards,label,torn\n");
		for (unsigned p = 0; p < o->npoints; p++)
			for (int w = 0; w < WAY_COUNT; w++) {
				const struct way_stat *s = &rows[p].way[w];

				printf("%s,%s,%u,%s,%llu,%.3f,%.3f,%.3f,%.4f,%llu,%llu,%llu,%llu,%llu\n",
				       tp, mode, rows[p].compute, way_names[w],
				       (unsigned long long)s->sum.requests, s->med, s->mean, s->p99,
				       ratio(s->sum.hits, s->sum.requests),
				       (unsigned long long)rows[p].updates,
				       (unsigned long long)s->sum.stale,
				       (unsigned long long)s->sum.backwards,
				       (unsigned long long)s->sum.label,
				       (unsigned long long)s->sum.torn);
			}
	} else {
		printf("ddss-cache: back-end rank 1, %u front-end%s, transport %s, %s mode%s\n",
		       nfront, nfront == 1 ? "" : "s", tp, mode,
		       o->pin ? ", back-end on CPU 0, front-ends on the others" : ", unpinned");
		printf("%u documents of %zu B, %s, %u requests per front-end, way and point "
		       "(ways take turns every %u), an update every %u us%s\n", o->docs, o->size,
		       o->zipf > 0 ? "zipf popularity" : "uniform popularity", o->requests,
		       o->block, o->update_us,
		       o->no_version_check ? "; DELIBERATELY BROKEN: --no-version-check" : "");
		printf("C = busy compute threads on the back-end; request latency in us; "
		       "ratio = tcp / ddss; hits = requests served without moving the document\n");
		printf("%3s | %9s %9s | %9s %9s | %7s %7s | %6s %6s | %7s %5s %5s\n", "C",
		       "ddss med", "ddss mean", "tcp med", "tcp mean", "r(med)", "r(mean)",
		       "hits/d", "hits/t", "updates", "torn", "bad");
		for (unsigned p = 0; p < o->npoints; p++) {
			const struct row *x = &rows[p];
			const struct way_stat *d = &x->way[WAY_DDSS], *t = &x->way[WAY_TCP];

			printf("%3u | %9.2f %9.2f | %9.2f %9.2f | %7.2f %7.2f | %6.3f %6.3f | "
			       "%7llu %5llu %5llu\n", x->compute, d->med, d->mean, t->med, t->mean,
			       t->med / d->med, t->mean / d->mean,
			       ratio(d->sum.hits, d->sum.requests),
			       ratio(t->sum.hits, t->sum.requests),
			       (unsigned long long)x->updates, (unsigned long long)d->sum.torn,
			       (unsigned long long)(violations(d) + violations(t)));
		}
	}
	/* Both formats: the verdict (on stderr with --csv, so stdout stays CSV). */
	fprintf(o->csv ? stderr : stdout, "freshness: %llu requests checked; stale serves: %llu, "
		"versions going back: %llu, labels newer than data: %llu -> %s\n",
		(unsigned long long)checked, (unsigned long long)bad[0],
		(unsigned long long)bad[1], (unsigned long long)bad[2],
		bad[0] + bad[1] + bad[2] ? "FAILED" : "ok");
}

static int run_backend(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t nfront)
{
	struct row rows[CACHE_MAX_POINTS] = { 0 };
	struct backend *be = NULL;
	uint64_t total = 0;
	ddss_key_t results;
	int r, rc = 0;

	r = backend_setup(ctx, o, nfront, &be);
	if (r)
		return 1;
	r = ddss_barrier(ctx); /* setup: everything exists */
	if (!r)
		r = ddss_lookup_ss(ctx, CACHE_SEG_RESULTS, &results);
	for (unsigned p = 0; !r && p < o->npoints; p++) {
		rows[p].compute = o->compute[p];
		r = backend_point_start(be, o->compute[p]);
		if (!r)
			r = ddss_barrier(ctx); /* the point starts */
		if (!r)
			r = ddss_barrier(ctx); /* the front-ends are done and have put their results */
		if (backend_point_stop(be, &rows[p].updates) && !r)
			r = -EIO;
		if (!r)
			r = collect(ctx, results, o, nfront, &rows[p]);
		for (int w = 0; !r && w < WAY_COUNT; w++)
			total += violations(&rows[p].way[w]);
	}
	if (!r)
		report(o, nfront, rows);
	fflush(stdout);
	if (!r)
		r = ddss_barrier(ctx); /* the front-ends closed their connections */
	if (r) {
		fprintf(stderr, "ddss-cache: back-end: %s\n", ddss_strerror(r));
		rc = 1;
	}
	if (backend_teardown(be))
		rc = 1;
	return rc || total ? 1 : 0;
}

static int run_frontend(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t index)
{
	struct frontend *fe = NULL;
	uint64_t bad;
	int r;

	r = ddss_barrier(ctx); /* setup */
	if (!r)
		r = frontend_setup(ctx, o, index, &fe);
	if (!r)
		r = frontend_warmup(fe);
	for (unsigned p = 0; !r && p < o->npoints; p++) {
		r = ddss_barrier(ctx);
		if (!r)
			r = frontend_point(fe, p);
		if (!r)
			r = ddss_barrier(ctx);
	}
	bad = fe ? frontend_violations(fe) : 0;
	if (fe)
		frontend_teardown(fe);
	if (!r)
		r = ddss_barrier(ctx);
	if (r) {
		fprintf(stderr, "ddss-cache: front-end %u: %s\n", index + 1, ddss_strerror(r));
		return 1;
	}
	if (bad)
		fprintf(stderr, "ddss-cache: front-end %u: %llu freshness violations\n", index + 1,
			(unsigned long long)bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	unsigned rank = env_uint("DDSS_RANK", 0), client = env_uint("DDSS_CLIENT", 1);
	unsigned clients = env_uint("DDSS_CLIENTS", 1);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct cache_opts o;
	struct ddss_attr attr;
	ddss_ctx_t *ctx;
	uint32_t size, nfront;
	bool backend;
	int r, rc, f;

	if (parse(argc, argv, &o)) {
		usage(argv[0]);
		return 2;
	}
	if (client < 1 || clients < 1 || client > clients)
		client = clients = 1;
	backend = rank == 1 && client == 1;
	/* Before ddss_init, so the library's threads inherit it. */
	if (o.pin && ncpu >= 2 && rank >= 1)
		pin_cpu(backend ? 0 : 1 + ((rank - 1) * clients + client - 2) % (unsigned)(ncpu - 1));
	ddss_attr_init(&attr);
	attr.connect_timeout_ms = BARRIER_TIMEOUT_MS;
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss-cache: ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	rank = ddss_rank(ctx);
	size = ddss_size(ctx);
	backend = rank == 1 && client == 1;
	nfront = size * clients - 1;
	if (!nfront) {
		fprintf(stderr, "ddss-cache: needs a back-end and at least one front-end "
			"(ddssrun -n 2 or more)\n");
		ddss_finalize(ctx);
		return 2;
	}
	rc = backend ? run_backend(ctx, &o, nfront) :
		       run_frontend(ctx, &o, (rank - 1) * clients + client - 2);
	fflush(stdout);
	f = ddss_finalize(ctx);
	if (f)
		fprintf(stderr, "ddss-cache: ddss_finalize: %s\n", ddss_strerror(f));
	return rc ? rc : (f ? 1 : 0);
}
