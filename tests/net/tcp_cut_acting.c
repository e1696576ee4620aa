/*
 * tcp: a cut (ddss_tp_peer_refuse) that says a rank is cut off (ddss_tp_peer_cut) means
 * nothing of it lands any more, even a request that had passed its check when the refusal
 * came (src/net/tcp/tcp_serve.c, act_announce and tcp_serve_cut). Readmitting a rank as a
 * new process, and a home vouching for a dead writer, both rest on that.
 *
 * Four in-process tcp transports on loopback: rank 1 (the home), ranks 2 to 4. Each case:
 *  1. the rank posts a fetch&add of 1 (a write of 1, rank 4) to its word of the home's pool;
 *  2. the home's progress thread checks that the rank may act and, right before the atomic
 *     runs (the bytes are placed), stops in a test hook (tcp_serve_act_hook) until the test
 *     lets it go;
 *  3. another thread of the home refuses the rank, and notes whether it is cut off and
 *     the word once the refusal returned; the test waits for that at most CUT_EARLY_MS;
 *  4. the hook lets the progress thread go: the act runs, as it passed its check.
 * Rank 2, within the bound: the refusal did not return while the fetch&add was still to
 * run, and it ended with the rank cut off, the word then as it is at the end (1). Rank 3,
 * the act held past the cut's bound (1 s): the refusal gives up and says the rank is
 * refused but not cut off; a second refusal once the act is over cuts it off. Rank 4: as
 * rank 2, with a write. Before the cut waited for the act (2026-12-07), the refusal
 * returned at once with the rank cut off and the word still 0, and the act landed after.
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
#define CUT_EARLY_MS 200 /* how long the test gives a wrong cut to return (the right one
			  * waits 1 s at most: the rest is the margin for the act to end) */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
/* The case under way (under mu): the rank whose atomic stops, and what was seen. */
static uint32_t stop_rank;
static bool in_act, let_go, cut_done, cut_ok;
static uint64_t word_at_cut;
static struct tp_proc home, peer[3];

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

static bool wait_flag(const bool *flag, int ms)
{
	bool set;

	pthread_mutex_lock(&mu);
	set = wait_flag_locked(flag, ms);
	pthread_mutex_unlock(&mu);
	return set;
}

