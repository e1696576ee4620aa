/*
 * ddss-checkpoint: the checkpointing application of the DDSS paper (section 5.3, Figure 6b)
 * over the public API only.
 *
 *   ddssrun -n N ddss-checkpoint [--steps S] [--seed X] [--interval I] [--restarts R]
 *                                [--state-bytes B] [--keep K] [--step-us U] [--csv]
 *
 * Every process evolves a state (an array of 64-bit counters) step by step. The state at
 * step s is a closed-form function of (process, s), so anyone can check a copy of it
 * (state_word()). A step stands for --step-us of computation (paced against the clock,
 * sleeping, so that 8 processes fit on a 2-core machine and the processes advance at about
 * the same rate, as an application's coupled processes do). At random intervals (mean
 * --interval steps, a PRNG per process seeded from --seed) a process checkpoints its
 * state into DDSS. Now and then (a random draw per step, --restarts in all) a process
 * simulates a restart: it freezes everybody, reads every process's latest checkpoint
 * version, computes the most recent consistent checkpoint and tells all processes to roll
 * back to it; each restores its state from its own checkpoint of that number and, once the
 * coordinator has checked every restored state, continues.
 *
 * Where checkpoints live, and why a delta segment. Each process has one segment,
 * "ckpt.data.<p>", of the delta coherence model with x = K-1 (the last K checkpoints
 * kept), homed on the next rank (a buddy: a checkpoint is worth something only if it
 * survives the node that took it). The paper's restart "gets the current checkpoint version
 * from all other processes"; delta gives exactly that and what a checkpoint store needs:
 *   - a put is one whole new version: a reader never sees half a checkpoint, and a writer
 *     that dies mid-put leaves the previous version intact (docs/coherence.md);
 *   - the home keeps the x+1 newest versions, and ddss_get_versioned(..., back = k) returns
 *     exactly the one k before the newest: the ring of checkpoint slots comes with the model,
 *     without a separate version word to keep consistent with the slots by hand;
 *   - gets never wait for a writer, so the coordinator's reads do not queue behind puts.
 * (The version model would keep only the newest copy and lets a get overlapping a put see
 * it half written; null has no versions at all.)
 *
 * Checkpoint numbers and consistency. A process numbers its checkpoints 1, 2, 3... (its
 * checkpoint version; each records the step it was taken at). A global checkpoint c is
 * consistent when every process has taken its checkpoint number c, so the most recent
 * consistent one is the minimum over processes of their latest numbers; 0 is the initial
 * state (step 0), which every process always has. Rolling back to c discards every later
 * checkpoint: the process puts a copy of checkpoint c as its newest version (what the next
 * coordinator reads as its latest), and the next one it takes is c+1 again. Because only K
 * are kept, a process far ahead of the slowest may no longer have c; each checkpoint's
 * header records the oldest number still kept ("floor", counting the rollback copy), and
 * if c is below some process's floor the coordinator falls back to the initial state
 * (counted in the table as "to step 0").
 *
 * The restart protocol. "ckpt.board" (write coherence: readers lock-free and never torn,
 * so every process polls it once a step for one 8-byte read while it is unchanged) holds
 * the current command: {seq, phase, target}. A process handles each seq once.
 *   1. Coordinator: ddss_try_lock_ss(board, EXCLUSIVE) (busy: someone else is restarting),
 *      read the board inside the lock; only if it is IDLE post FREEZE, then unlock. So one
 *      restart runs at a time.
 *   2. Everybody stops at a step boundary and acknowledges in its slot of "ckpt.acks" (a
 *      null segment, one self-checksummed 64-byte slot per process, polled by one get).
 *   3. The coordinator reads the newest checkpoint header of every process (its version),
 *      computes c and posts ROLLBACK c.
 *   4. Everybody restores its own checkpoint c from DDSS, checks it against the closed
 *      form, puts the rollback copy, and acknowledges with the restored step and a hash of
 *      the restored state. Restart time = from the coordinator's decision to here.
 *   5. The coordinator checks every process: it finds the original checkpoint c in each
 *      process's segment itself (scanning back past the rollback copy), checks its data
 *      against the closed form, and the copy and the process's restored state against it;
 *      then posts IDLE (resume). Not timed.
 * The run ends when every process has done --steps steps (rollbacks repeat steps): process
 * 1 then starts any restarts not yet drawn, and posts EXIT inside the board lock once all
 * are done and no restart is running.
 *
 * Output (process 1): the average checkpoint time (one delta put of header + state) and
 * restart time, as a one-row table (or --csv); apps/checkpoint/run.sh runs N = 2, 4, 8.
 * Exit status: 0; 1 on any failed call or any state / checkpoint mismatch (printed);
 * 2 on bad usage.
 *
 * Processes: in direct mode a process is a rank. In daemon mode (ddssrun --daemon --clients
 * K) the K clients of a ddssd share its rank; process = (rank-1)*K + DDSS_CLIENT, with K
 * and DDSS_CLIENT from the environment ddssrun sets.
 */
