/*
 * The lock fault matrix (docs/failure.md), 4 ranks, the SRSL scheme (the one whose locks
 * are recovered from dead ranks today). Rank 4 is the victim and is killed with SIGKILL:
 *   --case x-holder   while holding the lock exclusively (after one complete increment)
 *   --case s-holder   while holding it shared
 *   --case queued     while queued between rank 2 (holding) and rank 3 (queued behind it)
 *   --case mid-put    while holding it and writing a 4 MiB segment
 *   --case frozen     not killed but stopped (SIGSTOP) holding it exclusively, so only
 *                     heartbeats can tell; woken up at the end, everything it tries fails
 *   --case ticket     (--scheme ncosed --fair) right after taking its ticket, so the turn
 *                     word waits for a ticket nobody will pass on
 * Ranks 1-3 then take the lock (each must get it within the bound: peer timeout + probe
 * interval, with slack) and increment a counter under it ITERS times each; rank 1 checks
 * the counter is exactly the increments that completed (the victim's one, in x-holder,
 * and the survivors'), so no update was lost or doubled, and that a segment homed on a
 * live rank kept its bytes.
 *
 * Fencing numbers (docs/locks.md "Fencing"): the counter segment is [counter | the last
 * holder's fencing number], a resource that checks them. A victim holding the lock takes
 * its number and publishes it before it is killed; every survivor's number must be larger
 * than the victim's and than the stored one, and in the end the stored number is exactly
 * the victim's plus one per survivor hold (no number was handed out twice or skipped).
 *
 * The victim rank is a child of its rank process: the parent only waits and reports the
 * planned SIGKILL as success, so ddssrun (which fails a run when a rank dies) is not
 * involved. Signalling between ranks goes through a flags segment homed at rank 1; the
 * waits on it poll (a flag read is one remote read).
 */
#include "common/test_util.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VICTIM 4u
#define ITERS 100
#define BULK_LEN (4u << 20)
#define WAIT_MS 30000
#define PEER_TIMEOUT_MS 2000
#define PROBE_MS 500 /* lock/srsl.c SRSL_PROBE_MS */
#define SLACK_MS 2000 /* a loaded 2-core machine; the guest */

/* Flag words in the flags segment (8 bytes each). */
enum flag {
	F_VICTIM_READY = 0,  /* the victim holds (or, queued case, is about to queue) */
	F_VICTIM_INCS,       /* increments the victim completed */
	F_QUEUING,           /* + rank: that survivor is about to ask for the lock */
	F_DONE = F_QUEUING + 8, /* + rank: that survivor finished its increments */
	F_HOLDER_READY = F_DONE + 8, /* queued case: rank 2 holds */
	F_LAST_QUEUED,       /* queued case: rank 3 is about to queue behind the victim */
	F_VICTIM_FENCE,      /* the fencing number the victim got (0: none asked) */
	F_VICTIM_PID,        /* frozen case: the victim's pid (rank 1 wakes it up) */
	F_NFLAGS
};

static ddss_ctx_t *ctx;
static uint32_t me;
static const char *which;
/* --scheme ncosed: the default scheme, whose locks its homes take back by recovery agents
 * (src/lock/lock_agent.c) and drain surveys (src/lock/lock_recover.c). */
static bool ncosed;
/* --try: the survivors' first lock is a try-lock loop (no request of theirs ever fails). */
static bool try_only;
/* --fair: starvation-free exclusive queueing (tickets). */
static bool fair;
static ddss_key_t counter, flags, bulk, witness;
static uint64_t victim_own_fence; /* the victim's number, as it knows it */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void flag_put(unsigned f, uint64_t v)
{
	CU_ASSERT_EQUAL_FATAL(ddss_put(ctx, flags, f * 8, &v, 8), 0);
}

static uint64_t flag_get(unsigned f)
{
	uint64_t v = 0;

	CU_ASSERT_EQUAL(ddss_get(ctx, flags, f * 8, &v, 8), 0);
	return v;
}

/* Poll a flag until it reaches @want (one remote read per look). */
static bool flag_wait(unsigned f, uint64_t want)
{
	int64_t end = now_ms() + WAIT_MS;

	while (flag_get(f) < want) {
		if (now_ms() > end)
			return false;
		sched_yield();
	}
	return true;
}

/* Under the exclusive lock: +1 on the counter, storing the holder's fencing number beside
 * it; -EILSEQ if the number is not above the stored one (the resource would refuse it). */
