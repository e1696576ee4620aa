/*
 * Coordinator mode: a rank declared dead comes back as a new process (a new incarnation
 * took its slot in the view; docs/membership.md "Replacement"). The coordinator asks for
 * it from the view's thread; the heartbeat thread carries it out right after the refusals
 * (heartbeat.c), so the old incarnation is always cut before the new one is let in.
 */
#include "net/net_internal.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct net_admit {
	bool pending;
	uint64_t incarnation;
	uint32_t generation;
	struct ddss_tp_node node;
};

int ddss_net_readmit_init(struct ddss_net *net)
{
	if (!net->env.incarnations)
		return 0;
	net->admit = calloc(net->env.size + 1, sizeof(*net->admit));
	return net->admit ? 0 : -ENOMEM;
}

void ddss_net_readmit_fini(struct ddss_net *net)
{
	free(net->admit);
	net->admit = NULL;
}

void ddss_net_on_readmit(struct ddss_net *net, ddss_net_readmit_fn fn, void *arg)
{
	/* Set after start (the cache it empties comes later): the heartbeat thread reads it. */
	__atomic_store_n(&net->readmit_arg, arg, __ATOMIC_RELAXED);
	__atomic_store_n(&net->readmit_fn, fn, __ATOMIC_RELEASE);
}

int ddss_net_readmit(struct ddss_net *net, uint32_t rank, const struct ddss_tp_node *node,
		     uint64_t incarnation, uint32_t generation)
{
	if (!net->admit)
		return -EOPNOTSUPP;
	if (rank < 1 || rank > net->env.size || rank == net->env.rank || !node || !incarnation)
		return -EINVAL;
	pthread_mutex_lock(&net->mu);
	net->admit[rank] = (struct net_admit){ true, incarnation, generation, *node };
	net->dead_requested = true; /* wakes the heartbeat thread */
	pthread_cond_broadcast(&net->cv);
	pthread_mutex_unlock(&net->mu);
	return 0;
}

void ddss_net_readmit_pending(struct ddss_net *net)
{
	for (uint32_t r = 1; net->admit && r <= net->env.size; r++) {
		struct net_admit a;
		ddss_net_readmit_fn fn;
		int err;

		pthread_mutex_lock(&net->mu);
		a = net->admit[r];
		net->admit[r].pending = false;
		pthread_mutex_unlock(&net->mu);
		if (!a.pending)
			continue;
		/*
		 * A death declared after this round's refusals (the same view can remove a
		 * rank and let its new process in) is the old process's: cut it now, or the
		 * next round's refusals would shut out the new one.
		 */
		ddss_net_refuse_if_pending(net, r);
		/* A cut that failed is tried again now (ddss_tp_peer_readmit would): the
		 * layers above settle what the old process left only once it is cut off. */
		if (ddss_tp_peer_refused(net->tp, r) && !ddss_tp_peer_cut(net->tp, r))
			ddss_tp_peer_refuse(net->tp, r);
		/* What the layers above kept of the old process (descriptors of segments it
		 * homed, marks of puts it left unfinished) goes before anything can reach the
		 * new one. */
		fn = __atomic_load_n(&net->readmit_fn, __ATOMIC_ACQUIRE);
		err = fn ? fn(__atomic_load_n(&net->readmit_arg, __ATOMIC_RELAXED), r) : 0;
		if (err != -EBUSY) {
			/* The old process's state goes before the door opens: the new one's
			 * handshake may report it up at once, and that must stay. */
			pthread_mutex_lock(&net->mu);
			net->peer_state[r] = DDSS_TP_PEER_UNKNOWN;
			net->barrier_arrived[r] = 0; /* the old process's are not the new one's */
			pthread_mutex_unlock(&net->mu);
			ddss_net_heartbeat_peer_up(net, r); /* its silence counts from now */
			err = ddss_tp_peer_readmit(net->tp, r, &a.node, a.incarnation,
						   a.generation);
		}
		pthread_mutex_lock(&net->mu);
		if (err)
			net->peer_state[r] = DDSS_TP_PEER_DOWN;
		/* -EBUSY: the old process could not be cut off yet; the next round tries again
		 * (unless a newer admission came meanwhile). */
		if (err == -EBUSY && !net->admit[r].pending)
			net->admit[r] = a;
		pthread_cond_broadcast(&net->cv);
		pthread_mutex_unlock(&net->mu);
		if (err == -EBUSY)
			DDSS_WARN("rank %u: its old process is not cut off yet; its new incarnation "
				  "%llu waits for the next round", r, (unsigned long long)a.incarnation);
		else if (err)
			DDSS_ERR("rank %u: cannot take in its new incarnation %llu: %s; it stays "
				 "refused here", r, (unsigned long long)a.incarnation, strerror(-err));
	}
}
