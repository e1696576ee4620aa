/*
 * ddss-seg-bench: what the segment layer adds to a transfer. ddss_get / ddss_put are timed
 * next to the raw transport read / write of the same bytes at the same pool offset, between
 * the same two processes, in the same run; the difference of the medians is the library's
 * cost (key check, lock-free descriptor lookup, reference count, range check).
 *
 *   ddssrun -n 2 ddss-seg-bench [--iters N] [--rounds R] [--max-size B] [--no-pin] [--csv]
 *
 * Rank 1 measures, rank 2 is the home of one segment of --max-size bytes (default 64 KiB),
 * which rank 1 allocates there; the raw operations use the segment's data offset from its
 * descriptor, so both paths move the same bytes. Sizes: 1 B and every power of 8 below
 * --max-size, then --max-size itself (1, 8, 64, 512, 4 KiB, 32 KiB, 64 KiB by default):
 * inline, staged and registered-on-the-fly buffers on verbs, one and several segments on
 * tcp. The local buffer is a plain heap buffer, as a user's would be.
 *
 * Each rank pins itself (all its threads) to CPU rank-1: unpinned, the scheduler sometimes
 * runs both ranks on one core and the numbers measure placement. For each size the four
 * operations take turns in blocks of 25 (raw read, get, raw write, put, raw read, ...) so
 * drift on a shared machine hits all alike. The completion mode comes from DDSS_COMPLETION
 * (event | poll). Prints medians, the added cost and the ratio to raw, then p99 and mean.
 * Exit status: 0, 1 if an operation failed, 2 on bad usage or a group of other than 2 ranks.
 */
#include "core/access.h"
#include "core/ctx.h"

#include "bench_util.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOME 2
#define DEFAULT_MAX_SIZE (64u << 10)
/* Far below the default 64 MiB pool, so the segment always fits. */
#define LIMIT_MAX_SIZE (16u << 20)
/* 1, 8, ..., 8^8 (below LIMIT_MAX_SIZE), and the max itself. */
#define MAX_SIZES 10
/* Operations take turns in blocks this long (see tp_bench.c: emulation runs in spells). */
#define BLOCK 25
#define WARMUP 200
#define TARGET_US 0.5

enum bench_op { B_RAW_READ, B_GET, B_RAW_WRITE, B_PUT, B_COUNT };
static const char *const op_names[B_COUNT] = { "raw_read", "get", "raw_write", "put" };

/* One operation's statistics at one size, in TSC ticks until converted. */
struct op_stat {
	double med, p99, mean;
};

struct bench {
	struct ddss_ctx *ctx;
	ddss_key_t key;
	uint64_t data_off; /* the segment's first byte in rank 2's pool */
	char *buf;
	double *lat;       /* iters * rounds samples of one operation */
};

static int one_op(struct bench *b, enum bench_op op, size_t size)
{
	switch (op) {
	case B_RAW_READ:
		return ddss_tp_read(b->ctx->tp, HOME, b->data_off, b->buf, size);
	case B_GET:
		return ddss_get(b->ctx, b->key, 0, b->buf, size);
	case B_RAW_WRITE:
		return ddss_tp_write(b->ctx->tp, HOME, b->data_off, b->buf, size);
	case B_PUT:
		return ddss_put(b->ctx, b->key, 0, b->buf, size);
	default:
		return -EINVAL;
	}
}

static int op_failed(enum bench_op op, size_t size, const char *when, int err)
{
	fprintf(stderr, "ddss-seg-bench: %s of %zu B failed%s: %s\n", op_names[op], size, when,
		ddss_strerror(err));
	return 1;
}

/*
 * Before timing anything: the raw offset must be the segment's, or the comparison moves
 * different bytes. A put is read back raw, a raw write is read back with a get.
 */
static int check_offset(struct bench *b, size_t size)
{
	char *want = malloc(size);
	int r = want ? 0 : -ENOMEM;

	for (size_t i = 0; !r && i < size; i++)
		want[i] = (char)(i * 7 + 1);
	if (!r)
		r = ddss_put(b->ctx, b->key, 0, want, size);
	if (!r)
		r = ddss_tp_read(b->ctx->tp, HOME, b->data_off, b->buf, size);
	if (!r && memcmp(b->buf, want, size))
		r = -EPROTO;
	for (size_t i = 0; !r && i < size; i++)
		want[i] = (char)(i * 13 + 5);
	if (!r)
		r = ddss_tp_write(b->ctx->tp, HOME, b->data_off, want, size);
	if (!r)
		r = ddss_get(b->ctx, b->key, 0, b->buf, size);
	if (!r && memcmp(b->buf, want, size))
		r = -EPROTO;
	free(want);
	if (r)
		fprintf(stderr, "ddss-seg-bench: raw and library access disagree: %s\n",
			ddss_strerror(r));
	return r ? 1 : 0;
}

