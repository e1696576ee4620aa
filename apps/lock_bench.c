/*
 * ddss-lock-bench: the three lock schemes (docs/locks.md) side by side, in one run, after
 * the experiments of the N-CoSED paper (section 4: basic latency, shared and exclusive lock
 * cascades, Figures 5-7) and of the DQNL paper (section 5: unlock cascade, throughput under
 * 0/50/100% contention).
 *
 *   ddssrun -n 4 ddss-lock-bench [--iters N] [--rounds R] [--waiters W] [--threads T]
 *                                [--duration-ms D] [--hold-us H] [--quick] [--no-pin] [--csv]
 *
 * Every rank switches the scheme (ncosed, dqnl, srsl) with ddss_lock_scheme_set() between
 * two barriers, with no lock held or awaited anywhere, and the schemes take turns in blocks
 * throughout, so slow and fast spells of the machine (long under emulation) hit all alike.
 * The measured locks are homed at rank 2 (rank 1 alone: at rank 1); rank 1 measures.
 *
 * (a) Uncontended latency: rank 1 takes and releases the lock, shared and exclusive, while
 *     every other rank waits in a barrier; a raw remote cas / fadd to a data word of the
 *     same segment (same home, same connection) is timed in the same blocks, and so is a
 *     raw cas posted right behind another (the pattern of an exclusive lock, which follows
 *     the last one's posted release on the same connection). --iters
 *     samples per round of each operation, in blocks of 25 per operation.
 * (b) Cascades: rank 1 holds the lock exclusively; W waiters (threads spread round robin
 *     over ranks 2..n) request it shared (resp. exclusive) and block; rank 1 releases and at
 *     once requests it exclusively again. It then queues behind all W waiters, each of which
 *     releases as soon as it is granted. Two times from one sample, both from the TSC read
 *     just before rank 1's release:
 *       reach: until the last waiter's grant (the TSC each waiter reads as soon as its
 *              acquire returns; the propagation delay of the N-CoSED paper, 4.3, Fig. 7);
 *       total: until rank 1 holds the lock again: the whole cascade, every waiter's release
 *              and rank 1's own grant included (the DQNL paper's timer, 5.3, Fig. 4).
 *     reach compares TSC reads of different ranks, so it needs one clock for all: every rank
 *     runs on one machine (or one VM) with one invariant TSC, which ddssrun's local launch
 *     gives; a grant read before the release (impossible with one clock) is counted as skew.
 *     For W = 1..--waiters (default 8); max(1, iters / 500) samples per round, W, mode and
 *     scheme.
 * (c) Throughput: N = ranks x --threads clients (default 2 threads per rank), each looping
 *     acquire-exclusive / release on lock (client mod L) for --duration-ms (default 200),
 *     with L = N, N/2, 1 (contention = 1 - L/N = 0, 50, 100%); all L locks at one home, as
 *     the DQNL paper's single lock server. Total ops/s, median over --rounds slices, and
 *     the part of it done by the home rank's own clients (on tcp a rank reaches its own
 *     pool with CPU operations, so those clients lock without the network and dominate).
 *     --hold-us H: each client holds the lock H microseconds (busy), the DQNL paper's hold
 *     time; the CSV's throughput rows end with H.
 *     Before it, per scheme, an exclusion check: all clients increment one counter by
 *     get / +1 / put under the exclusive lock; a lost increment is reported as a failure.
 *
 * Each rank pins itself (all its threads) to CPU (rank-1) mod ncpu unless --no-pin. The
 * completion mode comes from DDSS_COMPLETION (event | poll), fairness from DDSS_LOCK_FAIR.
 * --quick is --iters 100 --rounds 1 --waiters 4 --duration-ms 50 (the smoke test); explicit
 * options win. A watchdog ends a rank that makes no progress for 30 s, naming what each of
 * its threads was waiting for.
 * Exit status: 0; 1 if an operation failed or the exclusion check did; 2 on bad usage;
 * 3 if the watchdog fired (a hang).
 */
#include "core/ctx.h"
#include "lock/lock.h"

#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOLDER 1 /* the measuring rank: table (a), the cascades' holder, the counters' home */
#define HOME 2
#define NSCHEMES 3
/* Operations take turns in blocks this long (see tp_bench.c: emulation runs in spells). */
#define BLOCK 25
#define WARMUP 100
#define DEFAULT_WAITERS 8
/* Shared requests one exclusive waiter's record takes without reuse (docs/locks.md). */
#define MAX_WAITERS 64
#define DEFAULT_THREADS 2
#define MAX_THREADS 64
#define DEFAULT_DURATION_MS 200
#define MAX_DURATION_MS 60000
#define CASCADE_ITERS_PER_SAMPLE 500
/*
 * The waiters announce (fadd on a counter at rank 1) just before they call acquire; rank 1
 * then sleeps this long before it releases, so every request has reached the lock. The
 * release cannot be ordered after the requests by any message without adding that message
 * to the waiters' path. A sample where a waiter was still late is detected (below), dropped
 * and counted, and the settle time doubles, up to SETTLE_MAX_US.
 */
#define SETTLE_US 2000
#define SETTLE_MAX_US 64000
#define POLL_US 20
#define WATCHDOG_MS 30000
/* Ranks wait in barriers while rank 1 measures alone; a hang is the watchdog's business. */
#define BARRIER_TIMEOUT_MS (60 * 60 * 1000)
/* An uncontended lock within 5% of the raw atomics it costs. An exclusive lock is asked for
 * right after the previous one's posted release. Where the transport holds that release
 * for the next request (tcp: DDSS_TP_LATER, holds_later) both leave in one write, and the
 * lock's raw counterpart is a cas behind a held one (RAW_CAS_ONE_WRITE); elsewhere the
 * release's cas is still in flight on the same connection, and it is a cas behind a
 * posted one (RAW_CAS_BEHIND). Both are printed, and the ratio to a cas alone. */
#define LAT_TARGET 1.05
#define CASCADE_TARGET 3.0
#define CASCADE_TARGET_W 8
#define CHECK_MS 100

static const enum ddss_lock_scheme schemes[NSCHEMES] = { DDSS_LOCK_NCOSED, DDSS_LOCK_DQNL,
							  DDSS_LOCK_SRSL };
static const char *const scheme_names[NSCHEMES] = { "ncosed", "dqnl", "srsl" };

/* Control words at rank 1 (a named segment), only ever touched by transport fadd. */
enum { CTL_ANNOUNCED = 0, CTL_RATE = 16, CTL_CHECKED = 24, CTL_RATE_HOME = 32,
       CTL_LEN = 64 };

enum lat_op { L_S_LOCK, L_S_UNLOCK, L_X_LOCK, L_X_UNLOCK, L_COUNT };
static const char *const lat_names[L_COUNT] = { "S_lock", "S_unlock", "X_lock", "X_unlock" };
/* RAW_CAS_BEHIND: a cas posted right behind another cas that nobody waits for yet, timed from
 * its own post: an exclusive lock's raw pattern where the previous posted release went out
 * on its own (verbs). RAW_CAS_ONE_WRITE: the same two, the first held (DDSS_TP_MORE) so
 * that both leave in one write, timed from the same point: the pattern where the transport
 * holds the release for the next request (tcp), and what a separate write costs the second
 * (docs/locks.md, "What the posted release costs the next lock"). */
enum { RAW_CAS, RAW_FADD, RAW_CAS_BEHIND, RAW_CAS_ONE_WRITE, RAW_COUNT };
enum { M_SHARED, M_EXCL, M_COUNT };
static const enum ddss_lock_mode modes[M_COUNT] = { DDSS_LOCK_SHARED, DDSS_LOCK_EXCLUSIVE };
static const char *const mode_names[M_COUNT] = { "shared", "exclusive" };
enum { C_0, C_50, C_100, C_COUNT };
static const char *const level_names[C_COUNT] = { "0%", "50%", "100%" };

