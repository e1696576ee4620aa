/*
 * ddss-clients-bench: many clients at one home, after Figures 4b and 4c of the DDSS paper.
 *
 *   ddssrun -n N ddss-clients-bench [--iters I] [--max-clients C] [--size B] [--csv]
 *
 * Rank 1 is the home of every segment and only serves (one-sided: its CPU does nothing
 * for gets and puts). The clients are threads on ranks 2..N, client i on rank 2 + i mod
 * (N - 1), so up to C clients run at once; each step starts and ends with a barrier.
 *
 *  4b  clients = 1 .. C, each reading its own B-byte part of one null segment (ddss_get):
 *      the median over the clients of each client's median latency. The paper's claim: it
 *      stays flat, the home's CPU is not involved.
 *  4c  C clients putting B bytes; with probability p (0, 20, .. 100 %) a put goes to the one
 *      shared segment, otherwise to the client's own: latency per coherence model (null,
 *      version, write, strict) and p. Models with locks slow down as contention grows.
 *
 * Baselines of the same run: a raw transport read and write of the same bytes at the same
 * home (ddss_tp_read / ddss_tp_write, one client). Prints tables, or CSV with --csv:
 *   figure,series,x,median_us,p99_us,raw_us
 *   fig4b,get,<clients>,...,<raw read>
 *   fig4c,<model>,<contention %>,...,<raw write>
 * In daemon mode (ddssrun --daemon) the raw baselines are not measured (0): the transport is
 * the daemon's.
 * Exit status: 0; 1 if an operation failed; 2 on bad usage or fewer than 2 ranks.
 */
#include "core/ctx.h"
#include "net/transport.h"

#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOME 1
#define MAX_CLIENTS 64
#define RESULT_WORDS 2 /* per client: median ns, p99 ns */

static ddss_ctx_t *ctx;
static uint32_t me, nranks;
static unsigned iters = 500, max_clients = 8;
static size_t size = 64;
static bool csv;
static unsigned failures; /* atomic */

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static ddss_key_t named(const char *name, size_t len, enum ddss_coherence model)
{
	ddss_key_t key = 0;
	int r = ddss_allocate_ss(ctx, len, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = HOME, .name = name, .coherence = model },
		&key);

	if (r) {
		fprintf(stderr, "clients-bench: rank %u: allocate %s: %s\n", me, name,
			ddss_strerror(r));
		exit(1);
	}
	return key;
}

static void barrier(void)
{
	int r = ddss_barrier(ctx);

	if (r) {
		fprintf(stderr, "clients-bench: rank %u: barrier: %s\n", me, ddss_strerror(r));
		exit(1);
	}
}

/* The rank a client runs on, and how many of the first @n clients are this rank's. */
static uint32_t client_rank(unsigned i)
{
	return 2 + i % (nranks - 1);
}

struct client {
	unsigned id;
	enum { DO_GET, DO_PUT } op;
	ddss_key_t own, shared;   /* own: a segment (4c) or 0: a part of @shared (4b) */
	unsigned contention;      /* percent of puts to @shared */
	ddss_key_t results;
	uint64_t seed;
};

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	double *lat = malloc(iters * sizeof(double)), med, p99, mean;
	uint8_t *buf = calloc(1, size);
	uint64_t out[RESULT_WORDS];

	if (!lat || !buf) {
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
		free(lat);
		free(buf);
		return NULL;
	}
	for (unsigned i = 0; i < iters; i++) {
		ddss_key_t k = c->shared;
		size_t off = 0;
		double t0;
		int r;

		if (c->op == DO_GET)
			off = (size_t)c->id * size; /* its own part */
		else if (next_rand(&c->seed) % 100 >= c->contention)
			k = c->own;
		t0 = now_ns();
		r = c->op == DO_GET ? ddss_get(ctx, k, off, buf, size) :
				      ddss_put(ctx, k, 0, buf, size);
		lat[i] = now_ns() - t0;
		if (r) {
			if (__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED) <= 3)
				fprintf(stderr, "clients-bench: client %u: %s\n", c->id,
					ddss_strerror(r));
			break;
		}
	}
	bench_summarize(lat, iters, &med, &p99, &mean);
	out[0] = (uint64_t)med;
	out[1] = (uint64_t)p99;
	if (ddss_put(ctx, c->results, (size_t)c->id * sizeof(out), out, sizeof(out)))
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	free(lat);
	free(buf);
	return NULL;
}

