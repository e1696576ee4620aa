/* The verbs provider as the rest of the library sees it (see verbs_int.h for its insides). */
#ifndef DDSS_NET_VERBS_VERBS_H
#define DDSS_NET_VERBS_VERBS_H

#include "net/transport.h"

#include <stdbool.h>

extern const struct ddss_tp_ops ddss_verbs_ops;

/** True if some RDMA device has an active port (the automatic transport choice). */
bool ddss_verbs_usable(void);

/**
 * Test only (DDSS-internal, not in ddss.h): receive buffers posted and not yet completed:
 * in the SRQ, or without one, in all served QPs' receive queues. Steady (no traffic, no
 * teardown under way) it stays the same across any number of disconnects.
 */
unsigned ddss_verbs_srq_posted(struct ddss_tp *tp);

/**
 * Test only: teardowns of a QP that gave up waiting (VERBS_TEARDOWN_MS) for the receive
 * thread to poll its completions, or without an SRQ for its receives to flush. 0 while
 * the receive thread is free to run.
 */
unsigned long ddss_verbs_teardown_stalls(struct ddss_tp *tp);

/** Test only: messages sent on the liveness path (verbs_liveness.c) so far. */
unsigned long ddss_verbs_liveness_sent(struct ddss_tp *tp);

#endif