static void summarize(double *lat, size_t n, struct op_stat *s)
{
	bench_summarize(lat, n, &s->med, &s->p99, &s->mean);
}

/*
 * All four operations at @size, interleaved; one sample array is filled per operation and
 * reduced before the next, so memory stays at one array whatever the sizes.
 */
static int measure_size(struct bench *b, const struct bench_opts *o, size_t size,
			struct op_stat st[B_COUNT])
{
	size_t n = (size_t)o->iters * o->rounds;
	double *lat[B_COUNT];
	int rc = 0;

	for (int k = 0; k < B_COUNT; k++) {
		lat[k] = calloc(n, sizeof(double));
		if (!lat[k])
			rc = op_failed((enum bench_op)k, size, " (no memory for samples)", -ENOMEM);
	}
	/* Warm up every path (connections, staging slots, the descriptor cache). */
	for (int k = 0; !rc && k < B_COUNT; k++)
		for (unsigned i = 0; !rc && i < WARMUP; i++) {
			int err = one_op(b, (enum bench_op)k, size);

			if (err)
				rc = op_failed((enum bench_op)k, size, " during warm-up", err);
		}
	for (unsigned r = 0; !rc && r < o->rounds; r++)
		for (unsigned blk = 0; !rc && blk < o->iters; blk += BLOCK)
			for (int k = 0; !rc && k < B_COUNT; k++)
				for (unsigned i = blk; i < o->iters && i < blk + BLOCK; i++) {
					uint64_t t0 = bench_ticks();
					int err = one_op(b, (enum bench_op)k, size);

					if (err) {
						rc = op_failed((enum bench_op)k, size, "", err);
						break;
					}
					lat[k][(size_t)r * o->iters + i] = (double)(bench_ticks() - t0);
				}
	for (int k = 0; k < B_COUNT; k++) {
		if (!rc)
			summarize(lat[k], n, &st[k]);
		free(lat[k]);
	}
	return rc;
}

/* 1 B, the powers of 8 below @max, then @max. */
static unsigned size_list(size_t max, size_t sizes[MAX_SIZES])
{
	unsigned n = 0;

	for (size_t s = 1; s < max; s *= 8)
		sizes[n++] = s;
	sizes[n++] = max;
	return n;
}

static const char *completion_name(void)
{
	const char *c = getenv("DDSS_COMPLETION");

	return c && *c ? c : "adaptive";
}

