/*
 * ddss-coh-bench: what each coherence model costs (docs/coherence.md), after Figure 4a of
 * the DDSS paper. ddss_put / ddss_get on one segment per model are timed next to the raw
 * transport operations a model is built from (read and write of the same bytes, an 8-byte
 * atomic, an 8-byte read), between the same two processes, at the same home, in the same
 * run, so every ratio compares numbers taken under the same conditions.
 *
 *   ddssrun -n 2 ddss-coh-bench [--iters N] [--rounds R] [--max-size B] [--no-pin] [--csv]
 *
 * Rank 1 measures; rank 2 is the home of every segment (DDSS_PLACE_RANK 2) and only waits
 * in a barrier. Sizes: 1 B, 64 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB, 256 KiB below --max-size,
 * then --max-size itself (default 64 KiB; at most 1 MiB, the largest copy the default
 * coherence cache keeps, so the caching models behave alike at every size). For each size
 * rank 1 allocates one segment of exactly that size per model (temporal t = 1000 ms, delta
 * x = 4), so a put always covers its whole segment, as a delta put must to avoid merging
 * with the previous version; nobody else touches them (uncontended).
 *
 * Operations at each size:
 *   raw read / raw write  ddss_tp_read / ddss_tp_write of the null segment's bytes (the
 *                         data offset from its descriptor): what null get / put should cost;
 *   raw atomic            ddss_tp_cas on an 8-byte word (a scratch null segment's header
 *                         version word): what a lock acquire or release costs (also shown:
 *                         ddss_tp_fadd, and a raw 8-byte read of the same word, the cost
 *                         floor of a version check);
 *   put, get per model    a put is the model's whole protocol (strict: lock, write, unlock;
 *                         version: write, fetch&add; write and delta: lock, compare&swap,
 *                         write, fetch&add, unlock). Gets are repeated without a put in
 *                         between except before the first of each block, so the median is
 *                         the steady state of an unchanged segment: the cache path for the
 *                         models that cache (write, version, delta: one version read;
 *                         temporal: no transfer while the copy is younger than t);
 *   version get, unchanged  a version segment nobody writes: one 8-byte read, then the copy;
 *   version get, changed    a put (not timed) before every get: version read + data read.
 *   raw 8-byte read again   the raw 8-byte read, measured a second time: the quotient of
 *                         its two medians (A/A) shows how far one operation's numbers
 *                         move within the run;
 *   version check floor   the unchanged version get without the library call around it:
 *                         the version word fetched as the version model fetches it (a
 *                         fetch&add of 0 where ddss_tp.fetch_by_fadd, else an 8-byte read),
 *                         the bytes copied from a local buffer while it is in flight. No
 *                         descriptor lookup, no cache, no dispatch: what a version get
 *                         would cost if its own code took no time. The raw 8-byte read,
 *                         the unchanged version get, the read again and the floor take
 *                         turns op by op (see turn_len).
 * The coherence counters (ddss_coh_stats_get: data fetches, cache hits, retries) are read
 * around every block of gets, so the table shows which gets moved data.
 *
 * Each rank pins itself (all its threads) to CPU rank-1: unpinned, the scheduler sometimes
 * runs both ranks on one core and the numbers measure placement. For each size the
 * operations take turns in blocks of 25 (raw ones, then each model's puts and gets) so
 * drift on a shared machine hits all alike. The completion mode comes from DDSS_COMPLETION
 * (event | poll). Prints medians and p99 per size, the ratios, then three targets at 1 B:
 * null put / raw write and null get / raw read <= 1.05; strict put <= 2.1 raw atomics +
 * one raw write; a version get of an unchanged segment <= one raw 8-byte read.
 * Exit status (targets do not change it): 0; 1 if an operation failed or returned wrong
 * data; 2 on bad usage or a group of other than 2 ranks.
 */
#include "core/ctx.h"
#include "coherence/coherence.h"

#include "bench_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOME 2
#define DEFAULT_MAX_SIZE (64u << 10)
/* The default coherence cache (16 MiB, 16 shards) keeps copies up to 1 MiB. */
#define LIMIT_MAX_SIZE (1u << 20)
#define MAX_SIZES 9
/* Operations take turns in blocks this long (see tp_bench.c: emulation runs in spells). */
#define BLOCK 25
#define WARMUP 200
#define TEMPORAL_MS 1000
#define DELTA_X 4
#define NULL_TARGET 1.05
#define STRICT_ATOMICS 2.1

