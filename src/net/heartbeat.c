/*
 * Peer liveness. A killed rank is noticed at once (its sockets or QPs close), but a rank
 * that is frozen, or cut off by the network, keeps its connections open and just goes
 * quiet; a lock it holds would then stay held forever. So every rank sends each peer it is
 * connected to a small message every interval, and declares dead a peer it has not heard
 * from for the peer timeout (DDSS_PEER_TIMEOUT_MS): the transport refuses it for good
 * (ddss_tp_peer_refuse), so its outstanding and later operations fail with -EHOSTDOWN /
 * -ECONNRESET and, should it wake up, it cannot act on memory or locks the survivors have
 * moved on from.
 *
 * Bound: a silent peer is declared dead between timeout and timeout + interval after its
 * last heartbeat (interval = timeout / 4). Only heartbeats count as signs of life, so the
 * hot paths never read the clock for this. They go unordered (ddss_tp_msg_send_unordered):
 * verbs sends them on a lane that our own bulk transfers to the peer cannot hold up.
 */
#include "net/coordinator.h"
#include "net/net_internal.h"
#include "core/log.h"
#include "net/thread_files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void on_heartbeat(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_net *net = arg;

	(void)buf;
	(void)len;
	__atomic_store_n(&net->last_heard[from], ddss_now_ns(), __ATOMIC_RELAXED);
}

bool ddss_net_heard_lately(struct ddss_net *net, uint32_t rank)
{
	int64_t bound = (int64_t)net->env.peer_timeout_ms * 1000000;

	if (net->env.peer_timeout_ms <= 0 || !net->last_heard || rank > net->env.size)
		return true;
	return ddss_now_ns() - __atomic_load_n(&net->last_heard[rank], __ATOMIC_RELAXED) <= bound;
}

void ddss_net_heartbeat_peer_up(struct ddss_net *net, uint32_t rank)
{
	if (net->last_heard)
		__atomic_store_n(&net->last_heard[rank], ddss_now_ns(), __ATOMIC_RELAXED);
}

/* Without a peer timeout the thread only carries out ddss_net_declare_dead. */
static int interval_ms(const struct ddss_net *net)
{
	int ms = net->env.peer_timeout_ms / 4;

	if (net->env.peer_timeout_ms <= 0)
		return 3600 * 1000;
	return ms < 1 ? 1 : ms;
}

/*
 * Each transport delivers messages on one thread, and a handler may hold it up: a reply
 * to a rank whose connection is still being made waits for it (a lost connect request
 * costs rdma_cm seconds). Meanwhile nothing is heard from anyone, and that silence must
 * not count against the peers. Returns whether this call marked the dispatch.
 */
