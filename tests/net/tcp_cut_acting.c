/*
 * tcp: a cut (ddss_tp_peer_refuse) that says a rank is cut off (ddss_tp_peer_cut) means
 * nothing of it lands any more, even a request that had passed its check when the refusal
 * came (src/net/tcp/tcp_serve.c, act_announce and tcp_serve_cut). Readmitting a rank as a
 * new process, and a home vouching for a dead writer, both rest on that.
 *
 * Two in-process tcp transports on loopback: rank 1 (A, the home) and rank 2 (B). Steps:
 *  1. B posts a fetch&add of 1 to word 1 of A's pool;
 *  2. A's progress thread checks that rank 2 may act and, right before the atomic runs,
 *     stops in a test hook (tcp_serve_act_hook) until the test lets it go;
 *  3. another thread of A refuses rank 2, and notes whether it is cut off and word 1
 *     once the refusal returned; the test waits for that at most CUT_EARLY_MS;
 *  4. the hook lets the progress thread go: the fetch&add runs, as it passed its check.
 * Checked: the refusal did not return while the fetch&add was still to run, and it did end
 * with rank 2 cut off, word 1 then as it is at the end (1). Before the cut waited for the
 * act (2026-12-07), the refusal returned at once with rank 2 cut off and word 1 still 0,
 * and the fetch&add landed after.
 */
#include "common/test_util.h"
#include "common/tp_pair.h"
#include "net/tcp/tcp.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 10000
#define CUT_EARLY_MS 500 /* how long the test gives a wrong cut to return */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool armed = true, in_act, let_go, cut_done, cut_ok;
static uint64_t word_at_cut;
static struct tp_proc a, b;

static void deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* Wait (mu held) until @flag is set or @ms passed: whether it is set. */
static bool wait_flag_locked(const bool *flag, int ms)
{
	struct timespec until;

	deadline_in(&until, ms);
	while (!*flag)
		if (pthread_cond_timedwait(&cv, &mu, &until))
			break;
	return *flag;
}

static void set_flag(bool *flag)
{
	pthread_mutex_lock(&mu);
	*flag = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* A's progress thread, rank 2's atomic checked and about to run: the first time, stop. */
static void act_hook(struct tcp_tp *t, uint32_t rank)
{
	(void)t;
	pthread_mutex_lock(&mu);
	if (armed && rank == 2) {
		armed = false;
		in_act = true;
		pthread_cond_broadcast(&cv);
		wait_flag_locked(&let_go, WAIT_MS);
	}
	pthread_mutex_unlock(&mu);
}

static void *refuse_2(void *arg)
{
	bool cut;
	uint64_t w;

	(void)arg;
	ddss_tp_peer_refuse(a.tp, 2);
	cut = ddss_tp_peer_cut(a.tp, 2);
	w = __atomic_load_n(&a.pool[1], __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&mu);
	cut_ok = cut;
	word_at_cut = w;
	pthread_mutex_unlock(&mu);
	set_flag(&cut_done);
	return NULL;
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0xac7, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 3000,
	};

	tp_proc_open(p, &cfg);
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_tp_req fadd_req;
	bool stopped, early;
	uint64_t final = 0;
	pthread_t th;
	int lfd[2], r;

	tp_pair_listen(nodes, lfd, 2);
	open_proc(&a, 1, nodes, lfd[0]);
	open_proc(&b, 2, nodes, lfd[1]);
	tcp_serve_act_hook = act_hook;

	/* 1, 2: the fetch&add, stopped between its check and its run. */
	r = ddss_tp_post_fadd(b.tp, 1, 8, 1, &fadd_req);
	TEST_CHECK(2, r == 0, "posting the fetch&add: %d (%s)", r, ddss_strerror(r));
	pthread_mutex_lock(&mu);
	stopped = !r && wait_flag_locked(&in_act, WAIT_MS);
	pthread_mutex_unlock(&mu);
	TEST_CHECK(1, stopped, "A's progress thread never reached rank 2's fetch&add");
	if (!stopped)
		return 1;

	/* 3: the refusal, from another thread; a correct one waits for the act. */
	if (pthread_create(&th, NULL, refuse_2, NULL)) {
		printf("rank 1: FAIL cannot start a thread\n");
		return 1;
	}
	pthread_mutex_lock(&mu);
	early = wait_flag_locked(&cut_done, CUT_EARLY_MS);
	pthread_mutex_unlock(&mu);

	/* 4: the act runs; the refusal ends. */
	set_flag(&let_go);
	pthread_join(th, NULL);
	for (int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	     !(final = __atomic_load_n(&a.pool[1], __ATOMIC_SEQ_CST)) && ddss_now_ns() < give_up;)
		usleep(1000);
	r = ddss_tp_wait(b.tp, &fadd_req, WAIT_MS);
	printf("rank 1: refusal returned %s the act; cut off: %s; word 1 at the cut %llu, at "
	       "the end %llu\n", early ? "before" : "after", cut_ok ? "yes" : "no",
	       (unsigned long long)word_at_cut, (unsigned long long)final);
	printf("rank 2: its fetch&add: %d (status %d, %s)\n", r, fadd_req.status,
	       ddss_strerror(fadd_req.status));
	TEST_CHECK(1, !early, "the refusal returned while a fetch&add of the rank, past its "
		   "check, was still to run");
	TEST_CHECK(1, cut_ok, "rank 2 not cut off once its act was over");
	TEST_CHECK(1, final == 1, "the fetch&add that passed its check did not run (%llu)",
		   (unsigned long long)final);
	TEST_CHECK(1, !cut_ok || word_at_cut == final,
		   "the fetch&add landed after the cut said nothing of rank 2 would (%llu, then "
		   "%llu)", (unsigned long long)word_at_cut, (unsigned long long)final);

	tcp_serve_act_hook = NULL;
	tp_proc_close(&b);
	tp_proc_close(&a);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