static const size_t ladder[] = { 1, 64, 1u << 10, 4u << 10, 16u << 10, 64u << 10, 256u << 10 };

#define NMODELS 7
static const enum ddss_coherence models[NMODELS] = {
	DDSS_COHERENCE_NULL,    DDSS_COHERENCE_STRICT, DDSS_COHERENCE_READ,
	DDSS_COHERENCE_WRITE,   DDSS_COHERENCE_VERSION, DDSS_COHERENCE_DELTA,
	DDSS_COHERENCE_TEMPORAL,
};
static const char *const model_names[NMODELS] = { "null",    "strict", "read",    "write",
						  "version", "delta",  "temporal" };
enum { M_NULL, M_STRICT, M_READ, M_WRITE, M_VERSION, M_DELTA, M_TEMPORAL };

enum bench_op {
	B_RAW_READ,
	B_RAW_WRITE,
	B_RAW_CAS,
	B_RAW_FADD,
	B_RAW_READ8,
	B_PUT,                       /* + model */
	B_GET = B_PUT + NMODELS,     /* + model */
	B_VGET_SAME = B_GET + NMODELS,
	B_VGET_CHANGED,
	B_RAW_READ8_AGAIN,           /* the same raw 8-byte read, for the A/A noise floor */
	B_VCHECK_FLOOR,              /* the version get's fetch and copy without the call */
	B_COUNT
};

/* One operation's statistics at one size, in TSC ticks until converted. */
struct op_stat {
	double med, p99, mean;
	uint64_t fetches, hits, retries; /* coherence counters over the timed blocks */
};

struct bench {
	struct ddss_ctx *ctx;
	uint64_t word_off;       /* scratch segment: its header's version word (cas, 8-byte read) */
	uint64_t fadd_off;       /* scratch segment: its first data word (fadd) */
	ddss_key_t key[NMODELS]; /* this size's segment per model */
	ddss_key_t vsame, vchanged;
	uint64_t data_off;       /* the null segment's first byte in rank 2's pool */
	uint64_t vword_off;      /* the unchanged version segment's version word */
	char *buf;
	char *floor_copy;        /* the floor's stand-in for a cached copy */
	enum bench_op order[B_COUNT]; /* the turns within a block */
};

static const char *op_name(enum bench_op op, char *s, size_t n)
{
	static const char *const raw[] = { "raw_read", "raw_write", "raw_cas", "raw_fadd",
					   "raw_read8" };

	if (op < B_PUT)
		snprintf(s, n, "%s", raw[op]);
	else if (op < B_GET)
		snprintf(s, n, "%s_put", model_names[op - B_PUT]);
	else if (op < B_VGET_SAME)
		snprintf(s, n, "%s_get", model_names[op - B_GET]);
	else if (op == B_RAW_READ8_AGAIN)
		snprintf(s, n, "raw_read8_again");
	else if (op == B_VCHECK_FLOOR)
		snprintf(s, n, "version_check_floor");
	else
		snprintf(s, n, "%s", op == B_VGET_SAME ? "version_get_unchanged" :
							 "version_get_changed");
	return s;
}

static int op_failed(enum bench_op op, size_t size, const char *when, int err)
{
	char name[32];

	fprintf(stderr, "ddss-coh-bench: %s of %zu B failed%s: %s\n",
		op_name(op, name, sizeof(name)), size, when, ddss_strerror(err));
	return 1;
}

/*
 * The version get's own steps on an unchanged segment (coh_version_read_with_copy), with
 * nothing of the library around them: post the version word's fetch, copy, wait.
 */
static int version_check_floor(struct bench *b, size_t size)
{
	struct ddss_tp *tp = b->ctx->tp;
	struct ddss_tp_req req;
	uint64_t word;
	int r = tp->fetch_by_fadd ? ddss_tp_post_fadd(tp, HOME, b->vword_off, 0, &req) :
				    ddss_tp_post_read(tp, HOME, b->vword_off, &word, 8, &req);

	if (r)
		return r;
	memcpy(b->buf, b->floor_copy, size);
	r = ddss_tp_wait(tp, &req, DDSS_TP_TIMEOUT_DEFAULT);
	return r ? r : req.status;
}