struct lb_opts {
	struct bench_opts b; /* b.size is --waiters */
	unsigned threads, duration_ms;
	unsigned hold_us; /* --hold-us: time inside each critical section of (c) */
};

enum job_kind { JOB_CASCADE, JOB_TPUT, JOB_EXIT };

struct job {
	enum job_kind kind;
	enum ddss_lock_mode mode; /* cascade: the waiters' mode */
	unsigned waiters;         /* cascade: W */
	unsigned nlocks;          /* throughput: L */
	bool check;               /* throughput: get / +1 / put under the lock */
	int64_t deadline_ns;      /* throughput */
};

struct lb;

struct worker {
	struct lb *lb;
	unsigned idx;
	pthread_t th;
	bool waited;        /* cascade: this thread was one of the W waiters ... */
	unsigned g;         /* ... waiter g of the cascade ... */
	uint64_t granted;   /* ... granted at this tick */
	uint64_t ops;       /* throughput: acquire/release pairs done */
	int64_t elapsed_ns; /* ... in this long */
};

struct lb {
	struct ddss_ctx *ctx;
	struct lb_opts o;
	uint32_t rank, size, home;
	bool fair;
	ddss_key_t key;         /* the lock of tables (a) and (b) */
	uint64_t word_off;      /* that segment's first data word: the raw atomics' target */
	ddss_key_t ctl;
	uint64_t ctl_off;
	ddss_key_t grants;      /* at rank 1: the cascade waiters' grant TSCs, 8 bytes each */
	ddss_key_t *tkeys;      /* throughput locks, N of them, at the home */
	unsigned ntkeys;
	unsigned nworkers;
	struct worker *w;
	pthread_barrier_t go, done;
	struct job job;         /* written by the main thread between the two barriers */
	unsigned settle_us;
	uint64_t tick0;
	int64_t ns0;
};

/* ---- watchdog: what each thread waits for, so a hang is reported precisely ---- */

struct activity {
	_Atomic int64_t since_ns; /* 0: not waiting */
	const char *_Atomic what;
};

static struct activity *acts; /* [0] the main thread, [1 + i] worker i */
static unsigned nacts;
static pthread_mutex_t phase_mu = PTHREAD_MUTEX_INITIALIZER;
static char phase[192] = "start-up";
static uint32_t my_rank;
static atomic_bool watchdog_stop;

static void set_phase(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&phase_mu);
	va_start(ap, fmt);
	vsnprintf(phase, sizeof(phase), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&phase_mu);
}

static void busy(unsigned slot, const char *what)
{
	atomic_store(&acts[slot].what, what);
	atomic_store(&acts[slot].since_ns, ddss_now_ns());
}

static void idle(unsigned slot)
{
	atomic_store(&acts[slot].since_ns, 0);
}

static void *watchdog_main(void *arg)
{
	const struct timespec tick = { 0, 200 * 1000 * 1000 };

	(void)arg;
	while (!atomic_load(&watchdog_stop)) {
		int64_t now = ddss_now_ns();
		bool stuck = false;

		nanosleep(&tick, NULL);
		for (unsigned i = 0; i < nacts; i++) {
			int64_t t = atomic_load(&acts[i].since_ns);

			if (t && now - t > (int64_t)WATCHDOG_MS * 1000000)
				stuck = true;
		}
		if (!stuck)
			continue;
		pthread_mutex_lock(&phase_mu);
		fprintf(stderr, "ddss-lock-bench: rank %u: no progress for %d s during %s\n", my_rank,
			WATCHDOG_MS / 1000, phase);
		pthread_mutex_unlock(&phase_mu);
		for (unsigned i = 0; i < nacts; i++) {
			int64_t t = atomic_load(&acts[i].since_ns);

			if (t)
				fprintf(stderr, "ddss-lock-bench: rank %u: %s %u in %s for %.1f s\n",
					my_rank, i ? "worker" : "main thread", i ? i - 1 : 0,
					atomic_load(&acts[i].what), (double)(now - t) / 1e9);
		}
		fflush(NULL);
		/* Give the other ranks' watchdogs time to report too before ddssrun ends them. */
		sleep(2);
		_exit(3);
	}
	return NULL;
}

/*
 * An operation failed: the group cannot go on with its collective steps, so this rank
 * reports and leaves; ddssrun then ends the others.
 */
static void fail(const char *what, int err)
{
	pthread_mutex_lock(&phase_mu);
	fprintf(stderr, "ddss-lock-bench: rank %u: %s failed during %s: %s\n", my_rank, what,
		phase, ddss_strerror(err));
	pthread_mutex_unlock(&phase_mu);
	fflush(NULL);
	exit(1);
}

/* ---- helpers ---- */

static void sleep_us(unsigned us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static void barrier(struct lb *lb)
{
	int r;

	busy(0, "ddss_barrier");
	r = ddss_barrier(lb->ctx);
	idle(0);
	if (r)
		fail("ddss_barrier", r);
}

/* Collective: every rank switches between two barriers, no lock held or awaited. */
static void switch_scheme(struct lb *lb, int s)
{
	int r;

	barrier(lb);
	busy(0, "ddss_lock_scheme_set");
	r = ddss_lock_scheme_set(lb->ctx, schemes[s], lb->fair);
	idle(0);
	if (r)
		fail("ddss_lock_scheme_set", r);
	barrier(lb);
}

static uint64_t ctl_fadd(struct lb *lb, unsigned word, uint64_t add)
{
	uint64_t old;
	int r = ddss_tp_fadd(lb->ctx->tp, HOLDER, lb->ctl_off + word, add, &old);

	if (r)
		fail("fadd on a control word at rank 1", r);
	return old;
}

/* A named segment of @len bytes at @home (every rank gets the same key); its data offset. */
static void seg_named(struct lb *lb, const char *name, uint32_t home, size_t len,
		      ddss_key_t *key_p, uint64_t *off_p)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK, .rank = home, .name = name };
	const struct ddss_seg_desc *d;
	int r = ddss_allocate_ss(lb->ctx, len, &sa, key_p);

	if (r)
		fail(name, r);
	r = ddss_ctx_desc(lb->ctx, *key_p, &d);
	if (r)
		fail("descriptor lookup", r);
	if (d->home != home || d->data_off % 8)
		fail(name, -EPROTO);
	if (off_p)
		*off_p = d->data_off;
	ddss_seg_cache_put(d);
}

static double median(double *v, size_t n)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof(double), bench_cmp_double);
	return v[n / 2];
}

static double *samples(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));

	if (!p)
		fail("allocating sample arrays", -ENOMEM);
	return p;
}

/* ---- workers: the cascade's waiters and the throughput clients ---- */

/* Waiter @i of this rank is waiter *g_p of the cascade (threads spread over ranks 2..n). */
static bool waiter_index(const struct lb *lb, unsigned i, unsigned *g_p)
{
	if (lb->size == 1) {
		*g_p = i;
		return true;
	}
	if (lb->rank == HOLDER)
		return false;
	*g_p = i * (lb->size - 1) + (lb->rank - 2);
	return true;
}

/*
 * Between its announcement and its release a waiter does nothing but acquire and read the
 * clock: its grant time is reported after the cascade (cascade_sample), because on a
 * machine with fewer CPUs than threads, work of the early waiters inside the cascade
 * would delay the wake-up of the later ones.
 */
