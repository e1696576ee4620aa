/*
 * ddss-reconfig: dynamic reconfiguration of a shared data-centre (the DDSS paper's section
 * 5.2, Figure 5a, after Balaji et al., "Exploiting remote memory operations to design
 * efficient reconfiguration for shared data-centers"), over the public API only.
 *
 *   ddssrun -n N ddss-reconfig [--servers S] [--sites W] [--loaded L1,L2,...] [--reps R]
 *                              [--seed X] [--hold-us U] [--csv]
 *
 * A pool of S servers serves W websites. Each server is a record in DDSS, one segment per
 * server, "rc.srv.<s>", of the write coherence model: {site, pinned, moves, last agent,
 * load}. Writers (monitors, agents) hold the segment's lock; readers (the balancers) read
 * lock-free and never see a torn record (docs/coherence.md). Server s starts at site
 * s mod W; servers 0..W-1 are each site's home server and never move.
 *
 * Monitors: a thread per process rewrites the load of the servers it watches (server s by
 * process s mod P + 1) every few milliseconds: about 10 for an idle server; a loaded
 * site's home server reports what puts the site's average above 200 (overloaded) by a
 * margin that one more idle server takes away, so each loaded site needs one move.
 *
 * Agents: one per process (agent p is the load balancer of the sites w with w mod P ==
 * p-1). In each round the home servers of L sites (the same random choice everywhere)
 * become loaded, and every agent, at once, does: scan every record (lock-free gets); for
 * an overloaded site of its own, pick a movable server (not pinned, idle, at a site that
 * is not overloaded; least loaded first, so agents compete for the same ones) and
 * ddss_try_lock_ss() it EXCLUSIVE, so two agents never take the same server; -EBUSY (another
 * agent, or a monitor writing its load, holds it): try the next one. Holding the lock, re-read the record: still at the site it was seen at,
 * still idle? Then rewrite its site (and its move counter and last agent), log the move,
 * release. Rescan until none of its sites is overloaded. After the round process 1 moves
 * every server back home (the same critical section, with a blocking lock, as agent 0).
 *
 * Reconfiguration time: from the scan that found the site overloaded to the moved server
 * serving the new site (its record rewritten and its lock released: the next balancer
 * read routes the site's requests to it), failed try-locks and rescans included; the
 * witness's own operations (below) are not counted. Printed per number of loaded servers
 * (one per overloaded site), with how many try-locks found the server busy and how many
 * servers were no longer movable once locked.
 *
 * Checks (exit status 1 on any failure, printed):
 *   - witness: entering a server's critical section an agent sets its flag in "rc.witness"
 *     (one word per server and agent) and then reads all the server's flags; leaving, it
 *     clears it. Put-then-get on every side: if two agents were ever inside at once, at
 *     least one of them sees the other's flag;
 *   - the move log: every move is logged ("rc.log.<p>") with the agent, the server, the
 *     sites from and to, and the server's move counter after it (incremented inside the
 *     lock). At the end, for each server, its log entries must number 1..n with no gap
 *     and no duplicate, each move must start at the site the previous one ended at
 *     (starting from the server's initial site), and its record must show the last move's
 *     site, move count and agent: a server moved by two agents at once breaks this;
 *   - every overloaded site has been relieved at the end of each round, and every server
 *     is back home after the final reset.
 * --hold-us U keeps each move's lock U microseconds longer (the time a real server takes
 * to switch sites), which makes agents collide more often.
 *
 * Processes: in direct mode a process is a rank. In daemon mode (ddssrun --daemon --clients
 * K) process = (rank-1)*K + DDSS_CLIENT, with K and DDSS_CLIENT from the environment
 * ddssrun sets; locks belong to each client process.
 */
#include <ddss/ddss.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "ddss-reconfig"
#define NAME_LEN 48
#define MAX_LEVELS 8
#define MAX_SERVERS 1024
#define MAX_SITES 256
#define LOG_CAP 4096
#define LOAD_IDLE 10
#define THRESHOLD 200  /* a site whose average load is above this is overloaded */
#define HOT_MARGIN ((THRESHOLD - LOAD_IDLE) / 2)
#define MOVABLE_LOAD 50 /* a server below this may be moved */
#define MONITOR_PERIOD_US 5000
#define MAX_SCANS 20000 /* scans one agent may make in a round before giving up */
#define STATS_SLOT 512

