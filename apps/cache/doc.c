/* ddss-cache: document payloads, the request generator, the clock. */
#include "cache.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t doc, uint64_t version, uint64_t i)
{
	uint64_t x = doc * 0x9e3779b97f4a7c15ull ^ version * 0xc2b2ae3d27d4eb4full ^ i;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

void doc_fill(void *buf, size_t size, uint32_t doc, uint64_t version)
{
	uint64_t *w = buf;
	size_t n = size / 8;

	w[0] = doc;
	w[1] = version;
	for (size_t i = 2; i < n - 1; i++)
		w[i] = mix(doc, version, i);
	w[n - 1] = version;
}

int doc_check(const void *buf, size_t size, uint32_t doc, uint64_t *version_p)
{
	const uint64_t *w = buf;
	size_t n = size / 8;
	uint64_t v = w[1];

	if (w[0] != doc || w[n - 1] != v)
		return -1;
	for (size_t i = 2; i < n - 1; i++)
		if (w[i] != mix(doc, v, i))
			return -1;
	*version_p = v;
	return 0;
}

uint64_t rng_next(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x2545f4914f6cdd1dull;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dull;
}

int zipf_init(struct zipf *z, unsigned n, double s)
{
	double sum = 0;

	z->cdf = malloc(n * sizeof(double));
	if (!z->cdf)
		return -ENOMEM;
	z->n = n;
	for (unsigned i = 0; i < n; i++) {
		sum += s > 0 ? 1.0 / pow((double)(i + 1), s) : 1.0;
		z->cdf[i] = sum;
	}
	for (unsigned i = 0; i < n; i++)
		z->cdf[i] /= sum;
	return 0;
}

unsigned zipf_draw(const struct zipf *z, uint64_t *rng)
{
	double u = (double)(rng_next(rng) >> 11) / 9007199254740992.0; /* [0, 1) */
	unsigned lo = 0, hi = z->n - 1;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (z->cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void zipf_fini(struct zipf *z)
{
	free(z->cdf);
	z->cdf = NULL;
}

double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

void pin_cpu(unsigned cpu)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (ncpu < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu % (unsigned)ncpu, &set);
	sched_setaffinity(0, sizeof(set), &set); /* best effort: unpinned still measures */
}