static void cascade_waiter(struct lb *lb, struct worker *w)
{
	unsigned g, slot = 1 + w->idx;
	const char *what;
	uint64_t granted;
	int r;

	w->waited = false;
	if (!waiter_index(lb, w->idx, &g) || g >= lb->job.waiters)
		return;
	busy(slot, "announcing itself (fadd at rank 1)");
	ctl_fadd(lb, CTL_ANNOUNCED, 1);
	what = lb->job.mode == DDSS_LOCK_SHARED ? "ddss_acquire_lock_ss(shared)" :
						  "ddss_acquire_lock_ss(exclusive)";
	busy(slot, what);
	r = ddss_acquire_lock_ss(lb->ctx, lb->key, lb->job.mode);
	granted = bench_ticks();
	if (r)
		fail(what, r);
	r = ddss_release_lock_ss(lb->ctx, lb->key);
	if (r)
		fail("ddss_release_lock_ss (cascade waiter)", r);
	idle(slot);
	w->g = g;
	w->granted = granted;
	w->waited = true;
}

static void tput_client(struct lb *lb, struct worker *w)
{
	unsigned slot = 1 + w->idx, c = (lb->rank - 1) * lb->o.threads + w->idx;
	ddss_key_t key = lb->tkeys[c % lb->job.nlocks];
	int64_t t0 = ddss_now_ns(), t;
	uint64_t ops = 0, v;
	int r;

	w->ops = 0;
	w->elapsed_ns = 0;
	if (w->idx >= lb->o.threads)
		return;
	busy(slot, lb->job.check ? "exclusion check loop (acquire X, get, put, release)" :
				   "throughput loop (acquire X / release)");
	do {
		r = ddss_acquire_lock_ss(lb->ctx, key, DDSS_LOCK_EXCLUSIVE);
		if (r)
			fail("ddss_acquire_lock_ss(exclusive) (throughput)", r);
		if (lb->o.hold_us && !lb->job.check) {
			/* The DQNL paper's hold time: work done while holding the lock. */
			int64_t until = ddss_now_ns() + (int64_t)lb->o.hold_us * 1000;

			while (ddss_now_ns() < until)
				;
		}
		if (lb->job.check) {
			r = ddss_get(lb->ctx, key, 0, &v, sizeof(v));
			v++;
			if (!r)
				r = ddss_put(lb->ctx, key, 0, &v, sizeof(v));
			if (r)
				fail("get/put under the lock (exclusion check)", r);
		}
		r = ddss_release_lock_ss(lb->ctx, key);
		if (r)
			fail("ddss_release_lock_ss (throughput)", r);
		ops++;
		t = ddss_now_ns();
	} while (t < lb->job.deadline_ns);
	idle(slot);
	w->ops = ops;
	w->elapsed_ns = t - t0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct lb *lb = w->lb;

	for (;;) {
		pthread_barrier_wait(&lb->go);
		if (lb->job.kind == JOB_EXIT)
			return NULL;
		if (lb->job.kind == JOB_CASCADE)
			cascade_waiter(lb, w);
		else
			tput_client(lb, w);
		pthread_barrier_wait(&lb->done);
	}
}

/* ---- (a) uncontended latency ---- */

struct lat_result {
	double raw[RAW_COUNT];             /* medians, ticks until converted */
	double lock[NSCHEMES][L_COUNT];
	size_t n;                          /* samples per lock operation and scheme */
	/* ncosed exclusive lock + unlock through the public API (mode table, counters) and
	 * through the direct calls behind the table, interleaved: the API layer's cost. */
	double api_pair, impl_pair;
};

/* Exclusive lock + unlock by the direct-mode calls behind the public API's table. */
static double lat_impl_pair(struct lb *lb)
{
	uint64_t t0 = bench_ticks();
	int r = ddss_lock_acquire(lb->ctx, lb->key, DDSS_LOCK_EXCLUSIVE, false, -1);

	if (r)
		fail("uncontended exclusive acquire (behind the API)", r);
	r = ddss_lock_release(lb->ctx, lb->key);
	if (r)
		fail("uncontended release (behind the API)", r);
	return (double)(bench_ticks() - t0);
}

static void lat_lock_pair(struct lb *lb, enum ddss_lock_mode mode, double *lock, double *unlock)
{
	uint64_t t0, t1, t2;
	int r;

	t0 = bench_ticks();
	r = ddss_acquire_lock_ss(lb->ctx, lb->key, mode);
	t1 = bench_ticks();
	if (r)
		fail(mode == DDSS_LOCK_SHARED ? "uncontended shared acquire" :
						"uncontended exclusive acquire", r);
	r = ddss_release_lock_ss(lb->ctx, lb->key);
	t2 = bench_ticks();
	if (r)
		fail("uncontended release", r);
	*lock = (double)(t1 - t0);
	*unlock = (double)(t2 - t1);
}

static double lat_raw(struct lb *lb, int op)
{
	uint64_t t0, old;
	int r;

	t0 = bench_ticks();
	if (op == RAW_CAS)
		r = ddss_tp_cas(lb->ctx->tp, lb->home, lb->word_off, 0, 0, &old);
	else
		r = ddss_tp_fadd(lb->ctx->tp, lb->home, lb->word_off + 8, 1, &old);
	if (r)
		fail(op == RAW_CAS ? "raw cas" : "raw fadd", r);
	return (double)(bench_ticks() - t0);
}

/*
 * A raw cas behind a posted one (RAW_CAS_BEHIND; @one_write: RAW_CAS_ONE_WRITE, the first
 * held until the second's post sends both); the posted one is reaped after it.
 */
static double lat_raw_behind(struct lb *lb, bool one_write)
{
	struct ddss_tp_req first = { 0 };
	uint64_t t0, t1, old;
	int r, r1;

	r = lb->ctx->tp->ops->post_ex(lb->ctx->tp, DDSS_TP_OP_CAS, lb->home, lb->word_off, NULL, 0,
				      0, 0, one_write ? DDSS_TP_MORE : 0, &first);
	if (r)
		fail("raw posted cas", r);
	t0 = bench_ticks();
	r = ddss_tp_cas(lb->ctx->tp, lb->home, lb->word_off, 0, 0, &old);
	t1 = bench_ticks();
	r1 = ddss_tp_wait(lb->ctx->tp, &first, -1);
	if (r || r1 || first.status)
		fail("raw cas behind a posted cas", r ? r : r1 ? r1 : first.status);
	return (double)(t1 - t0);
}

/* One block of every operation under scheme @s, at rank 1; samples [i0, i1) of the round. */
static void lat_block(struct lb *lb, int s, size_t base, unsigned i0, unsigned i1,
		      double *raw[RAW_COUNT], double *lat[NSCHEMES][L_COUNT], double *impl)
{
	for (int k = 0; k < 6; k++)
		for (unsigned i = i0; i < i1; i++) {
			size_t j = base + i;

			switch (k) {
			case 0:
				raw[RAW_CAS][j * NSCHEMES + s] = lat_raw(lb, RAW_CAS);
				break;
			case 1:
				lat_lock_pair(lb, DDSS_LOCK_SHARED, &lat[s][L_S_LOCK][j],
					      &lat[s][L_S_UNLOCK][j]);
				break;
			case 2:
				raw[RAW_FADD][j * NSCHEMES + s] = lat_raw(lb, RAW_FADD);
				break;
			case 4:
				raw[RAW_CAS_BEHIND][j * NSCHEMES + s] = lat_raw_behind(lb, false);
				break;
			case 5:
				raw[RAW_CAS_ONE_WRITE][j * NSCHEMES + s] = lat_raw_behind(lb, true);
				break;
			default:
				/* ncosed: also the pair behind the API, first on every other
				 * sample, so what ran just before is the same for both. */
				if (s == 0 && j % 2)
					impl[j] = lat_impl_pair(lb);
				lat_lock_pair(lb, DDSS_LOCK_EXCLUSIVE, &lat[s][L_X_LOCK][j],
					      &lat[s][L_X_UNLOCK][j]);
				if (s == 0 && !(j % 2))
					impl[j] = lat_impl_pair(lb);
			}
		}
}

