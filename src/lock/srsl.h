/*
 * SRSL, the server-based baseline lock (docs/locks.md "SRSL"): the home rank's progress
 * thread keeps each lock's holders and a FIFO of waiters; requests, grants, releases and
 * withdrawals are two-sided control messages on tag DDSS_SRSL_TAG. Acquire costs one
 * request and one grant message, release one message.
 *
 * One struct ddss_srsl per net plays both parts: the home of the locks homed at this rank
 * (message handler, progress thread) and the client of every acquire and release made
 * from this rank (any application thread, concurrently).
 */
#ifndef DDSS_LOCK_SRSL_H
#define DDSS_LOCK_SRSL_H

#include "net/net.h"

#include <stdbool.h>
#include <stdint.h>

/* The control message tag SRSL owns (net.h: tags below 32 are the library's). */
#define DDSS_SRSL_TAG DDSS_MSG_SRSL

struct ddss_srsl;

/**
 * Attach to @net before ddss_net_start: registers the handler for DDSS_SRSL_TAG.
 * Returns 0, -ENOMEM, or -EINVAL if the tag is taken.
 */
int ddss_srsl_create(struct ddss_net *net, struct ddss_srsl **srsl_p);

/**
 * Optional, before ddss_net_close: acquires still waiting return -ESHUTDOWN, later calls
 * return -ESHUTDOWN at once; returns when no call uses the net any more (a waiter checks
 * its home's state every 50 ms and a timed-out one sends its withdrawal, so without this
 * a call in progress could touch a closed net).
 */
void ddss_srsl_stop(struct ddss_srsl *srsl);

/**
 * Free, after ddss_net_close (no handler runs any more). Acquires still waiting return
 * -ESHUTDOWN (as ddss_srsl_stop); this waits for them to leave before freeing.
 */
void ddss_srsl_destroy(struct ddss_srsl *srsl);

/**
 * Acquire lock @lock_id homed at rank @home in @mode (DDSS_LOCK_SHARED or
 * DDSS_LOCK_EXCLUSIVE). Any thread; blocks the caller.
 *
 * @try_only: never queue; -EBUSY if the lock is not grantable at once (held in a
 * conflicting mode, or others are queued). @timeout_ms < 0: no limit; 0: not queued either,
 * -ETIMEDOUT if not grantable at once. A request that is not queued still waits for the
 * home's answer (one round trip): at most @timeout_ms if positive, else the transport's
 * operation timeout.
 *
 * Returns 0 (held), -EBUSY, -ETIMEDOUT (the request is withdrawn; a grant that crosses the
 * withdrawal is released by the home, so nothing leaks), -EHOSTDOWN (the home, or a rank
 * holding the lock, went down), -EINVAL (bad mode or rank), -ENOMEM, -ESHUTDOWN
 * (destroyed meanwhile) or the transport's error.
 */
int ddss_srsl_acquire(struct ddss_srsl *srsl, uint32_t home, uint64_t lock_id, int mode,
		      bool try_only, int timeout_ms);

/**
 * Release one hold of @lock_id (homed at @home) in @mode, taken by an acquire on this
 * @srsl from any thread. Any thread; does not wait (one message). Returns 0 or the
 * transport's error (the hold is forgotten locally either way).
 */
int ddss_srsl_release(struct ddss_srsl *srsl, uint32_t home, uint64_t lock_id, int mode);

/**
 * Wait until every release sent before the call has been handled at its home: one round
 * trip (a SYNC) to each home released to since the last flush. Any thread. Returns 0, or
 * the first error (a home down or not answering within the operation timeout, -ENOMEM,
 * -ESHUTDOWN); the other homes are still flushed.
 */
int ddss_srsl_flush(struct ddss_srsl *srsl);

#endif /* DDSS_LOCK_SRSL_H */
