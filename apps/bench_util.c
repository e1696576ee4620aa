/* Shared benchmark helpers (see bench_util.h). */
#include "bench_util.h"
#include "ddss/ddss.h"
#include "net/transport.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

void bench_pin_rank(void)
{
	const char *r = getenv("DDSS_RANK");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (!r || ncpu < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET((atoi(r) - 1) % ncpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int bench_parse(int argc, char **argv, const char *size_flag, size_t size, size_t size_max,
		struct bench_opts *o)
{
	*o = (struct bench_opts){ .iters = 2000, .rounds = 5, .size = size, .pin = true };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			o->iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			o->rounds = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], size_flag) && i + 1 < argc)
			o->size = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--no-pin"))
			o->pin = false;
		else if (!strcmp(argv[i], "--csv"))
			o->csv = true;
		else
			return -1;
	}
	return o->iters && o->rounds && o->size && o->size <= size_max ? 0 : -1;
}

/*
 * Rank 2 waits in one ddss_barrier for the whole measurement, which in the Soft-RoCE guest
 * takes minutes; the default barrier timeout (30 s) would end it. ddssrun --timeout and
 * the peer-down check still end a run that hangs or loses rank 1.
 */
#define BARRIER_TIMEOUT_MS (60 * 60 * 1000)

int bench_two_ranks_main(int argc, char **argv, const char *name, const char *size_flag,
			 size_t size, size_t size_max,
			 int (*measure)(struct ddss_ctx *ctx, const struct bench_opts *o))
{
	struct ddss_attr attr;
	struct ddss_ctx *ctx;
	struct bench_opts o;
	int r, f, rc = 0;

	if (bench_parse(argc, argv, size_flag, size, size_max, &o)) {
		fprintf(stderr, "usage: ddssrun -n 2 %s [--iters N] [--rounds R] [%s B<=%zu] "
			"[--no-pin] [--csv]\n", argv[0], size_flag, size_max);
		return 2;
	}
	if (o.pin)
		bench_pin_rank();
	ddss_attr_init(&attr);
	attr.connect_timeout_ms = BARRIER_TIMEOUT_MS;
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "%s: ddss_init: %s\n", name, ddss_strerror(r));
		return 1;
	}
	if (ddss_size(ctx) != 2) {
		if (ddss_rank(ctx) == 1)
			fprintf(stderr, "%s: run with exactly 2 ranks (ddssrun -n 2)\n", name);
		ddss_finalize(ctx);
		return 2;
	}
	if (ddss_rank(ctx) == 1)
		rc = measure(ctx, &o);
	fflush(stdout);
	r = ddss_barrier(ctx);
	if (r)
		fprintf(stderr, "%s: rank %u: barrier: %s\n", name, ddss_rank(ctx), ddss_strerror(r));
	f = ddss_finalize(ctx);
	if (f)
		fprintf(stderr, "%s: ddss_finalize: %s\n", name, ddss_strerror(f));
	return rc ? rc : (r || f ? 1 : 0);
}

void bench_summarize(double *lat, size_t n, double *med_p, double *p99_p, double *mean_p)
{
	double sum = 0;

	qsort(lat, n, sizeof(double), bench_cmp_double);
	for (size_t i = 0; i < n; i++)
		sum += lat[i];
	*med_p = lat[n / 2];
	*p99_p = lat[n * 99 / 100];
	*mean_p = sum / (double)n;
}
