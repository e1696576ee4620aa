/*
 * SRSL messages at a lock's home (src/lock/srsl.c: on_msg and the home's handlers), as
 * peers send them, well-formed or not. srsl.c is compiled into this target (to reach its
 * static handler); the net below it is replaced by stubs that check what it sends.
 *
 * Input: [group size 1][down ranks 1] then messages, each [from 1][len 1][op 1][arg 1]
 * [lock 1][req 1]: a 24-byte SRSL message (or one of a fuzzed length) from rank `from`
 * about one of 4 lock ids, for request `req` (high bit clear: one of the requests this
 * input made so far, so releases and cancels name real requests; set: any id at all).
 *
 * Invariants: every message the home sends is a 24-byte REPLY to a rank of the group, for
 * a request id other than 0, with a status the protocol has (0, -EBUSY, -EINVAL, -ENOMEM);
 * a SYNC is answered 0 and grants nothing; and, while the input names only its own requests, the holders the home granted (and
 * that were not released or cancelled since) of a lock that belong to ranks that are up
 * are compatible: one exclusive holder, or only shared ones.
 */
#include "fuzz_common.h"

#include "lock/srsl.c"

#define LOCKS 4
#define MAXREQ 64
#define MAXHOLD 256

static ddss_net_msg_fn handler;
static void *handler_arg;
static struct ddss_tp tp;
static uint8_t down[16];
static bool consistent; /* every req named so far was one of ours */
static uint8_t handling; /* the op of the message being handled */

static struct {
	uint32_t rank;
	uint64_t lock, req;
	int mode;
} reqs[MAXREQ], holds[MAXHOLD];
static unsigned nreqs, nholds;

int ddss_net_on_msg(struct ddss_net *net, uint16_t tag, ddss_net_msg_fn fn, void *arg)
{
	(void)net;
	FUZZ_CHECK(tag == DDSS_SRSL_TAG);
	handler = fn;
	handler_arg = arg;
	return 0;
}

struct ddss_tp *ddss_net_tp(struct ddss_net *net)
{
	(void)net;
	return &tp;
}

static int fake_peer_info(struct ddss_tp *t, uint32_t rank, struct ddss_tp_peer_info *info)
{
	(void)t;
	FUZZ_CHECK(rank >= 1 && rank <= tp.cfg.size);
	info->state = down[rank] ? DDSS_TP_PEER_DOWN : DDSS_TP_PEER_UP;
	info->pool_len = 0;
	info->served = false;
	return 0;
}

static const struct ddss_tp_ops fake_ops = { .name = "fuzz", .peer_info = fake_peer_info };

void ddss_net_declare_dead(struct ddss_net *net, uint32_t rank)
{
	(void)net;
	FUZZ_CHECK(rank >= 1 && rank <= tp.cfg.size && down[rank]);
}

int64_t ddss_now_ns(void)
{
	return 0;
}

static int mode_of(uint32_t rank, uint64_t lock, uint64_t req)
{
	for (unsigned i = nreqs; i-- > 0;)
		if (reqs[i].rank == rank && reqs[i].lock == lock && reqs[i].req == req)
			return reqs[i].mode;
	return 0;
}

/* A grant of @mode on @lock: compatible with every holder of a rank that is up. */
static void check_grant(uint32_t rank, uint64_t lock, uint64_t req, int mode)
{
	for (unsigned i = 0; i < nholds; i++) {
		if (holds[i].lock != lock || down[holds[i].rank])
			continue;
		FUZZ_CHECK(mode == DDSS_LOCK_SHARED && holds[i].mode == DDSS_LOCK_SHARED);
	}
	if (nholds == MAXHOLD) {
		consistent = false;
		return;
	}
	holds[nholds].rank = rank;
	holds[nholds].lock = lock;
	holds[nholds].req = req;
	holds[nholds++].mode = mode;
}

