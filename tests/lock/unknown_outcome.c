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
 *
 * C. The home is alive: a try-lock times out as in A, and right after rank 1 is woken,
 *    with no get or put in between (those connect again), rank 2 asks for the lock of
 *    another of its segments. The timeout failed rank 2's connection and rank 1 reads
 *    down there, but rank 1's own connection to rank 2 is still open. Before the fix the
 *    call said -EHOSTDOWN at once ("give up the key") in every run; now it connects again
 *    and takes the lock.
 * D. The same, but rank 1 stays frozen: the lock call must fail within the reconnect's
 *    bound (the handshake's: the operation timeout, 1 s here; 5 s until 2026-12-06), not
 *    wait.
 * E. Only try-locks. A try-lock times out as in A; then rank 1 only try-locks the same
 *    lock, again and again, for at most 10 s. Nobody queues behind the stray id, so
 *    nobody is failed behind it and asks the home to take the lock back: before the fix
 *    every try said -EBUSY for as long as rank 2 lived. Now rank 2 asks the home itself
 *    once its request is lost, and a try succeeds.
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
#define FROZEN_BOUND_MS 7000 /* D: the handshake (1 s), and slack for a loaded machine */

static ddss_ctx_t *ctx;
static uint32_t me;

/* Rank 2: freeze rank 1, ask for @key's lock (@timed: a timed acquire, else a try), wake
 * rank 1 (unless @stay_frozen: the caller does). The request must fail: its compare&swap
 * waits in rank 1's socket. */
static void ask_frozen(pid_t home_pid, ddss_key_t key, bool timed, bool stay_frozen,
		       const char *what)
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
	if (!stay_frozen)
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

/* Rank 1, E: try-locks only, until one succeeds (bounded). */
static void try_only(ddss_key_t key)
{
	unsigned tries, busy;
	double ms;
	int r = test_try_lock_until(ctx, key, TAKE_MS, &tries, &busy, &ms);

	printf("rank 1: E. try-locks only: %d (%s) after %u tries (%u said -EBUSY), %.0f ms\n",
	       r, ddss_strerror(r), tries, busy, ms);
	TEST_CHECK(1, r == 0, "E. no try-lock took the lock past rank 2's stray id in %d ms: %d",
		   TAKE_MS, r);
	if (r == 0)
		TEST_CHECK(1, ddss_release_lock_ss(ctx, key) == 0, "E. release");
}

/* Rank 2, D: the home still frozen after the timeout; a lock at it fails, bounded by the
 * handshake the reconnect waits for (on tcp the operation timeout, at most 5 s). */
static void lock_at_frozen(pid_t home_pid, ddss_key_t key)
{
	int64_t t0 = ddss_now_ns(), ms;
	int r = ddss_acquire_lock_timed_ss(ctx, key, DDSS_LOCK_EXCLUSIVE, TAKE_MS);

	ms = (ddss_now_ns() - t0) / 1000000;
	TEST_CHECK(2, kill(home_pid, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
	printf("rank 2: D. another lock at the still frozen home: %d (%s) after %lld ms\n", r,
	       ddss_strerror(r), (long long)ms);
	TEST_CHECK(2, r == -EHOSTDOWN, "D. a lock at the frozen home: %d, not -EHOSTDOWN", r);
	TEST_CHECK(2, ms < FROZEN_BOUND_MS, "D. took %lld ms", (long long)ms);
}

/* Rank 2, C: the home thawed and our connection to it failed; a lock at it all the same. */
static void lock_after_timeout(ddss_key_t key)
{
	int64_t t0 = ddss_now_ns();
	int r = ddss_acquire_lock_timed_ss(ctx, key, DDSS_LOCK_EXCLUSIVE, TAKE_MS);

	printf("rank 2: C. another lock at the woken home: %d (%s) after %lld ms\n", r,
	       ddss_strerror(r), (long long)((ddss_now_ns() - t0) / 1000000));
	TEST_CHECK(2, r == 0, "C. a lock at the live home after a timeout: %d, not 0", r);
	if (r == 0)
		TEST_CHECK(2, ddss_release_lock_ss(ctx, key) == 0, "C. release");
}

int main(void)
{
	ddss_key_t pid_key, phase_key, key_a, key_b, key_c, key_d, key_e;
	uint64_t pid = (uint64_t)getpid();

	ctx = test_init_ranks_or_exit(2);
	me = ddss_rank(ctx);
	pid_key = test_segment_at(ctx, me, "uo-pid", 1, 8);
	phase_key = test_segment_at(ctx, me, "uo-phase", 1, 8);
	key_a = test_segment_at(ctx, me, "uo-try", 1, 8);
	key_b = test_segment_at(ctx, me, "uo-timed", 1, 8);
	key_c = test_segment_at(ctx, me, "uo-try-2", 1, 8);
	key_d = test_segment_at(ctx, me, "uo-after", 1, 8);
	key_e = test_segment_at(ctx, me, "uo-try-only", 1, 8);
	if (me == 1)
		TEST_CHECK(1, ddss_put(ctx, pid_key, 0, &pid, 8) == 0, "put of the pid");
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		TEST_CHECK(2, ddss_get(ctx, pid_key, 0, &pid, 8) == 0, "get of rank 1's pid");
		ask_frozen((pid_t)pid, key_a, false, false, "A. try-lock");
		phase_go(phase_key, 1);
	} else {
		phase_wait(phase_key, 1);
		take_behind(key_a, "A. try-lock");
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		ask_frozen((pid_t)pid, key_b, true, false, "B. timed acquire");
		phase_go(phase_key, 2);
	} else {
		phase_wait(phase_key, 2);
		take_behind(key_b, "B. timed acquire");
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		uint64_t v;

		/* Both segments' descriptors in this rank's cache: neither call may need to ask
		 * rank 1 for one (an ask that times out leaves the connection up, and one that
		 * goes out later connects again by itself). Which rank created a segment, and
		 * so whether it is cached here already, is a race. The get also makes sure the
		 * posted release has landed before rank 1 is frozen (it is ordered behind). */
		TEST_CHECK(2, ddss_acquire_lock_ss(ctx, key_d, DDSS_LOCK_EXCLUSIVE) == 0 &&
				      ddss_release_lock_ss(ctx, key_d) == 0 &&
				      ddss_get(ctx, key_c, 0, &v, 8) == 0,
			   "C. a first lock of the other segment");
		ask_frozen((pid_t)pid, key_c, false, false, "C. try-lock");
		lock_after_timeout(key_d);
		phase_go(phase_key, 3);
	} else {
		phase_wait(phase_key, 3);
		take_behind(key_c, "C. try-lock");
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		/* The same key: its descriptor is cached here (a try-lock of a key never looked
		 * up here would first ask the frozen rank 1 for it, and time out there). */
		ask_frozen((pid_t)pid, key_d, false, true, "D. try-lock");
		lock_at_frozen((pid_t)pid, key_d);
		phase_go(phase_key, 4);
	} else {
		phase_wait(phase_key, 4);
		take_behind(key_d, "D. try-lock");
	}
	test_ctx_barrier_or_exit(ctx);
	if (me == 2) {
		uint64_t v;

		/* Its descriptor cached here first, as in C. */
		TEST_CHECK(2, ddss_get(ctx, key_e, 0, &v, 8) == 0, "E. a first get");
		ask_frozen((pid_t)pid, key_e, false, false, "E. try-lock");
		phase_go(phase_key, 5);
	} else {
		phase_wait(phase_key, 5);
		try_only(key_e);
	}
	test_ctx_barrier_or_exit(ctx);
	ddss_finalize(ctx);
	printf("rank %u: %s\n", me, test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