static int increment(uint64_t fence)
{
	uint64_t v[2];
	int r = ddss_get(ctx, counter, 0, v, sizeof(v));

	if (r)
		return r;
	if (fence <= v[1]) {
		printf("[%u] %s: fence %llu not above the stored %llu\n", me, which,
		       (unsigned long long)fence, (unsigned long long)v[1]);
		return -EILSEQ;
	}
	v[0]++;
	v[1] = fence;
	return ddss_put(ctx, counter, 0, v, sizeof(v));
}

/* The calling holder's fencing number (0 and a failed assertion if refused). */
static uint64_t my_fence(void)
{
	uint64_t f = 0;

	CU_ASSERT_EQUAL(ddss_lock_fence_ss(ctx, counter, &f), 0);
	return f;
}

/* ---- the victim (rank 4) ---- */

static void *killer(void *arg)
{
	unsigned f = (unsigned)(uintptr_t)arg;

	/* Wait for the moment, then die the hard way, whatever the main thread is doing. */
	if (flag_wait(f, 1))
		raise(SIGKILL);
	return NULL;
}

/*
 * Frozen case: stop (a rank cut off, or paused by the OS, holding the lock) until rank 1
 * wakes us after the survivors have taken the lock from us and done their work. Then
 * everything we try fails: we were declared dead and refused for good, so our old hold
 * buys nothing, and the number we still have is below every survivor's. Exit 0 when so.
 */
static void after_thaw(void)
{
	uint64_t f = 0, v = 1;
	int r_fence, r_get, r_put, r_rel;

	fflush(stdout);
	raise(SIGSTOP);
	r_fence = ddss_lock_fence_ss(ctx, counter, &f); /* cached: no message needed */
	r_get = ddss_get(ctx, counter, 0, &v, 8);
	r_put = ddss_put(ctx, counter, 0, &v, 8);
	r_rel = ddss_release_lock_ss(ctx, counter);
	printf("[%u] frozen: after the thaw fence %d (%llu), get %d, put %d, release %d\n", me,
	       r_fence, (unsigned long long)f, r_get, r_put, r_rel);
	fflush(stdout);
	/* N-CoSED posts an exclusive release's CAS and returns (docs/locks.md): its error is
	 * logged, not returned. The counter check (rank 1) shows it changed nothing. */
	_exit(r_get < 0 && r_put < 0 && (r_rel < 0 || ncosed) &&
			      (r_fence < 0 || f == victim_own_fence) ? 0 : 1);
}

/* Ticket case: killed right after taking its fair-mode ticket, before passing the turn. */
static void die_with_ticket(ddss_ctx_t *c, enum ddss_lock_test_point point)
{
	(void)c;
	if (point != DDSS_LOCK_TP_TICKET)
		return;
	flag_put(F_VICTIM_READY, 1);
	raise(SIGKILL);
}

static void victim(void)
{
	pthread_t th;
	void *buf;

	if (!strcmp(which, "ticket")) {
		ddss_lock_test_hook = die_with_ticket;
		ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE);
		CU_FAIL("the victim outlived its ticket");
		return;
	}

	if (!strcmp(which, "queued")) {
		CU_ASSERT_FATAL(flag_wait(F_HOLDER_READY, 1));
		pthread_create(&th, NULL, killer, (void *)(uintptr_t)F_LAST_QUEUED);
		flag_put(F_VICTIM_READY, 1);
		/*
		 * Usually dies in there. Nothing orders our request before rank 2's release, so
		 * now and then it is granted first: then we die holding (the x-holder case).
		 */
		int r = ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE);

		printf("[%u] queued: the victim's request returned (%s) before it was killed\n",
		       me, ddss_strerror(r));
		for (;;)
			pause();
	}
	if (!strcmp(which, "s-holder")) {
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_SHARED), 0);
		flag_put(F_VICTIM_FENCE, my_fence()); /* a shared holder's: read, not bumped */
	} else {
		uint64_t f;

		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE), 0);
		f = my_fence();
		CU_ASSERT_FATAL(f > 0);
		victim_own_fence = f;
		flag_put(F_VICTIM_FENCE, f);
		if (!strcmp(which, "x-holder") || !strcmp(which, "frozen")) {
			CU_ASSERT_EQUAL_FATAL(increment(f), 0);
			flag_put(F_VICTIM_INCS, 1);
		}
	}
	if (!strcmp(which, "mid-put")) {
		/* Killed by the other thread while a put is on its way. */
		buf = malloc(BULK_LEN);
		memset(buf, 0x5a, BULK_LEN);
		pthread_create(&th, NULL, killer, (void *)(uintptr_t)(F_QUEUING + 3));
		flag_put(F_VICTIM_READY, 1);
		for (;;)
			ddss_put(ctx, bulk, 0, buf, BULK_LEN);
	}
	if (!strcmp(which, "frozen"))
		flag_put(F_VICTIM_PID, (uint64_t)getpid());
	flag_put(F_VICTIM_READY, 1);
	for (uint32_t r = 1; r < VICTIM; r++)
		flag_wait(F_QUEUING + r, 1);
	if (!strcmp(which, "frozen"))
		after_thaw(); /* does not return */
	raise(SIGKILL);
}