static void report(struct ddss_ctx *ctx, const struct bench_opts *o, const size_t *sizes,
		   unsigned nsizes, struct op_stat (*st)[B_COUNT])
{
	const char *tp = ddss_net_transport_name(ctx->net), *comp = completion_name();
	const char *target = "target: the library's added cost at 1 B should be < 0.5 us "
			     "(the DDSS paper: 0.35 us)";

	if (o->csv) {
		/* stdout stays pure CSV; the target goes with the diagnostics. */
		fprintf(stderr, "%s\n", target);
		printf("transport,completion,size,op,median_us,p99_us,mean_us,added_us,ratio_to_raw\n");
		for (unsigned s = 0; s < nsizes; s++)
			for (int k = 0; k < B_COUNT; k++) {
				/* Each library op follows its raw op in enum bench_op. */
				const struct op_stat *x = &st[s][k], *raw = &st[s][k & ~1];

				printf("%s,%s,%zu,%s,%.3f,%.3f,%.3f,%.3f,%.3f\n", tp, comp, sizes[s],
				       op_names[k], x->med, x->p99, x->mean, x->med - raw->med,
				       x->med / raw->med);
			}
		return;
	}
	printf("ddss-seg-bench: transport=%s completion=%s, %zu samples per op and size, %s\n",
	       tp, comp, (size_t)o->iters * o->rounds,
	       o->pin ? "ranks pinned to CPUs 0 and 1" : "unpinned");
	printf("%s\n", target);
	printf("medians in us; added = library median - raw median; x_raw = library / raw\n");
	printf("%8s %12s %10s %12s %7s %12s %10s %12s %7s\n", "size", "raw_read_us", "get_us",
	       "get_added_us", "get_x", "raw_write_us", "put_us", "put_added_us", "put_x");
	for (unsigned s = 0; s < nsizes; s++) {
		const struct op_stat *x = st[s];

		printf("%8zu %12.3f %10.3f %12.3f %7.3f %12.3f %10.3f %12.3f %7.3f\n", sizes[s],
		       x[B_RAW_READ].med, x[B_GET].med, x[B_GET].med - x[B_RAW_READ].med,
		       x[B_GET].med / x[B_RAW_READ].med, x[B_RAW_WRITE].med, x[B_PUT].med,
		       x[B_PUT].med - x[B_RAW_WRITE].med, x[B_PUT].med / x[B_RAW_WRITE].med);
	}
	for (int p99 = 1; p99 >= 0; p99--) {
		printf("%s in us\n%8s", p99 ? "p99" : "mean", "size");
		for (int k = 0; k < B_COUNT; k++)
			printf(" %12s", op_names[k]);
		printf("\n");
		for (unsigned s = 0; s < nsizes; s++) {
			printf("%8zu", sizes[s]);
			for (int k = 0; k < B_COUNT; k++)
				printf(" %12.3f", p99 ? st[s][k].p99 : st[s][k].mean);
			printf("\n");
		}
	}
	/* sizes[0] is always 1 B. */
	printf("added at 1 B: get %.3f us, put %.3f us (target < %.1f us)\n",
	       st[0][B_GET].med - st[0][B_RAW_READ].med, st[0][B_PUT].med - st[0][B_RAW_WRITE].med,
	       TARGET_US);
}

/*
 * The public API's own cost at 1 B: ddss_get / ddss_put (the mode's table and the
 * statistics counters) against the direct-mode calls behind the table, interleaved in
 * blocks as above. Then the run's counters, as ddss_stats_get reports them.
 */
enum api_op { A_GET, A_IMPL_GET, A_PUT, A_IMPL_PUT, A_COUNT };

static int api_op(struct bench *b, enum api_op op)
{
	switch (op) {
	case A_GET:
		return ddss_get(b->ctx, b->key, 0, b->buf, 1);
	case A_IMPL_GET:
		return ddss_access_get(b->ctx, b->key, 0, b->buf, 1, 0, NULL);
	case A_PUT:
		return ddss_put(b->ctx, b->key, 0, b->buf, 1);
	case A_IMPL_PUT:
		return ddss_access_put(b->ctx, b->key, 0, b->buf, 1);
	default:
		return -EINVAL;
	}
}

static int measure_api(struct bench *b, const struct bench_opts *o, double us_per_tick)
{
	size_t n = (size_t)o->iters * o->rounds;
	struct op_stat st[A_COUNT];
	struct ddss_stats ds;
	double *lat[A_COUNT];
	int rc = 0;

	for (int k = 0; k < A_COUNT; k++)
		if (!(lat[k] = calloc(n, sizeof(double))))
			rc = -ENOMEM;
	for (unsigned r = 0; !rc && r < o->rounds; r++)
		for (unsigned blk = 0; !rc && blk < o->iters; blk += BLOCK)
			for (int k = 0; !rc && k < A_COUNT; k++)
				for (unsigned i = blk; !rc && i < o->iters && i < blk + BLOCK; i++) {
					uint64_t t0 = bench_ticks();

					rc = api_op(b, (enum api_op)k);
					lat[k][(size_t)r * o->iters + i] = (double)(bench_ticks() - t0);
				}
	for (int k = 0; k < A_COUNT; k++) {
		if (!rc) {
			summarize(lat[k], n, &st[k]);
			st[k].med *= us_per_tick;
		}
		free(lat[k]);
	}
	if (rc) {
		fprintf(stderr, "ddss-seg-bench: API layer run failed: %s\n", ddss_strerror(rc));
		return 1;
	}
	printf("API layer at 1 B (mode table + statistics counters), medians: get %.3f us vs "
	       "%.3f us behind it (%+.3f us, %+.2f%%); put %.3f us vs %.3f us (%+.3f us, "
	       "%+.2f%%)\n", st[A_GET].med, st[A_IMPL_GET].med, st[A_GET].med - st[A_IMPL_GET].med,
	       100.0 * (st[A_GET].med / st[A_IMPL_GET].med - 1.0), st[A_PUT].med,
	       st[A_IMPL_PUT].med, st[A_PUT].med - st[A_IMPL_PUT].med,
	       100.0 * (st[A_PUT].med / st[A_IMPL_PUT].med - 1.0));
	if (!ddss_stats_get(b->ctx, &ds)) {
		uint64_t errors = 0;

		for (unsigned e = 0; e < DDSS_STAT_NERRNO; e++)
			errors += ds.errors[e];
		printf("ddss_stats_get after the run: get %llu (%llu B), put %llu (%llu B), "
		       "errors %llu, timeouts %llu\n",
		       (unsigned long long)ds.ops[DDSS_STAT_GET],
		       (unsigned long long)ds.bytes[DDSS_STAT_GET],
		       (unsigned long long)ds.ops[DDSS_STAT_PUT],
		       (unsigned long long)ds.bytes[DDSS_STAT_PUT], (unsigned long long)errors,
		       (unsigned long long)ds.timeouts);
	}
	return 0;
}

