/*
 * Group barrier messages (src/net/barrier.c: ddss_net_barrier_on_msg), as peers send them,
 * well-formed or not. barrier.c is compiled into this target; the net below it is a stub
 * that checks what the coordinator sends.
 *
 * Input: [group size 1][this rank 1] then messages, each [from 1][len 1][kind 4][epoch 4].
 * Invariants: only rank 1 (the coordinator) sends, and only RELEASE messages, to ranks
 * 2..size: to all of them for an epoch in which it counted `size` arrivals, or that
 * epoch's RELEASE to the sender alone for an ARRIVE repeated after the release (the
 * sender had arrived: its RELEASE was lost); a RELEASE from a rank other than 1 never
 * moves the released epoch; the released epoch never goes back.
 */
#include "fuzz_common.h"

#include "net/barrier.c"

static struct ddss_net net;
static struct ddss_tp tp;
static uint32_t arrived[9]; /* net.barrier_arrived: ranks 1..8 */
static unsigned sends;
static uint32_t last_to, last_epoch; /* the peer and epoch of the last RELEASE */
static enum ddss_tp_peer_state states[9]; /* net.peer_state: every rank up */

int ddss_net_send(struct ddss_net *n, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	struct barrier_msg m;

	FUZZ_CHECK(n == &net && tag == DDSS_MSG_BARRIER && len == sizeof(m));
	FUZZ_CHECK(net.env.rank == 1 && peer >= 2 && peer <= net.env.size);
	memcpy(&m, buf, sizeof(m));
	/* The coordinator releases, or answers a newcomer's QUERY (not counted). */
	FUZZ_CHECK(le32toh(m.kind) == BARRIER_RELEASE || le32toh(m.kind) == BARRIER_STATE);
	if (le32toh(m.kind) == BARRIER_RELEASE) {
		sends++;
		last_to = peer;
		last_epoch = le32toh(m.epoch);
	}
	return 0;
}

int ddss_net_cond_wait(struct ddss_net *n, int64_t deadline_ns)
{
	(void)n;
	(void)deadline_ns;
	return -ETIMEDOUT;
}

/* Coordinator mode (net/coordinator.c): never reached (no env.coord here). */
int ddss_coord_set_serving(struct ddss_coord *c)
{
	(void)c;
	abort();
}

bool ddss_coord_in_view(struct ddss_coord *c, uint32_t rank)
{
	(void)c;
	(void)rank;
	abort();
}

int64_t ddss_now_ns(void)
{
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	memset(&net, 0, sizeof(net));
	memset(arrived, 0, sizeof(arrived));
	net.barrier_arrived = arrived;
	net.tp = &tp;
	for (unsigned r = 0; r < sizeof(states) / sizeof(states[0]); r++)
		states[r] = DDSS_TP_PEER_UP;
	net.peer_state = states;
	net.env.size = 1 + fuzz_u8(&in) % 8;
	net.env.rank = 1 + fuzz_u8(&in) % net.env.size;
	pthread_mutex_init(&net.mu, NULL);
	pthread_cond_init(&net.cv, NULL);
	sends = 0;
	while (in.left >= 10) {
		uint32_t from = 1 + fuzz_u8(&in) % net.env.size, before = net.barrier_released;
		uint8_t len = fuzz_u8(&in), msg[16];
		uint32_t kind, epoch, had_arrived = arrived[from];
		unsigned sent_before = sends;

		fuzz_bytes(&in, msg, 8);
		memset(msg + 8, 0x5a, 8);
		ddss_net_barrier_on_msg(&net, from, msg, len % 5 ? 8 : len % 17);
		if (from != 1 && net.env.rank != 1)
			FUZZ_CHECK(net.barrier_released == before); /* only the coordinator releases */
		FUZZ_CHECK((int32_t)(net.barrier_released - before) >= 0);
		/* None, all others (completed), or the sender again: a repeated ARRIVE of an
		 * epoch released already with that sender counted. */
		memcpy(&kind, msg, sizeof(kind));
		memcpy(&epoch, msg + 4, sizeof(epoch));
		kind = le32toh(kind), epoch = le32toh(epoch);
		FUZZ_CHECK(sends == sent_before || sends - sent_before == net.env.size - 1 ||
			   (sends - sent_before == 1 && kind == BARRIER_ARRIVE && from != 1 &&
			    last_to == from && last_epoch == epoch &&
			    (int32_t)(before - epoch) >= 0 && (int32_t)(had_arrived - epoch) >= 0));
	}
	pthread_cond_destroy(&net.cv);
	pthread_mutex_destroy(&net.mu);
	return 0;
}