/* Drop the first hold of @rank on @lock for @req (0: any) in @mode (0: any). */
static void drop_hold(uint32_t rank, uint64_t lock, uint64_t req, int mode)
{
	for (unsigned i = 0; i < nholds; i++) {
		if (holds[i].rank == rank && holds[i].lock == lock && (!req || holds[i].req == req) &&
		    (!mode || holds[i].mode == mode)) {
			holds[i] = holds[--nholds];
			return;
		}
	}
}

int ddss_net_send(struct ddss_net *net, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int32_t status;
	uint64_t lock, req;

	(void)net;
	FUZZ_CHECK(tag == DDSS_SRSL_TAG && len == SRSL_MSG_LEN);
	FUZZ_CHECK(peer >= 1 && peer <= tp.cfg.size);
	FUZZ_CHECK(wire_get32(p) == SRSL_REPLY);
	status = (int32_t)wire_get32(p + 4);
	lock = wire_get64(p + 8);
	req = wire_get64(p + 16);
	FUZZ_CHECK(req != 0);
	FUZZ_CHECK(status == 0 || status == -EBUSY || status == -EINVAL || status == -ENOMEM);
	if (down[peer])
		return -EHOSTDOWN; /* the home must undo such a grant */
	if (handling == SRSL_SYNC) {
		FUZZ_CHECK(status == 0);
		return 0;
	}
	if (!status && consistent) {
		int mode = mode_of(peer, lock, req);

		FUZZ_CHECK(mode == DDSS_LOCK_SHARED || mode == DDSS_LOCK_EXCLUSIVE);
		check_grant(peer, lock, req, mode);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct ddss_srsl *s = NULL;

	memset(down, 0, sizeof(down));
	tp.ops = &fake_ops;
	tp.cfg.size = 1 + fuzz_u8(&in) % 8;
	for (uint32_t r = 1, bits = fuzz_u8(&in); r <= tp.cfg.size; r++)
		down[r] = (bits >> (r - 1)) & 1;
	nreqs = nholds = 0;
	consistent = true;
	FUZZ_CHECK(ddss_srsl_create((struct ddss_net *)&tp, &s) == 0 && handler);
	while (in.left >= 6) {
		uint32_t from = 1 + fuzz_u8(&in) % tp.cfg.size;
		uint8_t len = fuzz_u8(&in), op = fuzz_u8(&in) % 8, arg = fuzz_u8(&in);
		uint64_t lock = 0x100 + fuzz_u8(&in) % LOCKS, req;
		uint8_t r = fuzz_u8(&in), msg[SRSL_MSG_LEN + 8];
		int mode = arg & 0x7f;

		if (r & 0x80) {
			req = r & 0x7f; /* any id at all */
			consistent = false;
		} else if (op == SRSL_REQ || !nreqs) {
			req = 1000 + nreqs;
		} else {
			req = reqs[r % nreqs].req;
			from = reqs[r % nreqs].rank;
			lock = reqs[r % nreqs].lock;
		}
		size_t sent = len % 9 ? SRSL_MSG_LEN : len % 33;
		bool whole = sent == SRSL_MSG_LEN;

		if (op == SRSL_REQ && nreqs == MAXREQ)
			consistent = false; /* its id is not unique any more */
		if (op == SRSL_REQ && nreqs < MAXREQ && !(r & 0x80) && whole) {
			reqs[nreqs].rank = from;
			reqs[nreqs].lock = lock;
			reqs[nreqs].req = req;
			reqs[nreqs++].mode = mode & SRSL_MODE_MASK;
		}
		wire_put32(msg, op);
		wire_put32(msg + 4, (uint32_t)mode | (arg & 0x80 ? SRSL_F_TRY : 0));
		wire_put64(msg + 8, lock);
		wire_put64(msg + 16, req);
		memset(msg + 24, 0xa5, 8);
		if (consistent && whole && op == SRSL_REL && mode_ok(mode))
			drop_hold(from, lock, req, mode);
		if (consistent && whole && op == SRSL_CANCEL)
			drop_hold(from, lock, req, 0);
		handling = op;
		handler(handler_arg, from, msg, sent);
	}
	ddss_srsl_stop(s);
	ddss_srsl_destroy(s);
	return 0;
}
