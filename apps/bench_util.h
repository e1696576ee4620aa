/* What the benchmark programs share: pinning, the sample clock, sorting samples. */
#ifndef DDSS_APPS_BENCH_UTIL_H
#define DDSS_APPS_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#else
int64_t ddss_now_ns(void);
#endif

/* The options every benchmark takes. */
struct bench_opts {
	unsigned iters, rounds; /* --iters, --rounds */
	size_t size;            /* the benchmark's size option (@size_flag below) */
	bool csv;               /* --csv */
	bool pin;               /* unless --no-pin */
};

/*
 * Parse --iters N, --rounds R, @size_flag B (default @size, at most @size_max), --csv and
 * --no-pin. Returns -1 on anything else or a zero / too large value.
 */
int bench_parse(int argc, char **argv, const char *size_flag, size_t size, size_t size_max,
		struct bench_opts *o);

/*
 * Pin this rank (all its threads: call it before any exist) to CPU rank-1, so both sides
 * of every measured pair cross between the same two CPUs run after run.
 */
void bench_pin_rank(void);

/*
 * The clock for samples: TSC ticks on x86-64, converted with a rate calibrated against
 * CLOCK_MONOTONIC over the whole run (clock_gettime costs a microsecond where the clock
 * source is slow, as in the rxe guest; perftest reads the cycle counter too). Elsewhere
 * nanoseconds. Inline, so a sample's window holds no call or return of its own (perftest's
 * get_cycles is inline too; under emulation a return costs as much as 100 cycles).
 */
static inline uint64_t bench_ticks(void)
{
#if defined(__x86_64__)
	return __rdtsc();
#else
	return (uint64_t)ddss_now_ns();
#endif
}

struct ddss_ctx;

/*
 * main() of a two-rank benchmark: parse the options (@size_flag, default @size, at most
 * @size_max), pin, join the group (a barrier timeout long enough for the whole measurement,
 * which rank 2 spends waiting in one barrier), run @measure on rank 1, then meet rank 2 in
 * that barrier and finalize. Exit status: @measure's (1 on a failed operation), 2 on bad
 * usage or a group of other than 2 ranks, 1 if joining or leaving failed.
 */
int bench_two_ranks_main(int argc, char **argv, const char *name, const char *size_flag,
			 size_t size, size_t size_max,
			 int (*measure)(struct ddss_ctx *ctx, const struct bench_opts *o));

/* Sort @n samples and give their median, 99th percentile and mean. */
void bench_summarize(double *lat, size_t n, double *med_p, double *p99_p, double *mean_p);

/* qsort comparison for doubles. */
int bench_cmp_double(const void *a, const void *b);

#endif /* DDSS_APPS_BENCH_UTIL_H */