/* A server's record (its write-coherence segment). Agents write bytes [0, 24), monitors
 * write the load, so neither overwrites the other's fields. */
struct record {
	uint32_t site;
	uint32_t pinned;
	uint64_t moves;      /* moves so far, incremented inside the lock */
	uint64_t last_agent; /* the agent of the last move (0: the reset agent) */
	uint64_t load;
};
#define AGENT_PART offsetof(struct record, load)

/* One logged move. */
struct move {
	uint32_t server, agent;
	uint32_t from, to;
	uint64_t move_no; /* the server's move counter after this move */
	uint64_t round;
};

/* Per number of loaded servers, one process's figures. */
struct level_stats {
	uint64_t moves, ns, max_ns, busy, stale, scans;
};

/* A process's totals, in its slot of "rc.stats". */
struct stats {
	struct level_stats lv[MAX_LEVELS];
	uint64_t logged;     /* entries in my log */
	uint64_t violations; /* witness: another agent seen inside */
	uint64_t homes;      /* process 1: moves home after the rounds */
	uint64_t pad[5];
};
_Static_assert(sizeof(struct stats) <= STATS_SLOT, "stats fit a slot");

struct opts {
	uint32_t servers, sites, reps, nlevels;
	uint32_t levels[MAX_LEVELS];
	uint64_t seed, hold_us;
	bool csv;
};

struct proc {
	struct opts o;
	ddss_ctx_t *ctx;
	uint32_t me, nprocs, rank, size, clients;
	ddss_key_t *rec, witness, log, stats_key;
	struct stats st;
	struct record *snap;  /* the last scan */
	uint64_t *flags;      /* a witness row */
	uint32_t *cand;       /* candidate servers */
	uint64_t round;       /* rounds begun */
	/* The monitor thread: loads of the servers I watch. */
	pthread_t monitor;
	pthread_mutex_t hot_lock; /* held while a sweep writes loads, and to change hot[] */
	bool hot[MAX_SITES];
	atomic_bool stop;
	uint64_t rng_mon, noise; /* loads vary by 0..noise-1 */
};

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, PROG ": %s\n", msg); /* one write: ddssrun prefixes whole lines */
	exit(1);
}

static void check(int r, const char *what, uint32_t me)
{
	if (r)
		die("process %u: %s: %s", me, what, ddss_strerror(r));
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return mix64(*s);
}

/* ---- options ---- */

static void usage(FILE *to)
{
	fputs("usage: ddssrun -n N " PROG " [--servers S] [--sites W] [--loaded L1,L2,...]\n"
	      "       [--reps R] [--seed X] [--hold-us U] [--csv]\n"
	      "  --servers S      servers in the pool (48; at least 2 x sites)\n"
	      "  --sites W        websites (16)\n"
	      "  --loaded LIST    numbers of loaded servers, one round each (1,2,4,8; each <= W/2)\n"
	      "  --reps R         rounds per number of loaded servers (10)\n"
	      "  --seed X         which sites get loaded, load noise (1)\n"
	      "  --hold-us U      extra time each move holds the server's lock (0)\n"
	      "  --csv            print the result as CSV\n",
	      to);
}

static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *v_p)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return false;
	*v_p = v;
	return true;
}