/* ---- the survivors (ranks 1-3) ---- */

/* Frozen case, rank 1 at the end: wake the victim, wait for it to exit (all its attempts
 * must fail, which it checks), and see that the counter @before did not change. */
static void thaw_victim(const uint64_t before[2])
{
	pid_t pid = (pid_t)flag_get(F_VICTIM_PID);
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p = { .fd = pfd, .events = POLLIN };
	uint64_t after[2] = { 0, 0 };

	CU_ASSERT_FATAL(pfd >= 0);
	CU_ASSERT_EQUAL(kill(pid, SIGCONT), 0);
	CU_ASSERT_EQUAL(poll(&p, 1, WAIT_MS), 1); /* readable once it has exited */
	close(pfd);
	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, after, sizeof(after)), 0);
	printf("[1] frozen: after the victim's thaw the counter is %llu (was %llu)\n",
	       (unsigned long long)after[0], (unsigned long long)before[0]);
	CU_ASSERT(after[0] == before[0] && after[1] == before[1]);
}

static void survivor(void)
{
	int64_t t0, waited, bound = PEER_TIMEOUT_MS + PEER_TIMEOUT_MS / 4 + PROBE_MS + SLACK_MS;
	uint64_t victim_fence, f;
	unsigned fails = 0;
	int r;

	if (!strcmp(which, "queued") && me == 2) {
		CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE), 0);
		flag_put(F_HOLDER_READY, 1);
		/* The victim queues behind us, rank 3 behind it, then the victim is killed. */
		CU_ASSERT_FATAL(flag_wait(F_LAST_QUEUED, 1));
		/* Handing over to the victim as it dies fails: logged, and the release is done. */
		CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, counter), 0);
	}
	CU_ASSERT_FATAL(flag_wait(F_VICTIM_READY, 1));
	if (!strcmp(which, "queued") && me == 3)
		flag_put(F_LAST_QUEUED, 1);
	flag_put(F_QUEUING + me, 1);
	t0 = now_ms();
	if (try_only) {
		/* Only try-locks: one that finds a dead tail asks the home to take it back. */
		do
			r = ddss_try_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE);
		while (r == -EBUSY && now_ms() - t0 < WAIT_MS && !sched_yield());
	} else {
		r = ddss_acquire_lock_timed_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE, WAIT_MS);
	}
	waited = now_ms() - t0;
	printf("[%u] %s: lock taken after %lld ms (bound %lld ms): %s\n", me, which,
	       (long long)waited, (long long)bound, ddss_strerror(r));
	CU_ASSERT_EQUAL_FATAL(r, 0);
	CU_ASSERT(waited <= bound);
	/* Published before F_VICTIM_READY, which we waited for. */
	victim_fence = flag_get(F_VICTIM_FENCE);
	f = my_fence();
	printf("[%u] %s: fence %llu after the victim's %llu\n", me, which, (unsigned long long)f,
	       (unsigned long long)victim_fence);
	CU_ASSERT(f > victim_fence);
	CU_ASSERT_EQUAL(increment(f), 0);
	CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, counter), 0);
	for (int i = 1; i < ITERS; i++) {
		r = ddss_acquire_lock_ss(ctx, counter, DDSS_LOCK_EXCLUSIVE);
		if (!r) {
			r = ddss_lock_fence_ss(ctx, counter, &f);
			if (!r)
				r = increment(f);
			fails += r != 0;
			r = ddss_release_lock_ss(ctx, counter);
		}
		fails += r != 0;
	}
	CU_ASSERT_EQUAL(fails, 0);
	/* Rank 1 homes the flags and leaves once it has every survivor's. */
	test_put_farewell(ctx, me, flags, F_DONE + me, 1);
	if (me != 1)
		return;
	for (uint32_t p = 1; p < VICTIM; p++)
		CU_ASSERT(flag_wait(F_DONE + p, 1));
	uint64_t v[2] = { 0, 0 }, w = 0, expect = flag_get(F_VICTIM_INCS) + (VICTIM - 1) * ITERS;

	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, v, sizeof(v)), 0);
	printf("[1] %s: counter %llu, expected %llu (victim %llu + %u survivors x %d)\n", which,
	       (unsigned long long)v[0], (unsigned long long)expect,
	       (unsigned long long)flag_get(F_VICTIM_INCS), VICTIM - 1, ITERS);
	CU_ASSERT_EQUAL(v[0], expect);
	/* One number per survivor hold after the victim's: none reused, none skipped. */
	printf("[1] %s: last fence %llu, expected %llu\n", which, (unsigned long long)v[1],
	       (unsigned long long)(flag_get(F_VICTIM_FENCE) + (VICTIM - 1) * ITERS));
	CU_ASSERT_EQUAL(v[1], flag_get(F_VICTIM_FENCE) + (VICTIM - 1) * ITERS);
	CU_ASSERT_EQUAL(ddss_get(ctx, witness, 0, &w, 8), 0);
	CU_ASSERT_EQUAL(w, 0x77697477697477ull);
	if (!strcmp(which, "frozen"))
		thaw_victim(v);
}

