/*
 * A rank that goes silent without closing anything (frozen with SIGSTOP: its sockets and
 * QPs stay open, only heartbeats stop) is declared dead within the peer timeout, 3 ranks:
 *  1. rank 3 tells the others it freezes, then stops itself;
 *  2. ranks 1 and 2 see it DOWN between timeout - interval and timeout + interval (+ slack
 *     for scheduling), and print the time it took; it was the heartbeat (counted), not a
 *     closed connection, that said so;
 *  3. operations on it fail fast with an error; the survivors carry on between themselves;
 *     threads that were waiting on it when it froze (one reading replies, the others
 *     asleep behind it) see short waits time out, then all return with an error;
 *  4. rank 1 wakes rank 3 up: everything it tries now fails (it was refused for good, so a
 *     rank that was only frozen cannot come back to memory or locks the group moved on
 *     from), and it exits with its checks' result; rank 1 waits for that exit.
 * Option: --timeout-ms N (default 1000; the environment's DDSS_PEER_TIMEOUT_MS wins).
 */
#include "common/test_util.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POOL_LEN 65536
#define W_ALL 0
#define W_SURVIVORS 8
#define TAG_CTRL DDSS_MSG_USER_FIRST
#define NOTE_FREEZE 0x40000000u /* | pid */
#define WAIT_MS 20000
#define VICTIM 3u

enum ctrl { CTRL_SURVIVOR_DONE = 1, CTRL_VICTIM_GONE = 2 };

static struct ddss_net *net;
static struct ddss_tp *tp;
static uint32_t me;
static int timeout_ms = 1000;
static uint64_t *pool;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned freeze_seen;
static int64_t freeze_ns;
static pid_t victim_pid;

static bool is_error(int r)
{
	return r == -EHOSTDOWN || r == -ECONNRESET || r == -ECONNREFUSED;
}

static void on_notify(void *arg, uint32_t from, uint32_t value)
{
	(void)arg;
	if (from != VICTIM || !(value & NOTE_FREEZE))
		return;
	pthread_mutex_lock(&mu);
	freeze_ns = ddss_now_ns();
	victim_pid = (pid_t)(value & ~NOTE_FREEZE);
	freeze_seen = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Wait for the victim's "I freeze now". */
static bool freeze_wait(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&mu);
	while (!freeze_seen && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
		;
	pthread_mutex_unlock(&mu);
	return freeze_seen;
}

static void test_connect_all(void)
{
	/* Everyone talks to everyone, so heartbeats flow on every pair. */
	for (uint32_t r = 1; r <= ddss_net_size(net); r++)
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, r, W_ALL, 1, NULL), 0);
	test_barrier_or_exit(net, WAIT_MS);
	CU_ASSERT_EQUAL(pool[W_ALL / 8], ddss_net_size(net));
	test_barrier_or_exit(net, WAIT_MS);
}

/* Rank 3: freeze, and once woken check that the group has shut us out. */
static void victim(void)
{
	uint64_t v;
	int r;

	for (uint32_t p = 1; p < VICTIM; p++)
		CU_ASSERT_EQUAL(ddss_tp_notify(tp, p, NOTE_FREEZE | (uint32_t)getpid()), 0);
	raise(SIGSTOP);
	/* Woken by rank 1 long after the timeout. */
	for (uint32_t p = 1; p < VICTIM; p++) {
		r = ddss_tp_read(tp, p, W_ALL, &v, 8);
		if (!is_error(r))
			printf("[%u] read from rank %u after being declared dead: %d\n", me, p, r);
		CU_ASSERT(is_error(r));
		CU_ASSERT_EQUAL(ddss_net_wait_peer(net, p, DDSS_TP_PEER_DOWN, WAIT_MS), 0);
		r = ddss_tp_read(tp, p, W_ALL, &v, 8); /* a fresh connect: refused */
		CU_ASSERT(is_error(r));
	}
}

/*
 * Threads waiting on the frozen rank. Each reads it with a short wait until one wait times
 * out, then waits for that read again with no short bound. Over tcp the frozen rank's CPU
 * would have to answer, so once it froze short waits time out; several threads share the
 * channel, so one reads replies and the others sleep behind it, and short waits must time
 * out for both kinds. Over verbs its NIC answers reads of a frozen process (one-sided), so
 * they succeed until the rank is declared dead. Either way the failure must then reach
 * every thread.
 */
#define STUCK_THREADS 4
#define SHORT_WAIT_MS 100

struct stuck {
	pthread_t th;
	bool timed_out; /* a short wait returned -ETIMEDOUT */
	int r;          /* the read's final result */
};

static void *stuck_reader(void *p)
{
	struct stuck *s = p;
	int64_t end = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	struct ddss_tp_req req;
	uint64_t v;
	int r;

	for (;;) {
		r = ddss_tp_post_read(tp, VICTIM, W_ALL, &v, 8, &req);
		if (r) {
			s->r = r;
			return NULL;
		}
		r = ddss_tp_wait(tp, &req, SHORT_WAIT_MS);
		if (r == -ETIMEDOUT)
			break;
		if (r || req.status || ddss_now_ns() >= end) {
			s->r = r ? r : req.status ? req.status : -ETIME;
			return NULL;
		}
	}
	s->timed_out = true;
	r = ddss_tp_wait(tp, &req, WAIT_MS);
	s->r = r ? r : req.status;
	return NULL;
}