static bool parse_levels(char *s, struct opts *o)
{
	uint64_t v;

	o->nlevels = 0;
	for (char *save, *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->nlevels == MAX_LEVELS || !parse_u64(t, 1, MAX_SITES, &v))
			return false;
		o->levels[o->nlevels++] = (uint32_t)v;
	}
	return o->nlevels > 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "servers", required_argument, NULL, 's' },
		{ "sites", required_argument, NULL, 'w' },
		{ "loaded", required_argument, NULL, 'l' },
		{ "reps", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 'x' },
		{ "hold-us", required_argument, NULL, 'u' },
		{ "csv", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int c;

	*o = (struct opts){ .servers = 48, .sites = 16, .reps = 10, .nlevels = 4,
			    .levels = { 1, 2, 4, 8 }, .seed = 1 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!parse_u64(optarg, 2, MAX_SERVERS, &v))
				return -1;
			o->servers = (uint32_t)v;
			break;
		case 'w':
			if (!parse_u64(optarg, 2, MAX_SITES, &v))
				return -1;
			o->sites = (uint32_t)v;
			break;
		case 'l':
			if (!parse_levels(optarg, o))
				return -1;
			break;
		case 'r':
			if (!parse_u64(optarg, 1, 10000, &v))
				return -1;
			o->reps = (uint32_t)v;
			break;
		case 'x':
			if (!parse_u64(optarg, 0, UINT64_MAX, &o->seed))
				return -1;
			break;
		case 'u':
			if (!parse_u64(optarg, 0, 1000000, &o->hold_us))
				return -1;
			break;
		case 'c':
			o->csv = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -1;
		}
	}
	if (optind != argc || o->servers < 2 * o->sites)
		return -1;
	for (uint32_t i = 0; i < o->nlevels; i++)
		if (o->levels[i] > o->sites / 2)
			return -1;
	return 0;
}

/* ---- the model ---- */

static uint32_t home_site(const struct proc *P, uint32_t s) { return s % P->o.sites; }
static uint32_t agent_of(const struct proc *P, uint32_t w) { return w % P->nprocs + 1; }
static uint32_t monitor_of(const struct proc *P, uint32_t s) { return s % P->nprocs + 1; }

/* Servers whose home is site @w. */
static uint64_t site_size(const struct proc *P, uint32_t w)
{
	return P->o.servers / P->o.sites + (w < P->o.servers % P->o.sites);
}

/*
 * The load a monitor reports for server s. A loaded site's home server (s < sites) reports
 * T*n - (n-1)*idle + margin for a site of n servers: the average is then T + margin/n
 * (overloaded), and with one more idle server at most T - (T - idle - margin)/(n+1) plus
 * the noise, which P->noise keeps below that.
 */
static uint64_t load_of(struct proc *P, uint32_t s)
{
	uint64_t noise = rng_next(&P->rng_mon) % P->noise, n;

	if (s >= P->o.sites || !P->hot[s])
		return LOAD_IDLE + noise;
	n = site_size(P, s);
	return THRESHOLD * n - (n - 1) * LOAD_IDLE + HOT_MARGIN + noise;
}

/* Write the loads of the servers I watch; call with hot_lock held. */
static void monitor_sweep(struct proc *P)
{
	for (uint32_t s = 0; s < P->o.servers; s++) {
		uint64_t load;

		if (monitor_of(P, s) != P->me)
			continue;
		load = load_of(P, s);
		check(ddss_put(P->ctx, P->rec[s], AGENT_PART, &load, sizeof(load)),
		      "monitor: write a load", P->me);
	}
}

static void *monitor_main(void *arg)
{
	struct proc *P = arg;

	while (!atomic_load(&P->stop)) {
		pthread_mutex_lock(&P->hot_lock);
		monitor_sweep(P);
		pthread_mutex_unlock(&P->hot_lock);
		usleep(MONITOR_PERIOD_US);
	}
	return NULL;
}

/* The L loaded sites of round @round: the same draw on every process. */
static void choose_hot(const struct proc *P, uint32_t L, uint64_t round, bool *hot)
{
	uint32_t perm[MAX_SITES];
	uint64_t rng = mix64(P->o.seed) ^ mix64(round + 1);

	for (uint32_t w = 0; w < P->o.sites; w++)
		perm[w] = w;
	for (uint32_t w = P->o.sites - 1; w > 0; w--) {
		uint32_t j = (uint32_t)(rng_next(&rng) % (w + 1)), t = perm[w];

		perm[w] = perm[j];
		perm[j] = t;
	}
	memset(hot, 0, MAX_SITES * sizeof(*hot));
	for (uint32_t i = 0; i < L; i++)
		hot[perm[i]] = true;
}

