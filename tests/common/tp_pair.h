/*
 * In-process tcp transports on loopback for the tcp provider's own tests (tests/net/tcp_*):
 * listening sockets for each rank, and a transport started on a zeroed pool of its own.
 * Each test fills in its own ddss_tp_config (group, handlers, incarnations).
 */
#ifndef DDSS_TESTS_TP_PAIR_H
#define DDSS_TESTS_TP_PAIR_H

#include "net/transport.h"

#include <stdint.h>

#define TP_PAIR_POOL_LEN 65536

/* One rank's transport and its pool (TP_PAIR_POOL_LEN bytes, registered). */
struct tp_proc {
	struct ddss_tp *tp;
	uint64_t *pool;
};

/* A loopback listening socket for each of @n nodes: host 127.0.0.1 and its port in
 * @nodes[i], the socket in @lfd[i]. Exits (1) with FAIL printed if one cannot be made. */
void tp_pair_listen(struct ddss_tp_node *nodes, int *lfd, unsigned n);

/* Open and start @cfg's rank over tcp with a fresh pool. Exits (1) with FAIL printed. */
void tp_proc_open(struct tp_proc *p, const struct ddss_tp_config *cfg);

/* Close the transport, then free its pool. */
void tp_proc_close(struct tp_proc *p);

#endif
