/*
 * Fault tests with BUSY victims (issue 26, part 3): one program, run as every rank of a
 * multi-host group (DDSS_NODES, DDSS_RANK; tests/lock/busy_fault.sh puts each rank in its
 * own network namespace and applies the fault). Not a ddssrun test: the driver kills,
 * freezes or cuts off one rank while all ranks are busy with one lock.
 *
 * Every rank runs --threads threads, each looping until --duration-ms after the start
 * barrier, on one null-coherence segment homed at --home:
 *   [counter | tally[0] | tally[1] | ... | tally[N]]   (u64 each; tally[r]: rank r's)
 *   exclusive: acquire X, get all, counter++, tally[me]++, put all, release
 *              (under X, tally[me] must equal this rank's completed increments)
 *   shared:    acquire S, get all, short busy pause, get all, both equal, release
 * mixed at random from --seed. Every call is timed (monotonic clock) and its result
 * counted by error code.
 *
 * Failures (exit status 1): -EPROTO from any call; a survivor's error outside the expected
 * set (the errors ddss.h lists for the case: with the home alive only -EAGAIN from a lock
 * call, with the home gone -EHOSTDOWN, or -ECONNRESET for a transfer in flight; and what
 * --allow adds; -ENOLCK is not in it: a survivor that runs out of waiter slots cannot lock
 * anything any more, on live homes either); a call that takes
 * longer than --bound-ms (default T + T/4 + 3000, T the peer timeout) or never returns (a
 * hang: the watchdog reports it and the program exits); a shared hold that saw the data
 * change; a lost or doubled increment. The victim (--victim, told by the driver with
 * --fault) is held to: no EPROTO, no hang, and, when it is not the home, no success of a
 * call that started after it must have declared the home dead (cut: T/4 + 1 s after its
 * first error; frozen: after its thaw). It exits on its own.
 *
 * At the end each survivor writes its increments to a control segment at the home; the
 * home (when it is not the victim) waits for them, takes the lock X, reads the segment and
 * checks tally[r] == rank r's increments for every survivor and counter == sum of tallies.
 * Every rank prints one line:
 *   RESULT rank=R role=survivor|victim|checker incs=N errors=EHOSTDOWN:3,...|none
 *     eproto=0 unexpected=0 hangs=0 slow=0 late_ok=0 bad=0
 *     maxlat_ms=acqx:..,acqs:..,get:..,put:..,rel:.. bound_ms=B [check=...] status=PASS|FAIL
 * (late_ok: the victim's successes after the home was dead; bad: broken S/X exclusion or
 * a tally that disagrees with the increments, seen under the lock).
 * A rank whose threads all finished leaves with ddss_finalize, which must return within
 * --bound-ms even with a member gone; the program ends with _exit, bounded by alarm() as a
 * last resort.
 */
#include "ddss/ddss.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 32
#define MAX_ERR 4096
#define MAX_RANKS 64

enum op { OP_ACQ_X, OP_ACQ_S, OP_GET, OP_PUT, OP_REL, OP_CHECK, OP_N };
static const char *const op_names[OP_N] = { "acquire_x", "acquire_s", "get", "put",
					    "release", "check" };

enum fault { F_NONE, F_KILL, F_FREEZE, F_CUT };

static struct {
	unsigned threads;
	int64_t duration_ms;
	uint64_t seed;
	uint32_t home;
	uint32_t victim; /* 0: none */
	enum fault fault;
	int64_t peer_timeout_ms;
	int64_t bound_ms;
	int64_t linger_ms;
	int x_percent;
} opt = { 3, 5000, 1, 1, 0, F_NONE, 2000, -1, 1000, 50 };

static ddss_ctx_t *ctx;
static uint32_t me, nranks;
static ddss_key_t seg, ctl;
static size_t seg_len;
static int64_t t_start, t_end;
static bool i_am_victim;

