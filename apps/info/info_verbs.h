/* ddss-info's verbs checks that need rdma-core (built only with the verbs provider). */
#ifndef DDSS_APPS_INFO_VERBS_H
#define DDSS_APPS_INFO_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the verbs provider decided about one device when it opened and started on it. */
struct info_verbs_caps {
	uint8_t port;            /* the port the address is on */
	bool atomics;            /* remote atomics used (else SRSL locks, some models refused) */
	bool atomic_be;          /* atomic results come back big-endian (converted) */
	bool srq;                /* a shared receive queue (else one per served QP) */
	unsigned inline_max;     /* inline bytes the device granted a QP */
	unsigned rd_atom;        /* reads/atomics in flight per QP */
	uint8_t ack_timeout;     /* IB code: 4.096 us << code */
	const char *atomics_why; /* static text */
	const char *fence;       /* static text: how a fence is kept */
	const char *guard;       /* static text: reads/atomics alone on the QP */
};

/*
 * Open and start the verbs provider as a group of one on @ip (an address of @dev), then
 * connect its loopback QP, as a rank would: 0 and the provider's decisions in *@caps_p,
 * or -errno with the step that failed in @why (the provider logs the details). Bounded
 * by the connect timeout it is given, @timeout_ms.
 */
int info_verbs_probe(const char *dev, const char *ip, int timeout_ms,
		     struct info_verbs_caps *caps_p, char *why, size_t len);

/*
 * Whether rdma_cm works on 127.0.0.1 (bind, then resolve, each bounded by @timeout_ms):
 * true if it does; else false with the reason in @why.
 */
bool info_verbs_cm_loopback(int timeout_ms, char *why, size_t len);

#endif /* DDSS_APPS_INFO_VERBS_H */
