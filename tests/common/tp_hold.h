/*
 * Holding a transport's progress thread from a test: a message with tag @tag from @rank
 * parks the thread in its handler until the test lets it go (bounded by TP_HOLD_MS). The
 * thread that serves requests then serves none, so a test can line up what it finds when
 * it resumes (tests/net/tcp_stale_close.c, tcp_superseded.c). Holds come one after the
 * other: each such message holds until its own let-go (tcp_readmit_backlog.c holds twice).
 */
#ifndef DDSS_TESTS_TP_HOLD_H
#define DDSS_TESTS_TP_HOLD_H

#include "net/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TP_HOLD_MS 10000

/* Which message holds: from rank @from with tag @tag. */
void tp_hold_on(uint32_t from, uint16_t tag);
/* The on_msg handler to install (struct ddss_tp_handlers). */
void tp_hold_on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len);
/* Wait until a handler holds that was not let go yet (at most TP_HOLD_MS): whether one does. */
bool tp_hold_wait_held(void);
/* Park @to's progress thread: send it the hold message from @from (rank and tag as set by
 * tp_hold_on) and wait until its handler holds. 0, the send's error, or -ETIMEDOUT. */
int tp_hold_park(struct ddss_tp *from, uint32_t to);
/* Let the held thread go (the oldest hold not let go yet). */
void tp_hold_let_go(void);

#endif