static void measure_latency(struct lb *lb, struct lat_result *res)
{
	const struct bench_opts *o = &lb->o.b;
	size_t n = (size_t)o->iters * o->rounds;
	double *raw[RAW_COUNT], *lat[NSCHEMES][L_COUNT], *impl, d;
	bool me = lb->rank == HOLDER;

	for (int k = 0; k < RAW_COUNT; k++)
		raw[k] = samples(me ? n * NSCHEMES : 0);
	for (int s = 0; s < NSCHEMES; s++)
		for (int k = 0; k < L_COUNT; k++)
			lat[s][k] = samples(me ? n : 0);
	impl = samples(me ? n : 0);
	for (int s = 0; s < NSCHEMES; s++) {
		set_phase("uncontended latency, warm-up, scheme %s", scheme_names[s]);
		switch_scheme(lb, s);
		busy(0, "uncontended latency warm-up (lock/unlock, raw cas/fadd)");
		for (unsigned i = 0; me && i < WARMUP; i++) {
			lat_raw(lb, RAW_CAS);
			lat_raw(lb, RAW_FADD);
			lat_raw_behind(lb, false);
			lat_raw_behind(lb, true);
			lat_lock_pair(lb, DDSS_LOCK_SHARED, &d, &d);
			lat_lock_pair(lb, DDSS_LOCK_EXCLUSIVE, &d, &d);
		}
		idle(0);
	}
	for (unsigned r = 0; r < o->rounds; r++)
		for (unsigned blk = 0; blk < o->iters; blk += BLOCK)
			for (int s = 0; s < NSCHEMES; s++) {
				unsigned end = blk + BLOCK < o->iters ? blk + BLOCK : o->iters;

				set_phase("uncontended latency, round %u, samples %u-%u, scheme %s",
					  r, blk, end, scheme_names[s]);
				/* The other ranks wait in the next switch's barrier meanwhile. */
				switch_scheme(lb, s);
				if (!me)
					continue;
				busy(0, "uncontended latency block (lock/unlock, raw cas/fadd)");
				lat_block(lb, s, (size_t)r * o->iters, blk, end, raw, lat, impl);
				idle(0);
			}
	res->n = n;
	for (int k = 0; k < RAW_COUNT; k++) {
		res->raw[k] = me ? median(raw[k], n * NSCHEMES) : NAN;
		free(raw[k]);
	}
	if (me) {
		/* The API pair: the same samples as ncosed's X_lock + X_unlock, summed per
		 * sample (before median() sorts them apart), against the pairs behind it. */
		double *pair = samples(n);

		for (size_t j = 0; j < n; j++)
			pair[j] = lat[0][L_X_LOCK][j] + lat[0][L_X_UNLOCK][j];
		res->api_pair = median(pair, n);
		res->impl_pair = median(impl, n);
		free(pair);
	}
	free(impl);
	for (int s = 0; s < NSCHEMES; s++)
		for (int k = 0; k < L_COUNT; k++) {
			res->lock[s][k] = me ? median(lat[s][k], n) : NAN;
			free(lat[s][k]);
		}
}

/* ---- (b) cascades ---- */

enum { K_REACH, K_TOTAL, K_COUNT };
static const char *const metric_names[K_COUNT] = { "reach", "total" };

struct cascade_result {
	unsigned wmax;
	size_t n;                          /* samples per mode, W and scheme (late ones included) */
	double *med[K_COUNT][M_COUNT][NSCHEMES]; /* [W - 1], ticks until converted */
	unsigned *late[M_COUNT][NSCHEMES];
	unsigned skew;                     /* valid samples with a grant before the release */
	double pair_q[3];                  /* shared reach at the target W: quartiles of the
					    * per-sample ratios dqnl / ncosed (sample i of each
					    * was taken in the same round), NAN if none */
};

static uint64_t ctl_read(struct lb *lb, unsigned word)
{
	return ctl_fadd(lb, word, 0);
}

/*
 * One cascade, collective. Rank 1 returns in t_p[K_REACH] the ticks from its release until
 * the last waiter's grant, in t_p[K_TOTAL] those until it holds the lock again, whether a
 * waiter was late (the sample is then not valid) and whether a grant was read before the
 * release (the ranks do not share one TSC). @base: waiters announced before this sample
 * (rank 1's count). A late waiter is one that had not queued when rank 1 released: it
 * queued behind rank 1's second acquire, so its grant came after rank 1's (t1).
 */
static void cascade_sample(struct lb *lb, enum ddss_lock_mode mode, unsigned W, uint64_t base,
			   double t_p[K_COUNT], bool *late_p, bool *skew_p)
{
	bool me = lb->rank == HOLDER;
	uint64_t t0 = 0, t1 = 0, last, target = base + W, granted[MAX_WAITERS] = { 0 };
	int r;

	if (me) {
		/* Zero = not written: every waiter must overwrite its slot in this sample. */
		r = ddss_put(lb->ctx, lb->grants, 0, granted, (size_t)W * sizeof(granted[0]));
		if (r)
			fail("clearing the grant times", r);
		busy(0, "holder: ddss_acquire_lock_ss(exclusive) before the waiters come");
		r = ddss_acquire_lock_ss(lb->ctx, lb->key, DDSS_LOCK_EXCLUSIVE);
		idle(0);
		if (r)
			fail("holder's first exclusive acquire", r);
	}
	barrier(lb);
	lb->job = (struct job){ .kind = JOB_CASCADE, .mode = mode, .waiters = W };
	pthread_barrier_wait(&lb->go);
	if (me) {
		busy(0, "holder: waiting for the waiters to announce themselves");
		while (ctl_read(lb, CTL_ANNOUNCED) < target)
			sleep_us(POLL_US);
		busy(0, "holder: settle delay");
		sleep_us(lb->settle_us);
		busy(0, "holder: release, then ddss_acquire_lock_ss(exclusive) behind the waiters");
		t0 = bench_ticks();
		r = ddss_release_lock_ss(lb->ctx, lb->key);
		if (r)
			fail("holder's release", r);
		r = ddss_acquire_lock_ss(lb->ctx, lb->key, DDSS_LOCK_EXCLUSIVE);
		t1 = bench_ticks();
		if (r)
			fail("holder's exclusive re-acquire", r);
		t_p[K_TOTAL] = (double)(t1 - t0);
		busy(0, "holder: final release");
		r = ddss_release_lock_ss(lb->ctx, lb->key);
		idle(0);
		if (r)
			fail("holder's final release", r);
	}
	busy(0, "waiting for this rank's workers (pthread barrier)");
	pthread_barrier_wait(&lb->done);
	busy(0, "storing this rank's waiters' grant times (put at rank 1)");
	for (unsigned i = 0; i < lb->nworkers; i++) {
		const struct worker *w = &lb->w[i];

		if (!w->waited)
			continue;
		r = ddss_put(lb->ctx, lb->grants, (size_t)w->g * sizeof(w->granted), &w->granted,
			     sizeof(w->granted));
		if (r)
			fail("ddss_put of a waiter's grant time", r);
	}
	idle(0);
	/* Every grant time is stored (its put returned) before this rank enters. */
	barrier(lb);
	if (!me)
		return;
	r = ddss_get(lb->ctx, lb->grants, 0, granted, (size_t)W * sizeof(granted[0]));
	if (r)
		fail("reading the grant times", r);
	last = t0;
	*skew_p = false;
	*late_p = false;
	for (unsigned i = 0; i < W; i++) {
		if (!granted[i])
			fail("a cascade waiter's grant time (not stored)", -EPROTO);
		*skew_p |= granted[i] < t0;
		*late_p |= granted[i] > t1;
		last = granted[i] > last ? granted[i] : last;
	}
	t_p[K_REACH] = (double)(last - t0);
}

