/*
 * A static group's cut that did not hold is tried again (src/net/heartbeat.c,
 * refuse_pending): rank 1 declares a silent rank 2 dead while a fetch&add of rank 2's is
 * between its check and its run at rank 1 (tcp_serve_act_hook holds it there), so the cut
 * gives up after its bound (refused, not cut: tcp_serve_cut). Once the fetch&add has run,
 * the heartbeat must cut rank 2 off by itself: until then rank 1 cannot vouch that rank
 * 2's writes are over (lock/lock_gone.c answers -EIO). Before 2026-12-07 nothing tried
 * again, and rank 2 stayed refused and not cut for good.
 *
 * One process: rank 1 is a whole net (heartbeat included) over tcp, rank 2 a bare tcp
 * transport that never sends a heartbeat, so rank 1 finds it silent.
 */
#include "common/test_util.h"
#include "common/tp_pair.h"
#include "net/net.h"
#include "net/nodes.h"
#include "net/tcp/tcp.h"
#include "net/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 10000
#define GROUP 0x5e7

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool armed = true, in_act, let_go;

/* Wait (mu held) until @flag is set or @ms passed: whether it is set. */
static bool wait_flag_locked(const bool *flag, int ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	while (!*flag)
		if (pthread_cond_timedwait(&cv, &mu, &until))
			break;
	return *flag;
}

/* Rank 1's progress thread, rank 2's atomic checked: the first time, stop until let go. */
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

/* A bounded poll of rank 1's door for rank 2 (the heartbeat thread moves it). */
static bool wait_door(struct ddss_tp *tp, bool (*state)(const struct ddss_tp *, uint32_t))
{
	for (double t0 = test_now_ms(); !state(tp, 2) && test_now_ms() - t0 < WAIT_MS;)
		usleep(1000);
	return state(tp, 2);
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_net_env env = {
		.rank = 1, .size = 2, .nodes = nodes, .group = GROUP,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 1000, .peer_timeout_ms = 1000,
	};
	struct ddss_tp_config cfg2 = {
		.rank = 2, .size = 2, .group = GROUP, .nodes = nodes,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 1000,
	};
	void *pool = test_alloc_pool(TP_PAIR_POOL_LEN);
	struct ddss_tp_req req;
	struct ddss_net *net;
	struct tp_proc two;
	bool stopped, failed, cut;
	uint64_t word;
	int lfd[2], r;

	tp_pair_listen(nodes, lfd, 2);
	strcpy(env.transport, "tcp");
	env.listen_fd = lfd[0];
	cfg2.listen_fd = lfd[1];
	if (ddss_net_open(&env, &net) || ddss_net_start(net, pool, TP_PAIR_POOL_LEN)) {
		printf("FAIL: cannot start rank 1's net\n");
		return 1;
	}
	tcp_serve_act_hook = act_hook;
	tp_proc_open(&two, &cfg2);

	r = ddss_tp_post_fadd(two.tp, 1, 8, 1, &req);
	TEST_CHECK(2, r == 0, "posting the fetch&add: %d (%s)", r, ddss_strerror(r));
	pthread_mutex_lock(&mu);
	stopped = !r && wait_flag_locked(&in_act, WAIT_MS);
	pthread_mutex_unlock(&mu);
	TEST_CHECK(1, stopped, "rank 1's progress thread never reached rank 2's fetch&add");
	if (!stopped)
		return 1;
	/* Silent, rank 2 is declared dead; its cut waits for the act, then gives up. */
	failed = wait_door(ddss_net_tp(net), ddss_tp_peer_cut_failed);
	pthread_mutex_lock(&mu);
	let_go = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	cut = wait_door(ddss_net_tp(net), ddss_tp_peer_cut);
	for (double t0 = test_now_ms();
	     !(word = __atomic_load_n((uint64_t *)pool + 1, __ATOMIC_SEQ_CST)) &&
	     test_now_ms() - t0 < WAIT_MS;)
		usleep(1000);
	ddss_tp_wait(two.tp, &req, WAIT_MS);
	printf("rank 1: rank 2's cut %s while its act ran; after: %s; word 1 = %llu\n",
	       failed ? "did not hold" : "held", cut ? "cut off" : "not cut off",
	       (unsigned long long)word);
	TEST_CHECK(1, failed, "rank 2's cut did not give up while its act ran");
	TEST_CHECK(1, cut, "rank 2 was never cut off after its act was over");
	TEST_CHECK(1, word == 1, "the fetch&add that passed its check did not run (%llu)",
		   (unsigned long long)word);

	tcp_serve_act_hook = NULL;
	tp_proc_close(&two);
	ddss_net_close(net);
	free(pool);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
