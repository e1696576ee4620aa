/* Shared benchmark helpers (see bench_util.h). */
#include "bench_util.h"
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

uint64_t bench_ticks(void)
{
#if defined(__x86_64__)
	return __rdtsc();
#else
	return (uint64_t)ddss_now_ns();
#endif
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