/* The W the cascade target is checked at: 8, or the largest measured below that. */
static unsigned target_w(unsigned wmax)
{
	return wmax < CASCADE_TARGET_W ? wmax : CASCADE_TARGET_W;
}

/*
 * Quartiles of the ratios dq[i] / nc[i] over the samples both schemes have (sample i of
 * each was taken in the same round): a ratio of medians alone hides how far they swing.
 */
static void cascade_pair_quartiles(const double *nc, size_t n_nc, const double *dq, size_t n_dq,
				   double q[3])
{
	size_t n = n_nc < n_dq ? n_nc : n_dq;
	double *r = samples(n);

	for (size_t i = 0; i < n; i++)
		r[i] = dq[i] / nc[i];
	qsort(r, n, sizeof(double), bench_cmp_double);
	for (int k = 0; k < 3; k++)
		q[k] = n ? r[(n - 1) * (size_t)(k + 1) / 4] : NAN;
	free(r);
}

static void measure_cascades(struct lb *lb, struct cascade_result *res)
{
	const struct bench_opts *o = &lb->o.b;
	unsigned wmax = (unsigned)o->size, per = o->iters / CASCADE_ITERS_PER_SAMPLE;
	size_t n;
	double *v[K_COUNT][M_COUNT][NSCHEMES][MAX_WAITERS], t[K_COUNT];
	size_t got[M_COUNT][NSCHEMES][MAX_WAITERS] = { 0 }, j;
	uint64_t base = 0;
	bool late, skew;

	per = per ? per : 1;
	n = (size_t)per * o->rounds;
	res->wmax = wmax;
	res->n = n;
	for (int m = 0; m < M_COUNT; m++)
		for (int s = 0; s < NSCHEMES; s++) {
			res->late[m][s] = calloc(wmax, sizeof(unsigned));
			if (!res->late[m][s])
				fail("allocating results", -ENOMEM);
			for (int k = 0; k < K_COUNT; k++) {
				res->med[k][m][s] = calloc(wmax, sizeof(double));
				if (!res->med[k][m][s])
					fail("allocating results", -ENOMEM);
				for (unsigned w = 0; w < wmax; w++)
					v[k][m][s][w] = samples(n);
			}
		}
	/* Warm-up: every waiter thread's connections and slots, every scheme, both modes. */
	for (int s = 0; s < NSCHEMES; s++) {
		switch_scheme(lb, s);
		for (int m = 0; m < M_COUNT; m++) {
			set_phase("%s cascade warm-up, W=%u, scheme %s", mode_names[m], wmax,
				  scheme_names[s]);
			cascade_sample(lb, modes[m], wmax, base, t, &late, &skew);
			base += wmax;
		}
	}
	for (unsigned r = 0; r < o->rounds; r++)
		for (unsigned W = 1; W <= wmax; W++)
			for (int m = 0; m < M_COUNT; m++)
				for (int s = 0; s < NSCHEMES; s++) {
					switch_scheme(lb, s);
					for (unsigned i = 0; i < per; i++) {
						set_phase("%s cascade, round %u, W=%u, sample %u, "
							  "scheme %s", mode_names[m], r, W, i,
							  scheme_names[s]);
						cascade_sample(lb, modes[m], W, base, t, &late,
							       &skew);
						base += W;
						if (lb->rank != HOLDER)
							continue;
						if (late) {
							res->late[m][s][W - 1]++;
							if (lb->settle_us < SETTLE_MAX_US)
								lb->settle_us *= 2;
							continue;
						}
						res->skew += skew;
						j = got[m][s][W - 1]++;
						for (int k = 0; k < K_COUNT; k++)
							v[k][m][s][W - 1][j] = t[k];
					}
				}
	j = target_w(wmax) - 1;
	cascade_pair_quartiles(v[K_REACH][M_SHARED][0][j], got[M_SHARED][0][j],
			       v[K_REACH][M_SHARED][1][j], got[M_SHARED][1][j], res->pair_q);
	for (int k = 0; k < K_COUNT; k++)
		for (int m = 0; m < M_COUNT; m++)
			for (int s = 0; s < NSCHEMES; s++)
				for (unsigned w = 0; w < wmax; w++) {
					res->med[k][m][s][w] = median(v[k][m][s][w], got[m][s][w]);
					free(v[k][m][s][w]);
				}
}

/* ---- (c) throughput ---- */

struct tput_result {
	unsigned nclients, nlocks[C_COUNT];
	double ops[C_COUNT][NSCHEMES]; /* median total ops/s */
	double home[C_COUNT][NSCHEMES]; /* the home rank's clients' share of it, median */
	uint64_t checked[NSCHEMES];    /* increments the exclusion check made */
	bool check_ok[NSCHEMES];
};

/*
 * One slice of @ms on every rank's clients; rank 1 gets the group's total ops/s, and in
 * *home_p the part of it by the home rank's own clients (on tcp they reach the lock words
 * with local CPU operations, no network).
 */
static double tput_slice(struct lb *lb, unsigned nlocks, bool check, unsigned ms,
			 uint64_t *ops_p, double *home_p)
{
	static uint64_t rate_seen, home_seen, ops_seen;
	double rate = 0;
	uint64_t ops = 0, total;

	lb->job = (struct job){ .kind = JOB_TPUT, .nlocks = nlocks, .check = check,
				.deadline_ns = ddss_now_ns() + (int64_t)ms * 1000000 };
	pthread_barrier_wait(&lb->go);
	busy(0, "waiting for this rank's clients (pthread barrier)");
	pthread_barrier_wait(&lb->done);
	idle(0);
	for (unsigned i = 0; i < lb->nworkers; i++)
		if (lb->w[i].elapsed_ns > 0) {
			rate += (double)lb->w[i].ops * 1e9 / (double)lb->w[i].elapsed_ns;
			ops += lb->w[i].ops;
		}
	ctl_fadd(lb, CTL_RATE, (uint64_t)(rate + 0.5));
	if (lb->rank == lb->home)
		ctl_fadd(lb, CTL_RATE_HOME, (uint64_t)(rate + 0.5));
	ctl_fadd(lb, CTL_CHECKED, ops);
	barrier(lb);
	if (lb->rank != HOLDER)
		return 0;
	total = ctl_read(lb, CTL_RATE);
	rate = (double)(total - rate_seen);
	rate_seen = total;
	total = ctl_read(lb, CTL_RATE_HOME);
	if (home_p)
		*home_p = (double)(total - home_seen);
	home_seen = total;
	total = ctl_read(lb, CTL_CHECKED);
	if (ops_p)
		*ops_p = total - ops_seen;
	ops_seen = total;
	return rate;
}