/* Run this rank's share of @n clients described by @tmpl; all ranks meet before and after. */
static void run_step(unsigned n, const struct client *tmpl, const ddss_key_t *own)
{
	struct client c[MAX_CLIENTS];
	pthread_t th[MAX_CLIENTS];
	unsigned mine = 0;

	barrier();
	for (unsigned i = 0; i < n; i++) {
		if (client_rank(i) != me)
			continue;
		c[mine] = *tmpl;
		c[mine].id = i;
		c[mine].own = own ? own[i] : 0;
		c[mine].seed = 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 32) ^ n;
		if (pthread_create(&th[mine], NULL, client_main, &c[mine])) {
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
			break;
		}
		mine++;
	}
	for (unsigned t = 0; t < mine; t++)
		pthread_join(th[t], NULL);
	barrier();
}

/* Rank 1: the median of the clients' medians and p99s of the last step. */
static void collect(ddss_key_t results, unsigned n, double *med, double *p99)
{
	uint64_t w[MAX_CLIENTS * RESULT_WORDS];
	double m[MAX_CLIENTS], p[MAX_CLIENTS], mean;

	if (ddss_get(ctx, results, 0, w, n * RESULT_WORDS * sizeof(uint64_t)))
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n; i++) {
		m[i] = (double)w[i * RESULT_WORDS] / 1e3;
		p[i] = (double)w[i * RESULT_WORDS + 1] / 1e3;
	}
	bench_summarize(m, n, med, &mean, &mean);
	bench_summarize(p, n, p99, &mean, &mean);
}

