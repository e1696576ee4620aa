/*
 * Threads that wait for a transport request while another thread polls for completions
 * (the tcp channel's reply reader, tcp_chan.c). Each sleeps on a futex word of its own,
 * so the poller wakes exactly the thread whose request it completed, and when it stops
 * polling, exactly one thread whose request is still pending, to take over. A condition
 * variable shared by all would wake every one of them for every completion.
 *
 * The list belongs to its user's mutex: every function but ddss_sleeper_wait,
 * ddss_sleeper_wake and ddss_sleeper_claimed is called with that mutex held. A waker claims a sleeper (takes it off
 * the list and marks it) under the mutex and wakes it after unlocking; a claimed sleeper's
 * memory is never written again, so it may leave at once (its struct lives on its stack).
 */
#ifndef DDSS_NET_SLEEPERS_H
#define DDSS_NET_SLEEPERS_H

#include "net/transport.h"

#include <stdbool.h>
#include <stdint.h>

struct ddss_sleeper {
	const struct ddss_tp_req *req; /* what it waits for; NULL: any completion */
	uint32_t woken;                /* futex word: 0 asleep and linked; 1 claimed */
	struct ddss_sleeper *next;
};

/* Mutex held: put @me on @list, not woken. */
void ddss_sleeper_link(struct ddss_sleeper **list, struct ddss_sleeper *me);

/* Mutex held: take the sleeper waiting for @req off @list (compared, never dereferenced);
 * NULL if none. */
struct ddss_sleeper *ddss_sleepers_claim_req(struct ddss_sleeper **list,
					     const struct ddss_tp_req *req);

/* Mutex held: take the first sleeper whose request is still pending (or that waits for any
 * completion) off @list, to take over polling; NULL if none. */
struct ddss_sleeper *ddss_sleepers_claim_pending(struct ddss_sleeper **list);

/* Mutex held: take every sleeper off @list and wake it (each then checks its request). */
void ddss_sleepers_wake_all(struct ddss_sleeper **list);

/* Mutex held: @me, awake without being claimed (timed out), leaves @list. */
void ddss_sleeper_unlink(struct ddss_sleeper **list, struct ddss_sleeper *me);

/* Mutex not held: sleep until @me is claimed (true) or @deadline_ns passes (false;
 * INT64_MAX: never). */
bool ddss_sleeper_wait(struct ddss_sleeper *me, int64_t deadline_ns);

/* Mutex not held (or held: either is safe): wake a sleeper claimed off the list. */
void ddss_sleeper_wake(struct ddss_sleeper *s);

static inline bool ddss_sleeper_claimed(const struct ddss_sleeper *me)
{
	return __atomic_load_n(&me->woken, __ATOMIC_ACQUIRE);
}

#endif /* DDSS_NET_SLEEPERS_H */
