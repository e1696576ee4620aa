/*
 * Kill-and-replace cycles (3 ranks under ddssrun --coordinator; --cycles N):
 * rank 3 is a watcher that runs one process per cycle in slot 3. Process i (the first one
 * starts with the group, every later one replaces the one before) does its share of
 * locked increments and a put/get of its own segment, then takes the counter's lock and
 * is killed holding it. Ranks 1 and 2 increment through every death (the lock is taken
 * back from the dead holder each time). A last process does its share and leaves.
 *
 * Checked: the counter is exact, no call ever returns -ENOLCK, and ranks 1 and 2 end
 * with their open fds, RSS and retired lock waiter slots within a small fixed bound of
 * where they were after the first cycle (printed).
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "lock/lock.h"

#include <ddss/ddss.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 3000 /* the lease TTL too */
#define NRANKS 3
#define VICTIM 3
#define SHARE 20               /* increments per process per cycle */
#define WAIT_MS 60000
#define FD_BOUND 4
#define RSS_BOUND_KIB (16 * 1024)
/* Retired waiter slots per survivor over the whole run (--slot-bound). Each death takes
 * one or two out of use at the lock's home (its queued request, its recovery agent's);
 * src/lock/lock_reclaim.c gives them back once nothing can land in them any more. Before
 * it, the lock's home retired 2 per death: 4 in 3 cycles, and -ENOLCK after ~128. */

static unsigned slots_bound = 1;

/* Words of the results segment (homed at rank 1). */
enum { W_HOLD = 0, W_SURV = 1 /* +rank-1: the cycle each survivor finished */,
       W_FINAL = 1 + NRANKS, W_WORDS = 2 + NRANKS };

static ddss_ctx_t *ctx;
static uint32_t me;
static ddss_key_t results, counter;
static unsigned cycles = 3;
#define CHECK(cond, ...) TEST_CHECK(me, cond, __VA_ARGS__)

static uint64_t word(unsigned w)
{
	uint64_t v = 0;

	return ddss_get(ctx, results, 8 * w, &v, sizeof(v)) ? 0 : v;
}

/* Wait (bounded) until word @w is at least @at. */
static bool wait_word(unsigned w, uint64_t at)
{
	double t0 = test_now_ms();

	while (test_now_ms() - t0 < WAIT_MS) {
		if (word(w) >= at)
			return true;
		usleep(5000); /* a bounded poll of a word another rank writes */
	}
	return false;
}

static void put_word(unsigned w, uint64_t v)
{
	CHECK(ddss_put(ctx, results, 8 * w, &v, sizeof(v)) == 0, "put word %u", w);
}

/* @n locked increments; -EAGAIN (a dead holder not taken back yet) is asked again. */
static void increments(unsigned n)
{
	double t0 = test_now_ms();

	for (unsigned i = 0; i < n && test_now_ms() - t0 < WAIT_MS;) {
		int r = test_locked_increment(ctx, counter);

		CHECK(r != -ENOLCK, "-ENOLCK (waiter slots used up)");
		if (r == -ENOLCK)
			return;
		if (!r)
			i++;
		else if (r != -EAGAIN)
			CHECK(0, "locked increment: %s", ddss_strerror(r));
	}
}

/* A segment of this process: put, get, release. */
static void own_segment(uint64_t value)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = me };
	ddss_key_t k;
	uint64_t v = 0;

	CHECK(ddss_allocate_ss(ctx, 64, &a, &k) == 0, "allocate");
	CHECK(ddss_put(ctx, k, 8, &value, sizeof(value)) == 0, "put");
	CHECK(ddss_get(ctx, k, 8, &v, sizeof(v)) == 0 && v == value, "get %#" PRIx64, v);
	CHECK(ddss_release_ss(ctx, k) == 0, "release");
}

static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = 0;
	if (f)
		fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Rank 1 or 2: through every cycle, then the totals. */
static void survivor(void)
{
	unsigned fds0 = 0, slots0 = 0;
	long rss0 = 0;
	uint64_t total = 0, expect = (uint64_t)(cycles + 1) * NRANKS * SHARE;

	for (unsigned i = 1; i <= cycles && !test_failures; i++) {
		CHECK(wait_word(W_HOLD, i), "process %u of slot %u did not come", i, VICTIM);
		increments(SHARE); /* the lock is taken back from the dead holder */
		own_segment(0x5000 + i);
		put_word(W_SURV + me - 1, i);
		if (i == 1) { /* warm: connections, pools and caches exist now */
			fds0 = open_fds();
			rss0 = rss_kib();
			slots0 = ddss_lock_slots_retired(ctx);
		}
		/* Progress, for the long run's log. Not the retired count: counting frees
		 * quarantined slots, which the run must leave to the lock path (it frees them
		 * when it runs out, after ~128 deaths at the lock's home). */
		if (i % 10 == 0)
			printf("rank %u: cycle %u: open fds %u, RSS %ld KiB\n", me, i, open_fds(),
			       rss_kib());
	}
	increments(SHARE);
	put_word(W_SURV + me - 1, cycles + 1);
	for (uint32_t s = 1; s <= NRANKS; s++)
		if (s != VICTIM)
			CHECK(wait_word(W_SURV + s - 1, cycles + 1), "rank %u did not finish", s);
	CHECK(wait_word(W_FINAL, 1), "the last process of slot %u did not finish", VICTIM);
	CHECK(ddss_get(ctx, counter, 0, &total, sizeof(total)) == 0, "get counter");
	printf("rank %u: %u cycles: counter %" PRIu64 " (expected %" PRIu64 "); open fds %u -> "
	       "%u, RSS %ld -> %ld KiB, retired waiter slots %u -> %u\n", me, cycles, total,
	       expect, fds0, open_fds(), rss0, rss_kib(), slots0, ddss_lock_slots_retired(ctx));
	CHECK(total == expect, "counter");
	CHECK(open_fds() <= fds0 + FD_BOUND, "fds grew");
	CHECK(rss_kib() <= rss0 + RSS_BOUND_KIB, "RSS grew");
	CHECK(ddss_lock_slots_retired(ctx) <= slots0 + slots_bound, "waiter slots retired");
	/* Rank 1 homes the results: it leaves after the others have read. */
	if (me == 1)
		put_word(W_SURV + me - 1, cycles + 2); /* its own memory: checked */
	else
		test_put_farewell(ctx, me, results, W_SURV + me - 1, cycles + 2);
	for (uint32_t s = 2; me == 1 && s <= NRANKS; s++)
		if (s != VICTIM)
			CHECK(wait_word(W_SURV + s - 1, cycles + 2), "rank %u did not leave", s);
}

