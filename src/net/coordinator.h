/*
 * Coordinator mode: the group formed, and deaths decided, through etcd (docs/membership.md).
 *
 *   DDSS_COORDINATOR  etcd://HOST:PORT[,HOST:PORT...]/NAME  turns it on: the group NAME's
 *                     keys live under /ddss/NAME/ in that etcd cluster
 *   DDSS_LISTEN       HOST:PORT this process serves on and publishes (port 0: any free one,
 *                     tcp only); ddssrun --coordinator sets it with DDSS_LISTEN_FD
 *   DDSS_SIZE         how many members the start waits for
 *   DDSS_MAX_SIZE     the group's slots (default DDSS_SIZE), fixed by the first process to
 *                     join: a group may start below it and grow into the free slots
 * DDSS_RANK and DDSS_NODES must not be set: the slot is the rank, the view gives the nodes.
 *
 * What it does today: a process joins (a free slot, in one etcd transaction, under a lease
 * kept alive from DDSS_PEER_TIMEOUT_MS), waits until the view holds DDSS_SIZE members, and
 * starts with the founders' addresses (the members of that view, coord/member_start.c). A rank the heartbeat finds silent is reported, not declared
 * dead; a member that leaves the view is declared dead by every rank at once; a process
 * whose lease was not renewed in time stops acting (every call returns -ENOLINK or
 * -EHOSTDOWN). A process that joins a running group (P serving/ keys exist) takes a dead
 * or free slot: the members let its new incarnation in (net/readmit.c), and it starts
 * without the start barrier (ddss_net_begin).
 */
#ifndef DDSS_NET_COORDINATOR_H
#define DDSS_NET_COORDINATOR_H

#include <stdbool.h>
#include <stdint.h>

struct ddss_net;
struct ddss_net_env;
struct ddss_coord;

/** True if DDSS_COORDINATOR asks for coordinator mode. */
bool ddss_coord_wanted(void);

/**
 * Join the group DDSS_COORDINATOR names and wait for it to form (bounded by
 * @env->connect_timeout_ms): fills @env's rank, size, nodes, listen_fd and coord.
 */
int ddss_coord_env_load(struct ddss_net_env *env);

/** References: the env that loaded it holds one, each net that copies the env another. */
struct ddss_coord *ddss_coord_ref(struct ddss_coord *c);
/** The last reference leaves the group (the lease is revoked: the slot frees at once). */
void ddss_coord_unref(struct ddss_coord *c);

/** From now on, a member that leaves the view is declared dead in @net, and a process that
 * takes a dead or free slot is let in. Free slots start refused. */
void ddss_coord_attach(struct ddss_coord *c, struct ddss_net *net);

/** Whether @rank is a member this process counts (the barrier waits for it): not a free
 * slot, nor a member that left the view. Takes the coordinator's lock: callers may hold
 * the net's (never the other way round). */
bool ddss_coord_in_view(struct ddss_coord *c, uint32_t rank);
/* The net is going away: no view applied from now on reaches it, and one being applied
 * is waited for (it used the net outside the coordinator's lock). */
void ddss_coord_detach(struct ddss_coord *c);

/**
 * The heartbeat found @rank silent for @silent_ms: report it (once per incarnation), so
 * that it leaves the view for everyone once it has stopped acting. Heartbeat thread.
 */
void ddss_coord_report(struct ddss_coord *c, uint32_t rank, int64_t silent_ms);
/** Say once per silence why @rank was not reported (we hear too few of the others). */
void ddss_coord_unreported(struct ddss_coord *c, uint32_t rank, unsigned heard, unsigned others);

/**
 * Heartbeat thread, each round: while renewals fail and the lease deadline comes near,
 * ask the others whether etcd answers them. If a majority
 * of the group cannot reach it either, nobody can change the view meanwhile, and this
 * rank serves on (docs/membership.md, "etcd faults"); if etcd answers anyone, this rank
 * is the one cut off and stops at its deadline.
 */
void ddss_coord_tick(struct ddss_coord *c, struct ddss_net *net);

/** The view number in which @rank's start incarnation left, and when we saw it
 * (ddss_now_ns); -ENOENT if it has not left. */
int ddss_coord_left(struct ddss_coord *c, uint32_t rank, int64_t *view_p, int64_t *when_ns_p);

/** -EAGAIN while etcd does not answer this rank's renewals, else 0. */
int ddss_coord_etcd_state(struct ddss_coord *c);

/** This rank has started serving: a process that joins from now on replaces a member. */
int ddss_coord_set_serving(struct ddss_coord *c);

/** 0 while this process may act, else -ENOLINK or -EHOSTDOWN for good. */
int ddss_coord_acting(struct ddss_coord *c);

/** This process's membership (for the name directory in etcd, coord/member.h). */
struct ddss_member *ddss_coord_member(struct ddss_coord *c);

#endif /* DDSS_NET_COORDINATOR_H */