static atomic_uint_fast64_t rank_incs;     /* this rank's increments whose put returned 0 */
static _Atomic int64_t thaw_ms;            /* freeze victim: when SIGCONT came (0: not yet) */
static _Atomic int64_t first_err_ms;       /* first failed call of this rank (0: none) */
static atomic_uint fails;                  /* failed checks, all threads */
static atomic_uint printed;                /* failure lines printed (capped) */

struct worker {
	pthread_t th;
	unsigned id;
	uint64_t rng;
	/* the call in progress, for the watchdog */
	_Atomic int64_t op_start; /* 0: none */
	_Atomic int op;
	atomic_bool hang_reported;
	atomic_bool done;
	/* results */
	uint64_t incs, xs, ss;
	unsigned errs[MAX_ERR];
	unsigned eproto, unexpected, slow, late_ok, broken_s, tally_bad;
	int64_t maxlat[OP_N];
};

static struct worker workers[MAX_THREADS];
static atomic_uint hangs;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *err_name(int e)
{
	static const struct { int e; const char *n; } t[] = {
		{ EHOSTDOWN, "EHOSTDOWN" },   { ECONNRESET, "ECONNRESET" },
		{ ECONNREFUSED, "ECONNREFUSED" }, { ETIMEDOUT, "ETIMEDOUT" },
		{ ENOTCONN, "ENOTCONN" },     { ESTALE, "ESTALE" },
		{ EPROTO, "EPROTO" },         { EPERM, "EPERM" },
		{ EINVAL, "EINVAL" },         { ENOLCK, "ENOLCK" },
		{ EBUSY, "EBUSY" },           { ENOMEM, "ENOMEM" },
		{ EIO, "EIO" },               { EPIPE, "EPIPE" },
		{ EHOSTUNREACH, "EHOSTUNREACH" }, { ENETUNREACH, "ENETUNREACH" },
		{ ECANCELED, "ECANCELED" },   { EAGAIN, "EAGAIN" },
		{ ENOENT, "ENOENT" },         { EILSEQ, "EILSEQ" },
	};
	static __thread char buf[16];

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].e == e)
			return t[i].n;
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

static bool allowed_extra[MAX_ERR]; /* --allow: more errors survivors may see */

static bool expected_err(int e)
{
	if (e > 0 && e < MAX_ERR && allowed_extra[e])
		return true;
	/* The home gone: the segment and its lock are gone (ddss.h: -EHOSTDOWN from lock
	 * calls; a get or put in flight may see the connection reset). */
	if (opt.victim && opt.victim == opt.home)
		return e == EHOSTDOWN || e == ECONNRESET;
	/* The home alive: get and put always work; a lock call may only be told to call
	 * again (-EAGAIN) when recovery took more than its rounds. */
	return e == EAGAIN;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	char buf[512];

	atomic_fetch_add(&fails, 1);
	if (atomic_fetch_add(&printed, 1) >= 20)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	printf("FAIL rank=%u t=%" PRId64 "ms: %s\n", me, now_ms() - t_start, buf);
	fflush(stdout);
}

static void on_sigcont(int sig)
{
	(void)sig;
	int64_t z = 0;

	atomic_compare_exchange_strong(&thaw_ms, &z, now_ms());
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL busy_fault: alarm: the program did not end within its "
				  "bound (a hang); exiting\n";
	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do */
	}
	_exit(3);
}