static void measure_tput(struct lb *lb, struct tput_result *res)
{
	const struct bench_opts *o = &lb->o.b;
	unsigned N = lb->ntkeys;
	double *v[C_COUNT][NSCHEMES], *h[C_COUNT][NSCHEMES];
	uint64_t counter = 0, expect = 0, ops;
	int err;

	res->nclients = N;
	res->nlocks[C_0] = N;
	res->nlocks[C_50] = N / 2 ? N / 2 : 1;
	res->nlocks[C_100] = 1;
	for (int c = 0; c < C_COUNT; c++)
		for (int s = 0; s < NSCHEMES; s++)
		{
			v[c][s] = samples(o->rounds);
			h[c][s] = samples(o->rounds);
		}
	/* The exclusion check, which also warms every client's path up. */
	for (int s = 0; s < NSCHEMES; s++) {
		set_phase("exclusion check, scheme %s", scheme_names[s]);
		switch_scheme(lb, s);
		tput_slice(lb, 1, true, CHECK_MS, &ops, NULL);
		if (lb->rank != HOLDER)
			continue;
		expect += ops;
		err = ddss_get(lb->ctx, lb->tkeys[0], 0, &counter, sizeof(counter));
		if (err)
			fail("reading the exclusion check's counter", err);
		res->checked[s] = ops;
		res->check_ok[s] = counter == expect;
		if (counter != expect)
			fprintf(stderr, "ddss-lock-bench: %s: exclusion check FAILED: %llu "
				"increments under the exclusive lock, counter %llu (was %llu)\n",
				scheme_names[s], (unsigned long long)ops,
				(unsigned long long)counter, (unsigned long long)(expect - ops));
		expect = counter; /* the next scheme is checked from here */
	}
	for (unsigned r = 0; r < o->rounds; r++)
		for (int c = 0; c < C_COUNT; c++)
			for (int s = 0; s < NSCHEMES; s++) {
				set_phase("throughput, round %u, contention %s (L=%u), scheme %s", r,
					  level_names[c], res->nlocks[c], scheme_names[s]);
				switch_scheme(lb, s);
				v[c][s][r] = tput_slice(lb, res->nlocks[c], false,
							lb->o.duration_ms, NULL, &h[c][s][r]);
			}
	for (int c = 0; c < C_COUNT; c++)
		for (int s = 0; s < NSCHEMES; s++) {
			res->ops[c][s] = median(v[c][s], o->rounds);
			res->home[c][s] = median(h[c][s], o->rounds);
			free(v[c][s]);
			free(h[c][s]);
		}
}

/* ---- report (rank 1) ---- */

static const char *completion_name(void)
{
	const char *c = getenv("DDSS_COMPLETION");

	return c && *c ? c : "adaptive";
}

/* The raw atomic a scheme's lock costs, for the ratio: srsl has none, cas stands in. */
static int raw_of(int s, int k)
{
	return (k == L_S_LOCK || k == L_S_UNLOCK) && schemes[s] == DDSS_LOCK_NCOSED ? RAW_FADD :
										  RAW_CAS;
}

static void report_csv(struct lb *lb, const struct lat_result *a, const struct cascade_result *b,
		       const struct tput_result *c)
{
	const char *tp = ddss_net_transport_name(lb->ctx->net), *comp = completion_name();

	printf("table,transport,completion,ranks,scheme,variant,param,value,unit,ratio,hold_us\n");
	printf("latency,%s,%s,%u,raw,cas,,%.3f,us,\n", tp, comp, lb->size, a->raw[RAW_CAS]);
	printf("latency,%s,%s,%u,raw,fadd,,%.3f,us,\n", tp, comp, lb->size, a->raw[RAW_FADD]);
	printf("latency,%s,%s,%u,raw,cas_behind_posted,,%.3f,us,%.3f\n", tp, comp, lb->size,
	       a->raw[RAW_CAS_BEHIND], a->raw[RAW_CAS_BEHIND] / a->raw[RAW_CAS]);
	printf("latency,%s,%s,%u,raw,cas_behind_one_write,,%.3f,us,%.3f\n", tp, comp, lb->size,
	       a->raw[RAW_CAS_ONE_WRITE], a->raw[RAW_CAS_ONE_WRITE] / a->raw[RAW_CAS]);
	for (int s = 0; s < NSCHEMES; s++)
		for (int k = 0; k < L_COUNT; k++)
			printf("latency,%s,%s,%u,%s,%s,,%.3f,us,%.3f\n", tp, comp, lb->size,
			       scheme_names[s], lat_names[k], a->lock[s][k],
			       a->lock[s][k] / a->raw[raw_of(s, k)]);
	for (int k = 0; k < K_COUNT; k++)
		for (int m = 0; m < M_COUNT; m++)
			for (unsigned w = 0; w < b->wmax; w++)
				for (int s = 0; s < NSCHEMES; s++)
					printf("cascade_%s,%s,%s,%u,%s,%s,%u,%.3f,us,%.3f\n",
					       metric_names[k], tp, comp, lb->size, scheme_names[s],
					       mode_names[m], w + 1, b->med[k][m][s][w],
					       b->med[k][m][s][w] / b->med[k][m][0][w]);
	for (int l = 0; l < C_COUNT; l++)
		for (int s = 0; s < NSCHEMES; s++)
		{
			printf("throughput,%s,%s,%u,%s,contention_%s,%u,%.0f,ops/s,%.3f,%u\n",
			       tp, comp, lb->size, scheme_names[s], level_names[l], c->nlocks[l],
			       c->ops[l][s], c->ops[l][s] / c->ops[l][0], lb->o.hold_us);
			printf("throughput_home,%s,%s,%u,%s,contention_%s,%u,%.0f,ops/s,%.3f\n", tp,
			       comp, lb->size, scheme_names[s], level_names[l], c->nlocks[l],
			       c->home[l][s], c->home[l][s] / c->ops[l][s]);
		}
}