/* One operation; *ticks_p gets its duration (the put before a changed get is not timed). */
static int timed_op(struct bench *b, enum bench_op op, size_t size, double *ticks_p)
{
	struct ddss_tp *tp = b->ctx->tp;
	uint64_t t0, old;
	int r;

	if (op == B_VGET_CHANGED) {
		r = ddss_put(b->ctx, b->vchanged, 0, b->buf, size);
		if (r)
			return r;
	}
	t0 = bench_ticks();
	switch (op) {
	case B_RAW_READ:
		r = ddss_tp_read(tp, HOME, b->data_off, b->buf, size);
		break;
	case B_RAW_WRITE:
		r = ddss_tp_write(tp, HOME, b->data_off, b->buf, size);
		break;
	case B_RAW_CAS:
		r = ddss_tp_cas(tp, HOME, b->word_off, 0, 0, &old);
		break;
	case B_RAW_FADD:
		r = ddss_tp_fadd(tp, HOME, b->fadd_off, 1, &old);
		break;
	case B_RAW_READ8:
	case B_RAW_READ8_AGAIN:
		r = ddss_tp_read(tp, HOME, b->word_off, &old, sizeof(old));
		break;
	case B_VGET_SAME:
		r = ddss_get(b->ctx, b->vsame, 0, b->buf, size);
		break;
	case B_VCHECK_FLOOR:
		r = version_check_floor(b, size);
		break;
	case B_VGET_CHANGED:
		r = ddss_get(b->ctx, b->vchanged, 0, b->buf, size);
		break;
	default:
		if (op >= B_PUT && op < B_GET)
			r = ddss_put(b->ctx, b->key[op - B_PUT], 0, b->buf, size);
		else if (op >= B_GET && op < B_VGET_SAME)
			r = ddss_get(b->ctx, b->key[op - B_GET], 0, b->buf, size);
		else
			r = -EINVAL;
	}
	*ticks_p = (double)(bench_ticks() - t0);
	return r;
}

/* Allocate @len bytes at rank 2 under @m (or the version model for the extra segments). */
static int seg_alloc(struct bench *b, enum ddss_coherence m, size_t len, ddss_key_t *key_p)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK, .rank = HOME, .coherence = m };
	int r;

	if (m == DDSS_COHERENCE_DELTA)
		sa.delta = DELTA_X;
	if (m == DDSS_COHERENCE_TEMPORAL)
		sa.temporal_ms = TEMPORAL_MS;
	r = ddss_allocate_ss(b->ctx, len, &sa, key_p);
	if (r)
		fprintf(stderr, "ddss-coh-bench: cannot allocate %zu B at rank %d: %s\n", len, HOME,
			ddss_strerror(r));
	return r;
}

/* The segment's descriptor: its home must be rank 2; its data offset goes to *off_p. */
static int seg_data_off(struct bench *b, ddss_key_t key, size_t len, uint64_t *off_p)
{
	const struct ddss_seg_desc *d;
	int r = ddss_ctx_desc(b->ctx, key, &d);

	if (r) {
		fprintf(stderr, "ddss-coh-bench: no descriptor for a segment: %s\n",
			ddss_strerror(r));
		return r;
	}
	if (d->home != HOME || d->size < len || d->data_off % 8) {
		fprintf(stderr, "ddss-coh-bench: segment at rank %u, %llu B, offset %llu; asked "
			"rank %d, %zu B\n", d->home, (unsigned long long)d->size,
			(unsigned long long)d->data_off, HOME, len);
		r = -EPROTO;
	}
	*off_p = d->data_off;
	ddss_seg_cache_put(d);
	return r;
}

static int check_failed(const char *what, size_t size, int r)
{
	fprintf(stderr, "ddss-coh-bench: check at %zu B: %s: %s\n", size, what, ddss_strerror(r));
	return 1;
}

/*
 * Before timing anything at @size: every model's get returns what its put wrote; the raw
 * offset is the null segment's (a put is read back raw, a raw write with a get); a version
 * segment nobody wrote reads as zeros.
 */