/* Read every record (the balancers' lock-free reads); per-site count and load sum. */
static void scan(struct proc *P, uint32_t *count, uint64_t *sum)
{
	memset(count, 0, P->o.sites * sizeof(*count));
	memset(sum, 0, P->o.sites * sizeof(*sum));
	for (uint32_t s = 0; s < P->o.servers; s++) {
		struct record *r = &P->snap[s];

		check(ddss_get(P->ctx, P->rec[s], 0, r, sizeof(*r)), "read a record", P->me);
		if (r->site >= P->o.sites)
			die("process %u: server %u's record names site %u", P->me, s, r->site);
		count[r->site]++;
		sum[r->site] += r->load;
	}
}

static bool overloaded(uint32_t count, uint64_t sum)
{
	return count > 0 && sum > (uint64_t)THRESHOLD * count;
}

/* The witness: enter (set my flag, then read the row), leave (clear it). Returns the
 * time its operations took, which the caller leaves out of the reconfiguration time. */
static uint64_t witness(struct proc *P, uint32_t s, uint32_t agent, bool enter)
{
	size_t row = (size_t)s * (P->nprocs + 1), n = P->nprocs + 1;
	uint64_t t0 = now_ns(), one = enter;

	check(ddss_put(P->ctx, P->witness, (row + agent) * 8, &one, 8), "witness: set my flag",
	      P->me);
	if (enter) {
		check(ddss_get(P->ctx, P->witness, row * 8, P->flags, n * 8), "witness: read",
		      P->me);
		for (uint32_t a = 0; a < n; a++)
			if (a != agent && P->flags[a]) {
				fprintf(stderr, PROG ": process %u: WITNESS: agent %u is inside server "
					"%u's critical section together with agent %u\n",
					P->me, a, s, agent);
				P->st.violations++;
			}
	}
	return now_ns() - t0;
}

static void log_move(struct proc *P, const struct move *m)
{
	if (P->st.logged == LOG_CAP)
		die("process %u: move log full (%u entries)", P->me, LOG_CAP);
	check(ddss_put(P->ctx, P->log, P->st.logged * sizeof(*m), m, sizeof(*m)), "log a move",
	      P->me);
	P->st.logged++;
}

enum move_result { MOVED, BUSY, STALE };

/*
 * Move server @s from site @from to site @to as @agent (0: the reset agent, which waits
 * for the lock instead of trying). *@excluded_ns_p += the witness's time.
 */
static enum move_result move_server(struct proc *P, uint32_t s, uint32_t from, uint32_t to,
				    uint32_t agent, uint64_t *excluded_ns_p)
{
	struct record r;
	int ret;

	if (agent)
		ret = ddss_try_lock_ss(P->ctx, P->rec[s], DDSS_LOCK_EXCLUSIVE);
	else
		ret = ddss_acquire_lock_ss(P->ctx, P->rec[s], DDSS_LOCK_EXCLUSIVE);
	if (ret == -EBUSY)
		return BUSY;
	check(ret, "lock a server", P->me);
	*excluded_ns_p += witness(P, s, agent, true);
	/* Inside the lock: is it still where we saw it, and still idle? */
	check(ddss_get(P->ctx, P->rec[s], 0, &r, sizeof(r)), "re-read a record", P->me);
	if (r.site != from || r.pinned || (agent && r.load >= MOVABLE_LOAD)) {
		*excluded_ns_p += witness(P, s, agent, false);
		check(ddss_release_lock_ss(P->ctx, P->rec[s]), "unlock a server", P->me);
		return STALE;
	}
	if (P->o.hold_us)
		usleep((useconds_t)P->o.hold_us);
	r.site = to;
	r.moves++;
	r.last_agent = agent;
	check(ddss_put(P->ctx, P->rec[s], 0, &r, AGENT_PART), "rewrite a record", P->me);
	log_move(P, &(struct move){ .server = s, .agent = agent, .from = from, .to = to,
				    .move_no = r.moves, .round = P->round });
	*excluded_ns_p += witness(P, s, agent, false);
	check(ddss_release_lock_ss(P->ctx, P->rec[s]), "unlock a server", P->me);
	return MOVED;
}