static void join_stuck_readers(struct stuck st[STUCK_THREADS])
{
	bool cpu_serves = !strcmp(tp->ops->name, "tcp");
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_MS / 1000;
	for (unsigned i = 0; i < STUCK_THREADS; i++) {
		int jr = pthread_timedjoin_np(st[i].th, NULL, &ts);

		CU_ASSERT_EQUAL_FATAL(jr, 0); /* a thread still asleep: the failure missed it */
		if ((cpu_serves && !st[i].timed_out) || !is_error(st[i].r))
			printf("[%u] reader %u waiting on the frozen rank: %s, then %d\n", me, i,
			       st[i].timed_out ? "timed out" : "never timed out", st[i].r);
		if (cpu_serves)
			CU_ASSERT(st[i].timed_out);
		CU_ASSERT(is_error(st[i].r));
	}
}

static void survivor(void)
{
	int64_t detect_ns, interval_ns = (int64_t)timeout_ms * 1000000 / 4, t0;
	struct stuck st[STUCK_THREADS] = { 0 };
	uint64_t v;
	int r;

	CU_ASSERT_FATAL(freeze_wait());
	for (unsigned i = 0; i < STUCK_THREADS; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&st[i].th, NULL, stuck_reader, &st[i]), 0);
	CU_ASSERT_EQUAL(ddss_net_wait_peer(net, VICTIM, DDSS_TP_PEER_DOWN, WAIT_MS), 0);
	detect_ns = ddss_now_ns() - freeze_ns;
	printf("[%u] frozen rank declared dead after %.0f ms (peer timeout %d ms, bound %d ms)\n",
	       me, detect_ns / 1e6, timeout_ms, timeout_ms + timeout_ms / 4);
	CU_ASSERT_EQUAL(ddss_net_peers_declared_dead(net), 1);
	CU_ASSERT(detect_ns >= (int64_t)timeout_ms * 1000000 - interval_ns);
	/* 1 s of slack for a loaded 2-core machine (sanitizer builds, the guest). */
	CU_ASSERT(detect_ns <= (int64_t)timeout_ms * 1000000 + interval_ns + 1000000000);
	join_stuck_readers(st);

	t0 = ddss_now_ns();
	r = ddss_tp_read(tp, VICTIM, W_ALL, &v, 8);
	CU_ASSERT(is_error(r));
	CU_ASSERT(ddss_now_ns() - t0 < 1000000000ll); /* fails fast, no operation timeout */

	/* The survivors carry on. */
	for (uint32_t p = 1; p < VICTIM; p++) {
		CU_ASSERT_EQUAL(ddss_tp_fadd(tp, p, W_SURVIVORS, 1, NULL), 0);
		CU_ASSERT_EQUAL(test_ctrl_send(p, CTRL_SURVIVOR_DONE), 0);
	}
	CU_ASSERT(test_ctrl_wait(CTRL_SURVIVOR_DONE, VICTIM - 1, WAIT_MS));
	CU_ASSERT_EQUAL(pool[W_SURVIVORS / 8], VICTIM - 1);
}

/* Rank 1: wake the victim and wait for it to finish its checks and exit. */
static void wake_victim(void)
{
	int pfd = (int)syscall(SYS_pidfd_open, victim_pid, 0);
	struct pollfd p = { .fd = pfd, .events = POLLIN };

	CU_ASSERT_FATAL(pfd >= 0);
	CU_ASSERT_EQUAL(kill(victim_pid, SIGCONT), 0);
	CU_ASSERT_EQUAL(poll(&p, 1, WAIT_MS), 1); /* readable when it has exited */
	close(pfd);
	CU_ASSERT_EQUAL(test_ctrl_send(2, CTRL_VICTIM_GONE), 0);
}

static void test_frozen_rank(void)
{
	if (me == VICTIM) {
		victim();
		return;
	}
	survivor();
	if (me == 1)
		wake_victim();
	else
		CU_ASSERT(test_ctrl_wait(CTRL_VICTIM_GONE, 1, WAIT_MS));
}

int main(int argc, char **argv)
{
	CU_pSuite suite;
	unsigned failed;
	int r;

	r = test_peer_timeout_args(argc, argv, VICTIM, &timeout_ms);
	if (r)
		return r;
	net = test_net_open_or_exit();
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	pool = test_alloc_pool(POOL_LEN);
	ddss_net_on_notify(net, on_notify, NULL);
	if (test_ctrl_register(net, TAG_CTRL) || ddss_net_start(net, pool, POOL_LEN)) {
		fprintf(stderr, "cannot start the transport\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("peer_timeout", NULL, NULL);
	CU_add_test(suite, "everyone connected", test_connect_all);
	CU_add_test(suite, "frozen rank declared dead within the bound", test_frozen_rank);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_net_close(net);
	free(pool);
	return failed ? 1 : 0;
}