static int check_size(struct bench *b, size_t size)
{
	char *want = malloc(size);
	char *got = malloc(size);
	int r = want && got ? 0 : -ENOMEM;

	for (int m = 0; !r && m < NMODELS; m++) {
		for (size_t i = 0; i < size; i++)
			want[i] = (char)(i * 7 + m + 1);
		r = ddss_put(b->ctx, b->key[m], 0, want, size);
		if (!r)
			r = ddss_get(b->ctx, b->key[m], 0, got, size);
		if (!r && memcmp(got, want, size))
			r = -EPROTO;
		if (r) {
			fprintf(stderr, "ddss-coh-bench: %s: get does not return what put wrote\n",
				model_names[m]);
			goto out;
		}
	}
	r = ddss_put(b->ctx, b->key[M_NULL], 0, want, size);
	if (!r)
		r = ddss_tp_read(b->ctx->tp, HOME, b->data_off, got, size);
	if (!r && memcmp(got, want, size))
		r = -EPROTO;
	for (size_t i = 0; !r && i < size; i++)
		want[i] = (char)(i * 13 + 5);
	if (!r)
		r = ddss_tp_write(b->ctx->tp, HOME, b->data_off, want, size);
	if (!r)
		r = ddss_get(b->ctx, b->key[M_NULL], 0, got, size);
	if (!r && memcmp(got, want, size))
		r = -EPROTO;
	if (r) {
		fprintf(stderr, "ddss-coh-bench: raw and library access disagree\n");
		goto out;
	}
	memset(want, 0, size);
	r = ddss_get(b->ctx, b->vsame, 0, got, size);
	if (!r && memcmp(got, want, size))
		r = -EPROTO;
	if (r)
		fprintf(stderr, "ddss-coh-bench: a new version segment does not read as zeros\n");
out:
	free(want);
	free(got);
	return r ? check_failed("get / put", size, r) : 0;
}

static int alloc_size(struct bench *b, size_t size)
{
	for (int m = 0; m < NMODELS; m++)
		if (seg_alloc(b, models[m], size, &b->key[m]))
			return 1;
	if (seg_alloc(b, DDSS_COHERENCE_VERSION, size, &b->vsame) ||
	    seg_alloc(b, DDSS_COHERENCE_VERSION, size, &b->vchanged))
		return 1;
	if (seg_data_off(b, b->vsame, size, &b->vword_off))
		return 1;
	b->vword_off = b->vword_off - DDSS_SEG_HDR_LEN + DDSS_SEG_HDR_VERSION;
	return seg_data_off(b, b->key[M_NULL], size, &b->data_off) ? 1 : 0;
}

/* Release what alloc_size allocated (keys left 0 were not). */
static int release_size(struct bench *b)
{
	ddss_key_t *keys[NMODELS + 2];
	int rc = 0;

	for (int m = 0; m < NMODELS; m++)
		keys[m] = &b->key[m];
	keys[NMODELS] = &b->vsame;
	keys[NMODELS + 1] = &b->vchanged;
	for (int i = 0; i < NMODELS + 2; i++) {
		int r;

		if (!*keys[i])
			continue;
		r = ddss_release_ss(b->ctx, *keys[i]);
		if (r) {
			fprintf(stderr, "ddss-coh-bench: release failed: %s\n", ddss_strerror(r));
			rc = 1;
		}
		*keys[i] = 0;
	}
	return rc;
}

static void summarize(double *lat, size_t n, struct op_stat *s)
{
	bench_summarize(lat, n, &s->med, &s->p99, &s->mean);
}

/*
 * How many ops take one turn, from @op on in the order. The unchanged version get shares
 * its turn with the two measurements of the raw 8-byte read and with its own floor, op by
 * op (read, get, read again, floor): whatever the machine does during a block then weighs
 * on the four alike. Timed in separate blocks they differed by up to 3% (A/A) on a noisy
 * host; paired, by under 1%.
 */
static unsigned turn_len(enum bench_op op)
{
	/* measure() orders B_VGET_SAME, B_RAW_READ8_AGAIN, B_VCHECK_FLOOR right after */
	return op == B_RAW_READ8 ? 4 : 1;
}

/*
 * All operations at @size, interleaved in blocks; one sample array per operation, reduced
 * once the size is done.
 */
