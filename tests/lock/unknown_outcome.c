/*
 * An exclusive request whose compare&swap timed out at a live home, and landed there after
 * all (docs/failure.md, "An atomic whose outcome is unknown"), 2 ranks over tcp, run with a
 * short DDSS_OP_TIMEOUT_MS and a long DDSS_PEER_TIMEOUT_MS (nobody is declared dead):
 *
 *   DDSS_OP_TIMEOUT_MS=1000 DDSS_PEER_TIMEOUT_MS=60000 ddssrun -n 2 lock_unknown_outcome
 *
 * Rank 1 homes two segments. For each, rank 2 freezes rank 1 (SIGSTOP), asks for the lock
 * and, once the request failed with the operation timeout, wakes rank 1 up: rank 1's
 * progress thread then executes the compare&swap that was waiting in its socket, and rank
 * 2's id stands in the lock's tail. The two ways of asking:
 *  A. a try-lock. Before the fix its slot went back to the free list as "never published":
 *     whoever queued behind the id announced itself into a record nobody read, and waited
 *     for a grant that never came;
 *  B. a timed acquire (200 ms, shorter than the operation timeout). Before the fix the
 *     janitor finished it by running its swap again: it found its own id in the tail, took
 *     itself for its predecessor and waited for itself.
 * Checked each time: rank 1 takes the lock within 10 s. Rank 1 first says whether it found
 * rank 2's id in the word (a try says -EBUSY). Whether it still is depends on which rank 1
 * saw first, rank 2's old connection closing or its new one (the phase put): if the close,
 * rank 1 took rank 2 for gone for a moment and its recovery may have cleared the id
 * already. Before the fix the id was there in every run, and rank 1 waited out its 10 s.
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "net/transport.h" /* ddss_now_ns */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAKE_MS 10000     /* rank 1's acquire behind the stray id */
#define TIMED_MS 200      /* B's acquire: shorter than the operation timeout */

static ddss_ctx_t *ctx;
static uint32_t me;

static ddss_key_t segment(const char *name)
{
	struct ddss_seg_attr attr = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = name };
	ddss_key_t key;
	int r = ddss_allocate_ss(ctx, 8, &attr, &key);

	if (r) {
		printf("rank %u: FAIL: segment %s: %s\n", me, name, ddss_strerror(r));
		exit(1);
	}
	return key;
}

/* Rank 2: freeze rank 1, ask for @key's lock (@timed: a timed acquire, else a try), wake
 * rank 1. The request must fail: its compare&swap waits in rank 1's socket. */
static void ask_frozen(pid_t home_pid, ddss_key_t key, bool timed, const char *what)
{
	int64_t t0;
	int r;

	TEST_CHECK(2, kill(home_pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	TEST_CHECK(2, test_wait_stopped((int)home_pid, 10000), "rank 1 did not stop");
	t0 = ddss_now_ns();
	r = timed ? ddss_acquire_lock_timed_ss(ctx, key, DDSS_LOCK_EXCLUSIVE, TIMED_MS) :
		    ddss_try_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
	printf("rank 2: %s against the frozen home: %d (%s) after %lld ms\n", what, r,
	       ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(2, kill(home_pid, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
	TEST_CHECK(2, r == -ETIMEDOUT, "%s: %d, not -ETIMEDOUT", what, r);
}

/*
 * Rank 2 tells rank 1 that phase @phase may go on, by a put into the segment @key homed at
 * rank 1: it goes over a new connection, so rank 1 sees rank 2 up when it gets it. (A
 * barrier there could fail: rank 1 may see rank 2's old connection close first, and a
 * barrier fails when a rank it waits for is down.)
 */
static void phase_go(ddss_key_t key, uint64_t phase)
{
	int r = ddss_put(ctx, key, 0, &phase, 8);

	TEST_CHECK(2, r == 0, "put of phase %llu: %d", (unsigned long long)phase, r);
}

/* Rank 1: wait (bounded) for phase_go(@phase); a poll of our own memory. A get that was
 * under way when rank 1 was frozen may time out: the clock ran on meanwhile. */
static void phase_wait(ddss_key_t key, uint64_t phase)
{
	int64_t give_up = ddss_now_ns() + 30000000000ll;
	uint64_t v = 0;
	int r = 0;

	while (v != phase && ddss_now_ns() < give_up) {
		r = ddss_get(ctx, key, 0, &v, 8);
		if (r || v != phase)
			usleep(1000);
	}
	if (v != phase) {
		printf("rank 1: FAIL: rank 2 never reached phase %llu (last get: %s)\n",
		       (unsigned long long)phase, ddss_strerror(r));
		exit(1);
	}
}

/* Rank 1: whether the stray id is in the word (a try finds the lock taken), then the lock
 * is taken behind it all the same. */
static void take_behind(ddss_key_t key, const char *what)
{
	int64_t t0;
	int r = ddss_try_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);

	if (r == 0)
		ddss_release_lock_ss(ctx, key);
	printf("rank 1: %s: rank 2's compare&swap %s\n", what,
	       r == -EBUSY ? "landed" : "is not in the word (never landed, or cleared)");
	t0 = ddss_now_ns();
	r = ddss_acquire_lock_timed_ss(ctx, key, DDSS_LOCK_EXCLUSIVE, TAKE_MS);
	printf("rank 1: %s: the lock behind rank 2's stray id: %d (%s) after %lld ms\n", what,
	       r, ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(1, r == 0, "%s: the lock could not be taken behind the stray id: %d", what,
		   r);
	if (r == 0)
		TEST_CHECK(1, ddss_release_lock_ss(ctx, key) == 0, "%s: release", what);
}

int main(void)
{
	ddss_key_t pid_key, phase_key, key_a, key_b;
	uint64_t pid = (uint64_t)getpid();

	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	pid_key = segment("uo-pid");
	phase_key = segment("uo-phase");
	key_a = segment("uo-try");
	key_b = segment("uo-timed");
	if (me == 1)
		TEST_CHECK(1, ddss_put(ctx, pid_key, 0, &pid, 8) == 0, "put of the pid");
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		TEST_CHECK(2, ddss_get(ctx, pid_key, 0, &pid, 8) == 0, "get of rank 1's pid");
		ask_frozen((pid_t)pid, key_a, false, "A. try-lock");
		phase_go(phase_key, 1);
	} else {
		phase_wait(phase_key, 1);
		take_behind(key_a, "A. try-lock");
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		ask_frozen((pid_t)pid, key_b, true, "B. timed acquire");
		phase_go(phase_key, 2);
	} else {
		phase_wait(phase_key, 2);
		take_behind(key_b, "B. timed acquire");
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
