/*
 * ddss-daemon-bench: what daemon mode adds to a call (docs/daemon.md). The same calls are
 * timed twice in one run, against the same segment at the same home:
 *   direct  inside rank 1's ddssd, which is a direct-mode rank (the daemon times them itself
 *           on request: DOP_BENCH), i.e. what the call costs a process that drives the NIC.
 *           DOP_BENCH runs on a worker thread, whose waits spin at least the channel spin
 *           (net/spin.h: its client spins meanwhile); a direct-mode process's adaptive
 *           waits get the same where its core is free (2026-12-07, 2 runs each: get 1 B
 *           10.0-10.2 us here, 10.3-11.3 us in ddss-peers-bench with adaptive completion);
 *   daemon  by a client process of that ddssd, through its shared-memory channel.
 * The difference is the daemon mode's cost per call: request into the channel, the
 * daemon's worker picking it up, the answer back, the payload copies, and the core that a
 * client spinning for its answer takes from the daemons' threads.
 *
 * That last part is the machine's, not the daemon's, on a machine with fewer cores than
 * busy threads (this project's 2-core VM runs two daemons and a client). So a third way
 * is timed in the same blocks, the ceiling: direct again, while a thread of this client
 * spins the way a client waiting for its answer does (pause, sched_yield). What daemon
 * mode adds beyond that ceiling is its own cost. The output also gives the floor (text: a
 * line under the table; --csv: the column floor_us, the same in every row):
 * the round trip of a flag between two threads that wait as the channel's ends do, which
 * every call through the daemon crosses (about 1.4 us where a system call costs 1 us).
 *
 *   ddssrun --daemon -n 2 ddss-daemon-bench [--iters N] [--rounds R] [--csv]
 *
 * Calls: ddss_get and ddss_put of 1 byte of a null segment homed at rank 2, an exclusive
 * ddss_acquire_lock_ss + ddss_release_lock_ss of its lock, and a get of 1 byte of a null
 * segment homed at rank 1, the client's own node: the daemon reads it through its loopback
 * connection, the client straight from the daemon's pool (docs/daemon.md "Local reads"). Rounds alternate the
 * two ways so drift hits both alike. Prints medians and p99 in microseconds and the
 * target: daemon - direct <= 1 us per call (the papers measured 10-12 us). Exit status
 * (the target does not change it): 0; 1 if a call failed; 2 on bad usage, a group of
 * other than 2 ranks, or direct mode.
 */
#include "core/ctx.h"
#include "daemon/client_api.h"
#include "daemon/serve.h"

#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define HOME 2
#define TARGET_US 1.0
#define BLOCKS 10      /* blocks per round */
#define MAX_ROUNDS 64
#define MAX_BLOCKS (BLOCKS * MAX_ROUNDS)

static const struct call {
	enum dbench_what what;
	const char *name;
	bool local; /* the segment at rank 1, the client's own node (else at HOME) */
} calls[] = {
	{ DBENCH_GET, "get 1 B", false },
	{ DBENCH_PUT, "put 1 B", false },
	{ DBENCH_LOCK, "lock + unlock", false },
	{ DBENCH_GET, "get 1 B (local)", true },
	{ DBENCH_STAT, "stat (no I/O)", false },
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* One look's pause, as a daemon-mode client or the daemon's worker waits (daemon/chan.c). */
static void spin_once(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
	sched_yield();
}

/* The ceiling's spinner: a thread that waits the way a daemon-mode client does. */
static bool spinning;

static void *spinner_main(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&spinning, __ATOMIC_ACQUIRE))
		spin_once();
	return NULL;
}

