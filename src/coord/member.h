/*
 * Group membership agreed through etcd (coordinator mode; docs/membership.md).
 *
 * Keys under the group's prefix P (it ends in '/'):
 *   P max              the group's maximum size, fixed by the first process that joins
 *   P members/SSSSS    slot S's current member: {"addr": ..., "nonce": ...}, attached to that
 *                      member's lease. Its create revision is the member's incarnation:
 *                      unique, and larger for every later join.
 *   P suspect/SSSSS    a live member's report that slot S (incarnation in the value) is
 *                      silent to it
 *   P gen/SSSSS        slot S's generation: how many members it has had (no lease; written
 *                      in the transaction that makes a member, which publishes it as "gen")
 *   P serving/SSSSS    slot S's member has started serving (on its lease): a process that
 *                      joins while any other exists replaces a member of a running group
 *   P start            the founders, "S:I S:I ...": the members of the first view that held
 *                      the start size (member_start.c); no lease
 *
 * The view is the set of member keys at an etcd revision; that revision is the view
 * number. Every process reads the same revisions in the same order, so every process
 * goes through the same views.
 *
 * A member leaves the view only when its key goes: its lease expired (it stopped
 * renewing: dead, frozen or cut off from etcd), or it revoked its lease itself after it
 * stopped acting (it was reported, or it leaves). Nobody else deletes a member key. So
 * when a view without incarnation I appears, I has stopped acting, or will have before
 * anyone can use what it held: it stops at its own deadline, the last renewal it sent
 * plus the TTL minus a margin (ddss_member_acting), earlier than etcd lets its lease go.
 */
#ifndef DDSS_COORD_MEMBER_H
#define DDSS_COORD_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DDSS_MEMBER_ADDR_MAX 256

struct ddss_view_member {
	uint32_t slot;        /* 1..max */
	int64_t incarnation;  /* the member key's create revision */
	uint32_t generation;  /* 1 for the slot's first member, one more for each later one */
	char addr[DDSS_MEMBER_ADDR_MAX];
};

struct ddss_view {
	int64_t number;       /* the etcd revision this view was read at */
	uint32_t max;         /* the group's maximum size */
	size_t count;
	struct ddss_view_member *members; /* sorted by slot */
};

/** Called on the watch thread with each new view, in order (@v is valid for the call). */
typedef void (*ddss_member_view_fn)(void *arg, const struct ddss_view *v);

struct ddss_member_cfg {
	const char *endpoints; /* etcd: "host:port[,host:port...]" */
	const char *prefix;    /* the group's keys: "/ddss/<name>/" */
	uint32_t max;          /* the maximum size, if this process creates the group (1..4096) */
	int ttl_ms;            /* the lease TTL (etcd counts whole seconds: rounded up) */
	const char *addr;      /* what this member publishes for others to reach it */
	uint32_t slot;         /* the slot to take (-EBUSY if it has a member), 0: any free one */
	ddss_member_view_fn on_view; /* optional */
	void *arg;
};

struct ddss_member;

/**
 * Join the group: take a free slot, or the slot of a member that is gone, in one etcd
 * transaction (two joiners never get the same slot), under a new lease that a thread
 * keeps alive. Returns -ENOSPC if every slot is taken, -EBUSY if the slot asked for is,
 * -EINVAL for a bad @cfg, and the
 * etcd client's errors (-ECONNREFUSED: no etcd endpoint answered).
 */
int ddss_member_join(const struct ddss_member_cfg *cfg, struct ddss_member **m_p);

/** Leave: stop renewing, revoke the lease (the slot frees at once), stop the threads. */
void ddss_member_leave(struct ddss_member *m);

uint32_t ddss_member_slot(const struct ddss_member *m);
int64_t ddss_member_incarnation(const struct ddss_member *m);
uint32_t ddss_member_generation(const struct ddss_member *m);

/**
 * 0 while this member may act; else why not, for good: -ENOLINK (its lease was not
 * renewed before its deadline: etcd unreachable, or the process was paused) or
 * -EHOSTDOWN (reported silent by a member, or its lease is gone). Cheap: a clock read.
 */
int ddss_member_acting(struct ddss_member *m);

/** The last etcd revision this member's view has followed (any key under the prefix):
 * the view holds every member key change up to it. */
int64_t ddss_member_seen_rev(struct ddss_member *m);