static const struct record *cmp_snap; /* qsort has no context argument */

static int by_load(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;

	if (cmp_snap[i].load != cmp_snap[j].load)
		return cmp_snap[i].load < cmp_snap[j].load ? -1 : 1;
	return i < j ? -1 : i > j;
}

/*
 * Servers an agent may take for @target, from the last scan: not pinned, idle, and at a
 * site that stays within the threshold without it (so agents do not take back servers
 * that have just relieved another site). Least loaded first: agents compete for them.
 */
static uint32_t candidates(struct proc *P, uint32_t target, const uint32_t *count,
			   const uint64_t *sum)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < P->o.servers; s++) {
		const struct record *r = &P->snap[s];
		uint32_t w = r->site;

		if (!r->pinned && r->load < MOVABLE_LOAD && w != target && count[w] > 1 &&
		    !overloaded(count[w] - 1, sum[w] - r->load))
			P->cand[n++] = s;
	}
	cmp_snap = P->snap;
	qsort(P->cand, n, sizeof(*P->cand), by_load);
	return n;
}

/* One agent's round: relieve every overloaded site of mine. */
static void agent_round(struct proc *P, struct level_stats *ls)
{
	uint32_t count[MAX_SITES];
	uint64_t sum[MAX_SITES];

	for (;;) {
		uint32_t target = UINT32_MAX, n;
		uint64_t t0, ns, excluded = 0;
		bool moved = false;

		if (ls->scans++ > (uint64_t)MAX_SCANS * P->o.reps)
			die("process %u: could not relieve my sites after %u scans", P->me, MAX_SCANS);
		scan(P, count, sum);
		t0 = now_ns(); /* the overload is detected here */
		for (uint32_t w = 0; w < P->o.sites && target == UINT32_MAX; w++)
			if (agent_of(P, w) == P->me && overloaded(count[w], sum[w]))
				target = w;
		if (target == UINT32_MAX)
			return;
		n = candidates(P, target, count, sum);
		if (n == 0)
			die("process %u: site %u is overloaded and no server is free", P->me, target);
		/* Keep trying (rescanning when every candidate failed) until one move lands. */
		while (!moved) {
			for (uint32_t i = 0; i < n && !moved; i++) {
				uint32_t s = P->cand[i];

				switch (move_server(P, s, P->snap[s].site, target, P->me, &excluded)) {
				case MOVED:
					moved = true;
					break;
				case BUSY:
					ls->busy++;
					break;
				case STALE:
					ls->stale++;
					break;
				}
			}
			if (!moved) {
				if (ls->scans++ > (uint64_t)MAX_SCANS * P->o.reps)
					die("process %u: no move landed after %u scans", P->me,
					    MAX_SCANS);
				scan(P, count, sum);
				if (!overloaded(count[target], sum[target]))
					die("process %u: site %u relieved by someone else", P->me,
					    target);
				n = candidates(P, target, count, sum);
			}
		}
		ns = now_ns() - t0 - excluded;
		ls->moves++;
		ls->ns += ns;
		ls->max_ns = ns > ls->max_ns ? ns : ls->max_ns;
	}
}

/* Process 1 after a round: every loaded site relieved; then every server moved home. */
static void end_round(struct proc *P, const bool *hot)
{
	uint32_t count[MAX_SITES];
	uint64_t sum[MAX_SITES], ignored = 0;

	scan(P, count, sum);
	for (uint32_t w = 0; w < P->o.sites; w++)
		if (overloaded(count[w], sum[w]))
			die("round %" PRIu64 ": site %u%s is still overloaded (%u servers, load %" PRIu64
			    ")", P->round, w, hot[w] ? " (loaded)" : "", count[w], sum[w]);
	for (uint32_t s = 0; s < P->o.servers; s++)
		if (P->snap[s].site != home_site(P, s) &&
		    move_server(P, s, P->snap[s].site, home_site(P, s), 0, &ignored) != MOVED)
			die("round %" PRIu64 ": could not move server %u home", P->round, s);
		else if (P->snap[s].site != home_site(P, s))
			P->st.homes++;
}

/* ---- the final check of the move logs ---- */

