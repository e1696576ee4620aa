/*
 * The net layer: a transport opened from the group configuration, plus what every user of
 * it needs on top of the provider: control messages dispatched by tag, membership (peer
 * state changes one can wait for) and a group barrier.
 *
 * Life cycle: ddss_net_open -> set handlers -> ddss_net_start(pool) -> ... -> ddss_net_close.
 */
#ifndef DDSS_NET_NET_H
#define DDSS_NET_NET_H

#include "net/nodes.h"
#include "net/transport.h"

/* Control message tags; each subsystem owns one. */
enum ddss_msg_tag {
	DDSS_MSG_BARRIER = 1,
	DDSS_MSG_RPC_REQ = 2,  /* core/rpc.c */
	DDSS_MSG_RPC_REP = 3,
	DDSS_MSG_SRSL = 4,      /* lock/srsl.c */
	DDSS_MSG_HEARTBEAT = 5, /* net/heartbeat.c */
	DDSS_MSG_LOCK = 6,      /* lock/lock_recover.c */
	DDSS_MSG_COORD = 7,     /* net/coordinator.c: is etcd down for everyone? */
	DDSS_MSG_USER_FIRST = 32, /* tests and tools */
	DDSS_MSG_TAG_MAX = 64,
};

struct ddss_net;

/* Runs on the progress thread: must not block or wait for completions (may post). */
typedef void (*ddss_net_msg_fn)(void *arg, uint32_t from, const void *buf, size_t len);
typedef void (*ddss_net_notify_fn)(void *arg, uint32_t from, uint32_t value);

/** Open the transport described by @env (NULL: read the environment). Not serving yet. */
int ddss_net_open(const struct ddss_net_env *env, struct ddss_net **net_p);
/** Handle messages with @tag (before start). -EINVAL for a bad or taken tag. */
int ddss_net_on_msg(struct ddss_net *net, uint16_t tag, ddss_net_msg_fn fn, void *arg);
/** Handle notifications (before start). */
void ddss_net_on_notify(struct ddss_net *net, ddss_net_notify_fn fn, void *arg);
/** Register @pool (8-byte aligned) as this rank's shared memory and start serving peers. */
int ddss_net_start(struct ddss_net *net, void *pool, size_t pool_len);
/** Stop serving, disconnect, free. Peers notice this rank leave. */
void ddss_net_close(struct ddss_net *net);

struct ddss_tp *ddss_net_tp(struct ddss_net *net);
uint32_t ddss_net_rank(const struct ddss_net *net);
uint32_t ddss_net_size(const struct ddss_net *net);
const char *ddss_net_transport_name(const struct ddss_net *net);

/** Send a control message to @peer's handler for @tag (len <= DDSS_TP_MSG_MAX). */
int ddss_net_send(struct ddss_net *net, uint32_t peer, uint16_t tag, const void *buf, size_t len);

/**
 * Wait until @rank is in @state (as seen by this rank), at most @timeout_ms (-1: forever).
 * Returns 0 or -ETIMEDOUT.
 */
int ddss_net_wait_peer(struct ddss_net *net, uint32_t rank, enum ddss_tp_peer_state state,
		       int timeout_ms);

/**
 * Block until every rank has entered the barrier. Collective. Returns 0, -ETIMEDOUT after
 * @timeout_ms (-1: the connect timeout), or -EHOSTDOWN when a rank it needs went down.
 */
int ddss_net_barrier(struct ddss_net *net, int timeout_ms);

/**
 * The start: the group barrier, except for a process that replaces a rank of a running
 * group (coordinator mode), which instead waits until every other member lets it in.
 * Either way, in coordinator mode, the group learns that this rank serves. 0 or -errno.
 */
int ddss_net_begin(struct ddss_net *net);

/**
 * Wait until no other rank's connection is up (they all closed), at most @timeout_ms:
 * 0 or -ETIMEDOUT. The barrier's coordinator uses it to leave last.
 */