/** A copy of the current view (free with ddss_view_free). */
int ddss_member_view(struct ddss_member *m, struct ddss_view *v_p);
void ddss_view_free(struct ddss_view *v);
/** The view member with @slot, or NULL. */
const struct ddss_view_member *ddss_view_find(const struct ddss_view *v, uint32_t slot);

/**
 * Report slot @slot's incarnation @incarnation silent (its heartbeats stopped reaching
 * us). It leaves the view when it has stopped acting: at once if it still reaches etcd
 * (it sees the report and revokes its own lease), else when its lease expires. -ESTALE if
 * that incarnation is no longer the slot's member.
 */
int ddss_member_report(struct ddss_member *m, uint32_t slot, int64_t incarnation);

/** The group's maximum size (its slots): the first joiner's choice (P max). */
uint32_t ddss_member_max(const struct ddss_member *m);

/** A founder of the group: a member that starts it through the start barrier. */
struct ddss_member_founder {
	uint32_t slot;
	int64_t incarnation;
};

/**
 * The group's founders (P start), in @f (room for the maximum size), *@n_p of them: the
 * members of the first view that held @size (the start size) members, the same list for
 * every process; *@rev_p is the revision that wrote it (a view at that revision or later
 * has every founder that is still a member). -EAGAIN while there is no such list yet
 * (fewer members, or another member writes it now: ask again). Only while the group does
 * not serve yet: a list is made or replaced only then.
 */
int ddss_member_start(struct ddss_member *m, uint32_t size, struct ddss_member_founder *f,
		      uint32_t *n_p, int64_t *rev_p);

/** Say that this member serves (P serving/SSSSS, on its lease). */
int ddss_member_set_serving(struct ddss_member *m);
/** Whether another member serves already (*@serving_p): then the group is running, and a
 * process joining now replaces a member instead of starting the group with the others. */
int ddss_member_group_serving(struct ddss_member *m, bool *serving_p);

/** -EAGAIN while etcd is unreachable (membership changes are refused then), else 0. */
int ddss_member_etcd_state(struct ddss_member *m);
/**
 * Whether the last renewal failed in a way that says etcd has no leader now: every
 * endpoint refused the connection (no etcd runs there) or said it has none. Then no lease
 * can expire until a leader is elected, and a new leader gives every lease a full TTL.
 * A renewal that timed out (etcd slow, stalled, or cut off from us) says nothing of the
 * kind: etcd's leader may be counting our lease down.
 */
bool ddss_member_etcd_lost(struct ddss_member *m);

/** Nanoseconds until this member must stop acting (<= 0: past it, or it has stopped). */
int64_t ddss_member_time_left(struct ddss_member *m);

/**
 * etcd is unreachable for every member (the caller asked them: net/coordinator.c): no
 * view can change while that lasts, so act on until @until_ns (monotonic) at most. Only
 * while renewals fail and this member has not stopped; never shortens the deadline.
 * Returns 0, or why not (-EALREADY: etcd answers us; -ENOLINK/-EHOSTDOWN: stopped).
 */
int ddss_member_extend(struct ddss_member *m, int64_t until_ns);

/*
 * The directory of segment names, in etcd (member_names.c): it survives any rank's death.
 * Acquire: 0 with *@key_p (bound, its home alive), DDSS_MEMBER_NAME_CREATE (absent and
 * @create: this member now creates it; bind or abandon next), -ENOENT (absent),
 * -EHOSTDOWN (bound, but its home has left the view; a create replaces it), -EAGAIN (its
 * creator is still allocating it, or it was just replaced: ask again).
 */
#define DDSS_MEMBER_NAME_CREATE 1
int ddss_member_name_acquire(struct ddss_member *m, const char *name, bool create,
			     uint64_t *key_p);
/** Bind a name this member acquired to @segkey, homed at slot @home. */
int ddss_member_name_bind(struct ddss_member *m, const char *name, uint64_t segkey,
			  uint32_t home);
/** This member gives up creating @name: absent again. */
int ddss_member_name_abandon(struct ddss_member *m, const char *name);
/** @name's segment @segkey was released: forget the name (if still bound to it). */
int ddss_member_name_unbind(struct ddss_member *m, const char *name, uint64_t segkey);

#endif /* DDSS_COORD_MEMBER_H */