static void report(struct lb *lb, const struct lat_result *a, const struct cascade_result *b,
		   const struct tput_result *c)
{
	unsigned wt = target_w(b->wmax);
	double x, xt, xs, xx;
	int pattern;

	printf("ddss-lock-bench: transport=%s completion=%s ranks=%u fair=%d, locks homed at rank "
	       "%u, measured at rank 1, %s\n", ddss_net_transport_name(lb->ctx->net),
	       completion_name(), lb->size, lb->fair, lb->home,
	       lb->o.b.pin ? "ranks pinned to CPU (rank-1) mod ncpu" : "unpinned");
	printf("the schemes take turns in blocks (switched on every rank between barriers)\n\n");

	printf("(a) uncontended lock latency at rank 1, every other rank idle in a barrier; "
	       "%zu samples per op and scheme, medians in us\n", a->n);
	printf("    raw atomic round trip to rank %u, same segment, same blocks: cas %.2f us, "
	       "fadd %.2f us\n", lb->home, a->raw[RAW_CAS], a->raw[RAW_FADD]);
	printf("    x_raw = lock / the raw atomic that lock costs (X: cas; S: fadd for ncosed, "
	       "cas for dqnl; srsl sends messages, shown against cas)\n");
	printf("%-8s %9s %9s %8s %9s %9s %8s\n", "scheme", "S_lock", "S_unlock", "S_x_raw",
	       "X_lock", "X_unlock", "X_x_raw");
	for (int s = 0; s < NSCHEMES; s++)
		printf("%-8s %9.2f %9.2f %8.3f %9.2f %9.2f %8.3f\n", scheme_names[s],
		       a->lock[s][L_S_LOCK], a->lock[s][L_S_UNLOCK],
		       a->lock[s][L_S_LOCK] / a->raw[raw_of(s, L_S_LOCK)], a->lock[s][L_X_LOCK],
		       a->lock[s][L_X_UNLOCK], a->lock[s][L_X_LOCK] / a->raw[raw_of(s, L_X_LOCK)]);
	xs = a->lock[0][L_S_LOCK] / a->raw[RAW_FADD];
	pattern = lb->ctx->tp->holds_later ? RAW_CAS_ONE_WRITE : RAW_CAS_BEHIND;
	xx = a->lock[0][L_X_LOCK] / a->raw[pattern];
	printf("    raw cas posted right behind another cas (an X lock's pattern where the last "
	       "posted release went alone): %.2f us, %.3f x a cas alone\n",
	       a->raw[RAW_CAS_BEHIND], a->raw[RAW_CAS_BEHIND] / a->raw[RAW_CAS]);
	printf("    the same two cas in one write (the first held for the second: the pattern "
	       "where the transport holds the release, %s here): %.2f us, %.3f x a cas alone\n",
	       lb->ctx->tp->holds_later ? "as" : "not", a->raw[RAW_CAS_ONE_WRITE],
	       a->raw[RAW_CAS_ONE_WRITE] / a->raw[RAW_CAS]);
	printf("target: ncosed uncontended lock within 5%% of its raw pattern: S / fadd %.3f, "
	       "X / %s %.3f -> %s (X / a cas alone: %.3f)\n", xs,
	       pattern == RAW_CAS_ONE_WRITE ? "cas behind a held cas" : "cas behind a posted cas",
	       xx, xs <= LAT_TARGET && xx <= LAT_TARGET ? "met" : "NOT met",
	       a->lock[0][L_X_LOCK] / a->raw[RAW_CAS]);
	printf("API layer (mode table + statistics counters), ncosed X lock + unlock medians: "
	       "%.3f us vs %.3f us behind it (%+.3f us, %+.2f%%)\n\n", a->api_pair, a->impl_pair,
	       a->api_pair - a->impl_pair, 100.0 * (a->api_pair / a->impl_pair - 1.0));

	printf("(b) lock cascades (N-CoSED paper 4.3, Fig. 7; DQNL paper 5.3, Fig. 4): rank 1 holds "
	       "the lock exclusively, W waiters (threads round robin over ranks %s) request it and "
	       "block;\n"
	       "    rank 1 releases and at once requests it exclusively again, so it queues "
	       "behind all W, each of which releases as soon as granted. From rank 1's release:\n"
	       "    reach = until the last waiter is granted (propagation delay, N-CoSED Fig. 7); "
	       "total = until rank 1 holds the lock again (all W released, DQNL Fig. 4).\n"
	       "    reach compares TSC reads of different ranks: valid because all ranks run on "
	       "one machine (or VM) with one TSC, converted with the run's calibration.\n"
	       "    Median us over %zu samples per cell; late = samples dropped because a waiter "
	       "had not queued before the release (settle delay after the waiters announced: "
	       "%u us at the end).\n", lb->size > 1 ? "2..n" : "1", b->n, lb->settle_us);
	if (b->skew)
		printf("    WARNING: %u samples had a grant read before the release: the ranks do "
		       "not share one TSC, reach is not valid\n", b->skew);
	for (int m = 0; m < M_COUNT; m++) {
		unsigned late[NSCHEMES] = { 0 };

		printf("%s-lock cascade, median us\n%4s", mode_names[m], "");
		for (int k = 0; k < K_COUNT; k++)
			printf(" | %-47s", metric_names[k]);
		printf(" |\n%4s", "W");
		for (int k = 0; k < K_COUNT; k++) {
			printf(" |");
			for (int s = 0; s < NSCHEMES; s++)
				printf(" %9s", scheme_names[s]);
			printf(" %8s %8s", "dqnl/nc", "srsl/nc");
		}
		printf(" | %s\n", "late(nc,dq,sr)");
		for (unsigned w = 0; w < b->wmax; w++) {
			printf("%4u", w + 1);
			for (int k = 0; k < K_COUNT; k++) {
				double *const *md = b->med[k][m];

				printf(" |");
				for (int s = 0; s < NSCHEMES; s++)
					printf(" %9.2f", md[s][w]);
				printf(" %8.2f %8.2f", md[1][w] / md[0][w], md[2][w] / md[0][w]);
			}
			printf(" | %u,%u,%u\n", b->late[m][0][w], b->late[m][1][w],
			       b->late[m][2][w]);
			for (int s = 0; s < NSCHEMES; s++)
				late[s] += b->late[m][s][w];
		}
		if (late[0] + late[1] + late[2])
			printf("late samples: ncosed %u, dqnl %u, srsl %u\n", late[0], late[1],
			       late[2]);
	}
	x = b->med[K_REACH][M_SHARED][1][wt - 1] / b->med[K_REACH][M_SHARED][0][wt - 1];
	xt = b->med[K_TOTAL][M_SHARED][1][wt - 1] / b->med[K_TOTAL][M_SHARED][0][wt - 1];
	printf("target: shared cascade at W=%u, dqnl / ncosed: reach %.2fx (target >= %.0fx%s) -> "
	       "%s; total %.2fx (not the target's metric)\n", wt, x, CASCADE_TARGET,
	       wt < CASCADE_TARGET_W ? ", stated for W=8" : "",
	       x >= CASCADE_TARGET ? "met" : "NOT met", xt);
	printf("    per-sample reach ratios dqnl / ncosed at W=%u (samples of one round side by "
	       "side): p25 %.2f, median %.2f, p75 %.2f\n\n", wt, b->pair_q[0], b->pair_q[1],
	       b->pair_q[2]);

	printf("(c) throughput (DQNL paper 5.4): N = %u ranks x %u threads = %u clients, each "
	       "looping acquire-exclusive / release on lock (client mod L), no work in between;\n"
	       "    all L locks homed at rank %u; contention = 1 - L/N; total ops/s of all "
	       "clients, median over %u slices of %u ms\n", lb->size, lb->o.threads,
	       c->nclients, lb->home, lb->o.b.rounds, lb->o.duration_ms);
	printf("    (home%% = the part done by rank %u's own clients, which on tcp reach the lock "
	       "words with local CPU operations)\n", lb->home);
	printf("%-10s %4s", "contention", "L");
	for (int s = 0; s < NSCHEMES; s++)
		printf(" %10s %6s", scheme_names[s], "home%");
	printf("\n");
	for (int l = 0; l < C_COUNT; l++) {
		printf("%-10s %4u", level_names[l], c->nlocks[l]);
		for (int s = 0; s < NSCHEMES; s++)
			printf(" %10.0f %6.1f", c->ops[l][s], 100.0 * c->home[l][s] / c->ops[l][s]);
		printf("\n");
	}
	printf("exclusion check (all clients, one lock, get / +1 / put under it, %d ms):", CHECK_MS);
	for (int s = 0; s < NSCHEMES; s++)
		printf(" %s %s (%llu)", scheme_names[s], c->check_ok[s] ? "ok" : "FAILED",
		       (unsigned long long)c->checked[s]);
	printf("\n");
}

static double us_per_tick(const struct lb *lb)
{
	return (double)(ddss_now_ns() - lb->ns0) / 1000.0 / (double)(bench_ticks() - lb->tick0);
}

/* ---- set-up ---- */

