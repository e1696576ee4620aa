/* State of the net layer shared by net.c and barrier.c. */
#ifndef DDSS_NET_NET_INTERNAL_H
#define DDSS_NET_NET_INTERNAL_H

#include "net/net.h"

#include <pthread.h>
#include <stdbool.h>

struct net_admit;

struct net_msg_slot {
	ddss_net_msg_fn fn;
	void *arg;
};

struct ddss_net {
	struct ddss_tp *tp;
	struct ddss_net_env env;
	struct ddss_tp_mr *pool_mr;
	struct net_msg_slot msg[DDSS_MSG_TAG_MAX];
	ddss_net_notify_fn notify_fn;
	void *notify_arg;

	pthread_mutex_t mu; /* peer states and barrier state */
	pthread_cond_t cv;  /* broadcast on any change of them */
	enum ddss_tp_peer_state *peer_state; /* [1..size] */
	/* Barrier: epochs count from 1. The coordinator (rank 1) keeps the last epoch each
	 * rank arrived at (barrier.c): an epoch is over when every rank it counts is there. */
	uint32_t barrier_epoch;    /* last epoch this rank entered */
	uint32_t barrier_released; /* highest epoch released */
	uint32_t *barrier_arrived; /* [rank] rank 1 */
	bool barrier_asked;        /* a newcomer waits for rank 1's BARRIER_STATE */

	/* heartbeat.c */
	int64_t *last_heard;        /* [rank] (atomic): when its last heartbeat came */
	int64_t *warned_heard;      /* [rank] (heartbeat thread): last_heard when we warned */
	pthread_t heartbeat_thread;
	bool heartbeat_running;
	bool heartbeat_stop;        /* under mu */
	unsigned peers_declared_dead; /* atomic */
	bool leaving;               /* atomic: past the final barrier (ddss_net_wait_others_gone) */
	uint8_t *dead_pending;      /* [rank] (atomic): ddss_net_declare_dead asked */
	bool dead_requested;        /* under mu: some dead_pending is set */
	/* The receive path held up in a handler (a reply waiting for a connection): the
	 * silence heard meanwhile is ours, not the peers' (heartbeat.c). */
	int64_t dispatch_since;     /* atomic: when the running handler began, 0: none */
	int64_t held_up_ended;      /* atomic: when the last held-up handler returned */
	int64_t warned_held_up;     /* heartbeat thread: dispatch_since when we said so */
	int64_t last_round_ns;      /* heartbeat thread: when its last round began */

	/* reconnect.c: peers that read down but alive, to connect to again */
	pthread_mutex_t reconnect_mu;
	pthread_cond_t reconnect_cv;
	uint8_t *reconnect_want;    /* [rank] under reconnect_mu: asked for */
	int64_t *down_since;        /* [rank] (atomic): when it last went down */
	int64_t *up_since;          /* [rank] (atomic): when it last came up */
	bool reconnect_stop;        /* under reconnect_mu */
	bool reconnect_running;
	pthread_t reconnect_thread;

	/* readmit.c (coordinator mode): new incarnations to let in, [rank] under mu */
	struct net_admit *admit;
	ddss_net_readmit_fn readmit_fn;
	void *readmit_arg;
};

/* barrier.c */
void ddss_net_barrier_on_msg(void *arg, uint32_t from, const void *buf, size_t len);

/* heartbeat.c: init before the transport opens, register before start, start after it,
 * stop before the transport closes. */
int ddss_net_heartbeat_init(struct ddss_net *net);
int ddss_net_heartbeat_register(struct ddss_net *net);
int ddss_net_heartbeat_start(struct ddss_net *net);
void ddss_net_heartbeat_stop(struct ddss_net *net);
void ddss_net_heartbeat_fini(struct ddss_net *net);
/* A peer came up: its silence is measured from now. */
void ddss_net_heartbeat_peer_up(struct ddss_net *net, uint32_t rank);

/* heartbeat.c: around each handler the transport's delivering thread runs (net.c). */
bool ddss_net_dispatch_begin(struct ddss_net *net);
void ddss_net_dispatch_end(struct ddss_net *net, bool marked);
/* heartbeat.c, heartbeat thread: carry out a death declared of @r, if one is pending. */
void ddss_net_refuse_if_pending(struct ddss_net *net, uint32_t r);

/* reconnect.c: init with the heartbeat, start after it, stop after it (before the
 * transport closes). The heartbeat thread asks for each peer that reads down but alive;
 * a thread of its own connects (ddss_net_reconnect_ask in net.h). */
int ddss_net_reconnect_init(struct ddss_net *net);
/* The transport's state change for @rank (net.c, on_peer): when it went down or up. */
void ddss_net_reconnect_peer_changed(struct ddss_net *net, uint32_t rank,
				     enum ddss_tp_peer_state state);
int ddss_net_reconnect_start(struct ddss_net *net);
void ddss_net_reconnect_stop(struct ddss_net *net);
void ddss_net_reconnect_fini(struct ddss_net *net);

/* readmit.c: init before the heartbeat starts; the heartbeat thread runs the pending
 * readmissions after the refusals of each round. */
int ddss_net_readmit_init(struct ddss_net *net);
void ddss_net_readmit_fini(struct ddss_net *net);
void ddss_net_readmit_pending(struct ddss_net *net);

/* Wait on net->cv (mu held) until @deadline_ns (INT64_MAX: forever). false on timeout. */
int ddss_net_cond_wait(struct ddss_net *net, int64_t deadline_ns);

#endif /* DDSS_NET_NET_INTERNAL_H */
