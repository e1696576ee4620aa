/*
 * Sending lock recovery messages (recover_wire.h has their format) and telling whether a
 * peer is down: shared by lock_recover.c, lock_agent.c and lock_census.c.
 */
#ifndef DDSS_LOCK_LOCK_RECOVER_H
#define DDSS_LOCK_LOCK_RECOVER_H

#include "lock/lock_int.h"
#include "lock/recover_wire.h"

int lock_rc_send(struct ddss_lock *lk, uint32_t to, uint32_t type, uint32_t id, uint64_t hdr,
		 uint32_t pred, uint32_t arg);
/* Whether this rank sees @rank down (its connection closed, or declared dead). */
bool lock_rc_down(struct ddss_lock *lk, uint32_t rank);

#endif /* DDSS_LOCK_LOCK_RECOVER_H */