static int by_server_move(const void *a, const void *b)
{
	const struct move *x = a, *y = b;

	if (x->server != y->server)
		return x->server < y->server ? -1 : 1;
	return x->move_no < y->move_no ? -1 : x->move_no > y->move_no;
}

static void verify_logs(struct proc *P, const struct stats *all)
{
	uint64_t total = 0, k = 0;
	struct move *m;

	for (uint32_t j = 0; j < P->nprocs; j++)
		total += all[j].logged;
	m = calloc(total ? total : 1, sizeof(*m));
	if (!m)
		die("out of memory");
	for (uint32_t j = 1; j <= P->nprocs; j++) {
		char name[NAME_LEN];
		ddss_key_t key;

		if (!all[j - 1].logged)
			continue;
		snprintf(name, sizeof(name), "rc.log.%u", j);
		check(ddss_lookup_ss(P->ctx, name, &key), "look up a move log", P->me);
		check(ddss_get(P->ctx, key, 0, m + k, all[j - 1].logged * sizeof(*m)),
		      "read a move log", P->me);
		for (uint64_t i = 0; i < all[j - 1].logged; i++)
			if (m[k + i].agent != j && !(j == 1 && m[k + i].agent == 0))
				die("process %u's log has a move by agent %u", j, m[k + i].agent);
		k += all[j - 1].logged;
	}
	qsort(m, total, sizeof(*m), by_server_move);
	k = 0;
	for (uint32_t s = 0; s < P->o.servers; s++) {
		struct record r;
		uint32_t site = home_site(P, s);
		uint64_t n = 0, agent = 0;

		for (; k < total && m[k].server == s; k++) {
			if (m[k].move_no != n + 1)
				die("server %u: move %" PRIu64 " (agent %u, round %" PRIu64 ") follows "
				    "move %" PRIu64 ": %s", s, m[k].move_no, m[k].agent, m[k].round, n,
				    m[k].move_no == n ? "two moves with one number, the server was "
				    "moved by two agents at once" : "a move is missing");
			if (m[k].from != site)
				die("server %u: move %" PRIu64 " by agent %u took it from site %u, but it "
				    "was at site %u", s, m[k].move_no, m[k].agent, m[k].from, site);
			site = m[k].to;
			agent = m[k].agent;
			n++;
		}
		check(ddss_get(P->ctx, P->rec[s], 0, &r, sizeof(r)), "read a record", P->me);
		if (r.site != site || r.moves != n || (n && r.last_agent != agent))
			die("server %u: record says site %u after %" PRIu64 " moves by agent %" PRIu64
			    ", the log says site %u after %" PRIu64 " moves by agent %" PRIu64,
			    s, r.site, r.moves, r.last_agent, site, n, agent);
		if (r.site != home_site(P, s))
			die("server %u is not back home after the last round", s);
	}
	free(m);
}

/* ---- set-up, results ---- */

static void identify(struct proc *P)
{
	const char *mode = getenv("DDSS_MODE"), *k = getenv("DDSS_CLIENTS"),
		   *c = getenv("DDSS_CLIENT");
	uint64_t kv = 1, cv = 1;

	P->rank = ddss_rank(P->ctx);
	P->size = ddss_size(P->ctx);
	if (mode && !strcmp(mode, "daemon") && k && c &&
	    (!parse_u64(k, 1, 65535, &kv) || !parse_u64(c, 1, kv, &cv)))
		die("bad DDSS_CLIENTS / DDSS_CLIENT");
	P->clients = (uint32_t)kv;
	P->me = (P->rank - 1) * P->clients + (uint32_t)cv;
	P->nprocs = P->size * P->clients;
}

