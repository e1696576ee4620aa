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
 * peer that froze just now: the operation timeout, up to 5 s), which the heartbeat thread
 * must never do: it would miss its rounds, and judge nobody meanwhile. This thread's
 * connects are bounded by a heartbeat interval (ddss_tp_set_thread_connect_bound; on verbs
 * too since 2026-12-07):
 * a peer that reads down but alive answers at once, and one that does not is asked again
 * next round. (On tcp a refusal of the same peer waits for the connect's lock, but at most
 * 100 ms: the connect and the handshake look at the refusal. On verbs a broken QP's
 * teardown holds that lock up to its drain bound.)
 */
#include "core/log.h"
#include "net/net_internal.h"
#include "net/thread_files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ddss_net_reconnect_peer_changed(struct ddss_net *net, uint32_t rank,
				     enum ddss_tp_peer_state state)
{
	if (!net->down_since)
		return;
	if (state == DDSS_TP_PEER_DOWN)
		__atomic_store_n(&net->down_since[rank], ddss_now_ns(), __ATOMIC_RELAXED);
	else if (state == DDSS_TP_PEER_UP)
		__atomic_store_n(&net->up_since[rank], ddss_now_ns(), __ATOMIC_RELAXED);
}

/* How long a rank may read down but alive: the peer timeout, or without one the operation
 * timeout (0: no bound, as silence then is never judged either). */
static int64_t alive_bound_ns(const struct ddss_net *net)
{
	int ms = net->env.peer_timeout_ms > 0 ? net->env.peer_timeout_ms : net->env.op_timeout_ms;

	return ms > 0 ? (int64_t)ms * 1000000 : 0;
}

/*
 * Down for longer than the bound above, alive all the same: our connects to it keep
 * failing while it reaches us (a one-way partition). Taken for gone then, or a survey
 * that waits to ask it (lock_recover.c) would wait as long as the partition lasts.
 */
static bool down_too_long(struct ddss_net *net, uint32_t rank)
{
	int64_t bound = alive_bound_ns(net);
	int64_t down = __atomic_load_n(&net->down_since[rank], __ATOMIC_RELAXED);

	/* The transport says down before it tells us (on_peer): until then the last down we
	 * heard of is older than the last up, and this down is fresh. */
	if (!bound || down <= __atomic_load_n(&net->up_since[rank], __ATOMIC_RELAXED))
		return false;
	return ddss_now_ns() - down > bound;
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
	int bound_ms = net->env.peer_timeout_ms / 4;

	ddss_log_set_rank(net->env.rank);
	/* While this thread holds a peer's connection lock, a refusal of that peer on the
	 * heartbeat thread waits for it: no longer than a heartbeat interval. */
	ddss_tp_set_thread_connect_bound(bound_ms > 100 ? bound_ms : 100);
	ddss_tp_thread_files(net->tp); /* as the heartbeat thread (net/thread_files.h) */
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
	net->up_since = calloc(net->env.size + 1, sizeof(*net->up_since));
	if (!net->reconnect_want || !net->down_since || !net->up_since) {
		free(net->reconnect_want);
		free(net->down_since);
		free(net->up_since);
		net->reconnect_want = NULL;
		net->down_since = NULL;
		net->up_since = NULL;
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
	free(net->up_since);
	net->up_since = NULL;
	pthread_mutex_destroy(&net->reconnect_mu);
	pthread_cond_destroy(&net->reconnect_cv);
}
