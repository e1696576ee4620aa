/* Checking lock recovery messages from peers (recover_wire.h). No state, no I/O. */
#include "lock/recover_wire.h"

#include "ddss/ddss.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static bool rank_ok(uint32_t rank, uint32_t size)
{
	return rank >= 1 && rank <= size;
}

/* A waiter id (the sleeps bit is allowed); 0 only where @zero_ok. */
static bool id_ok(uint32_t id, uint32_t size, bool zero_ok)
{
	if (!id)
		return zero_ok;
	return rank_ok(id >> 16, size); /* every slot and window is one (lock_int.h) */
}

static int check_report(const uint8_t *w, const struct rc_msg *m, size_t len, uint32_t size)
{
	if (m->arg & ~(RC_CENSUS_SHARED | RC_CENSUS_UNPLACED) || m->pred > DDSS_LOCK_SLOTS ||
	    len != sizeof(*m) + (size_t)m->pred * RC_REQ_WORDS * sizeof(uint32_t))
		return -EPROTO;
	for (uint32_t i = 0; i < m->pred; i++, w += RC_REQ_WORDS * sizeof(uint32_t)) {
		uint32_t t[RC_REQ_WORDS];

		memcpy(t, w, sizeof(t));
		if (!id_ok(t[0], size, false) || !id_ok(t[1], size, true) ||
		    t[2] & ~(RC_REQ_WAITING | RC_REQ_SHARED | RC_REQ_TRYING))
			return -EPROTO;
	}
	return 0;
}

int lock_rc_decode(const void *buf, size_t len, uint32_t size, struct rc_msg *m)
{
	if (!buf || len < sizeof(*m) || !size)
		return -EPROTO;
	memcpy(m, buf, sizeof(*m));
	if (m->type == RC_XREPORT)
		return check_report((const uint8_t *)buf + sizeof(*m), m, len, size);
	if (len != sizeof(*m))
		return -EPROTO;
	switch (m->type) {
	case RC_CHECK:
		if (m->arg == RC_KIND_TURN)
			return 0; /* pred: a ticket's low bits, any value */
		return id_ok(m->pred, size, true) && m->arg == RC_KIND_DRAIN ? 0 : -EPROTO;
	case RC_SURVEY:
		if (m->arg == RC_KIND_TURN)
			return 0;
		return id_ok(m->pred, size, true) &&
			       (m->arg & RC_KIND_MASK) == RC_KIND_DRAIN &&
			       m->arg >> RC_FLUSHERS_SHIFT <= size ?
			       0 :
			       -EPROTO;
	case RC_FLUSH:
		return rank_ok(m->arg, size) ? 0 : -EPROTO;
	case RC_REPORT:
	case RC_ANSWER:
		return m->arg <= 1 ? 0 : -EPROTO;
	case RC_RECOVER:
		return !m->pred && !m->arg ? 0 : -EPROTO;
	case RC_RECOVERED:
		return m->arg <= 4095 ? 0 : -EPROTO;
	case RC_GONE:
		return m->id && !m->hdr && rank_ok(m->pred, size) && !m->arg ? 0 : -EPROTO;
	case RC_XSURVEY:
		return rank_ok(m->pred, size) && !m->arg ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}