static int measure(struct ddss_ctx *ctx, const struct bench_opts *o)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK, .rank = HOME };
	const struct ddss_seg_desc *d;
	struct op_stat (*st)[B_COUNT];
	struct bench b = { .ctx = ctx };
	size_t sizes[MAX_SIZES];
	unsigned nsizes = size_list(o->size, sizes);
	double us_per_tick;
	uint64_t tick0;
	int64_t ns0;
	int r, rc = 0;

	st = calloc(nsizes, sizeof(*st));
	b.buf = aligned_alloc(64, (o->size + 63) & ~(size_t)63);
	if (!st || !b.buf) {
		fprintf(stderr, "ddss-seg-bench: out of memory\n");
		rc = 1;
		goto out_free;
	}
	memset(b.buf, 0x5a, o->size);
	r = ddss_allocate_ss(ctx, o->size, &sa, &b.key);
	if (r) {
		fprintf(stderr, "ddss-seg-bench: cannot allocate %zu B at rank %d: %s\n",
			o->size, HOME, ddss_strerror(r));
		rc = 1;
		goto out_free;
	}
	r = ddss_ctx_desc(ctx, b.key, &d);
	if (r) {
		fprintf(stderr, "ddss-seg-bench: no descriptor for the segment: %s\n",
			ddss_strerror(r));
		rc = 1;
		goto out_release;
	}
	if (d->home != HOME || d->size < o->size) {
		fprintf(stderr, "ddss-seg-bench: segment at rank %u, %llu B; asked rank %d, %zu B\n",
			d->home, (unsigned long long)d->size, HOME, o->size);
		rc = 1;
	}
	b.data_off = d->data_off;
	ddss_seg_cache_put(d);
	if (!rc)
		rc = check_offset(&b, o->size);
	ns0 = ddss_now_ns();
	tick0 = bench_ticks();
	for (unsigned s = 0; !rc && s < nsizes; s++)
		rc = measure_size(&b, o, sizes[s], st[s]);
	if (!rc) {
		us_per_tick = (double)(ddss_now_ns() - ns0) / 1000.0 / (double)(bench_ticks() - tick0);
		for (unsigned s = 0; s < nsizes; s++)
			for (int k = 0; k < B_COUNT; k++) {
				st[s][k].med *= us_per_tick;
				st[s][k].p99 *= us_per_tick;
				st[s][k].mean *= us_per_tick;
			}
		report(ctx, o, sizes, nsizes, st);
		if (!o->csv)
			rc = measure_api(&b, o, us_per_tick);
	}
out_release:
	r = ddss_release_ss(ctx, b.key);
	if (r) {
		fprintf(stderr, "ddss-seg-bench: release failed: %s\n", ddss_strerror(r));
		rc = 1;
	}
out_free:
	free(b.buf);
	free(st);
	return rc;
}

int main(int argc, char **argv)
{
	return bench_two_ranks_main(argc, argv, "ddss-seg-bench", "--max-size", DEFAULT_MAX_SIZE,
				    LIMIT_MAX_SIZE, measure);
}
