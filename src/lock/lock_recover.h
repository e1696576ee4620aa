/*
 * Sending lock recovery messages (recover_wire.h has their format) and asking every member
 * something: shared by lock_recover.c, lock_agent.c and lock_census.c.
 */
#ifndef DDSS_LOCK_LOCK_RECOVER_H
#define DDSS_LOCK_LOCK_RECOVER_H

#include "lock/lock_int.h"
#include "lock/recover_wire.h"

int lock_rc_send(struct ddss_lock *lk, uint32_t to, uint32_t type, uint32_t id, uint64_t hdr,
		 uint32_t pred, uint32_t arg);
/*
 * Ask member @rank something it answers (a survey): 1 asked (its answer counts it), 0 it is
 * down (declared dead for good first: nothing of its can act on the lock again), -1 it
 * could not be reached but is not down, or reads down only because our connection to it
 * failed while it is alive (ddss_net_down_but_alive: connected again in the background);
 * its answer will not come: cannot tell.
 */
int lock_rc_ask(struct ddss_lock *lk, uint32_t rank, uint32_t type, uint32_t id, uint64_t hdr,
		uint32_t pred, uint32_t arg);

#endif /* DDSS_LOCK_LOCK_RECOVER_H */