/* DOP_BENCH (direct mode in the daemon) while a spinner runs here: the 2-core ceiling. */
static int bench_beside_spinner(struct ddss_ctx *ctx, enum dbench_what what, ddss_key_t key,
				unsigned iters, uint64_t *m, uint64_t *p)
{
	pthread_t th;
	int r;

	__atomic_store_n(&spinning, true, __ATOMIC_RELEASE);
	r = -pthread_create(&th, NULL, spinner_main, NULL);
	if (r)
		return r;
	r = ddss_cl_bench(ctx->client, what, key, iters, m, p);
	__atomic_store_n(&spinning, false, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	return r;
}

/*
 * The machine's floor under the stat row: two threads of this process pass a flag back
 * and forth, each waiting for it the way the channel's two ends wait for each other
 * (pause, sched_yield). A call through the daemon crosses such a hand-over there and back,
 * so no call can add less than this round trip here. Median of 5 tries of 2000, in ns.
 */
#define FLOOR_TRIES 5
#define FLOOR_TRIPS 2000

static unsigned floor_turn; /* 1: the helper's turn; 0: the main thread's; 2: stop */

static void *floor_helper(void *arg)
{
	(void)arg;
	for (;;) {
		unsigned t;

		while ((t = __atomic_load_n(&floor_turn, __ATOMIC_ACQUIRE)) == 0)
			spin_once();
		if (t == 2)
			return NULL;
		__atomic_store_n(&floor_turn, 0, __ATOMIC_RELEASE);
	}
}

static int handoff_floor(double *ns_p)
{
	double tries[FLOOR_TRIES], mean;
	pthread_t th;
	int r;

	__atomic_store_n(&floor_turn, 0, __ATOMIC_RELEASE);
	r = -pthread_create(&th, NULL, floor_helper, NULL);
	if (r)
		return r;
	for (unsigned t = 0; t < FLOOR_TRIES; t++) {
		double t0 = now_ns();

		for (unsigned i = 0; i < FLOOR_TRIPS; i++) {
			__atomic_store_n(&floor_turn, 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(&floor_turn, __ATOMIC_ACQUIRE) != 0)
				spin_once();
		}
		tries[t] = (now_ns() - t0) / FLOOR_TRIPS;
	}
	__atomic_store_n(&floor_turn, 2, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	bench_summarize(tries, FLOOR_TRIES, ns_p, &mean, &mean);
	return 0;
}

/* One call through the daemon, as the application would make it. */
static int one_call(struct ddss_ctx *ctx, enum dbench_what what, ddss_key_t key)
{
	uint8_t b = 1;
	int r;

	struct ddss_seg_info info;

	switch (what) {
	case DBENCH_STAT:
		return ddss_stat_ss(ctx, key, &info);
	case DBENCH_GET:
		return ddss_get(ctx, key, 0, &b, 1);
	case DBENCH_PUT:
		return ddss_put(ctx, key, 0, &b, 1);
	default:
		r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
		return r ? r : ddss_release_lock_ss(ctx, key);
	}
}

/* Median and p99 (ns) of @iters calls from this client; the same clock as the daemon's. */
static int time_client(struct ddss_ctx *ctx, enum dbench_what what, ddss_key_t key,
		       unsigned iters, double *lat, double *med, double *p99)
{
	double mean;

	for (unsigned i = 0; i < iters; i++) {
		double t0 = now_ns();
		int r = one_call(ctx, what, key);

		if (r) {
			fprintf(stderr, "daemon-bench: call %d: %s\n", (int)what, ddss_strerror(r));
			return 1;
		}
		lat[i] = now_ns() - t0;
	}
	bench_summarize(lat, iters, med, p99, &mean);
	return 0;
}

static int measure(struct ddss_ctx *ctx, const struct bench_opts *o)
{
	/*
	 * Each round is BLOCKS blocks of iters / BLOCKS calls, the two ways taking turns block
	 * by block: on a shared machine, drift then hits both alike. Per block a median; the
	 * table gives the median of those.
	 */
	static double dir_med[NCALLS][MAX_BLOCKS], dir_p99[NCALLS][MAX_BLOCKS],
		dmn_med[NCALLS][MAX_BLOCKS], dmn_p99[NCALLS][MAX_BLOCKS], ceil_med[NCALLS][MAX_BLOCKS];
	unsigned rounds = o->rounds > MAX_ROUNDS ? MAX_ROUNDS : o->rounds;
	unsigned nblocks = rounds * BLOCKS, per_block = o->iters / BLOCKS ? o->iters / BLOCKS : 1;
	double *lat = malloc(o->iters * sizeof(double)), fl;
	ddss_key_t keys[2]; /* [0]: at HOME; [1]: at rank 1 */
	int r;

	if (!ctx->client) {
		fprintf(stderr, "daemon-bench: run it in daemon mode: ddssrun --daemon -n 2 %s\n",
			"ddss-daemon-bench");
		free(lat);
		return 2;
	}
	r = lat ? ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
		.placement = DDSS_PLACE_RANK, .rank = HOME }, &keys[0]) : -ENOMEM;
	if (!r)
		r = ddss_allocate_ss(ctx, 64, &(struct ddss_seg_attr){
			.placement = DDSS_PLACE_RANK, .rank = 1 }, &keys[1]);
	if (r) {
		fprintf(stderr, "daemon-bench: allocate: %s\n", ddss_strerror(r));
		free(lat);
		return 1;
	}
	/* Warm up both ways (connections, the channel's data area, the daemon's worker). */
	for (unsigned c = 0; c < NCALLS; c++) {
		uint64_t m, p;

		if (time_client(ctx, calls[c].what, keys[calls[c].local], o->iters < 200 ? o->iters : 200, lat,
				&dir_med[c][0], &dir_p99[c][0]) ||
		    ddss_cl_bench(ctx->client, calls[c].what, keys[calls[c].local], 200, &m, &p)) {
			free(lat);
			return 1;
		}
	}
	for (unsigned k = 0; k < nblocks; k++) {
		for (unsigned c = 0; c < NCALLS; c++) {
			uint64_t m, p;

			r = ddss_cl_bench(ctx->client, calls[c].what, keys[calls[c].local], per_block,
					  &m, &p);
			if (r) {
				fprintf(stderr, "daemon-bench: direct %s: %s\n", calls[c].name,
					ddss_strerror(r));
				free(lat);
				return 1;
			}
			dir_med[c][k] = (double)m;
			dir_p99[c][k] = (double)p;
			r = bench_beside_spinner(ctx, calls[c].what, keys[calls[c].local],
						 per_block, &m, &p);
			if (r) {
				fprintf(stderr, "daemon-bench: direct %s beside a spinner: %s\n",
					calls[c].name, ddss_strerror(r));
				free(lat);
				return 1;
			}
			ceil_med[c][k] = (double)m;
			if (time_client(ctx, calls[c].what, keys[calls[c].local], per_block, lat,
					&dmn_med[c][k], &dmn_p99[c][k])) {
				free(lat);
				return 1;
			}
		}
	}
	free(lat);
	ddss_release_ss(ctx, keys[0]);
	ddss_release_ss(ctx, keys[1]);

	/* The floor after the timed blocks, so that its threads never run beside them. */
	if (handoff_floor(&fl))
		fl = NAN;
	if (!o->csv)
		printf("daemon mode vs direct mode, %u blocks x %u calls each way, taking turns; "
		       "segment at rank %d (median of the blocks' medians, us)\n", nblocks,
		       per_block, HOME);
	if (o->csv)
		printf("call,direct_med_us,direct_p99_us,daemon_med_us,daemon_p99_us,added_us,"
		       "ceiling_med_us,added_beyond_ceiling_us,floor_us\n");
	else
		printf("%-14s %10s %10s %10s %10s %10s  %-14s %10s %10s\n", "call", "direct", "p99",
		       "daemon", "p99", "added", "target <= 1 us", "ceiling", "beyond");
	for (unsigned c = 0; c < NCALLS; c++) {
		double dm, dp, mm, mp, cm, mean;

		bench_summarize(dir_med[c], nblocks, &dm, &mean, &mean);
		bench_summarize(dir_p99[c], nblocks, &dp, &mean, &mean);
		bench_summarize(dmn_med[c], nblocks, &mm, &mean, &mean);
		bench_summarize(dmn_p99[c], nblocks, &mp, &mean, &mean);
		bench_summarize(ceil_med[c], nblocks, &cm, &mean, &mean);
		if (o->csv)
			printf("%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", calls[c].name,
			       dm / 1e3, dp / 1e3, mm / 1e3, mp / 1e3, (mm - dm) / 1e3, cm / 1e3,
			       (mm - (cm > dm ? cm : dm)) / 1e3, fl / 1e3);
		else
			printf("%-14s %10.2f %10.2f %10.2f %10.2f %10.2f  %-14s %10.2f %10.2f\n",
			       calls[c].name, dm / 1e3, dp / 1e3, mm / 1e3, mp / 1e3, (mm - dm) / 1e3,
			       (mm - dm) / 1e3 <= TARGET_US ? "met" : "NOT met", cm / 1e3,
			       (mm - (cm > dm ? cm : dm)) / 1e3);
	}
	if (!o->csv) {
		printf("ceiling = direct mode while one thread here spins as a waiting client does "
		       "(pause + sched_yield): what a spinning client costs the daemons' threads "
		       "when cores are fewer than busy threads (%ld online here); beyond = daemon - "
		       "max(direct, ceiling), the daemon's own cost\n", sysconf(_SC_NPROCESSORS_ONLN));
		printf("floor = %.2f us: two threads here passing a flag there and back, each "
		       "waiting as the channel's ends do (pause + sched_yield), the same run; "
		       "every call through the daemon crosses that hand-over, so no row can add "
		       "less on this machine\n", fl / 1e3);
	}
	return 0;
}

int main(int argc, char **argv)
{
	char *args[argc + 2];

	/*
	 * Never pinned: the direct side runs in the daemons, which nobody pins, and a pinned
	 * client alone (spinning on its core) changes how fast the daemons' threads wake.
	 */
	for (int i = 0; i < argc; i++)
		args[i] = argv[i];
	args[argc] = "--no-pin";
	args[argc + 1] = NULL;
	return bench_two_ranks_main(argc + 1, args, "daemon-bench", "--size", 1, 1, measure);
}