static int measure_size(struct bench *b, const struct bench_opts *o, size_t size,
			struct op_stat st[B_COUNT])
{
	size_t n = (size_t)o->iters * o->rounds;
	double *lat[B_COUNT] = { 0 }, d;
	struct ddss_coh_stats c0, c1;
	int rc = 0;

	for (int k = 0; k < B_COUNT; k++) {
		lat[k] = calloc(n, sizeof(double));
		if (!lat[k] && !rc)
			rc = op_failed((enum bench_op)k, size, " (no memory for samples)", -ENOMEM);
	}
	if (!rc)
		rc = alloc_size(b, size);
	if (!rc)
		rc = check_size(b, size);
	/* Warm up every path (connections, descriptors, lock slots, cached copies). */
	for (int k = 0; !rc && k < B_COUNT; k++)
		for (unsigned i = 0; !rc && i < WARMUP; i++) {
			int err = timed_op(b, b->order[k], size, &d);

			if (err)
				rc = op_failed(b->order[k], size, " during warm-up", err);
		}
	for (unsigned r = 0; !rc && r < o->rounds; r++)
		for (unsigned blk = 0; !rc && blk < o->iters; blk += BLOCK)
			for (int k = 0; !rc && k < B_COUNT; k += turn_len(b->order[k])) {
				const enum bench_op *turn = &b->order[k];
				unsigned nops = turn_len(turn[0]);
				/* Raw reads move no coherence counter: a paired turn's are the get's. */
				enum bench_op counted = nops == 1 ? turn[0] : B_VGET_SAME;

				ddss_coh_stats_get(b->ctx, &c0);
				for (unsigned i = blk; !rc && i < o->iters && i < blk + BLOCK; i++)
					for (unsigned j = 0; !rc && j < nops; j++) {
						int err = timed_op(b, turn[j], size,
								   &lat[turn[j]][(size_t)r * o->iters + i]);

						if (err)
							rc = op_failed(turn[j], size, "", err);
					}
				ddss_coh_stats_get(b->ctx, &c1);
				st[counted].fetches += c1.fetches - c0.fetches;
				st[counted].hits += c1.hits - c0.hits;
				st[counted].retries += c1.retries - c0.retries;
			}
	for (int k = 0; k < B_COUNT; k++) {
		if (!rc)
			summarize(lat[k], n, &st[k]);
		free(lat[k]);
	}
	if (release_size(b))
		rc = 1;
	return rc;
}

/* The ladder below @max, then @max. */
static unsigned size_list(size_t max, size_t sizes[MAX_SIZES])
{
	unsigned n = 0;

	for (size_t i = 0; i < sizeof(ladder) / sizeof(ladder[0]) && ladder[i] < max; i++)
		sizes[n++] = ladder[i];
	sizes[n++] = max;
	return n;
}

static const char *completion_name(void)
{
	const char *c = getenv("DDSS_COMPLETION");

	return c && *c ? c : "adaptive";
}

/* The three targets' quotients at one size. */
struct ratios {
	double null_put, null_get; /* / raw write, / raw read */
	double strict_bound;       /* STRICT_ATOMICS raw cas + raw write */
	double strict;             /* strict put / strict_bound */
	double vsame;              /* unchanged version get / raw 8-byte read */
	double read8_aa;           /* the raw 8-byte read's second measurement / its first */
	double vfloor;             /* version check floor / raw 8-byte read */
};

static struct ratios ratios_of(const struct op_stat *x)
{
	struct ratios q;

	q.null_put = x[B_PUT + M_NULL].med / x[B_RAW_WRITE].med;
	q.null_get = x[B_GET + M_NULL].med / x[B_RAW_READ].med;
	q.strict_bound = STRICT_ATOMICS * x[B_RAW_CAS].med + x[B_RAW_WRITE].med;
	q.strict = x[B_PUT + M_STRICT].med / q.strict_bound;
	q.vsame = x[B_VGET_SAME].med / x[B_RAW_READ8].med;
	q.read8_aa = x[B_RAW_READ8_AGAIN].med / x[B_RAW_READ8].med;
	q.vfloor = x[B_VCHECK_FLOOR].med / x[B_RAW_READ8].med;
	return q;
}