static int parse(int argc, char **argv, struct lb_opts *o)
{
	char **rest = calloc((size_t)argc + 1, sizeof(char *));
	bool quick = false, iters = false, rounds = false, waiters = false, duration = false;
	int n = 0, r;

	if (!rest)
		return -1;
	o->threads = DEFAULT_THREADS;
	o->duration_ms = DEFAULT_DURATION_MS;
	rest[n++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			o->threads = (unsigned)strtoul(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--duration-ms") && i + 1 < argc) {
			o->duration_ms = (unsigned)strtoul(argv[++i], NULL, 0);
			duration = true;
		} else if (!strcmp(argv[i], "--hold-us") && i + 1 < argc) {
			o->hold_us = (unsigned)strtoul(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--quick")) {
			quick = true;
		} else {
			iters |= !strcmp(argv[i], "--iters");
			rounds |= !strcmp(argv[i], "--rounds");
			waiters |= !strcmp(argv[i], "--waiters");
			rest[n++] = argv[i];
		}
	}
	/* --waiters is the size option bench_parse knows (default and limit). */
	r = bench_parse(n, rest, "--waiters", DEFAULT_WAITERS, MAX_WAITERS, &o->b);
	free(rest);
	if (r)
		return -1;
	if (quick) {
		o->b.iters = iters ? o->b.iters : 100;
		o->b.rounds = rounds ? o->b.rounds : 1;
		o->b.size = waiters ? o->b.size : 4;
		o->duration_ms = duration ? o->duration_ms : 50;
	}
	return o->threads && o->threads <= MAX_THREADS && o->duration_ms &&
	       o->duration_ms <= MAX_DURATION_MS && o->hold_us <= 1000000 ? 0 : -1;
}

/* Waiter threads this rank runs for the largest cascade. */
static unsigned waiters_here(const struct lb *lb)
{
	unsigned n = 0, g;

	for (unsigned i = 0; i < MAX_WAITERS && waiter_index(lb, i, &g) && g < lb->o.b.size; i++)
		n++;
	return n;
}

static void setup(struct lb *lb)
{
	char name[DDSS_NAME_MAX];
	const char *f = getenv("DDSS_LOCK_FAIR");

	lb->rank = ddss_rank(lb->ctx);
	lb->size = ddss_size(lb->ctx);
	lb->home = lb->size >= HOME ? HOME : 1;
	lb->fair = f && !strcmp(f, "1");
	lb->settle_us = SETTLE_US;
	set_phase("set-up (named segments)");
	seg_named(lb, "ddss-lock-bench.lock", lb->home, 64, &lb->key, &lb->word_off);
	seg_named(lb, "ddss-lock-bench.ctl", HOLDER, CTL_LEN, &lb->ctl, &lb->ctl_off);
	seg_named(lb, "ddss-lock-bench.grant", HOLDER, MAX_WAITERS * sizeof(uint64_t),
		  &lb->grants, NULL);
	lb->ntkeys = lb->size * lb->o.threads;
	lb->tkeys = calloc(lb->ntkeys, sizeof(*lb->tkeys));
	if (!lb->tkeys)
		fail("set-up", -ENOMEM);
	for (unsigned i = 0; i < lb->ntkeys; i++) {
		snprintf(name, sizeof(name), "ddss-lock-bench.t%u", i);
		seg_named(lb, name, lb->home, 64, &lb->tkeys[i], NULL);
	}
	lb->nworkers = waiters_here(lb);
	if (lb->nworkers < lb->o.threads)
		lb->nworkers = lb->o.threads;
	lb->w = calloc(lb->nworkers, sizeof(*lb->w));
	if (!lb->w || pthread_barrier_init(&lb->go, NULL, lb->nworkers + 1) ||
	    pthread_barrier_init(&lb->done, NULL, lb->nworkers + 1))
		fail("set-up", -ENOMEM);
	for (unsigned i = 0; i < lb->nworkers; i++) {
		lb->w[i] = (struct worker){ .lb = lb, .idx = i };
		if (pthread_create(&lb->w[i].th, NULL, worker_main, &lb->w[i]))
			fail("creating worker threads", -EAGAIN);
	}
}

static void teardown(struct lb *lb)
{
	int r;

	lb->job.kind = JOB_EXIT;
	pthread_barrier_wait(&lb->go);
	for (unsigned i = 0; i < lb->nworkers; i++)
		pthread_join(lb->w[i].th, NULL);
	set_phase("tear-down");
	barrier(lb);
	if (lb->rank == HOLDER) {
		r = ddss_release_ss(lb->ctx, lb->key);
		if (!r)
			r = ddss_release_ss(lb->ctx, lb->ctl);
		if (!r)
			r = ddss_release_ss(lb->ctx, lb->grants);
		for (unsigned i = 0; !r && i < lb->ntkeys; i++)
			r = ddss_release_ss(lb->ctx, lb->tkeys[i]);
		if (r)
			fail("ddss_release_ss", r);
	}
	barrier(lb);
	pthread_barrier_destroy(&lb->go);
	pthread_barrier_destroy(&lb->done);
	free(lb->w);
	free(lb->tkeys);
}

int main(int argc, char **argv)
{
	struct lb lb = { 0 };
	struct lat_result a = { 0 };
	struct cascade_result b = { 0 };
	struct tput_result c = { 0 };
	struct ddss_attr attr;
	pthread_t wd;
	double upt;
	int r, rc = 0;

	if (parse(argc, argv, &lb.o)) {
		fprintf(stderr, "usage: ddssrun -n 4 %s [--iters N] [--rounds R] [--waiters W<=%d] "
			"[--threads T<=%d] [--duration-ms D] [--hold-us H] [--quick] [--no-pin] "
			"[--csv]\n",
			argv[0], MAX_WAITERS, MAX_THREADS);
		return 2;
	}
	if (lb.o.b.pin)
		bench_pin_rank();
	/* One slot for the main thread, one per possible worker. */
	nacts = 1 + (MAX_WAITERS > MAX_THREADS ? MAX_WAITERS : MAX_THREADS);
	acts = calloc(nacts, sizeof(*acts));
	if (!acts)
		return 1;
	ddss_attr_init(&attr);
	attr.connect_timeout_ms = BARRIER_TIMEOUT_MS;
	r = ddss_init(&attr, &lb.ctx);
	if (r) {
		fprintf(stderr, "ddss-lock-bench: ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	my_rank = ddss_rank(lb.ctx);
	if (pthread_create(&wd, NULL, watchdog_main, NULL)) {
		fprintf(stderr, "ddss-lock-bench: cannot start the watchdog\n");
		ddss_finalize(lb.ctx);
		return 1;
	}
	setup(&lb);
	lb.ns0 = ddss_now_ns();
	lb.tick0 = bench_ticks();
	measure_latency(&lb, &a);
	measure_cascades(&lb, &b);
	measure_tput(&lb, &c);
	if (lb.rank == HOLDER) {
		upt = us_per_tick(&lb);
		for (int k = 0; k < RAW_COUNT; k++)
			a.raw[k] *= upt;
		a.api_pair *= upt;
		a.impl_pair *= upt;
		for (int s = 0; s < NSCHEMES; s++) {
			for (int k = 0; k < L_COUNT; k++)
				a.lock[s][k] *= upt;
			for (int k = 0; k < K_COUNT; k++)
				for (int m = 0; m < M_COUNT; m++)
					for (unsigned w = 0; w < b.wmax; w++)
						b.med[k][m][s][w] *= upt;
			rc |= !c.check_ok[s];
		}
		if (lb.o.b.csv)
			report_csv(&lb, &a, &b, &c);
		else
			report(&lb, &a, &b, &c);
		fflush(stdout);
	}
	for (int m = 0; m < M_COUNT; m++)
		for (int s = 0; s < NSCHEMES; s++) {
			for (int k = 0; k < K_COUNT; k++)
				free(b.med[k][m][s]);
			free(b.late[m][s]);
		}
	teardown(&lb);
	atomic_store(&watchdog_stop, true);
	pthread_join(wd, NULL);
	r = ddss_finalize(lb.ctx);
	if (r)
		fprintf(stderr, "ddss-lock-bench: ddss_finalize: %s\n", ddss_strerror(r));
	free(acts);
	return rc ? 1 : (r ? 1 : 0);
}