static uint64_t rnd(struct worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

/* The start of a call, as the latency checks see it: a frozen victim's calls that were
 * under way when it was stopped count from its thaw. */
static int64_t effective_start(int64_t start)
{
	int64_t t = atomic_load(&thaw_ms);

	return t > start ? t : start;
}

/* Account one finished call: latency, error code, the victim's "nothing works after the
 * home is dead" rule. Returns @r. */
static int account(struct worker *w, enum op op, int64_t start, int r)
{
	int64_t end = now_ms(), lat;

	atomic_store(&w->op_start, 0);
	if (i_am_victim && opt.fault == F_FREEZE && end - start > opt.bound_ms &&
	    !atomic_load(&thaw_ms)) {
		/* Perhaps just thawed and the SIGCONT handler has not run yet: give it 200 ms. */
		for (int i = 0; i < 200 && !atomic_load(&thaw_ms); i++)
			usleep(1000);
	}
	lat = end - effective_start(start);
	if (lat > w->maxlat[op])
		w->maxlat[op] = lat;
	if (lat > opt.bound_ms) {
		w->slow++;
		fail("thread %u: %s took %" PRId64 " ms (bound %" PRId64 " ms), returned %d (%s)",
		     w->id, op_names[op], lat, opt.bound_ms, r, r ? err_name(-r) : "ok");
	}
	if (r < 0) {
		int e = -r;
		int64_t z = 0;

		atomic_compare_exchange_strong(&first_err_ms, &z, end);
		if (e < MAX_ERR)
			w->errs[e]++;
		if (e == EPROTO) {
			w->eproto++;
			fail("thread %u: %s returned -EPROTO (-71) after %" PRId64 " ms", w->id,
			     op_names[op], lat);
		} else if (!expected_err(e) && !i_am_victim) {
			/* The victim may see any error but -EPROTO (a cut-off rank retires a
			 * waiter slot per failed request and runs out: -ENOLCK). */
			w->unexpected++;
			fail("thread %u: %s returned an unexpected %d (%s)", w->id, op_names[op], r,
			     err_name(e));
		}
	} else if (r == 0 && i_am_victim && me != opt.home) {
		/* The victim (not the home) must never succeed once it has declared the home
		 * dead: frozen, from its thaw on; cut, from T/4 + 1 s after its first error
		 * (every peer went silent at the same moment, declared dead within T/4). */
		int64_t fe = atomic_load(&first_err_ms), th = atomic_load(&thaw_ms);
		bool late = (opt.fault == F_FREEZE && th && start > th + 50) ||
			    (opt.fault == F_CUT && fe &&
			     start > fe + opt.peer_timeout_ms / 4 + 1000);

		if (late) {
			w->late_ok++;
			fail("thread %u: %s succeeded after this cut-off/frozen victim must have "
			     "declared the home dead", w->id, op_names[op]);
		}
	}
	return r;
}

static void begin(struct worker *w, enum op op, int64_t *start)
{
	*start = now_ms();
	atomic_store(&w->op, op);
	atomic_store(&w->op_start, *start);
}

static int timed_acquire(struct worker *w, enum ddss_lock_mode mode)
{
	int64_t s;
	enum op op = mode == DDSS_LOCK_EXCLUSIVE ? OP_ACQ_X : OP_ACQ_S;

	begin(w, op, &s);
	return account(w, op, s, ddss_acquire_lock_ss(ctx, seg, mode));
}

static int timed_get(struct worker *w, void *buf)
{
	int64_t s;

	begin(w, OP_GET, &s);
	return account(w, OP_GET, s, ddss_get(ctx, seg, 0, buf, seg_len));
}

static int timed_put(struct worker *w, const void *buf)
{
	int64_t s;

	begin(w, OP_PUT, &s);
	return account(w, OP_PUT, s, ddss_put(ctx, seg, 0, buf, seg_len));
}

static int timed_release(struct worker *w)
{
	int64_t s;

	begin(w, OP_REL, &s);
	return account(w, OP_REL, s, ddss_release_lock_ss(ctx, seg));
}

static void pause_a_little(void)
{
	volatile unsigned x = 0;

	for (unsigned i = 0; i < 3000; i++)
		x += i;
}

static void backoff(void)
{
	/* Not synchronisation: keeps a rank whose every call fails at once from flooding the
	 * log. */
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static bool keep_going(void)
{
	int64_t t = now_ms();

	if (t < t_end)
		return true;
	/* A thawed victim goes on for --linger-ms after its thaw: every call must fail. */
	if (i_am_victim && opt.fault == F_FREEZE) {
		int64_t th = atomic_load(&thaw_ms);

		return th && t < th + opt.linger_ms;
	}
	return false;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t *a = calloc(1, seg_len), *b = calloc(1, seg_len);
	int r;

	while (keep_going()) {
		bool x = (int)(rnd(w) % 100) < opt.x_percent;

		if (x) {
			w->xs++;
			if (timed_acquire(w, DDSS_LOCK_EXCLUSIVE)) {
				backoff();
				continue;
			}
			if (!timed_get(w, a)) {
				uint64_t mine = atomic_load(&rank_incs);

				if (a[1 + me] != mine) {
					w->tally_bad++;
					fail("thread %u: under X tally[%u] = %" PRIu64 ", this rank "
					     "completed %" PRIu64 " increments (lost or doubled)",
					     w->id, me, a[1 + me], mine);
				}
				a[0]++;
				a[1 + me]++;
				if (!timed_put(w, a)) {
					w->incs++;
					atomic_fetch_add(&rank_incs, 1);
				}
			}
			if (timed_release(w))
				backoff();
		} else {
			w->ss++;
			if (timed_acquire(w, DDSS_LOCK_SHARED)) {
				backoff();
				continue;
			}
			r = timed_get(w, a);
			pause_a_little();
			if (!r && !timed_get(w, b) && memcmp(a, b, seg_len)) {
				w->broken_s++;
				fail("thread %u: the segment changed under a shared hold (counter "
				     "%" PRIu64 " -> %" PRIu64 "): S/X exclusion broken",
				     w->id, a[0], b[0]);
			}
			if (timed_release(w))
				backoff();
		}
	}
	free(a);
	free(b);
	atomic_store(&w->done, true);
	return NULL;
}

/* Watch the workers until they are done or @deadline; report calls in progress for
 * longer than the bound. Returns whether all finished. */
static bool watch(int64_t deadline)
{
	for (;;) {
		bool all = true;
		int64_t t = now_ms();

		for (unsigned i = 0; i < opt.threads; i++) {
			struct worker *w = &workers[i];
			int64_t s = atomic_load(&w->op_start);

			if (!atomic_load(&w->done))
				all = false;
			if (s && t - effective_start(s) > opt.bound_ms &&
			    !atomic_exchange(&w->hang_reported, true)) {
				/* A frozen victim just thawed may see a stale start: recheck. */
				if (i_am_victim && opt.fault == F_FREEZE && !atomic_load(&thaw_ms)) {
					atomic_store(&w->hang_reported, false);
					continue;
				}
				atomic_fetch_add(&hangs, 1);
				fail("thread %u: HANG: %s in progress for %" PRId64 " ms (bound %" PRId64
				     " ms)", i, op_names[atomic_load(&w->op)],
				     t - effective_start(s), opt.bound_ms);
			}
		}
		if (all)
			return true;
		if (t > deadline)
			return false;
		usleep(20 * 1000);
	}
}

static void errors_string(char *out, size_t len, const unsigned *errs)
{
	size_t n = 0;

	out[0] = 0;
	for (int e = 1; e < MAX_ERR; e++) {
		if (!errs[e])
			continue;
		n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s:%u", n ? "," : "",
				      err_name(e), errs[e]);
		if (n >= len)
			break;
	}
	if (!out[0])
		snprintf(out, len, "none");
}

/* The home checks the counter against every survivor's reported increments. */
static bool check_counter(char *what, size_t len)
{
	uint64_t *v = calloc(1, seg_len), *done = calloc(nranks + 1, 8);
	int64_t deadline = now_ms() + opt.bound_ms + 2000, s;
	uint64_t sum = 0;
	bool ok = true, all;
	int r;
	size_t n = 0;

	/* Every survivor writes incs + 1 into ctl[r] when its threads are done. */
	do {
		all = true;
		r = ddss_get(ctx, ctl, 0, done, (nranks + 1) * 8);
		if (r) {
			snprintf(what, len, "reading the control segment: %d (%s)", r, err_name(-r));
			free(v);
			free(done);
			return false;
		}
		for (uint32_t p = 1; p <= nranks; p++)
			if (p != opt.victim && !done[p])
				all = false;
		if (!all)
			usleep(10 * 1000);
	} while (!all && now_ms() < deadline);
	if (!all) {
		n += (size_t)snprintf(what, len, "not every survivor reported (");
		for (uint32_t p = 1; p <= nranks; p++)
			if (p != opt.victim && !done[p])
				n += (size_t)snprintf(what + n, n < len ? len - n : 0, " %u", p);
		snprintf(what + n, n < len ? len - n : 0, " )");
		free(v);
		free(done);
		return false;
	}
	s = now_ms();
	r = ddss_acquire_lock_timed_ss(ctx, seg, DDSS_LOCK_EXCLUSIVE, (int)opt.bound_ms);
	if (r) {
		snprintf(what, len, "the checker's lock X: %d (%s) after %" PRId64 " ms", r,
			 err_name(-r), now_ms() - s);
		free(v);
		free(done);
		return false;
	}
	r = ddss_get(ctx, seg, 0, v, seg_len);
	ddss_release_lock_ss(ctx, seg);
	if (r) {
		snprintf(what, len, "the checker's get: %d (%s)", r, err_name(-r));
		free(v);
		free(done);
		return false;
	}
	n = (size_t)snprintf(what, len, "counter=%" PRIu64 " tallies=", v[0]);
	for (uint32_t p = 1; p <= nranks; p++) {
		sum += v[1 + p];
		n += (size_t)snprintf(what + n, n < len ? len - n : 0, "%s%u:%" PRIu64, p > 1 ? "," : "",
				      p, v[1 + p]);
		if (p != opt.victim) {
			n += (size_t)snprintf(what + n, n < len ? len - n : 0, "/%" PRIu64,
					      done[p] - 1);
			if (v[1 + p] != done[p] - 1)
				ok = false;
		}
	}
	if (sum != v[0])
		ok = false;
	snprintf(what + n, n < len ? len - n : 0, " sum=%" PRIu64 "%s", sum,
		 ok ? "" : " MISMATCH");
	free(v);
	free(done);
	return ok;
}

static void usage(const char *p)
{
	fprintf(stderr,
		"usage: %s [--threads N] [--duration-ms MS] [--seed S] [--home R] [--victim R]\n"
		"          [--fault none|kill|freeze|cut] [--bound-ms MS] [--linger-ms MS]\n"
		"          [--x-percent P] [--allow ENOLCK,...]\n"
		"Run as every rank of a group (DDSS_NODES, DDSS_RANK, DDSS_SECRET...).\n",
		p);
}

int main(int argc, char **argv)
{
	struct ddss_attr attr;
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK };
	const char *pt;
	int64_t t_init;
	unsigned incs = 0, eproto = 0, unexpected = 0, slow = 0, late = 0, bad = 0;
	static unsigned errs[MAX_ERR];
	int64_t maxlat[OP_N] = { 0 };
	char errstr[512], check[1024] = "";
	bool finished, checked_ok = true, pass;
	const char *role;
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v) {
			usage(argv[0]);
			return 2;
		}
		i++;
		if (!strcmp(a, "--threads"))
			opt.threads = (unsigned)atoi(v);
		else if (!strcmp(a, "--duration-ms"))
			opt.duration_ms = atoll(v);
		else if (!strcmp(a, "--seed"))
			opt.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--home"))
			opt.home = (uint32_t)atoi(v);
		else if (!strcmp(a, "--victim"))
			opt.victim = (uint32_t)atoi(v);
		else if (!strcmp(a, "--bound-ms"))
			opt.bound_ms = atoll(v);
		else if (!strcmp(a, "--linger-ms"))
			opt.linger_ms = atoll(v);
		else if (!strcmp(a, "--x-percent"))
			opt.x_percent = atoi(v);
		else if (!strcmp(a, "--allow")) {
			/* e.g. ENOLCK,EIO: names as err_name() spells them (never EPROTO) */
			char *list = strdup(v), *save = NULL;

			for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
				for (int e = 1; e < 200; e++)
					if (e != EPROTO && !strcmp(err_name(e), t))
						allowed_extra[e] = true;
			free(list);
		}
		else if (!strcmp(a, "--fault")) {
			if (!strcmp(v, "none"))
				opt.fault = F_NONE;
			else if (!strcmp(v, "kill"))
				opt.fault = F_KILL;
			else if (!strcmp(v, "freeze"))
				opt.fault = F_FREEZE;
			else if (!strcmp(v, "cut"))
				opt.fault = F_CUT;
			else {
				usage(argv[0]);
				return 2;
			}
		} else {
			usage(argv[0]);
			return 2;
		}
	}
	if (!opt.threads || opt.threads > MAX_THREADS || !opt.home || !getenv("DDSS_RANK")) {
		usage(argv[0]);
		return 2;
	}
	if (opt.fault == F_NONE)
		opt.victim = 0;
	pt = getenv("DDSS_PEER_TIMEOUT_MS");
	if (pt && atoll(pt) > 0)
		opt.peer_timeout_ms = atoll(pt);
	if (opt.bound_ms < 0)
		opt.bound_ms = opt.peer_timeout_ms + opt.peer_timeout_ms / 4 + 3000;
	me = (uint32_t)atoi(getenv("DDSS_RANK"));
	i_am_victim = me == opt.victim;
	signal(SIGALRM, on_alarm);
	/* init (collective, peers may start late) + run + wait + check, with room to spare */
	alarm((unsigned)((60000 + opt.duration_ms + 4 * opt.bound_ms + opt.linger_ms) / 1000));
	if (i_am_victim && opt.fault == F_FREEZE) {
		struct sigaction sa_c = { .sa_handler = on_sigcont };

		sigemptyset(&sa_c.sa_mask);
		sigaction(SIGCONT, &sa_c, NULL);
	}

	ddss_attr_init(&attr);
	attr.peer_timeout_ms = (int)opt.peer_timeout_ms;
	t_init = now_ms();
	r = ddss_init(&attr, &ctx);
	if (r) {
		printf("FAIL rank=%u: ddss_init: %d (%s)\n", me, r, ddss_strerror(r));
		return 1;
	}
	nranks = ddss_size(ctx);
	if (opt.home > nranks || opt.victim > nranks || nranks >= MAX_RANKS) {
		printf("FAIL rank=%u: --home/--victim out of range (%u ranks)\n", me, nranks);
		_exit(2);
	}
	seg_len = (size_t)(nranks + 2) * 8;
	sa.rank = opt.home;
	sa.coherence = DDSS_COHERENCE_NULL;
	sa.name = "busy_fault";
	r = ddss_allocate_ss(ctx, seg_len, &sa, &seg);
	if (!r) {
		sa.name = "busy_fault_ctl";
		r = ddss_allocate_ss(ctx, (nranks + 1) * 8, &sa, &ctl);
	}
	if (r) {
		printf("FAIL rank=%u: ddss_allocate_ss: %d (%s)\n", me, r, ddss_strerror(r));
		_exit(1);
	}
	r = ddss_barrier(ctx);
	if (r) {
		printf("FAIL rank=%u: ddss_barrier: %d (%s)\n", me, r, ddss_strerror(r));
		_exit(1);
	}
	t_start = now_ms();
	t_end = t_start + opt.duration_ms;
	printf("STARTED rank=%u pid=%d size=%u home=%u victim=%u init_ms=%" PRId64 "\n", me,
	       (int)getpid(), nranks, opt.home, opt.victim, t_start - t_init);

	for (unsigned i = 0; i < opt.threads; i++) {
		struct worker *w = &workers[i];

		w->id = i;
		w->rng = (opt.seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)me << 32) ^ (i + 1) ^
			 0x5bd1e995ull;
		if (!w->rng)
			w->rng = 1;
		pthread_create(&w->th, NULL, worker_main, w);
	}
	/* The workers stop at t_end; a call in progress then gets the bound to return. A
	 * thawed victim goes on for --linger-ms after its thaw. */
	for (;;) {
		finished = watch(t_end + opt.bound_ms + 1000);
		if (finished || !(i_am_victim && opt.fault == F_FREEZE))
			break;
		/* A frozen victim: its deadline counts from its thaw. */
		if (atomic_load(&thaw_ms) &&
		    now_ms() > atomic_load(&thaw_ms) + opt.linger_ms + opt.bound_ms + 1000)
			break;
	}
	for (unsigned i = 0; i < opt.threads; i++) {
		struct worker *w = &workers[i];

		if (finished)
			pthread_join(w->th, NULL);
		incs += (unsigned)w->incs;
		eproto += w->eproto;
		unexpected += w->unexpected;
		slow += w->slow;
		late += w->late_ok;
		bad += w->broken_s + w->tally_bad;
		for (int e = 0; e < MAX_ERR; e++)
			errs[e] += w->errs[e];
		for (int o = 0; o < OP_N; o++)
			if (w->maxlat[o] > maxlat[o])
				maxlat[o] = w->maxlat[o];
	}
	if (!finished)
		fail("not every thread finished within %" PRId64 " ms of the end of the run",
		     opt.bound_ms + 1000);
	/* Survivors report their increments to the home's control segment; the home checks. */
	role = i_am_victim ? "victim" : "survivor";
	if (finished && !i_am_victim && opt.victim != opt.home) {
		uint64_t v = atomic_load(&rank_incs) + 1;

		r = ddss_put(ctx, ctl, me * 8, &v, 8);
		if (r)
			fail("reporting the increments to the home: %d (%s)", r, err_name(-r));
	}
	if (finished && !i_am_victim && me == opt.home) {
		role = "checker";
		checked_ok = check_counter(check, sizeof(check));
		if (!checked_ok)
			fail("counter check: %s", check);
	} else if (opt.victim && opt.victim == opt.home) {
		snprintf(check, sizeof(check), "skipped (the home is the victim)");
	}
	/* A user leaves with ddss_finalize after a failure too: it must not hang on the dead
	 * (its barrier fails once a member is gone). */
	if (finished && opt.fault != F_NONE) {
		int64_t t0 = now_ms(), took;

		r = ddss_finalize(ctx);
		took = now_ms() - t0;
		if (took > opt.bound_ms)
			fail("ddss_finalize took %" PRId64 " ms (bound %" PRId64 " ms), returned %d",
			     took, opt.bound_ms, r);
		if (r == -EPROTO)
			fail("ddss_finalize returned -EPROTO");
	}
	errors_string(errstr, sizeof(errstr), errs);
	pass = !atomic_load(&fails);
	printf("RESULT rank=%u role=%s incs=%u errors=%s eproto=%u unexpected=%u hangs=%u "
	       "slow=%u late_ok=%u bad=%u maxlat_ms=acqx:%" PRId64 ",acqs:%" PRId64 ",get:%" PRId64
	       ",put:%" PRId64 ",rel:%" PRId64 " bound_ms=%" PRId64 "%s%s status=%s\n",
	       me, role, incs, errstr, eproto, unexpected, atomic_load(&hangs), slow, late, bad,
	       maxlat[OP_ACQ_X], maxlat[OP_ACQ_S], maxlat[OP_GET], maxlat[OP_PUT],
	       maxlat[OP_REL], opt.bound_ms, check[0] ? " check=" : "", check,
	       pass ? "PASS" : "FAIL");
	fflush(stdout);
	fflush(stderr);
	if (opt.fault == F_NONE && finished) {
		/* Nobody is gone: leave together (bounded by the alarm). */
		ddss_barrier(ctx);
		ddss_finalize(ctx);
	}
	/* (With a member gone, ddss_finalize ran above; with threads stuck, it cannot.) */
	_exit(pass ? 0 : 1);
}