static void print_targets(FILE *f, const struct op_stat *x)
{
	struct ratios q = ratios_of(x);

	fprintf(f, "target 1 at 1 B: null put %.3f us / raw write %.3f us = %.3f, null get %.3f us "
		"/ raw read %.3f us = %.3f (target: both <= %.2f) -> %s\n",
		x[B_PUT + M_NULL].med, x[B_RAW_WRITE].med, q.null_put, x[B_GET + M_NULL].med,
		x[B_RAW_READ].med, q.null_get, NULL_TARGET,
		q.null_put <= NULL_TARGET && q.null_get <= NULL_TARGET ? "met" : "NOT met");
	fprintf(f, "target 2 at 1 B: strict put %.3f us <= %.1f x raw atomic %.3f us + raw write "
		"%.3f us = %.3f us; strict put / bound = %.3f -> %s\n",
		x[B_PUT + M_STRICT].med, STRICT_ATOMICS, x[B_RAW_CAS].med, x[B_RAW_WRITE].med,
		q.strict_bound, q.strict, q.strict <= 1.0 ? "met" : "NOT met");
	fprintf(f, "target 3 at 1 B: version get, unchanged segment %.3f us <= raw 8-byte read "
		"%.3f us; ratio %.3f, %+.3f us (%llu fetches, %llu cache hits in the timed gets) "
		"-> %s\n", x[B_VGET_SAME].med, x[B_RAW_READ8].med, q.vsame,
		x[B_VGET_SAME].med - x[B_RAW_READ8].med,
		(unsigned long long)x[B_VGET_SAME].fetches, (unsigned long long)x[B_VGET_SAME].hits,
		q.vsame <= 1.0 ? "met" : "NOT met");
	fprintf(f, "  A/A: the same raw 8-byte read measured again, in turn with the version gets: "
		"%.3f us, %.3f of the first (how far two measurements of one operation differ in "
		"this run)\n", x[B_RAW_READ8_AGAIN].med, q.read8_aa);
	fprintf(f, "  floor: the version get's fetch and copy without the call, in turn with it: "
		"%.3f us, %.3f of the raw 8-byte read; the call's own work = get - floor = "
		"%+.3f us\n", x[B_VCHECK_FLOOR].med, q.vfloor,
		x[B_VGET_SAME].med - x[B_VCHECK_FLOOR].med);
}

static void report_csv(struct ddss_ctx *ctx, const size_t *sizes, unsigned nsizes,
		       struct op_stat (*st)[B_COUNT])
{
	const char *tp = ddss_net_transport_name(ctx->net), *comp = completion_name();
	char name[32];

	printf("transport,completion,size,op,median_us,p99_us,mean_us,fetches,hits,retries\n");
	for (unsigned s = 0; s < nsizes; s++)
		for (int k = 0; k < B_COUNT; k++) {
			const struct op_stat *x = &st[s][k];

			printf("%s,%s,%zu,%s,%.3f,%.3f,%.3f,%llu,%llu,%llu\n", tp, comp, sizes[s],
			       op_name((enum bench_op)k, name, sizeof(name)), x->med, x->p99,
			       x->mean, (unsigned long long)x->fetches,
			       (unsigned long long)x->hits, (unsigned long long)x->retries);
		}
	/* stdout stays pure CSV; the targets go with the diagnostics. */
	print_targets(stderr, st[0]);
}

/* Rows = sizes; raw read, write, atomic, then put and get per model; medians or p99. */
static void print_latency_table(const size_t *sizes, unsigned nsizes,
				struct op_stat (*st)[B_COUNT], bool p99)
{
	printf("%s in us\n%8s %-26s", p99 ? "p99" : "medians", "", "|raw");
	for (int m = 0; m < NMODELS; m++)
		printf(" |%-16s", model_names[m]);
	printf("\n%8s %8s %8s %8s", "size", "read", "write", "atomic");
	for (int m = 0; m < NMODELS; m++)
		printf(" %8s %8s", "put", "get");
	printf("\n");
	for (unsigned s = 0; s < nsizes; s++) {
		const struct op_stat *x = st[s];

		printf("%8zu %8.2f %8.2f %8.2f", sizes[s], p99 ? x[B_RAW_READ].p99 : x[B_RAW_READ].med,
		       p99 ? x[B_RAW_WRITE].p99 : x[B_RAW_WRITE].med,
		       p99 ? x[B_RAW_CAS].p99 : x[B_RAW_CAS].med);
		for (int m = 0; m < NMODELS; m++)
			printf(" %8.2f %8.2f", p99 ? x[B_PUT + m].p99 : x[B_PUT + m].med,
			       p99 ? x[B_GET + m].p99 : x[B_GET + m].med);
		printf("\n");
	}
}