static void set_flag(bool *flag)
{
	pthread_mutex_lock(&mu);
	*flag = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* The home's progress thread, an atomic checked and about to run: stop the case's one. */
static void act_hook(struct tcp_tp *t, uint32_t rank)
{
	(void)t;
	pthread_mutex_lock(&mu);
	if (rank == stop_rank) {
		stop_rank = 0;
		in_act = true;
		pthread_cond_broadcast(&cv);
		wait_flag_locked(&let_go, WAIT_MS);
	}
	pthread_mutex_unlock(&mu);
}

static uint64_t word(uint32_t rank)
{
	return __atomic_load_n(&home.pool[rank], __ATOMIC_SEQ_CST);
}

/* Refuse @arg's rank at the home; note whether it is cut off, and its word, after. */
static void *refuse(void *arg)
{
	uint32_t rank = (uint32_t)(uintptr_t)arg;
	bool cut;
	uint64_t w;

	ddss_tp_peer_refuse(home.tp, rank);
	cut = ddss_tp_peer_cut(home.tp, rank);
	w = word(rank);
	pthread_mutex_lock(&mu);
	cut_ok = cut;
	word_at_cut = w;
	pthread_mutex_unlock(&mu);
	set_flag(&cut_done);
	return NULL;
}

/*
 * Rank @rank's fetch&add of 1 on word @rank of the home's pool, stopped between its check
 * and its run, and the rank refused meanwhile from another thread. @past_bound: the act
 * lasts longer than a cut waits (TCP_CUT_ACT_WAIT_NS); the refusal must then say "not
 * cut", and a second one, once the act is over, "cut".
 */
static void run_case(uint32_t rank, bool write, bool past_bound)
{
	static const uint64_t one = 1;
	const char *what = write ? "write" : "fetch&add";
	struct tp_proc *p = &peer[rank - 2];
	struct ddss_tp_req req;
	bool early, ended = false, cut_during = false, cut_again = false;
	uint64_t final = 0;
	pthread_t th;
	int r;

	pthread_mutex_lock(&mu);
	stop_rank = rank;
	in_act = let_go = cut_done = cut_ok = false;
	pthread_mutex_unlock(&mu);
	r = write ? ddss_tp_post_write(p->tp, 1, 8 * rank, &one, 8, &req) :
		    ddss_tp_post_fadd(p->tp, 1, 8 * rank, 1, &req);
	TEST_CHECK(rank, r == 0, "posting the %s: %d (%s)", what, r, ddss_strerror(r));
	if (r || !wait_flag(&in_act, WAIT_MS)) {
		TEST_CHECK(1, false, "the progress thread never reached rank %u's %s", rank, what);
		exit(1);
	}
	if (pthread_create(&th, NULL, refuse, (void *)(uintptr_t)rank)) {
		printf("rank 1: FAIL cannot start a thread\n");
		exit(1);
	}
	early = wait_flag(&cut_done, CUT_EARLY_MS);
	if (past_bound) { /* the cut gives up after TCP_CUT_ACT_WAIT_NS */
		ended = wait_flag(&cut_done, WAIT_MS);
		pthread_mutex_lock(&mu);
		cut_during = cut_ok;
		pthread_mutex_unlock(&mu);
	}
	set_flag(&let_go);
	pthread_join(th, NULL);
	for (int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;
	     !(final = word(rank)) && ddss_now_ns() < give_up;)
		usleep(1000);
	r = ddss_tp_wait(p->tp, &req, WAIT_MS);
	if (past_bound) {
		ddss_tp_peer_refuse(home.tp, rank);
		cut_again = ddss_tp_peer_cut(home.tp, rank);
	}
	printf("rank 1, a %s %s: refusal returned %s the act; cut off: %s; word at the cut "
	       "%llu, at the end %llu\n", what, past_bound ? "past the bound" : "within it",
	       early ? "before" : "after", cut_ok ? "yes" : "no",
	       (unsigned long long)word_at_cut, (unsigned long long)final);
	printf("rank %u: its %s: %d (status %d, %s)\n", rank, what, r, req.status,
	       ddss_strerror(req.status));
	TEST_CHECK(1, !early, "the refusal returned while a %s of the rank, past its check, "
		   "was still to run", what);
	TEST_CHECK(1, final == 1, "the %s that passed its check did not land (%llu)", what,
		   (unsigned long long)final);
	if (!past_bound) {
		TEST_CHECK(1, cut_ok, "rank %u not cut off once its act was over", rank);
		TEST_CHECK(1, !cut_ok || word_at_cut == final,
			   "the %s landed after the cut said nothing of rank %u would "
			   "(%llu, then %llu)", what, rank, (unsigned long long)word_at_cut,
			   (unsigned long long)final);
	} else {
		TEST_CHECK(1, ended, "the refusal did not give up while the act lasted");
		TEST_CHECK(1, !cut_during, "rank %u said cut off while its act still ran", rank);
		TEST_CHECK(1, word_at_cut == 0, "rank %u's %s ran before it was let go "
			   "(%llu)", rank, what, (unsigned long long)word_at_cut);
		TEST_CHECK(1, ddss_tp_peer_refused(home.tp, rank), "rank %u not refused", rank);
		TEST_CHECK(1, cut_again, "rank %u not cut off by a refusal after its act", rank);
	}
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 4, .group = 0xac7, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 3000,
	};

	tp_proc_open(p, &cfg);
}

int main(void)
{
	struct ddss_tp_node nodes[4] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 },
					 { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	int lfd[4];

	tp_pair_listen(nodes, lfd, 4);
	open_proc(&home, 1, nodes, lfd[0]);
	for (uint32_t i = 0; i < 3; i++)
		open_proc(&peer[i], i + 2, nodes, lfd[i + 1]);
	tcp_serve_act_hook = act_hook;
	run_case(2, false, false);
	run_case(3, false, true);
	run_case(4, true, false);
	tcp_serve_act_hook = NULL;
	for (int i = 2; i >= 0; i--)
		tp_proc_close(&peer[i]);
	tp_proc_close(&home);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
