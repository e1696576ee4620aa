/*
 * A transport read of one rank in a thread of its own, so that a test sees a hang instead
 * of waiting it out (tests/net/tcp_connect_bound.c, tcp_slow_resolver.c).
 */
#ifndef DDSS_TEST_TP_READER_H
#define DDSS_TEST_TP_READER_H

#include "net/transport.h"

#include <stdint.h>

/* Start a read of 8 bytes at offset 0 of @rank's pool through @tp; exits the test if no
 * thread can be made. One read at a time. */
void tp_reader_start(struct ddss_tp *tp, uint32_t rank);

/* The read's result within @wait_ms, and in *@ns_p how long it took; else the test ends
 * here with FAIL (the thread hangs). */
int tp_reader_result(int wait_ms, int64_t *ns_p);

#endif /* DDSS_TEST_TP_READER_H */