static void report(struct ddss_ctx *ctx, const struct bench_opts *o, const size_t *sizes,
		   unsigned nsizes, struct op_stat (*st)[B_COUNT])
{
	const char *tp = ddss_net_transport_name(ctx->net), *comp = completion_name();

	if (o->csv) {
		report_csv(ctx, sizes, nsizes, st);
		return;
	}
	printf("ddss-coh-bench: transport=%s completion=%s, %zu samples per op and size, %s\n",
	       tp, comp, (size_t)o->iters * o->rounds,
	       o->pin ? "ranks pinned to CPUs 0 and 1" : "unpinned");
	printf("coherence models (DDSS paper, Figure 4a): put and get per model, uncontended, "
	       "every segment at rank %d; temporal t = %d ms, delta x = %d\n", HOME, TEMPORAL_MS,
	       DELTA_X);
	printf("raw = the transport alone, same home, same run: read / write of the null "
	       "segment's bytes, atomic = one 8-byte cas\n");
	printf("gets repeat with no put in between (but before the first of each block of %d): "
	       "write, version, delta and temporal gets are their cache path\n", BLOCK);
	print_latency_table(sizes, nsizes, st, false);
	print_latency_table(sizes, nsizes, st, true);

	printf("8-byte operations and version gets, median (p99) in us; fetches / hits = data "
	       "transfers / cache hits counted by ddss_coh_stats_get over the timed gets\n");
	printf("%8s %17s %17s %17s %17s %17s %17s %17s\n", "size", "raw_cas", "raw_fadd",
	       "raw_read8", "vget_unchanged", "fetches/hits", "vget_changed", "fetches/hits");
	for (unsigned s = 0; s < nsizes; s++) {
		const struct op_stat *x = st[s];
		char fh[2][40];

		for (int i = 0; i < 2; i++) {
			const struct op_stat *v = &x[i ? B_VGET_CHANGED : B_VGET_SAME];

			snprintf(fh[i], sizeof(fh[i]), "%llu/%llu", (unsigned long long)v->fetches,
				 (unsigned long long)v->hits);
		}
		printf("%8zu %8.2f (%6.2f) %8.2f (%6.2f) %8.2f (%6.2f) %8.2f (%6.2f) %17s "
		       "%8.2f (%6.2f) %17s\n", sizes[s], x[B_RAW_CAS].med, x[B_RAW_CAS].p99,
		       x[B_RAW_FADD].med, x[B_RAW_FADD].p99, x[B_RAW_READ8].med, x[B_RAW_READ8].p99,
		       x[B_VGET_SAME].med, x[B_VGET_SAME].p99, fh[0], x[B_VGET_CHANGED].med,
		       x[B_VGET_CHANGED].p99, fh[1]);
	}

	printf("model gets over the timed blocks: fetches/hits (retries of write and delta "
	       "gets, if any, after a +)\n%8s", "size");
	for (int m = 0; m < NMODELS; m++)
		printf(" %13s", model_names[m]);
	printf("\n");
	for (unsigned s = 0; s < nsizes; s++) {
		printf("%8zu", sizes[s]);
		for (int m = 0; m < NMODELS; m++) {
			const struct op_stat *g = &st[s][B_GET + m];
			char fh[48];
			int len = snprintf(fh, sizeof(fh), "%llu/%llu",
					   (unsigned long long)g->fetches,
					   (unsigned long long)g->hits);

			if (g->retries && len > 0 && (size_t)len < sizeof(fh))
				snprintf(fh + len, sizeof(fh) - (size_t)len, "+%llu",
					 (unsigned long long)g->retries);
			printf(" %13s", fh);
		}
		printf("\n");
	}

	printf("target ratios at every size (medians): null put / raw write, null get / raw read "
	       "(<= %.2f); strict put / (%.1f raw atomic + raw write) (<= 1); version get "
	       "unchanged / raw 8-byte read (<= 1)\n", NULL_TARGET, STRICT_ATOMICS);
	printf("%8s %10s %10s %12s %10s %10s %10s %10s\n", "size", "null_put", "null_get",
	       "strict_bound", "strict", "vget_same", "read8_aa", "vfloor");
	for (unsigned s = 0; s < nsizes; s++) {
		struct ratios q = ratios_of(st[s]);

		printf("%8zu %10.3f %10.3f %12.3f %10.3f %10.3f %10.3f %10.3f\n", sizes[s],
		       q.null_put, q.null_get, q.strict_bound, q.strict, q.vsame, q.read8_aa,
		       q.vfloor);
	}
	/* sizes[0] is always 1 B. */
	print_targets(stdout, st[0]);
}