#include <ddss/ddss.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "ddss-checkpoint"
#define NAME_LEN 48
#define CKPT_MAGIC 0x434b50544444ULL /* "DDTPKC" */
#define SLOT 64
#define MAX_STATE (1u << 20)
#define FROZEN_POLL_US 50
#define ACK_POLL_US 20
#define WAIT_LIMIT_NS (60ull * 1000000000ull) /* a protocol wait this long is a failure */

enum phase { PH_IDLE = 0, PH_FREEZE, PH_ROLLBACK, PH_EXIT };
enum ack_state { ACK_RUNNING = 0, ACK_FROZEN, ACK_RESTORED };

/* The command board (a write-coherence segment). */
struct board {
	uint64_t seq;      /* bumped by every command */
	uint32_t phase;    /* enum phase */
	uint32_t coord;    /* the process that posted it */
	uint64_t restarts; /* restarts begun so far */
	uint64_t target;   /* PH_ROLLBACK: the consistent checkpoint number */
	uint64_t pad[4];
};

/* A process's slot in "ckpt.acks"; written whole by its owner, checked by csum. */
struct ack {
	uint64_t seq;        /* the last command handled */
	uint32_t state;      /* enum ack_state */
	uint32_t done;       /* all --steps done (and not rolled back since) */
	uint64_t step;       /* current step (after a restore: the restored one) */
	uint64_t ckpt;       /* latest checkpoint number (after a restore: the restored one) */
	uint64_t state_hash; /* hash of the current state */
	uint64_t rollbacks;  /* rollbacks done so far */
	uint64_t pad;
	uint64_t csum;
};

/* Each process's totals, in its slot of "ckpt.stats" (read after the last barrier). */
struct stats {
	uint64_t ckpts, ckpt_ns;          /* checkpoints taken, total put time */
	uint64_t restarts, restart_ns;    /* restarts coordinated, total restart time */
	uint64_t freeze_ns;               /* of which: until every process had stopped */
	uint64_t decide_ns;               /* of which: reading the versions and deciding */
	uint64_t fallbacks;               /* restarts that went back to step 0 */
	uint64_t rollbacks;               /* rollbacks done */
};

/* The header at the start of every checkpoint. */
struct ckpt_hdr {
	uint64_t magic;
	uint32_t proc, keep;
	uint64_t ckpt_no;    /* this process's checkpoint number */
	uint64_t step;       /* the step it was taken at */
	uint64_t floor;      /* the oldest checkpoint number still kept once this one is in */
	uint64_t restarts;   /* rollbacks this process had done when it took it */
	uint64_t state_hash; /* hash of the state that follows */
	uint64_t pad;
};

_Static_assert(sizeof(struct board) == SLOT, "board is one slot");
_Static_assert(sizeof(struct ack) == SLOT, "ack is one slot");
_Static_assert(sizeof(struct ckpt_hdr) == SLOT, "header is one slot");
_Static_assert(sizeof(struct stats) == SLOT, "stats are one slot");

struct opts {
	uint64_t steps, seed, interval, restarts, step_us;
	size_t state_bytes;
	unsigned keep;
	bool csv;
};

struct proc {
	struct opts o;
	ddss_ctx_t *ctx;
	uint32_t me, nprocs, rank, size, clients;
	ddss_key_t board, acks, stats_key, *data; /* data[j-1]: process j's checkpoints */
	size_t words, seg_len;                     /* state words, header + state bytes */
	uint64_t *ctr, *a, *b;                     /* state; its per-word coefficients */
	uint64_t step, latest;                     /* current step, latest checkpoint number */
	uint64_t version;                          /* puts made on my checkpoint segment */
	uint64_t *ver_of;                          /* checkpoint number -> segment version */
	uint64_t next_ckpt, seen, rng;
	uint64_t pace_base, paced;                 /* pacing: clock and steps since (re)start */
	bool frozen, done;
	struct stats st;
	void *buf;                                 /* seg_len bytes: a checkpoint */
	struct ack *all;                           /* nprocs ack slots */
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

/* The coefficients of word i of process p: each step s adds a*s + b to the word. */
static uint64_t coef_a(uint32_t p, size_t i)
{
	return mix64(((uint64_t)p << 40) ^ i) | 1;
}

static uint64_t coef_b(uint32_t p, size_t i)
{
	return mix64(((uint64_t)p << 40) ^ i ^ (1ull << 63));
}

/* Word i of process p's state after @step steps, in closed form (mod 2^64). */
static uint64_t state_word(uint32_t p, size_t i, uint64_t step)
{
	uint64_t tri = step % 2 ? step * ((step + 1) / 2) : (step / 2) * (step + 1);

	return coef_a(p, i) * tri + coef_b(p, i) * step;
}

static uint64_t hash_words(const uint64_t *w, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = mix64(h ^ w[i]);
	return h;
}

static uint64_t expected_hash(uint32_t p, size_t n, uint64_t step)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = mix64(h ^ state_word(p, i, step));
	return h;
}

