/*
 * Daemon mode's fast lane: one thread that serves the plain gets and puts of every channel
 * lent to it, with the transport's posted operations, while the channels' workers sleep.
 *
 * Why: a worker per channel serves its calls with blocking transfers. With more client
 * threads than cores, each call then costs the daemon a worker's wake-up and its spinning
 * while it waits for the next call, and each transfer leaves in a system call of its own.
 * The lane looks at all the channels it holds in turn, posts the calls it finds together
 * (one doorbell per home, DDSS_TP_MORE), and answers each as its transfer completes.
 *
 * A worker lends its channel to the lane after it answered a get or a put while other
 * channels were busy too (server.c says when), and sleeps until the lane gives it back. A
 * lone stream of calls, and anything but a get or put, stays with the worker: the lane
 * pays only when it can post several channels' calls together. The lane gives a channel
 * back, without consuming anything, when:
 * - the oldest request is not a get or put the lane can serve without blocking (a lock, a
 *   versioned get, a model with steps, a descriptor not cached yet, a home without a
 *   working connection, an error to report);
 *   the worker then serves it as before, with exactly direct mode's results;
 * - the channel has been quiet for DDSS_LANE_IDLE_NS (the worker then sleeps on it);
 * - the channel is closed or broken, or the lane stops.
 * At any moment either the worker or the lane uses the daemon's end of a channel, never
 * both: the hand-over is a release/acquire pair on the seat's @lent word.
 */
#ifndef DDSS_DAEMON_LANE_H
#define DDSS_DAEMON_LANE_H

#include "core/ctx.h"
#include "daemon/chan.h"
#include "net/transport.h"

#include <stdbool.h>

struct ddss_lane;

/*
 * How long the lane keeps a quiet channel: 1 ms, the longest a client spins for an answer.
 * With more busy threads than cores a client may wait that long for a core before its next
 * call, and a channel given back too early costs a worker's wake-up and a hand-over each
 * way (20 us gave 90-110k calls a second on the 8-thread loop, 1 ms 170-180k).
 */
#define DDSS_LANE_IDLE_NS 1000000

/* A worker's place in the lane; zero it before the first lend. */
struct ddss_lane_seat {
	struct ddss_chan *chan;
	uint32_t lent;   /* futex word: 1 while the lane holds the channel */
	bool broken;     /* the lane could not answer: the client broke the channel's rules */
	/* The lane's own while lent: */
	struct ddss_lane_seat *next;
	int64_t quiet_since;
	int64_t posted_ns;
	bool busy, is_put, want_desc;
	uint32_t len;
	const struct ddss_seg_desc *desc;
	void *buf;
	uint64_t at;
	struct ddss_tp_req tp;
};

/*
 * Start the lane thread on @ctx (the daemon's own context). @idle_ns: how long a channel
 * may stay quiet before it goes back to its worker. 0 or -errno.
 */
int ddss_lane_start(ddss_ctx_t *ctx, int64_t idle_ns, struct ddss_lane **lane_p);

/*
 * Give every channel back (after the transfers in flight end: the operation timeout bounds
 * them), refuse further lends, join the thread and free the lane.
 */
void ddss_lane_stop(struct ddss_lane *lane);

/*
 * Worker: lend @seat->chan to the lane and sleep until the lane gives it back. Returns at
 * once when the lane is stopping. Then the worker's next ddss_chan_wait_req() finds the
 * request the lane left, or sleeps on a quiet channel, or reports a closed one;
 * @seat->broken set means the channel is no longer usable.
 */
void ddss_lane_lend(struct ddss_lane *lane, struct ddss_lane_seat *seat);

/* How many channels the lane holds now. */
unsigned ddss_lane_held(const struct ddss_lane *lane);

/* The calls the lane served (answered), for tests and ddss-info. */
uint64_t ddss_lane_calls(const struct ddss_lane *lane);

#endif /* DDSS_DAEMON_LANE_H */