/* The scratch segment of the raw atomics: an 8-byte null segment at rank 2. */
static int scratch_alloc(struct bench *b, ddss_key_t *key_p)
{
	uint64_t off;

	if (seg_alloc(b, DDSS_COHERENCE_NULL, 8, key_p))
		return 1;
	if (seg_data_off(b, *key_p, 8, &off))
		return 1;
	b->fadd_off = off;
	b->word_off = off - DDSS_SEG_HDR_LEN + DDSS_SEG_HDR_VERSION;
	return 0;
}

static int measure(struct ddss_ctx *ctx, const struct bench_opts *o)
{
	struct op_stat (*st)[B_COUNT];
	struct bench b = { .ctx = ctx };
	size_t sizes[MAX_SIZES];
	unsigned nsizes = size_list(o->size, sizes), k = 0;
	ddss_key_t scratch = 0;
	double us_per_tick;
	uint64_t tick0;
	int64_t ns0;
	int r, rc = 0;

	/*
	 * Raw ones first, the raw 8-byte read last of them, then the unchanged version get,
	 * the raw 8-byte read once more and the get's floor: these four take one turn
	 * (turn_len), so the version check sits between two measurements of the raw read
	 * (their quotient is the run's A/A noise); then each model's puts and gets, and the
	 * changed version get.
	 */
	for (int op = B_RAW_READ; op < B_PUT; op++)
		b.order[k++] = (enum bench_op)op;
	b.order[k++] = B_VGET_SAME;
	b.order[k++] = B_RAW_READ8_AGAIN;
	b.order[k++] = B_VCHECK_FLOOR;
	for (int m = 0; m < NMODELS; m++) {
		b.order[k++] = (enum bench_op)(B_PUT + m);
		b.order[k++] = (enum bench_op)(B_GET + m);
	}
	b.order[k++] = B_VGET_CHANGED;
	st = calloc(nsizes, sizeof(*st));
	b.buf = aligned_alloc(64, (o->size + 63) & ~(size_t)63);
	b.floor_copy = aligned_alloc(64, (o->size + 63) & ~(size_t)63);
	if (!st || !b.buf || !b.floor_copy) {
		fprintf(stderr, "ddss-coh-bench: out of memory\n");
		rc = 1;
		goto out_free;
	}
	memset(b.buf, 0x5a, o->size);
	memset(b.floor_copy, 0, o->size);
	rc = scratch_alloc(&b, &scratch);
	ns0 = ddss_now_ns();
	tick0 = bench_ticks();
	for (unsigned s = 0; !rc && s < nsizes; s++)
		rc = measure_size(&b, o, sizes[s], st[s]);
	if (!rc) {
		us_per_tick = (double)(ddss_now_ns() - ns0) / 1000.0 / (double)(bench_ticks() - tick0);
		for (unsigned s = 0; s < nsizes; s++)
			for (int i = 0; i < B_COUNT; i++) {
				st[s][i].med *= us_per_tick;
				st[s][i].p99 *= us_per_tick;
				st[s][i].mean *= us_per_tick;
			}
		report(ctx, o, sizes, nsizes, st);
	}
	if (scratch) {
		r = ddss_release_ss(ctx, scratch);
		if (r) {
			fprintf(stderr, "ddss-coh-bench: release failed: %s\n", ddss_strerror(r));
			rc = 1;
		}
	}
out_free:
	free(b.floor_copy);
	free(b.buf);
	free(st);
	return rc;
}

int main(int argc, char **argv)
{
	return bench_two_ranks_main(argc, argv, "ddss-coh-bench", "--max-size", DEFAULT_MAX_SIZE,
				    LIMIT_MAX_SIZE, measure);
}