static uint64_t ack_csum(const struct ack *a)
{
	return hash_words((const uint64_t *)a, offsetof(struct ack, csum) / 8);
}

/* ---- options ---- */

static void usage(FILE *to)
{
	fputs("usage: ddssrun -n N " PROG " [--steps S] [--seed X] [--interval I] [--restarts R]\n"
	      "       [--state-bytes B] [--keep K] [--csv]\n"
	      "  --steps S        steps every process runs (1000)\n"
	      "  --seed X         seed of the per-process PRNGs (1)\n"
	      "  --interval I     mean steps between a process's checkpoints (20)\n"
	      "  --restarts R     restarts in the run (10)\n"
	      "  --state-bytes B  bytes of state per process, a multiple of 8 (4096, <= 1 MiB)\n"
	      "  --keep K         checkpoints kept per process: delta x = K-1 (16, 2..65)\n"
	      "  --step-us U      time one step of the application takes (100; 0: no pacing)\n"
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

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "steps", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'x' },
		{ "interval", required_argument, NULL, 'i' },
		{ "restarts", required_argument, NULL, 'r' },
		{ "state-bytes", required_argument, NULL, 'b' },
		{ "keep", required_argument, NULL, 'k' },
		{ "step-us", required_argument, NULL, 'u' },
		{ "csv", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int c;

	*o = (struct opts){ .steps = 1000, .seed = 1, .interval = 20, .restarts = 10,
			    .state_bytes = 4096, .keep = 16, .step_us = 100 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!parse_u64(optarg, 1, 100000000, &o->steps))
				return -1;
			break;
		case 'x':
			if (!parse_u64(optarg, 0, UINT64_MAX, &o->seed))
				return -1;
			break;
		case 'i':
			if (!parse_u64(optarg, 1, 1000000, &o->interval))
				return -1;
			break;
		case 'r':
			if (!parse_u64(optarg, 0, 100000, &o->restarts))
				return -1;
			break;
		case 'b':
			if (!parse_u64(optarg, 8, MAX_STATE, &v) || v % 8)
				return -1;
			o->state_bytes = v;
			break;
		case 'k':
			if (!parse_u64(optarg, 2, DDSS_DELTA_MAX + 1, &v))
				return -1;
			o->keep = (unsigned)v;
			break;
		case 'u':
			if (!parse_u64(optarg, 0, 1000000, &o->step_us))
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
	return optind == argc ? 0 : -1;
}

/* ---- the shared segments ---- */

static void put_ack(struct proc *P, uint32_t state)
{
	struct ack a = {
		.seq = P->seen, .state = state, .done = P->done, .step = P->step,
		.ckpt = P->latest, .state_hash = hash_words(P->ctr, P->words),
		.rollbacks = P->st.rollbacks,
	};

	a.csum = ack_csum(&a);
	check(ddss_put(P->ctx, P->acks, (size_t)(P->me - 1) * SLOT, &a, sizeof(a)),
	      "write my ack slot", P->me);
}

/* Read every ack slot; false if any was caught half written (read again). */
static bool get_acks(struct proc *P)
{
	check(ddss_get(P->ctx, P->acks, 0, P->all, (size_t)P->nprocs * SLOT), "read the acks",
	      P->me);
	for (uint32_t j = 0; j < P->nprocs; j++)
		if (P->all[j].csum != ack_csum(&P->all[j]))
			return false;
	return true;
}

/* Wait until every process has acknowledged command @seq with @state. */
static void wait_acks(struct proc *P, uint64_t seq, uint32_t state)
{
	uint64_t t0 = now_ns();

	for (;;) {
		uint32_t n = 0;

		if (get_acks(P))
			for (uint32_t j = 0; j < P->nprocs; j++)
				n += P->all[j].seq == seq && P->all[j].state == state;
		if (n == P->nprocs)
			return;
		if (now_ns() - t0 > WAIT_LIMIT_NS)
			die("process %u: only %u of %u processes acknowledged command %" PRIu64,
			    P->me, n, P->nprocs, seq);
		usleep(ACK_POLL_US);
	}
}

static void get_board(struct proc *P, struct board *b)
{
	check(ddss_get(P->ctx, P->board, 0, b, sizeof(*b)), "read the board", P->me);
}

static void put_board(struct proc *P, const struct board *b)
{
	check(ddss_put(P->ctx, P->board, 0, b, sizeof(*b)), "write the board", P->me);
}

/* ---- the application ---- */

static void draw_next_ckpt(struct proc *P)
{
	P->next_ckpt = P->step + 1 + rng_next(&P->rng) % (2 * P->o.interval - 1);
}

/* (Re)start the pacing clock: at start and whenever the processes resume together. */
static void pace_restart(struct proc *P)
{
	P->pace_base = now_ns();
	P->paced = 0;
}

static void do_step(struct proc *P)
{
	uint64_t s, due = P->pace_base + P->paced++ * P->o.step_us * 1000;

	if (P->o.step_us && now_ns() < due) {
		struct timespec ts = { .tv_sec = (time_t)(due / 1000000000ull),
				       .tv_nsec = (long)(due % 1000000000ull) };

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	s = ++P->step;

	for (size_t i = 0; i < P->words; i++)
		P->ctr[i] += P->a[i] * s + P->b[i];
}

/*
 * Put the current state as my checkpoint number @c: one delta put of header + state, a new
 * version of my segment. @timed: a checkpoint of the application (counted in the table);
 * otherwise the copy a rollback writes.
 */
static void put_checkpoint(struct proc *P, uint64_t c, bool timed)
{
	struct ckpt_hdr *h = P->buf;
	uint64_t v = P->version + 1, floor = c, t0;

	/*
	 * The oldest of my checkpoints still kept after this put and one more (the copy a
	 * rollback puts: so a checkpoint the coordinator chooses survives it). The home keeps
	 * versions v-keep+1 .. v; my live checkpoints 1..c were put in increasing version
	 * order, so the kept ones are a suffix of them.
	 */
	while (floor > 1 && P->ver_of[floor - 1] + P->o.keep - 1 > v)
		floor--;
	*h = (struct ckpt_hdr){ .magic = CKPT_MAGIC, .proc = P->me, .keep = P->o.keep,
				.ckpt_no = c, .step = P->step, .floor = floor,
				.restarts = P->st.rollbacks,
				.state_hash = hash_words(P->ctr, P->words) };
	memcpy(h + 1, P->ctr, P->words * 8);
	t0 = now_ns();
	check(ddss_put(P->ctx, P->data[P->me - 1], 0, P->buf, P->seg_len), "checkpoint", P->me);
	if (timed) {
		P->st.ckpt_ns += now_ns() - t0;
		P->st.ckpts++;
	}
	P->version = v;
	P->latest = c;
	P->ver_of[c] = v;
}

/*
 * Roll back to my checkpoint @c (0: the initial state), read back from DDSS. Then put it
 * again as my newest version: the rollback discards every later checkpoint, and the
 * newest version is what the next coordinator reads as my latest checkpoint.
 */
static void restore(struct proc *P, uint64_t c)
{
	if (c > P->latest)
		die("process %u: told to roll back to checkpoint %" PRIu64 " but my latest is %" PRIu64,
		    P->me, c, P->latest);
	if (c == 0) {
		memset(P->ctr, 0, P->words * 8);
		P->step = 0;
	} else {
		struct ckpt_hdr *h = P->buf;
		uint64_t back = P->version - P->ver_of[c], got;
		int r;

		if (back >= P->o.keep)
			die("process %u: checkpoint %" PRIu64 " (version %" PRIu64 ") is no longer kept"
			    " (newest version %" PRIu64 ", %u kept)",
			    P->me, c, P->ver_of[c], P->version, P->o.keep);
		r = ddss_get_versioned(P->ctx, P->data[P->me - 1], 0, P->buf, P->seg_len,
				       (unsigned)back, &got);
		check(r, "read my checkpoint back", P->me);
		if (got != P->ver_of[c] || h->magic != CKPT_MAGIC || h->proc != P->me ||
		    h->ckpt_no != c)
			die("process %u: restore of checkpoint %" PRIu64 " read version %" PRIu64
			    " (expected %" PRIu64 ") holding checkpoint %" PRIu64 " of process %u",
			    P->me, c, got, P->ver_of[c], h->ckpt_no, h->proc);
		memcpy(P->ctr, h + 1, P->words * 8);
		P->step = h->step;
	}
	/* Each process checks itself: the restored state is the state at the restored step. */
	for (size_t i = 0; i < P->words; i++)
		if (P->ctr[i] != state_word(P->me, i, P->step))
			die("process %u: state restored from checkpoint %" PRIu64 " (step %" PRIu64
			    ") differs from the expected state at word %zu",
			    P->me, c, P->step, i);
	put_checkpoint(P, c, false);
	P->st.rollbacks++;
	P->done = false;
	draw_next_ckpt(P);
}

/* Handle a command seen on the board (each seq once). Returns false on EXIT. */
static bool handle(struct proc *P, const struct board *b)
{
	P->seen = b->seq;
	switch (b->phase) {
	case PH_FREEZE:
		P->frozen = true;
		put_ack(P, ACK_FROZEN);
		return true;
	case PH_ROLLBACK:
		restore(P, b->target);
		put_ack(P, ACK_RESTORED);
		return true;
	case PH_EXIT:
		return false;
	default:
		P->frozen = false; /* resume */
		pace_restart(P);
		return true;
	}
}

/*
 * The coordinator (section 5.3: "reach a consistent checkpoint and inform all other
 * processes to revert back to it"): the most recent checkpoint number every process has
 * taken and still keeps. Reads one header per process (its newest version).
 */
static uint64_t decide(struct proc *P, uint64_t *fallback_p)
{
	uint64_t c = UINT64_MAX, max_floor = 0;
	struct ckpt_hdr h;

	for (uint32_t j = 1; j <= P->nprocs; j++) {
		uint64_t v;

		check(ddss_get_versioned(P->ctx, P->data[j - 1], 0, &h, sizeof(h), 0, &v),
		      "read a checkpoint version", P->me);
		if (v == 0) { /* never checkpointed */
			c = 0;
			continue;
		}
		if (h.magic != CKPT_MAGIC || h.proc != j)
			die("process %u: process %u's newest checkpoint has a bad header", P->me, j);
		c = h.ckpt_no < c ? h.ckpt_no : c;
		max_floor = h.floor > max_floor ? h.floor : max_floor;
	}
	*fallback_p = c > 0 && c < max_floor;
	return *fallback_p ? 0 : c;
}

/*
 * The coordinator's own check after a rollback to @c, for every process j: j's newest
 * version must be the copy of checkpoint c its rollback put; for c > 0, the original
 * checkpoint c (the newest older version holding that number, found by scanning back)
 * must hold the state at its step, and the copy and j's restored state (its ack: step and
 * state hash) must be that same state. For c = 0, everything must be the initial state.
 */
static void verify_rollback(struct proc *P, uint64_t c, uint64_t seq)
{
	struct ckpt_hdr *h = P->buf;
	uint64_t *data = (uint64_t *)(h + 1);

	while (!get_acks(P))
		;
	for (uint32_t j = 1; j <= P->nprocs; j++) {
		const struct ack *a = &P->all[j - 1];
		uint64_t step = 0, hash, v;
		unsigned back = 0;

		if (a->seq != seq || a->state != ACK_RESTORED || a->ckpt != c)
			die("process %u (coordinator): process %u acknowledged rollback %" PRIu64
			    " to checkpoint %" PRIu64 ", not %" PRIu64,
			    P->me, j, a->seq, a->ckpt, c);
		if (c > 0) {
			bool found = false;

			for (back = 1; back < P->o.keep && !found; back++) {
				int r = ddss_get_versioned(P->ctx, P->data[j - 1], 0, h, SLOT, back, &v);

				if (r == -ENOENT)
					break;
				check(r, "scan a checkpoint segment", P->me);
				found = h->magic == CKPT_MAGIC && h->proc == j && h->ckpt_no == c;
			}
			if (!found)
				die("process %u (coordinator): process %u has no checkpoint %" PRIu64
				    " among its last %u versions",
				    P->me, j, c, P->o.keep);
			back--;
		}
		hash = expected_hash(j, P->words, 0);
		/* back: the original checkpoint c (c > 0), then the rollback's copy (back 0). */
		for (;; back = 0) {
			check(ddss_get_versioned(P->ctx, P->data[j - 1], 0, P->buf, P->seg_len, back,
						 &v),
			      "read a checkpoint", P->me);
			if (h->magic != CKPT_MAGIC || h->proc != j || h->ckpt_no != c ||
			    (back == 0 && h->step != step))
				die("process %u (coordinator): process %u's version %u back is "
				    "checkpoint %" PRIu64 " at step %" PRIu64 ", expected checkpoint %"
				    PRIu64 " at step %" PRIu64,
				    P->me, j, back, h->ckpt_no, h->step, c, step);
			step = h->step;
			hash = expected_hash(j, P->words, step);
			for (size_t i = 0; i < P->words; i++)
				if (data[i] != state_word(j, i, step))
					die("process %u (coordinator): checkpoint %" PRIu64
					    " of process %u (step %" PRIu64 ", %u back) is wrong at "
					    "word %zu",
					    P->me, c, j, step, back, i);
			if (back == 0)
				break;
		}
		if (a->step != step || a->state_hash != hash)
			die("process %u (coordinator): process %u restored step %" PRIu64
			    " (state hash %#" PRIx64 "), but its checkpoint %" PRIu64
			    " is step %" PRIu64 " (hash %#" PRIx64 ")",
			    P->me, j, a->step, a->state_hash, c, step, hash);
	}
}

/*
 * Try to coordinate a restart. Returns without doing anything if another restart is
 * running (the board is locked or not IDLE) or none remain.
 */
static void try_restart(struct proc *P)
{
	uint64_t t0 = now_ns(), td, c, fallback;
	struct board b;
	int r;

	r = ddss_try_lock_ss(P->ctx, P->board, DDSS_LOCK_EXCLUSIVE);
	if (r == -EBUSY)
		return;
	check(r, "try-lock the board", P->me);
	get_board(P, &b);
	if (b.phase != PH_IDLE || b.restarts >= P->o.restarts) {
		check(ddss_release_lock_ss(P->ctx, P->board), "unlock the board", P->me);
		return;
	}
	b.seq++;
	b.phase = PH_FREEZE;
	b.coord = P->me;
	b.restarts++;
	put_board(P, &b); /* inside my hold of the lock */
	check(ddss_release_lock_ss(P->ctx, P->board), "unlock the board", P->me);
	handle(P, &b);
	wait_acks(P, b.seq, ACK_FROZEN);

	td = now_ns();
	P->st.freeze_ns += td - t0;
	c = decide(P, &fallback);
	P->st.decide_ns += now_ns() - td;
	b.seq++;
	b.phase = PH_ROLLBACK;
	b.target = c;
	put_board(P, &b);
	handle(P, &b);
	wait_acks(P, b.seq, ACK_RESTORED);
	P->st.restart_ns += now_ns() - t0;
	P->st.restarts++;
	P->st.fallbacks += fallback;

	verify_rollback(P, c, b.seq);
	b.seq++;
	b.phase = PH_IDLE;
	put_board(P, &b);
	handle(P, &b);
}

/*
 * Process 1, once every process is done: start any restarts not drawn yet, else post EXIT
 * inside the board lock (so no restart can be starting meanwhile). Returns true once EXIT
 * is posted.
 */
static bool try_finish(struct proc *P)
{
	struct board b;
	bool all_done = true, posted = false;

	if (!get_acks(P))
		return false;
	for (uint32_t j = 0; j < P->nprocs; j++)
		all_done &= P->all[j].done != 0;
	if (!all_done)
		return false;
	get_board(P, &b);
	if (b.phase == PH_IDLE && b.restarts < P->o.restarts) {
		try_restart(P);
		return false;
	}
	check(ddss_acquire_lock_ss(P->ctx, P->board, DDSS_LOCK_EXCLUSIVE), "lock the board", P->me);
	get_board(P, &b);
	if (b.phase == PH_IDLE && b.restarts >= P->o.restarts && get_acks(P)) {
		all_done = true;
		for (uint32_t j = 0; j < P->nprocs; j++)
			all_done &= P->all[j].done != 0;
		if (all_done) {
			b.seq++;
			b.phase = PH_EXIT;
			b.coord = P->me;
			put_board(P, &b);
			posted = true;
		}
	}
	check(ddss_release_lock_ss(P->ctx, P->board), "unlock the board", P->me);
	return posted;
}

static void run(struct proc *P)
{
	/* Each process draws a restart with this chance per step: --restarts in expectation
	 * over the run; process 1 makes up the rest at the end. */
	double q = (double)P->o.restarts / ((double)P->o.steps * P->nprocs);
	struct board b;

	draw_next_ckpt(P);
	pace_restart(P);
	for (;;) {
		get_board(P, &b);
		if (b.seq != P->seen && !handle(P, &b))
			return;
		if (P->frozen) {
			/* Over tcp every poll costs the board's home CPU time, which the coordinator
			 * needs now: poll gently. */
			usleep(FROZEN_POLL_US);
			continue;
		}
		if (P->step < P->o.steps) {
			if ((double)(rng_next(&P->rng) >> 11) * 0x1.0p-53 < q)
				try_restart(P);
			if (P->frozen)
				continue;
			do_step(P);
			if (P->step == P->next_ckpt && P->step < P->o.steps) {
				put_checkpoint(P, P->latest + 1, true);
				draw_next_ckpt(P);
			}
			if (P->step == P->o.steps) {
				P->done = true;
				put_ack(P, ACK_RUNNING);
			}
		} else if (P->me == 1) {
			if (try_finish(P))
				continue; /* the next get sees EXIT */
			usleep(200);
		} else {
			usleep(200);
		}
	}
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
	uint64_t v;

	P->words = P->o.state_bytes / 8;
	P->seg_len = SLOT + P->o.state_bytes;
	P->ctr = calloc(P->words, 8);
	P->a = malloc(P->words * 8);
	P->b = malloc(P->words * 8);
	P->ver_of = calloc(P->o.steps + 2, 8);
	P->buf = malloc(P->seg_len);
	P->all = calloc(P->nprocs, SLOT);
	P->data = calloc(P->nprocs, sizeof(*P->data));
	if (!P->ctr || !P->a || !P->b || !P->ver_of || !P->buf || !P->all || !P->data)
		die("out of memory");
	for (size_t i = 0; i < P->words; i++) {
		P->a[i] = coef_a(P->me, i);
		P->b[i] = coef_b(P->me, i);
	}
	P->rng = mix64(P->o.seed) ^ mix64(P->me);

	check(ddss_allocate_ss(P->ctx, SLOT, &(struct ddss_seg_attr){
			.name = "ckpt.board", .placement = DDSS_PLACE_RANK, .rank = 1,
			.coherence = DDSS_COHERENCE_WRITE }, &P->board),
	      "allocate the board", P->me);
	check(ddss_allocate_ss(P->ctx, (size_t)P->nprocs * SLOT, &(struct ddss_seg_attr){
			.name = "ckpt.acks", .placement = DDSS_PLACE_RANK, .rank = 1 }, &P->acks),
	      "allocate the acks", P->me);
	check(ddss_allocate_ss(P->ctx, (size_t)P->nprocs * SLOT,
			       &(struct ddss_seg_attr){ .name = "ckpt.stats" }, &P->stats_key),
	      "allocate the stats", P->me);
	snprintf(name, sizeof(name), "ckpt.data.%u", P->me);
	check(ddss_allocate_ss(P->ctx, P->seg_len, &(struct ddss_seg_attr){
			.name = name, .placement = DDSS_PLACE_RANK,
			.rank = P->rank % P->size + 1, .coherence = DDSS_COHERENCE_DELTA,
			.delta = P->o.keep - 1 }, &P->data[P->me - 1]),
	      "allocate my checkpoint segment", P->me);
	check(ddss_get_versioned(P->ctx, P->data[P->me - 1], 0, P->buf, SLOT, 0, &v),
	      "read my checkpoint version", P->me);
	if (v != 0)
		die("process %u: my checkpoint segment already has %" PRIu64 " versions", P->me, v);
	put_ack(P, ACK_RUNNING);
	check(ddss_barrier(P->ctx), "barrier", P->me);
	for (uint32_t j = 1; j <= P->nprocs; j++) {
		if (j == P->me)
			continue;
		snprintf(name, sizeof(name), "ckpt.data.%u", j);
		check(ddss_lookup_ss(P->ctx, name, &P->data[j - 1]), "look up a checkpoint segment",
		      P->me);
	}
	check(ddss_barrier(P->ctx), "barrier", P->me);
}

static double us(uint64_t ns, uint64_t n)
{
	return n ? (double)ns / (double)n / 1000.0 : 0.0;
}

static void report(struct proc *P)
{
	struct stats *all = calloc(P->nprocs, SLOT), t = { 0 };
	struct board b;

	if (!all)
		die("out of memory");
	check(ddss_get(P->ctx, P->stats_key, 0, all, (size_t)P->nprocs * SLOT), "read the stats",
	      P->me);
	get_board(P, &b);
	for (uint32_t j = 0; j < P->nprocs; j++) {
		t.ckpts += all[j].ckpts;
		t.ckpt_ns += all[j].ckpt_ns;
		t.restarts += all[j].restarts;
		t.restart_ns += all[j].restart_ns;
		t.freeze_ns += all[j].freeze_ns;
		t.decide_ns += all[j].decide_ns;
		t.fallbacks += all[j].fallbacks;
		/* Every restart rolls every process back. */
		if (all[j].rollbacks != b.restarts)
			die("process %u did %" PRIu64 " rollbacks, but %" PRIu64 " restarts ran", j + 1,
			    all[j].rollbacks, b.restarts);
	}
	if (t.restarts != b.restarts || b.restarts != P->o.restarts)
		die("%" PRIu64 " restarts coordinated, the board counts %" PRIu64 ", %" PRIu64
		    " asked for", t.restarts, b.restarts, P->o.restarts);
	if (P->o.csv) {
		printf("procs,ranks,state_bytes,steps,checkpoints,ckpt_avg_us,restarts,"
		       "restart_avg_us,freeze_avg_us,decide_avg_us,to_step0\n");
		printf("%u,%u,%zu,%" PRIu64 ",%" PRIu64 ",%.2f,%" PRIu64 ",%.2f,%.2f,%.2f,%" PRIu64
		       "\n",
		       P->nprocs, P->size, P->o.state_bytes, P->o.steps, t.ckpts,
		       us(t.ckpt_ns, t.ckpts), t.restarts, us(t.restart_ns, t.restarts),
		       us(t.freeze_ns, t.restarts), us(t.decide_ns, t.restarts), t.fallbacks);
	} else {
		printf("%u processes (%u ranks x %u), %" PRIu64 " steps each, %zu-byte state, a "
		       "checkpoint every ~%" PRIu64 " steps (delta segment on the next rank, last %u "
		       "kept), seed %" PRIu64 "\n",
		       P->nprocs, P->size, P->clients, P->o.steps, P->o.state_bytes, P->o.interval,
		       P->o.keep, P->o.seed);
		printf("| processes | checkpoints | checkpoint avg (us) | restarts | restart avg (us) "
		       "| freeze (us) | decide (us) | to step 0 |\n");
		printf("|---|---|---|---|---|---|---|---|\n");
		printf("| %u | %" PRIu64 " | %.1f | %" PRIu64 " | %.1f | %.1f | %.1f | %" PRIu64
		       " |\n",
		       P->nprocs, t.ckpts, us(t.ckpt_ns, t.ckpts), t.restarts,
		       us(t.restart_ns, t.restarts), us(t.freeze_ns, t.restarts),
		       us(t.decide_ns, t.restarts), t.fallbacks);
		printf("restart = from the decision to every process rolled back; freeze: until "
		       "all had stopped; decide: reading %u checkpoint versions\n", P->nprocs);
		printf("verified: %" PRIu64 " rollbacks (every process checked its restored state, "
		       "the coordinator re-read every checkpoint); every final state correct\n",
		       t.restarts * P->nprocs);
	}
	free(all);
}

int main(int argc, char **argv)
{
	struct proc P = { 0 };

	if (parse_opts(argc, argv, &P.o)) {
		usage(stderr);
		return 2;
	}
	check(ddss_init(NULL, &P.ctx), "ddss_init", 0);
	identify(&P);
	setup(&P);

	run(&P);

	/* Each process checks its final state; then the totals go to process 1. */
	if (P.step != P.o.steps)
		die("process %u: finished at step %" PRIu64 ", not %" PRIu64, P.me, P.step, P.o.steps);
	for (size_t i = 0; i < P.words; i++)
		if (P.ctr[i] != state_word(P.me, i, P.step))
			die("process %u: final state wrong at word %zu", P.me, i);
	check(ddss_put(P.ctx, P.stats_key, (size_t)(P.me - 1) * SLOT, &P.st, sizeof(P.st)),
	      "write my stats", P.me);
	check(ddss_barrier(P.ctx), "barrier", P.me);
	if (P.me == 1)
		report(&P);
	check(ddss_barrier(P.ctx), "barrier", P.me);
	check(ddss_release_ss(P.ctx, P.data[P.me - 1]), "release my checkpoint segment", P.me);
	if (P.me == 1) {
		check(ddss_release_ss(P.ctx, P.board), "release the board", P.me);
		check(ddss_release_ss(P.ctx, P.acks), "release the acks", P.me);
		check(ddss_release_ss(P.ctx, P.stats_key), "release the stats", P.me);
	}
	check(ddss_barrier(P.ctx), "barrier", P.me);
	check(ddss_finalize(P.ctx), "ddss_finalize", P.me);
	free(P.ctr);
	free(P.a);
	free(P.b);
	free(P.ver_of);
	free(P.buf);
	free(P.all);
	free(P.data);
	return 0;
}