static void setup(struct proc *P)
{
	char name[NAME_LEN];

	P->rec = calloc(P->o.servers, sizeof(*P->rec));
	P->snap = calloc(P->o.servers, sizeof(*P->snap));
	P->cand = calloc(P->o.servers, sizeof(*P->cand));
	P->flags = calloc(P->nprocs + 1, 8);
	if (!P->rec || !P->snap || !P->cand || !P->flags)
		die("out of memory");
	P->rng_mon = mix64(P->o.seed ^ 0x5eed) ^ mix64(P->me);
	/* n+1 servers each up to noise-1 above their base must stay within the margin. */
	P->noise = (THRESHOLD - LOAD_IDLE - HOT_MARGIN) / (site_size(P, 0) + 1);
	P->noise = P->noise > 10 ? 10 : P->noise < 1 ? 1 : P->noise;
	pthread_mutex_init(&P->hot_lock, NULL);

	for (uint32_t s = 0; s < P->o.servers; s++) {
		snprintf(name, sizeof(name), "rc.srv.%u", s);
		check(ddss_allocate_ss(P->ctx, sizeof(struct record), &(struct ddss_seg_attr){
				.name = name, .placement = DDSS_PLACE_RANK,
				.rank = s % P->size + 1, .coherence = DDSS_COHERENCE_WRITE },
				&P->rec[s]),
		      "allocate a server record", P->me);
	}
	check(ddss_allocate_ss(P->ctx, (size_t)P->o.servers * (P->nprocs + 1) * 8,
			       &(struct ddss_seg_attr){ .name = "rc.witness" }, &P->witness),
	      "allocate the witness", P->me);
	check(ddss_allocate_ss(P->ctx, (size_t)P->nprocs * STATS_SLOT,
			       &(struct ddss_seg_attr){ .name = "rc.stats" }, &P->stats_key),
	      "allocate the stats", P->me);
	snprintf(name, sizeof(name), "rc.log.%u", P->me);
	check(ddss_allocate_ss(P->ctx, LOG_CAP * sizeof(struct move), &(struct ddss_seg_attr){
			.name = name, .placement = DDSS_PLACE_LOCAL }, &P->log),
	      "allocate my move log", P->me);
	/* The monitors write the initial records of the servers they watch. */
	for (uint32_t s = 0; s < P->o.servers; s++) {
		struct record r = { .site = home_site(P, s), .pinned = s < P->o.sites,
				    .load = LOAD_IDLE };

		if (monitor_of(P, s) == P->me)
			check(ddss_put(P->ctx, P->rec[s], 0, &r, sizeof(r)), "write a record", P->me);
	}
	check(ddss_barrier(P->ctx), "barrier", P->me);
	if (pthread_create(&P->monitor, NULL, monitor_main, P))
		die("process %u: cannot start the monitor thread", P->me);
}

static double us(uint64_t ns, uint64_t n)
{
	return n ? (double)ns / (double)n / 1000.0 : 0.0;
}

static void report(struct proc *P, const struct stats *all)
{
	uint64_t violations = 0, moves = 0;

	for (uint32_t j = 0; j < P->nprocs; j++)
		violations += all[j].violations;
	if (violations)
		die("the witness saw %" PRIu64 " times two agents inside one server's critical "
		    "section", violations);
	verify_logs(P, all);
	if (P->o.csv)
		printf("procs,servers,sites,loaded,rounds,moves,reconfig_avg_us,reconfig_max_us,"
		       "trylock_busy,stale_after_lock,scans\n");
	else {
		printf("%u agents (%u ranks x %u), %u servers, %u sites, %u rounds per row%s\n",
		       P->nprocs, P->size, P->clients, P->o.servers, P->o.sites, P->o.reps,
		       P->o.hold_us ? ", locks held longer" : "");
		printf("| loaded servers | moves | reconfiguration avg (us) | max (us) | try-lock "
		       "busy | not movable once locked | scans |\n");
		printf("|---|---|---|---|---|---|---|\n");
	}
	for (uint32_t l = 0; l < P->o.nlevels; l++) {
		struct level_stats t = { 0 };

		for (uint32_t j = 0; j < P->nprocs; j++) {
			const struct level_stats *x = &all[j].lv[l];

			t.moves += x->moves;
			t.ns += x->ns;
			t.max_ns = x->max_ns > t.max_ns ? x->max_ns : t.max_ns;
			t.busy += x->busy;
			t.stale += x->stale;
			t.scans += x->scans;
		}
		if (t.moves < (uint64_t)P->o.levels[l] * P->o.reps)
			die("%" PRIu64 " moves with %u loaded servers in %u rounds: fewer than one per "
			    "loaded site", t.moves, P->o.levels[l], P->o.reps);
		moves += t.moves;
		if (P->o.csv)
			printf("%u,%u,%u,%u,%u,%" PRIu64 ",%.2f,%.2f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
			       "\n", P->nprocs, P->o.servers, P->o.sites, P->o.levels[l], P->o.reps,
			       t.moves, us(t.ns, t.moves), us(t.max_ns, 1), t.busy, t.stale, t.scans);
		else
			printf("| %u | %" PRIu64 " | %.1f | %.1f | %" PRIu64 " | %" PRIu64 " | %" PRIu64
			       " |\n", P->o.levels[l], t.moves, us(t.ns, t.moves), us(t.max_ns, 1),
			       t.busy, t.stale, t.scans);
	}
	if (!P->o.csv)
		printf("verified: no two agents ever inside one server's critical section "
		       "(witness); %" PRIu64 " moves and %" PRIu64 " moves home consistent with "
		       "every server's record and move counter; every loaded site relieved\n",
		       moves, all[0].homes);
}