bool ddss_net_dispatch_begin(struct ddss_net *net)
{
	int64_t none = 0;

	/* A transport delivering to itself inline, on another thread: the first mark stays. */
	return __atomic_compare_exchange_n(&net->dispatch_since, &none, ddss_now_ns(), false,
					   __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void ddss_net_dispatch_end(struct ddss_net *net, bool marked)
{
	int64_t since, now;

	if (!marked)
		return;
	since = __atomic_load_n(&net->dispatch_since, __ATOMIC_RELAXED);
	now = ddss_now_ns();
	/* A hold the heartbeat thread may have judged by: what queued up drains now. */
	if (now - since > (int64_t)interval_ms(net) * 1000000)
		__atomic_store_n(&net->held_up_ended, now, __ATOMIC_RELEASE);
	__atomic_store_n(&net->dispatch_since, 0, __ATOMIC_RELEASE);
}

/*
 * True while the receive path has been held up for more than a heartbeat interval, and
 * for one interval after such a hold ended (time for the queued messages to be read):
 * no silence is judged then. A peer that really died is declared so once we listen again.
 */
static bool held_up(struct ddss_net *net, int64_t now, int64_t *since_p)
{
	int64_t bound = (int64_t)interval_ms(net) * 1000000;
	int64_t since = __atomic_load_n(&net->dispatch_since, __ATOMIC_ACQUIRE);
	int64_t ended = __atomic_load_n(&net->held_up_ended, __ATOMIC_ACQUIRE);

	*since_p = since;
	return (since && now - since > bound) || (ended && now - ended < bound);
}

/* Heartbeat thread: the refusal ddss_net_declare_dead asked for @r, if any (it may block:
 * never on the declarer's thread). */
void ddss_net_refuse_if_pending(struct ddss_net *net, uint32_t r)
{
	/* Pending until the refusal is done: a rank marked refused and not pending is one
	 * whose cut is over, or failed (ddss_net_refusal_pending). A declaration meanwhile
	 * is of the rank being refused here (readmissions run on this thread too). */
	if (__atomic_load_n(&net->dead_pending[r], __ATOMIC_ACQUIRE)) {
		ddss_tp_peer_refuse(net->tp, r);
		__atomic_store_n(&net->dead_pending[r], 0, __ATOMIC_SEQ_CST);
	}
}

bool ddss_net_refusal_pending(struct ddss_net *net, uint32_t rank)
{
	return rank >= 1 && rank <= net->env.size && net->dead_pending &&
	       __atomic_load_n(&net->dead_pending[rank], __ATOMIC_SEQ_CST);
}

/*
 * The refusals declared since the last round; and the cuts that did not hold, again: until
 * a rank is cut off, a home cannot vouch that its writes are over (lock/lock_gone.c), and a
 * static group has nothing else that would try again (coordinator mode's readmission does).
 */
static void refuse_pending(struct ddss_net *net)
{
	for (uint32_t r = 1; r <= net->env.size; r++) {
		if (ddss_net_refusal_pending(net, r))
			ddss_net_refuse_if_pending(net, r);
		else if (ddss_tp_peer_cut_failed(net->tp, r))
			ddss_tp_peer_refuse(net->tp, r);
	}
}

/* The longest a heartbeat post may wait behind other posts to its peer. */
#define HEARTBEAT_POST_BOUND_MS 200

/* @r is another rank, and up. */
static bool other_up(struct ddss_net *net, uint32_t r)
{
	bool up;

	if (r == net->env.rank)
		return false;
	pthread_mutex_lock(&net->mu);
	up = net->peer_state[r] == DDSS_TP_PEER_UP;
	pthread_mutex_unlock(&net->mu);
	return up;
}

/* One round: declare the silent dead, send everyone else a heartbeat. */
static void heartbeat_round(struct ddss_net *net, uint64_t seq)
{
	int64_t bound = (int64_t)net->env.peer_timeout_ms * 1000000;

	int64_t since, now = ddss_now_ns(), gap = now - net->last_round_ns;
	unsigned others = 0, heard_from = 0;
	bool deaf, paused;

	refuse_pending(net);
	ddss_net_readmit_pending(net); /* after the refusals: the old incarnation is cut first */
	if (net->env.coord)
		ddss_coord_tick(net->env.coord, net);
	if (net->env.peer_timeout_ms <= 0)
		return;
	/*
	 * This thread did not run for two intervals: the process was paused (SIGSTOP, a VM
	 * stall) or starved. What it finds silent now went silent to a rank that was not
	 * there: judge nobody this round. A thawed rank would otherwise accuse everyone.
	 */
	paused = net->last_round_ns && gap > 2 * (int64_t)interval_ms(net) * 1000000;
	net->last_round_ns = now;
	if (paused)
		DDSS_INFO("the heartbeat thread did not run for %lld ms (the process was paused or "
			  "starved): peers' silence is not judged this round",
			  (long long)(gap / 1000000));
	deaf = held_up(net, now, &since) || paused;
	/* How many of the others we hear: a report needs us on the side that hears most. */
	for (uint32_t r = 1; r <= net->env.size; r++) {
		if (!other_up(net, r))
			continue;
		others++;
		heard_from += now - __atomic_load_n(&net->last_heard[r], __ATOMIC_RELAXED) <= bound;
	}
	if (deaf && since && net->warned_held_up != since) {
		net->warned_held_up = since;
		DDSS_WARN("this rank's receive path has been held up in a message handler for "
			  "%lld ms: peers' silence is not judged until it is back",
			  (long long)((ddss_now_ns() - since) / 1000000));
	}
	for (uint32_t r = 1; r <= net->env.size; r++) {
		int64_t silent, heard;

		if (!other_up(net, r)) {
			/* Our connection to it failed, and it is alive: it judges our silence
			 * all the same (net/reconnect.c). */
			if (r != net->env.rank && ddss_net_down_but_alive(net, r))
				ddss_net_reconnect_ask(net, r);
			continue;
		}
		heard = __atomic_load_n(&net->last_heard[r], __ATOMIC_RELAXED);
		silent = deaf ? 0 : ddss_now_ns() - heard;
		if (silent > bound && __atomic_load_n(&net->leaving, __ATOMIC_ACQUIRE)) {
			/* Past the final barrier, where a lost disconnect (a lossy fabric) leaves
			 * the coordinator waiting: the rank has left; there is nothing to recover. */
			DDSS_INFO("rank %u silent for %lld ms after the final barrier: gone", r,
				  (long long)(silent / 1000000));
			ddss_tp_peer_refuse(net->tp, r);
			continue;
		}
		if (silent > bound / 2 && silent <= bound &&
		    net->warned_heard[r] != heard) {
			/* Once per silence, at half the timeout: the time to look at the link
			 * (tests/net/fabric_fault.sh snapshots the QPs when it sees this). */
			net->warned_heard[r] = heard;
			DDSS_WARN("rank %u silent for %lld ms (half the peer timeout %d ms)", r,
				  (long long)(silent / 1000000), net->env.peer_timeout_ms);
		}
		if (silent > bound && net->env.coord) {
			/*
			 * Coordinator mode: death is the view's to decide, for everyone at once
			 * (net/coordinator.c), and only once the rank has stopped acting. Report
			 * it; but only if we hear at least half of the others: a rank that hears
			 * nobody is more likely the one cut off, and its lease settles it.
			 */
			if (2 * heard_from >= others)
				ddss_coord_report(net->env.coord, r, silent / 1000000);
			else
				ddss_coord_unreported(net->env.coord, r, heard_from, others);
			continue;
		}
		if (silent > bound) {
			DDSS_WARN("rank %u silent for %lld ms (peer timeout %d ms): declared dead", r,
				  (long long)(silent / 1000000), net->env.peer_timeout_ms);
			__atomic_add_fetch(&net->peers_declared_dead, 1, __ATOMIC_RELAXED);
			ddss_tp_peer_refuse(net->tp, r);
			continue;
		}
		/* Errors mean the peer is going down: the transport reports that itself.
		 * -EAGAIN: the post bound passed with the connection busy (skipped). Unordered:
		 * on a lane that bulk data to the peer cannot hold up, where the transport has
		 * one (verbs: net/verbs/verbs_liveness.c). */
		if (ddss_tp_msg_send_unordered(net->tp, r, DDSS_MSG_HEARTBEAT, &seq, sizeof(seq)) ==
		    -EAGAIN)
			DDSS_INFO("heartbeat to rank %u skipped: its connection stayed busy for %d ms",
				  r, HEARTBEAT_POST_BOUND_MS);
	}
}

static void *heartbeat_main(void *arg)
{
	struct ddss_net *net = arg;
	uint64_t seq = 0;

	ddss_log_set_rank(net->env.rank);
	/* A heartbeat that cannot go within this is skipped: this thread must go on to
	 * declare a silent peer dead even while sends to it are stuck. */
	ddss_tp_set_thread_post_bound(HEARTBEAT_POST_BOUND_MS);
	ddss_tp_thread_files(net->tp);
	pthread_mutex_lock(&net->mu);
	while (!net->heartbeat_stop) {
		pthread_mutex_unlock(&net->mu);
		heartbeat_round(net, ++seq);
		pthread_mutex_lock(&net->mu);
		int64_t until = ddss_now_ns() + (int64_t)interval_ms(net) * 1000000;

		while (!net->heartbeat_stop && !net->dead_requested && ddss_now_ns() < until)
			ddss_net_cond_wait(net, until); /* cv also wakes on peer changes */
		net->dead_requested = false;
	}
	pthread_mutex_unlock(&net->mu);
	return NULL;
}

int ddss_net_heartbeat_init(struct ddss_net *net)
{
	net->last_heard = calloc(net->env.size + 1, sizeof(*net->last_heard));
	net->warned_heard = calloc(net->env.size + 1, sizeof(*net->warned_heard));
	net->dead_pending = calloc(net->env.size + 1, sizeof(*net->dead_pending));
	if (!net->last_heard || !net->warned_heard || !net->dead_pending) {
		ddss_net_heartbeat_fini(net);
		return -ENOMEM;
	}
	return 0;
}

int ddss_net_heartbeat_register(struct ddss_net *net)
{
	net->msg[DDSS_MSG_HEARTBEAT] = (struct net_msg_slot){ on_heartbeat, net };
	return 0;
}

int ddss_net_heartbeat_start(struct ddss_net *net)
{
	int r;

	r = pthread_create(&net->heartbeat_thread, NULL, heartbeat_main, net);
	if (r) {
		DDSS_ERR("cannot start the heartbeat thread: %s", strerror(r));
		return -r;
	}
	net->heartbeat_running = true;
	return 0;
}

void ddss_net_heartbeat_stop(struct ddss_net *net)
{
	if (!net->heartbeat_running)
		return;
	pthread_mutex_lock(&net->mu);
	net->heartbeat_stop = true;
	pthread_cond_broadcast(&net->cv);
	pthread_mutex_unlock(&net->mu);
	pthread_join(net->heartbeat_thread, NULL);
	net->heartbeat_running = false;
}

void ddss_net_heartbeat_fini(struct ddss_net *net)
{
	free(net->last_heard);
	net->last_heard = NULL;
	free(net->warned_heard);
	net->warned_heard = NULL;
	free(net->dead_pending);
	net->dead_pending = NULL;
}

void ddss_net_declare_dead(struct ddss_net *net, uint32_t rank)
{
	if (rank < 1 || rank > net->env.size || rank == net->env.rank)
		return;
	/* At once, not when the heartbeat thread gets to it: the caller is about to give
	 * away what @rank held, and a request of it already on its way must find the door
	 * shut (the serving side checks the flag before each request). */
	__atomic_store_n(&net->dead_pending[rank], 1, __ATOMIC_SEQ_CST); /* before: lock_gone.c */
	ddss_tp_peer_mark_refused(net->tp, rank);
	pthread_mutex_lock(&net->mu);
	net->dead_requested = true;
	pthread_cond_broadcast(&net->cv);
	pthread_mutex_unlock(&net->mu);
}

unsigned ddss_net_peers_declared_dead(const struct ddss_net *net)
{
	return __atomic_load_n(&net->peers_declared_dead, __ATOMIC_RELAXED);
}
