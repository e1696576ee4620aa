/*
 * Lock recovery messages from peers (src/lock/recover_wire.c): lock_rc_decode checks every
 * message of tag DDSS_MSG_LOCK before a handler sees it.
 *
 * Input: [group size 1] then one message as the transport delivers it.
 * Invariants: the answer is 0 or -EPROTO; an accepted message is exactly one header (a
 * census report: the header and one triple per request it counts, at most DDSS_LOCK_SLOTS)
 * whose header is the input's first bytes; its type is one of the protocol's; every rank
 * it names is in 1..size and every waiter id names a rank of the group and a slot below
 * DDSS_LOCK_SLOTS; flags and answers are in range.
 */
#include "fuzz_common.h"
#include "ddss/ddss.h"
#include "lock/recover_wire.h"

#include <errno.h>

static int id_ok(uint32_t id, uint32_t size)
{
	/* The low 16 bits (sleeps, generation window, slot: lock_int.h) are all valid. */
	return (id >> 16) >= 1 && (id >> 16) <= size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct fuzz_in in = { data, len };
	uint32_t size = (uint32_t)fuzz_u8(&in) % 17; /* 0 (no group) .. 16 */
	struct rc_msg m;
	int r = lock_rc_decode(in.p, in.left, size, &m);

	FUZZ_CHECK(r == 0 || r == -EPROTO);
	if (r)
		return 0;
	FUZZ_CHECK(in.left >= sizeof(m) && !memcmp(&m, in.p, sizeof(m)));
	FUZZ_CHECK(size >= 1);
	switch (m.type) {
	case RC_XREPORT: {
		const uint8_t *w = in.p + sizeof(m);

		FUZZ_CHECK(m.pred <= DDSS_LOCK_SLOTS);
		FUZZ_CHECK(in.left == sizeof(m) + (size_t)m.pred * RC_REQ_WORDS * 4);
		FUZZ_CHECK(!(m.arg & ~(RC_CENSUS_SHARED | RC_CENSUS_UNPLACED)));
		for (uint32_t i = 0; i < m.pred; i++, w += RC_REQ_WORDS * 4) {
			uint32_t t[RC_REQ_WORDS];

			memcpy(t, w, sizeof(t));
			FUZZ_CHECK(id_ok(t[0], size) && (!t[1] || id_ok(t[1], size)));
			FUZZ_CHECK(t[2] <= (RC_REQ_WAITING | RC_REQ_SHARED | RC_REQ_TRYING));
		}
		return 0;
	}
	case RC_CHECK: /* a drain check names the epoch's tail; a turn check, any ticket */
		FUZZ_CHECK(m.arg == RC_KIND_DRAIN || m.arg == RC_KIND_TURN);
		FUZZ_CHECK(m.arg == RC_KIND_TURN || !m.pred || id_ok(m.pred, size));
		break;
	case RC_SURVEY: /* as the check; a drain survey also says how many ranks flush */
		FUZZ_CHECK(m.arg == RC_KIND_TURN || (m.arg & RC_KIND_MASK) == RC_KIND_DRAIN);
		FUZZ_CHECK(m.arg == RC_KIND_TURN || m.arg >> RC_FLUSHERS_SHIFT <= size);
		FUZZ_CHECK(m.arg == RC_KIND_TURN || !m.pred || id_ok(m.pred, size));
		break;
	case RC_FLUSH:
		FUZZ_CHECK(m.arg >= 1 && m.arg <= size);
		break;
	case RC_REPORT:
	case RC_ANSWER:
		FUZZ_CHECK(m.arg <= 1);
		break;
	case RC_RECOVER:
		FUZZ_CHECK(!m.pred && !m.arg);
		break;
	case RC_RECOVERED:
		FUZZ_CHECK(m.arg <= 4095);
		break;
	case RC_XSURVEY:
		FUZZ_CHECK(m.pred >= 1 && m.pred <= size);
		break;
	case RC_GONE: /* names a rank; needs an answer */
		FUZZ_CHECK(m.pred >= 1 && m.pred <= size && m.id && !m.hdr && !m.arg);
		break;
	default:
		FUZZ_CHECK(!"a type the protocol does not have was accepted");
	}
	FUZZ_CHECK(in.left == sizeof(m));
	return 0;
}