int main(int argc, char **argv)
{
	struct proc P = { 0 };
	struct stats *all;

	if (parse_opts(argc, argv, &P.o)) {
		usage(stderr);
		return 2;
	}
	check(ddss_init(NULL, &P.ctx), "ddss_init", 0);
	identify(&P);
	setup(&P);

	for (uint32_t l = 0; l < P.o.nlevels; l++) {
		for (uint32_t rep = 0; rep < P.o.reps; rep++, P.round++) {
			bool hot[MAX_SITES];

			/* The load arrives: my monitor reports it before anyone looks. */
			choose_hot(&P, P.o.levels[l], P.round, hot);
			pthread_mutex_lock(&P.hot_lock);
			memcpy(P.hot, hot, sizeof(hot));
			monitor_sweep(&P);
			pthread_mutex_unlock(&P.hot_lock);
			check(ddss_barrier(P.ctx), "barrier", P.me);
			agent_round(&P, &P.st.lv[l]);
			check(ddss_barrier(P.ctx), "barrier", P.me);
			/* The load leaves; process 1 checks the round and moves everything home. */
			pthread_mutex_lock(&P.hot_lock);
			memset(P.hot, 0, sizeof(P.hot));
			monitor_sweep(&P);
			pthread_mutex_unlock(&P.hot_lock);
			if (P.me == 1)
				end_round(&P, hot);
			check(ddss_barrier(P.ctx), "barrier", P.me);
		}
	}
	atomic_store(&P.stop, true);
	pthread_join(P.monitor, NULL);
	check(ddss_put(P.ctx, P.stats_key, (size_t)(P.me - 1) * STATS_SLOT, &P.st, sizeof(P.st)),
	      "write my stats", P.me);
	check(ddss_barrier(P.ctx), "barrier", P.me);
	if (P.me == 1) {
		all = calloc(P.nprocs, STATS_SLOT);
		if (!all)
			die("out of memory");
		for (uint32_t j = 0; j < P.nprocs; j++)
			check(ddss_get(P.ctx, P.stats_key, (size_t)j * STATS_SLOT, &all[j],
				       sizeof(all[j])),
			      "read the stats", P.me);
		report(&P, all);
		free(all);
	}
	check(ddss_barrier(P.ctx), "barrier", P.me);
	check(ddss_release_ss(P.ctx, P.log), "release my log", P.me);
	if (P.me == 1) {
		for (uint32_t s = 0; s < P.o.servers; s++)
			check(ddss_release_ss(P.ctx, P.rec[s]), "release a record", P.me);
		check(ddss_release_ss(P.ctx, P.witness), "release the witness", P.me);
		check(ddss_release_ss(P.ctx, P.stats_key), "release the stats", P.me);
	}
	check(ddss_barrier(P.ctx), "barrier", P.me);
	check(ddss_finalize(P.ctx), "ddss_finalize", P.me);
	free(P.rec);
	free(P.snap);
	free(P.cand);
	free(P.flags);
	return 0;
}