static void test_fault(void)
{
	if (me == VICTIM)
		victim();
	else
		survivor();
}

static void setup(void)
{
	struct ddss_seg_attr at = { .placement = DDSS_PLACE_RANK, .rank = 1 };
	uint64_t w = 0x77697477697477ull;

	at.name = "counter";
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 16, &at, &counter), 0);
	at.name = "flags";
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, F_NFLAGS * 8, &at, &flags), 0);
	at.name = "bulk";
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, BULK_LEN, &at, &bulk), 0);
	at.name = "witness";
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &at, &witness), 0);
	if (me == 1)
		CU_ASSERT_EQUAL_FATAL(ddss_put(ctx, witness, 0, &w, 8), 0);
	test_ctx_barrier_or_exit(ctx);
}

/* The victim's parent: exit 0 only if the child died of the planned SIGKILL (frozen case:
 * exited 0 after its checks). */
static int watch_victim(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return 1;
	if (!strcmp(which, "frozen") && WIFEXITED(status)) {
		printf("[%u] frozen: victim's checks after the thaw %s\n", VICTIM,
		       WEXITSTATUS(status) ? "FAILED" : "passed");
		return WEXITSTATUS(status) ? 1 : 0;
	}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
		printf("[%u] %s: victim killed as planned\n", VICTIM, which);
		return 0;
	}
	printf("[%u] %s: victim ended otherwise (status %#x)\n", VICTIM, which, status);
	return 1;
}

int main(int argc, char **argv)
{
	struct ddss_attr attr;
	CU_pSuite suite;
	unsigned failed;
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--case") && i + 1 < argc)
			which = argv[++i];
		else if (!strcmp(argv[i], "--scheme") && i + 1 < argc)
			ncosed = !strcmp(argv[++i], "ncosed");
		else if (!strcmp(argv[i], "--try"))
			try_only = true;
		else if (!strcmp(argv[i], "--fair"))
			fair = true;
	}
	if (!which || (strcmp(which, "x-holder") && strcmp(which, "s-holder") &&
		       strcmp(which, "queued") && strcmp(which, "mid-put") &&
		       strcmp(which, "frozen") && strcmp(which, "ticket")) ||
	    (!strcmp(which, "ticket") && (!ncosed || !fair))) {
		fprintf(stderr, "usage: %s --case x-holder|s-holder|queued|mid-put|frozen "
			"[--scheme srsl|ncosed] [--try] [--fair]\n"
			"       %s --case ticket --scheme ncosed --fair\n", argv[0], argv[0]);
		return 2;
	}
	if (!getenv("DDSS_SIZE") || atoi(getenv("DDSS_SIZE")) != (int)VICTIM ||
	    !getenv("DDSS_RANK")) {
		fprintf(stderr, "run under ddssrun with %u ranks\n", VICTIM);
		return 2;
	}
	me = (uint32_t)atoi(getenv("DDSS_RANK"));
	if (me == VICTIM) {
		pid_t pid;

		fflush(stdout);
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid > 0)
			return watch_victim(pid);
	}
	ddss_attr_init(&attr);
	attr.lock_scheme = ncosed ? DDSS_LOCK_NCOSED : DDSS_LOCK_SRSL;
	attr.lock_fair = fair;
	attr.peer_timeout_ms = PEER_TIMEOUT_MS;
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddss_init: %s\n", ddss_strerror(r));
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("lock_faults", NULL, NULL);
	CU_add_test(suite, "setup", setup);
	CU_add_test(suite, which, test_fault);
	failed = test_run_all();
	CU_cleanup_registry();
	/* Survivors leave without the collective finalize: one member is gone for good. */
	return failed ? 1 : 0;
}