int ddss_net_wait_others_gone(struct ddss_net *net, int timeout_ms);
/** Past the final barrier: from now on a rank that goes (silent, or out of the view in
 * coordinator mode) has left, not died. */
void ddss_net_set_leaving(struct ddss_net *net);


/**
 * Declare @rank dead for good (ddss_tp_peer_refuse), from any thread, without blocking:
 * nothing it sends is served from the return on, and the heartbeat thread closes its
 * channels. For a subsystem that has just given away what a
 * down rank held (lock/srsl.c), so that rank can never come back and act on it.
 */
void ddss_net_declare_dead(struct ddss_net *net, uint32_t rank);
/** Whether a refusal of @rank that ddss_net_declare_dead asked for is still to be done
 * (the heartbeat thread closes its channels). Any thread. */
bool ddss_net_refusal_pending(struct ddss_net *net, uint32_t rank);
/** Whether @rank was heard from (a heartbeat, or its connection coming up) within the peer
 * timeout; true without a peer timeout (then silence is never judged). Any thread. */
bool ddss_net_heard_lately(struct ddss_net *net, uint32_t rank);
/**
 * Whether @rank reads down only because our connection to it failed: not declared dead,
 * its own connection to us still open (a process that dies closes both), heard from
 * lately (one cut off goes silent), and down for no longer than the peer timeout, or the
 * operation timeout without one (our connects to it keep failing: a one-way partition). Such a rank is worth connecting to
 * again, and is not to be counted out. Any thread.
 */
bool ddss_net_down_but_alive(struct ddss_net *net, uint32_t rank);
/** Connect to @rank again soon, if it still reads down but alive then: on a thread of the
 * net layer's own (a connect may block for seconds). Any thread, never blocks; the
 * heartbeat thread asks each round for every such rank by itself. */
void ddss_net_reconnect_ask(struct ddss_net *net, uint32_t rank);

/*
 * Coordinator mode: @rank, declared dead, comes back as a new process (incarnation
 * @incarnation, listening at @node): the heartbeat thread lets it in once the old one is
 * cut (net/readmit.c), after calling the readmit handler. Any thread, never blocks.
 * -EOPNOTSUPP in a static group, -EINVAL for a bad argument.
 */
int ddss_net_readmit(struct ddss_net *net, uint32_t rank, const struct ddss_tp_node *node,
		     uint64_t incarnation, uint32_t generation);
/* Runs on the heartbeat thread before a readmitted rank can be reached: drop what was kept
 * of its old process. -EBUSY: not now (the old process is not cut off yet); the
 * readmission waits for the next round, as when the transport says so. */
typedef int (*ddss_net_readmit_fn)(void *arg, uint32_t rank);
/** Set the readmit handler (any time; readmissions before it skip it). */
void ddss_net_on_readmit(struct ddss_net *net, ddss_net_readmit_fn fn, void *arg);

/** Peers this rank declared dead because they went silent (net/heartbeat.c). */
unsigned ddss_net_peers_declared_dead(const struct ddss_net *net);

/** True in coordinator mode (DDSS_COORDINATOR). */
bool ddss_net_coordinated(const struct ddss_net *net);
struct ddss_member;
/** Coordinator mode: this process's membership (coord/member.h), else NULL. */
struct ddss_member *ddss_net_member(struct ddss_net *net);
/** Coordinator mode: 0 while this process may act, else why not (net/coordinator.h).
 * Without a coordinator: always 0. A clock read; any thread. */
int ddss_net_acting(struct ddss_net *net);
/** Coordinator mode: -EAGAIN while etcd does not answer this rank, else 0. */
int ddss_net_coord_state(struct ddss_net *net);
/** Coordinator mode: the view in which @rank left, and when this rank saw it (ddss_now_ns);
 * -ENOENT if it has not left, -EOPNOTSUPP without a coordinator. */
int ddss_net_coord_left(struct ddss_net *net, uint32_t rank, int64_t *view_p, int64_t *when_ns_p);

#endif /* DDSS_NET_NET_H */
