/* The spin bound of adaptive completion (see spin.h). */
#include "net/spin.h"
#include "net/transport.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Round trips run before the measured ones (first touches, the helper getting a CPU). */
#define WARMUP 20

struct pingpong {
	int to_helper[2], to_main[2];
	unsigned n;
};

static void *helper(void *arg)
{
	struct pingpong *p = arg;
	char c;

	for (unsigned i = 0; i < p->n; i++) {
		if (read(p->to_helper[0], &c, 1) != 1 || write(p->to_main[1], &c, 1) != 1)
			break;
	}
	return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int ddss_spin_measure_wake(unsigned iters, int64_t *ns_p)
{
	struct pingpong p = { .to_helper = { -1, -1 }, .to_main = { -1, -1 }, .n = iters + WARMUP };
	int64_t *rt = NULL;
	unsigned done = 0;
	pthread_t th;
	char c = 0;
	int r = 0;

	if (iters == 0)
		return -EINVAL;
	rt = malloc(iters * sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	if (pipe2(p.to_helper, O_CLOEXEC) || pipe2(p.to_main, O_CLOEXEC)) {
		r = -errno;
		goto out_pipes;
	}
	r = -pthread_create(&th, NULL, helper, &p);
	if (r)
		goto out_pipes;
	for (unsigned i = 0; i < p.n; i++) {
		int64_t t0 = ddss_now_ns();

		if (write(p.to_helper[1], &c, 1) != 1 || read(p.to_main[0], &c, 1) != 1) {
			r = -EIO;
			break;
		}
		if (i >= WARMUP)
			rt[done++] = ddss_now_ns() - t0;
	}
	/* On a failure the helper sees EOF (or its pipe broken) once the pipes close. */
	close(p.to_helper[1]);
	p.to_helper[1] = -1;
	pthread_join(th, NULL);
	if (!r) {
		qsort(rt, done, sizeof(*rt), cmp_i64);
		*ns_p = rt[done / 2];
	}
out_pipes:
	for (int i = 0; i < 2; i++) {
		if (p.to_helper[i] >= 0)
			close(p.to_helper[i]);
		if (p.to_main[i] >= 0)
			close(p.to_main[i]);
	}
	free(rt);
	return r;
}

int64_t ddss_spin_bound_for(int64_t wake_ns)
{
	return wake_ns < DDSS_SPIN_MIN_NS ? DDSS_SPIN_MIN_NS :
	       wake_ns > DDSS_SPIN_MAX_NS ? DDSS_SPIN_MAX_NS : wake_ns;
}

int ddss_spin_env(long *us_p)
{
	return ddss_env_long("DDSS_SPIN_US", 0, DDSS_SPIN_US_MAX, -1, us_p);
}

static pthread_once_t spin_once = PTHREAD_ONCE_INIT;
static int spin_err;
static int64_t spin_bound = DDSS_SPIN_MAX_NS, spin_wake;
static bool spin_by_env; /* DDSS_SPIN_US set the bound: no thread's floor moves it */
static __thread int64_t thread_floor;

static void spin_calibrate(void)
{
	int64_t wake;
	long us;
	int r;

	spin_err = ddss_spin_env(&us);
	if (spin_err)
		return;
	if (us >= 0) {
		spin_by_env = true;
		spin_bound = (int64_t)us * 1000;
		DDSS_INFO("spin bound %lld ns (DDSS_SPIN_US)", (long long)spin_bound);
		return;
	}
	r = ddss_spin_measure_wake(DDSS_SPIN_ITERS, &wake);
	if (r) {
		DDSS_WARN("cannot measure the wake-up cost (%s); spinning up to %d us",
			  strerror(-r), DDSS_SPIN_MAX_NS / 1000);
		return;
	}
	spin_wake = wake;
	spin_bound = ddss_spin_bound_for(wake);
	DDSS_INFO("wake-up round trip %lld ns: spin bound %lld ns", (long long)wake,
		   (long long)spin_bound);
}

int ddss_spin_init(void)
{
	pthread_once(&spin_once, spin_calibrate);
	return spin_err;
}

int64_t ddss_spin_ns(void)
{
	pthread_once(&spin_once, spin_calibrate);
	if (!spin_by_env && thread_floor > spin_bound)
		return thread_floor < DDSS_SPIN_MAX_NS ? thread_floor : DDSS_SPIN_MAX_NS;
	return spin_bound;
}

void ddss_spin_thread_floor(int64_t ns)
{
	thread_floor = ns > 0 ? ns : 0;
}

int64_t ddss_spin_wake_ns(void)
{
	pthread_once(&spin_once, spin_calibrate);
	return spin_wake;
}
