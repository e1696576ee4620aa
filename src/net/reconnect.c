/*
 * Connecting again to a peer that reads down but is alive.
 *
 * "Down" is about one connection: ours to the peer failed (an operation to it timed out,
 * a send failed). The peer may be alive and well: its own connection to us is still open
 * (a process that dies closes both) and we heard its heartbeats within the peer timeout
 * (one cut off goes silent). Such a peer is still judged by its silence on its side,
 * where we are up, and we send it heartbeats only over our own connection. Left down, we
 * would fall silent to it and it would declare us dead after its timeout, idle as we may
 * be (docs/failure.md, "Down after an operation timeout is not dead").
 *
 * So the heartbeat thread asks, once a round, for every peer that reads down but alive,
 * and this thread connects to it. A connect may block for seconds (the tcp handshake of a
 * peer that froze just now: 5 s), which the heartbeat thread must never do: it would miss
 * its rounds, and judge nobody meanwhile.
 */
#include "core/log.h"
#include "net/net_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Down for longer than the peer timeout, alive all the same: our connects to it keep
 * failing while it reaches us (a one-way partition). Taken for gone then, or a survey
 * that waits to ask it (lock_recover.c) would wait as long as the partition lasts.
 */
static bool down_too_long(struct ddss_net *net, uint32_t rank)
{
	int64_t bound = (int64_t)net->env.peer_timeout_ms * 1000000;

	return net->env.peer_timeout_ms > 0 &&
	       ddss_now_ns() - __atomic_load_n(&net->down_since[rank], __ATOMIC_RELAXED) > bound;
}

bool ddss_net_down_but_alive(struct ddss_net *net, uint32_t rank)
{
	struct ddss_tp_peer_info info;

	if (rank < 1 || rank > net->env.size || rank == net->env.rank ||
	    ddss_tp_peer_refused(net->tp, rank) || ddss_tp_peer_info(net->tp, rank, &info) ||
	    info.state != DDSS_TP_PEER_DOWN)
		return false;
	return info.served && ddss_net_heard_lately(net, rank) && !down_too_long(net, rank);
}

void ddss_net_reconnect_ask(struct ddss_net *net, uint32_t rank)
{
	pthread_mutex_lock(&net->reconnect_mu);
	if (!net->reconnect_want[rank]) {
		net->reconnect_want[rank] = 1;
		pthread_cond_signal(&net->reconnect_cv);
	}
	pthread_mutex_unlock(&net->reconnect_mu);
}

/* reconnect_mu held: a rank asked for (cleared), or 0. */
static uint32_t next_wanted_locked(struct ddss_net *net)
{
	for (uint32_t r = 1; r <= net->env.size; r++) {
		if (net->reconnect_want[r]) {
			net->reconnect_want[r] = 0;
			return r;
		}
	}
	return 0;
}

static void *reconnect_main(void *arg)
{
	struct ddss_net *net = arg;

	ddss_log_set_rank(net->env.rank);
	pthread_mutex_lock(&net->reconnect_mu);
	while (!net->reconnect_stop) {
		uint32_t r = next_wanted_locked(net);
		int err;

		if (!r) {
			pthread_cond_wait(&net->reconnect_cv, &net->reconnect_mu);
			continue;
		}
		pthread_mutex_unlock(&net->reconnect_mu);
		/* Asked a round ago: something else may have connected meanwhile. */
		if (ddss_net_down_but_alive(net, r)) {
			err = ddss_tp_peer_connect(net->tp, r);
			DDSS_INFO("rank %u read down but alive (its connection to us is open, and "
				  "it was heard lately): connected again: %s",
				  r, err ? strerror(-err) : "done");
		}
		pthread_mutex_lock(&net->reconnect_mu);
	}
	pthread_mutex_unlock(&net->reconnect_mu);
	return NULL;
}

int ddss_net_reconnect_init(struct ddss_net *net)
{
	net->reconnect_want = calloc(net->env.size + 1, sizeof(*net->reconnect_want));
	net->down_since = calloc(net->env.size + 1, sizeof(*net->down_since));
	if (!net->reconnect_want || !net->down_since) {
		free(net->reconnect_want);
		free(net->down_since);
		net->reconnect_want = NULL;
		net->down_since = NULL;
		return -ENOMEM;
	}
	pthread_mutex_init(&net->reconnect_mu, NULL);
	pthread_cond_init(&net->reconnect_cv, NULL);
	return 0;
}

int ddss_net_reconnect_start(struct ddss_net *net)
{
	int r = pthread_create(&net->reconnect_thread, NULL, reconnect_main, net);

	if (r) {
		DDSS_ERR("cannot start the reconnect thread: %s", strerror(r));
		return -r;
	}
	net->reconnect_running = true;
	return 0;
}

void ddss_net_reconnect_stop(struct ddss_net *net)
{
	if (!net->reconnect_running)
		return;
	pthread_mutex_lock(&net->reconnect_mu);
	net->reconnect_stop = true;
	pthread_cond_signal(&net->reconnect_cv);
	pthread_mutex_unlock(&net->reconnect_mu);
	pthread_join(net->reconnect_thread, NULL);
	net->reconnect_running = false;
}

void ddss_net_reconnect_fini(struct ddss_net *net)
{
	if (!net->reconnect_want)
		return;
	free(net->reconnect_want);
	net->reconnect_want = NULL;
	free(net->down_since);
	net->down_since = NULL;
	pthread_mutex_destroy(&net->reconnect_mu);
	pthread_cond_destroy(&net->reconnect_cv);
}