/* Process @i of slot 3: its share, then killed holding the counter's lock. */
static void victim(unsigned i, int to_watcher)
{
	uint64_t keys[2] = { results, counter };

	increments(SHARE);
	own_segment(0x7000 + i);
	if (i > cycles) {
		put_word(W_FINAL, 1);
		return;
	}
	if (i == 1 && write(to_watcher, keys, sizeof(keys)) != (ssize_t)sizeof(keys))
		_exit(3);
	CHECK(ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE) == 0, "hold");
	put_word(W_HOLD, i);
	fflush(stdout);
	raise(SIGKILL);
}

/* Slot 3's watcher: one process per cycle; each must end by SIGKILL but the last. */
static int watcher(char **argv)
{
	uint64_t keys[2];
	int fds[2], status;
	char text[64];

	for (unsigned i = 1; i <= cycles + 1; i++) {
		pid_t pid;

		if (i == 1) {
			if (pipe(fds))
				return 1;
			snprintf(text, sizeof(text), "%d", fds[1]);
			setenv("TEST_SOAK_PIPE", text, 1);
		}
		snprintf(text, sizeof(text), "%u", i);
		setenv("TEST_SOAK_PROCESS", text, 1);
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			if (i == 1)
				close(fds[0]);
			execv("/proc/self/exe", argv);
			_exit(127);
		}
		if (pid < 0)
			return 1;
		if (i == 1) {
			close(fds[1]);
			if (read(fds[0], keys, sizeof(keys)) != (ssize_t)sizeof(keys))
				return 1;
			close(fds[0]);
			unsetenv("TEST_SOAK_PIPE");
			snprintf(text, sizeof(text), "%" PRIu64 ",%" PRIu64, keys[0], keys[1]);
			setenv("TEST_SOAK_KEYS", text, 1);
			/* The replacements listen elsewhere, as on another machine. */
			if (getenv("DDSS_LISTEN_FD")) {
				close(atoi(getenv("DDSS_LISTEN_FD")));
				unsetenv("DDSS_LISTEN_FD");
			}
			test_listen_elsewhere();
		}
		if (waitpid(pid, &status, 0) != pid)
			return 1;
		if (i <= cycles && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
			printf("slot %u, process %u ended otherwise (status %#x)\n", VICTIM, i, status);
			return 1;
		}
		if (i > cycles)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	}
	return 1;
}

int main(int argc, char **argv)
{
	const char *proc = getenv("TEST_SOAK_PROCESS"), *keys = getenv("TEST_SOAK_KEYS");
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "soakres" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "soakcount" };
	unsigned i = proc ? (unsigned)atoi(proc) : 0;

	for (int k = 1; k + 1 < argc; k++)
		if (!strcmp(argv[k], "--cycles"))
			cycles = (unsigned)atoi(argv[k + 1]);
		else if (!strcmp(argv[k], "--slot-bound"))
			slots_bound = (unsigned)atoi(argv[k + 1]);
	if (!getenv("DDSS_COORDINATOR") || !getenv("DDSS_RANK")) {
		printf("SKIP: run under ddssrun --coordinator\n");
		return TEST_SKIP_EXIT;
	}
	if (!proc && atoi(getenv("DDSS_RANK")) == VICTIM)
		return watcher(argv);
	if (keys && sscanf(keys, "%" SCNu64 ",%" SCNu64, &results, &counter) != 2)
		return 2;
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	me = ddss_rank(ctx);
	if (!keys) { /* the start: every rank of the first cycle */
		CHECK(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results) == 0, "results");
		CHECK(ddss_allocate_ss(ctx, 8, &c, &counter) == 0, "counter");
		test_ctx_barrier_or_exit(ctx);
	}
	if (me == VICTIM) /* the first process tells the watcher the keys on this pipe */
		victim(i, getenv("TEST_SOAK_PIPE") ? atoi(getenv("TEST_SOAK_PIPE")) : -1);
	else
		survivor();
	printf("rank %u%s: %s\n", me, me == VICTIM ? " (last process)" : "",
	       test_failures ? "FAILED" : "passed");
	fflush(stdout);
	/* No collective finalize: barriers count from the start, which replacements missed. */
	_exit(test_failures ? 1 : 0);
}
