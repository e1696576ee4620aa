/*
 * What the device can do, decided once at open, and the test switch that takes
 * capabilities away: DDSS_VERBS_DISABLE=atomics,srq (comma separated) makes the provider
 * behave as if the device lacked them, so that the fallback paths run in CI on rxe.
 * Also how a fence is kept (verbs_fence_decide) and the ACK timeout (verbs_ack_timeout_decide).
 */
#include "net/verbs/verbs_int.h"

#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool verbs_simulate_lack(const char *cap)
{
	const char *list = getenv("DDSS_VERBS_DISABLE");
	size_t n = strlen(cap);

	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && strncmp(p, cap, n) == 0)
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

int verbs_slow_teardown_decide(struct verbs_tp *vt)
{
	long ms;

	if (ddss_env_long("DDSS_VERBS_SLOW_TEARDOWN_MS", 0, 60000, 0, &ms))
		return -EINVAL; /* it said why */
	vt->slow_teardown_ms = (int)ms;
	return 0;
}

void verbs_simulate_slow_teardown(const struct verbs_tp *vt)
{
	struct timespec ts = { .tv_sec = vt->slow_teardown_ms / 1000,
			       .tv_nsec = (vt->slow_teardown_ms % 1000) * 1000000l };

	while (vt->slow_teardown_ms && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * A fenced WR (DDSS_TP_FENCE) must not start before the QP's earlier READs and atomics
 * have completed. A NIC keeps that with IBV_SEND_FENCE. rxe cannot be trusted to: its
 * requester sets a wait_fence flag that its completer clears, in two tasks with no ordering
 * between them, and a lost wake-up leaves the QP sending nothing, ever (seen in the guest:
 * the QP's send PSN frozen, no retransmission, 3 of 16 runs of ddss-clients-bench; 0 of 16
 * without the flag). So on rxe the poster keeps the fence itself: it waits until the QP's
 * earlier WRs have completed, then posts without the flag. Same order, one round trip
 * that the fence costs anyway. DDSS_VERBS_FENCE=nic or wait overrides the choice.
 */
/*
 * A switch of the form NAME=auto|@a|@b: 1 for @a, 2 for @b, 0 for auto (unset, empty or
 * anything else, which is warned about).
 */
int verbs_env_choice(const char *name, const char *a, const char *b)
{
	const char *env = getenv(name);

	if (env && strcmp(env, a) == 0)
		return 1;
	if (env && strcmp(env, b) == 0)
		return 2;
	if (env && *env && strcmp(env, "auto") != 0)
		DDSS_WARN("verbs: %s=%s is not auto, %s or %s; using auto", name, env, a, b);
	return 0;
}

const char *verbs_fence_decide(struct verbs_tp *vt, uint32_t vendor_id)
{
	switch (verbs_env_choice("DDSS_VERBS_FENCE", "wait", "nic")) {
	case 1:
		vt->fence_by_wait = true;
		return "kept by waiting (DDSS_VERBS_FENCE=wait)";
	case 2:
		vt->fence_by_wait = false;
		return "IBV_SEND_FENCE (DDSS_VERBS_FENCE=nic)";
	}
	vt->fence_by_wait = vendor_id == RXE_VENDOR_ID;
	return vt->fence_by_wait ? "kept by waiting (rxe's IBV_SEND_FENCE can stall a QP)" :
				   "IBV_SEND_FENCE";
}

/*
 * The local ACK timeout (IB code: 4.096 us << code): VERBS_ACK_TIMEOUT, or on rxe
 * VERBS_ACK_TIMEOUT_RXE (verbs_int.h says why); DDSS_VERBS_ACK_TIMEOUT=1..31 overrides it
 * (a fabric with long round trips, or an experiment). -EINVAL for anything else.
 */
int verbs_ack_timeout_decide(struct verbs_tp *vt, uint32_t vendor_id)
{
	const char *s = getenv("DDSS_VERBS_ACK_TIMEOUT");
	char *end;
	long v;

	vt->ack_timeout = vendor_id == RXE_VENDOR_ID ? VERBS_ACK_TIMEOUT_RXE : VERBS_ACK_TIMEOUT;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 1 || v > 31) {
		DDSS_ERR("verbs: DDSS_VERBS_ACK_TIMEOUT=%s: want an IB timeout code from 1 to 31 "
			 "(4.096 us << code; default %u here)", s, vt->ack_timeout);
		return -EINVAL;
	}
	vt->ack_timeout = (uint8_t)v;
	DDSS_INFO("verbs: ACK timeout code %ld (%.1f ms)", v, 4.096e-3 * (double)(1L << v));
	return 0;
}

/*
 * DDSS_VERBS_MAX_MSG=N (bytes, 64 up to the port's): split transfers into messages of at
 * most N bytes, as a port with a smaller largest message would. For tests of the paths
 * that post a transfer as several WRs (verbs_provider.c, post_rw), which real ports reach
 * only past 1-2 GiB. Anything else: -EINVAL (the transport does not open).
 */
int verbs_max_msg_lower(struct verbs_tp *vt)
{
	const char *s = getenv("DDSS_VERBS_MAX_MSG");
	char *end;
	unsigned long long n;

	if (!s || !*s)
		return 0;
	errno = 0;
	n = strtoull(s, &end, 10);
	if (errno || *end || *s == '-' || n < 64 || n > vt->max_msg) {
		DDSS_ERR("verbs: DDSS_VERBS_MAX_MSG=%s is not 64..%u", s, vt->max_msg);
		return -EINVAL;
	}
	vt->max_msg = (uint32_t)n;
	DDSS_INFO("verbs: messages of at most %llu bytes (DDSS_VERBS_MAX_MSG)", n);
	return 0;
}
