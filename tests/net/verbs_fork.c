/*
 * fork() + exec() by an application thread while the group runs verbs operations (2 ranks,
 * under ddssrun --transport verbs). Worker threads put and get small (staged) and large
 * (registered per operation) buffers to a segment homed at the other rank and count under
 * the strict model's lock, while the main thread forks children that exec /bin/true. The
 * pool and the staging arena are MADV_DONTFORK (docs/transport.md, "Capabilities and
 * fallbacks"): the children never share their pages, so no copy-on-write can move a page
 * the NIC uses. Every transfer must still carry the right bytes, and the counter be exact.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 2
#define ITERS 60
#define FORKS 20
#define BIG (64u << 10)
#define SMALL 512u

static ddss_ctx_t *ctx;
static uint32_t me;
static ddss_key_t data_key[THREADS], count_key;
static unsigned failures;
static volatile int workers_done;

static void *worker(void *arg)
{
	unsigned tid = (unsigned)(uintptr_t)arg;
	unsigned char *buf = malloc(BIG), *back = malloc(BIG);
	/* Each rank uses its own half of the segment. */
	size_t base = (size_t)(me - 1) * BIG;

	for (int i = 0; i < ITERS && buf && back; i++) {
		size_t len = i % 2 ? BIG : SMALL;
		uint64_t seed = ((uint64_t)me << 32) | (tid << 16) | (unsigned)i, v;
		int r;

		test_fill(buf, len, seed);
		r = ddss_put(ctx, data_key[tid], base, buf, len);
		if (!r)
			r = ddss_get(ctx, data_key[tid], base, back, len);
		if (r || test_check(back, len, seed) != SIZE_MAX)
			test_thread_fail(&failures, me, tid, "iteration %d (%zu bytes): %s", i, len,
					 r ? ddss_strerror(r) : "wrong bytes");
		r = ddss_acquire_lock_ss(ctx, count_key, DDSS_LOCK_EXCLUSIVE);
		if (!r) {
			r = ddss_get(ctx, count_key, 0, &v, 8);
			v++;
			if (!r)
				r = ddss_put(ctx, count_key, 0, &v, 8);
			ddss_release_lock_ss(ctx, count_key);
		}
		if (r)
			test_thread_fail(&failures, me, tid, "counter, iteration %d: %s", i,
					 ddss_strerror(r));
	}
	free(buf);
	free(back);
	__atomic_add_fetch(&workers_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(void)
{
	struct ddss_seg_attr ca = { .coherence = DDSS_COHERENCE_STRICT, .name = "fork-count",
				    .placement = DDSS_PLACE_RANK, .rank = 1 };
	pthread_t th[THREADS];
	unsigned forks = 0;
	uint64_t v = 0;
	int r;

	r = ddss_init(NULL, &ctx);
	if (r) {
		fprintf(stderr, "verbs_fork: ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	me = ddss_rank(ctx);
	for (unsigned t = 0; t < THREADS && !r; t++) {
		char name[32];
		struct ddss_seg_attr a = { .name = name, .placement = DDSS_PLACE_RANK, .rank = t % 2 + 1 };

		snprintf(name, sizeof(name), "fork-data-%u", t);
		r = ddss_allocate_ss(ctx, 2 * BIG, &a, &data_key[t]);
	}
	if (!r)
		r = ddss_allocate_ss(ctx, 8, &ca, &count_key);
	if (!r)
		r = ddss_barrier(ctx);
	if (r) {
		fprintf(stderr, "verbs_fork: rank %u: setting up: %s\n", me, ddss_strerror(r));
		return 1;
	}
	for (unsigned t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t);
	/* The application thread: fork and exec while the workers run. */
	while (forks < FORKS || __atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < THREADS) {
		pid_t pid;
		int st;

		if (forks >= FORKS) {
			usleep(10000);
			continue;
		}
		pid = fork();
		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "verbs_fork: rank %u: fork/exec %u failed\n", me, forks);
			failures++;
		}
		forks++;
		usleep(5000);
	}
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	r = ddss_barrier(ctx);
	if (!r)
		r = ddss_get(ctx, count_key, 0, &v, 8);
	if (r || v != (uint64_t)ITERS * THREADS * ddss_size(ctx)) {
		fprintf(stderr, "verbs_fork: rank %u: counter %llu, expected %llu (%s)\n", me,
			(unsigned long long)v,
			(unsigned long long)ITERS * THREADS * ddss_size(ctx), ddss_strerror(r));
		failures++;
	}
	if (!r)
		r = ddss_barrier(ctx);
	if (ddss_finalize(ctx) || r)
		failures++;
	printf("verbs_fork: rank %u: %u forks + exec during %u x %d transfers: %s\n", me, forks,
	       THREADS, ITERS, failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