/* Rank 2: one raw transport read or write of @size bytes of @key, median over iters (us). */
static double raw_op(ddss_key_t key, bool write)
{
	const struct ddss_seg_desc *d;
	double *lat = malloc(iters * sizeof(double)), med, p99, mean;
	uint8_t *buf = calloc(1, size);

	if (!lat || !buf || ddss_ctx_desc(ctx, key, &d)) {
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
		free(lat);
		free(buf);
		return 0;
	}
	for (unsigned i = 0; i < iters; i++) {
		double t0 = now_ns();
		int r = write ? ddss_tp_write(ctx->tp, d->home, d->data_off, buf, size) :
				ddss_tp_read(ctx->tp, d->home, d->data_off, buf, size);

		lat[i] = now_ns() - t0;
		if (r)
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
	ddss_seg_cache_put(d);
	bench_summarize(lat, iters, &med, &p99, &mean);
	free(lat);
	free(buf);
	return med / 1e3;
}

struct raw_arg {
	ddss_key_t key;
	double read_us, write_us;
};

/* In a thread of its own, as the clients are: the same scheduling for both. */
static void *raw_main(void *p)
{
	struct raw_arg *a = p;

	a->read_us = raw_op(a->key, false);
	a->write_us = raw_op(a->key, true);
	return NULL;
}

/* Rank 2 measures the raw baselines; everyone learns them through @results' last words. */
static void baselines(ddss_key_t seg, ddss_key_t results, double *rd, double *wr)
{
	uint64_t w[2];
	size_t at = MAX_CLIENTS * RESULT_WORDS * sizeof(uint64_t);

	barrier();
	if (me == 2 && ctx->client) {
		w[0] = w[1] = 0;
		if (ddss_put(ctx, results, at, w, sizeof(w)))
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	} else if (me == 2) {
		struct raw_arg a = { .key = seg };
		pthread_t th;

		if (pthread_create(&th, NULL, raw_main, &a) == 0)
			pthread_join(th, NULL);
		w[0] = (uint64_t)(a.read_us * 1e3);
		w[1] = (uint64_t)(a.write_us * 1e3);
		if (ddss_put(ctx, results, at, w, sizeof(w)))
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
	barrier();
	if (ddss_get(ctx, results, at, w, sizeof(w)))
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	*rd = w[0] / 1e3;
	*wr = w[1] / 1e3;
}

static void fig4b(ddss_key_t results, double raw_read)
{
	ddss_key_t seg = named("c4b", (size_t)max_clients * size, DDSS_COHERENCE_NULL);
	struct client tmpl = { .op = DO_GET, .shared = seg, .results = results };

	if (me == 1 && !csv)
		printf("Figure 4b: get of %zu B, each client its own part of one segment at rank %d "
		       "(us; raw read %.2f)\n%8s %10s %10s\n", size, HOME, raw_read, "clients",
		       "median", "p99");
	for (unsigned n = 1; n <= max_clients; n++) {
		double med, p99;

		run_step(n, &tmpl, NULL);
		if (me != 1)
			continue;
		collect(results, n, &med, &p99);
		if (csv)
			printf("fig4b,get,%u,%.3f,%.3f,%.3f\n", n, med, p99, raw_read);
		else
			printf("%8u %10.2f %10.2f\n", n, med, p99);
	}
}

static void fig4c(ddss_key_t results, double raw_write)
{
	static const struct { enum ddss_coherence m; const char *name; } models[] = {
		{ DDSS_COHERENCE_NULL, "null" }, { DDSS_COHERENCE_VERSION, "version" },
		{ DDSS_COHERENCE_WRITE, "write" }, { DDSS_COHERENCE_STRICT, "strict" },
	};

	if (me == 1 && !csv)
		printf("\nFigure 4c: put of %zu B by %u clients, a share p of them to one shared "
		       "segment (us; raw write %.2f)\n%8s %8s %10s %10s\n", size, max_clients,
		       raw_write, "model", "p %", "median", "p99");
	for (unsigned m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
		ddss_key_t own[MAX_CLIENTS], shared;
		char name[32];

		snprintf(name, sizeof(name), "c4c-%s", models[m].name);
		shared = named(name, size, models[m].m);
		for (unsigned i = 0; i < max_clients; i++) {
			snprintf(name, sizeof(name), "c4c-%s-%u", models[m].name, i);
			own[i] = named(name, size, models[m].m);
		}
		for (unsigned p = 0; p <= 100; p += 20) {
			struct client tmpl = { .op = DO_PUT, .shared = shared, .contention = p,
					       .results = results };
			double med, p99;

			run_step(max_clients, &tmpl, own);
			if (me != 1)
				continue;
			collect(results, max_clients, &med, &p99);
			if (csv)
				printf("fig4c,%s,%u,%.3f,%.3f,%.3f\n", models[m].name, p, med, p99,
				       raw_write);
			else
				printf("%8s %8u %10.2f %10.2f\n", models[m].name, p, med, p99);
		}
	}
}

int main(int argc, char **argv)
{
	ddss_key_t results;
	double raw_read, raw_write;
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--max-clients") && i + 1 < argc)
			max_clients = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--csv"))
			csv = true;
		else
			iters = 0;
	}
	if (!iters || !max_clients || max_clients > MAX_CLIENTS || !size || size > (1u << 20)) {
		fprintf(stderr, "usage: ddssrun -n N %s [--iters I] [--max-clients C<=%d] "
			"[--size B<=1MiB] [--csv]\n", argv[0], MAX_CLIENTS);
		return 2;
	}
	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "clients-bench: ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	nranks = ddss_size(ctx);
	if (nranks < 2) {
		fprintf(stderr, "clients-bench: needs 2 or more ranks\n");
		ddss_finalize(ctx);
		return 2;
	}
	results = named("c-results", (MAX_CLIENTS * RESULT_WORDS + 2) * sizeof(uint64_t),
			DDSS_COHERENCE_NULL);
	baselines(named("c-raw", size, DDSS_COHERENCE_NULL), results, &raw_read, &raw_write);
	if (me == 1 && csv)
		printf("figure,series,x,median_us,p99_us,raw_us\n");
	fig4b(results, raw_read);
	fig4c(results, raw_write);
	fflush(stdout);
	barrier();
	r = ddss_finalize(ctx);
	return failures ? 1 : r ? 1 : 0;
}
