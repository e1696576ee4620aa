/*
 * The segment service as a caller sees it: what ddss_allocate_ss, ddss_lookup_ss,
 * ddss_release_ss and ddss_stat_ss (in direct mode: ddss_segment_allocate, ..., the calls
 * behind the API's table) make of the answers peers send (src/core/segment.c:
 * descriptor replies, the name directory's key, the RELEASE_BEGIN name and cachers bitmap),
 * through the real rpc layer (src/core/rpc.c: a reply is matched to its call by id and
 * copied into the caller's buffer). Both files are compiled in; the transport underneath
 * answers each request at once with the next reply from the input, and the descriptor
 * cache is a stub that checks what it is asked to keep.
 *
 * Input: [call 1][group size 1][key rank 2][slot 4] then, per request the call sends,
 * [flags 1][status 4][len 2][len bytes]: flags bit 0 answers with another id (the call
 * then times out), bit 1 sends the raw status, else the status is 0 or an errno.
 *
 * Invariants: every call returns 0 or -errno (as the API promises); a descriptor that gets
 * cached names a valid key homed at the rank that answered, a coherence model that exists
 * with a parameter that model accepts, a non-empty size and a data offset past the segment
 * header; a key handed to the user parses.
 */
#include "fuzz_common.h"

#include "core/rpc.c"
#include "core/segment.c"
#include "core/name_dir.c"

#include <errno.h>

static ddss_net_msg_fn handlers[DDSS_MSG_TAG_MAX];
static void *handler_args[DDSS_MSG_TAG_MAX];
static struct ddss_ctx ctx;
static struct fuzz_in in;
static struct ddss_seg_desc cached;
static int64_t clock_ns;

/* ---- transport, clock ---- */

static int peer_info(struct ddss_tp *tp, uint32_t rank, struct ddss_tp_peer_info *info_p)
{
	return -EOPNOTSUPP;
}

static const struct ddss_tp_ops tp_ops = { .name = "fuzz", .peer_info = peer_info };
static struct ddss_tp tp = { .ops = &tp_ops, .cfg = { .op_timeout_ms = 1000 }, .atomics = true };

int ddss_net_on_msg(struct ddss_net *net, uint16_t tag, ddss_net_msg_fn fn, void *arg)
{
	handlers[tag] = fn;
	handler_args[tag] = arg;
	return 0;
}

struct ddss_tp *ddss_net_tp(struct ddss_net *net)
{
	return &tp;
}

/* Static mode: names at a directory rank, whose replies are fuzzed (core/name_dir.c). */
struct ddss_member *ddss_net_member(struct ddss_net *net)
{
	return NULL;
}
int ddss_member_name_acquire(struct ddss_member *m, const char *name, bool create,
			     uint64_t *key_p) { abort(); }
int ddss_member_name_bind(struct ddss_member *m, const char *name, uint64_t segkey,
			  uint32_t home) { abort(); }
int ddss_member_name_abandon(struct ddss_member *m, const char *name) { abort(); }
int ddss_member_name_unbind(struct ddss_member *m, const char *name, uint64_t segkey)
{ abort(); }

/* Each look at the clock is 100 s later: a call without its reply times out at once. */
int64_t ddss_now_ns(void)
{
	return clock_ns += 100000000000ll;
}

static int32_t pick_status(uint8_t flags, uint32_t raw)
{
	static const int32_t st[] = { 0, 0, 0, 0, 0, 0, SEG_NAME_CREATE, -ESTALE, -EINVAL,
				      -ENOMEM, -EAGAIN, -EEXIST, -ENOENT, -EPROTO, -EHOSTDOWN };

	if (flags & 2)
		return (int32_t)raw;
	return st[raw % (sizeof(st) / sizeof(st[0]))];
}

/* A request goes out: answer it (or not) with the next reply of the input. */
int ddss_net_send(struct ddss_net *net, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	uint8_t msg[DDSS_TP_MSG_MAX + 16];
	uint8_t flags;
	uint32_t id, raw;
	size_t blen;

	FUZZ_CHECK(tag == DDSS_MSG_RPC_REQ && len >= DDSS_RPC_HDR && len <= DDSS_TP_MSG_MAX);
	FUZZ_CHECK(peer >= 1 && peer <= ctx.size);
	if (!in.left)
		return -EHOSTDOWN;
	id = wire_get32(buf);
	flags = fuzz_u8(&in);
	raw = fuzz_u32(&in);
	blen = fuzz_u16(&in) % (DDSS_TP_MSG_MAX - DDSS_RPC_HDR + 1);
	if (blen > in.left)
		blen = in.left;
	wire_put32(msg, flags & 1 ? id + 1 : id);
	wire_put32(msg + 4, (uint32_t)pick_status(flags, raw));
	fuzz_bytes(&in, msg + DDSS_RPC_HDR, blen);
	handlers[DDSS_MSG_RPC_REP](handler_args[DDSS_MSG_RPC_REP], peer, msg, DDSS_RPC_HDR + blen);
	return 0;
}

/* ---- what segment.c calls besides the rpc layer ---- */

int ddss_cl_allocate(struct ddss_client *cl, size_t nbytes, const struct ddss_seg_attr *attr,
		     ddss_key_t *key_p) { abort(); }
int ddss_cl_lookup(struct ddss_client *cl, const char *name, ddss_key_t *key_p) { abort(); }
int ddss_cl_release(struct ddss_client *cl, ddss_key_t key) { abort(); }
int ddss_cl_stat(struct ddss_client *cl, ddss_key_t key, struct ddss_seg_info *info_p) { abort(); }

int ddss_coh_choose(const struct ddss_seg_attr *attr, struct coh_choice *choice_p)
{
	choice_p->coherence = attr->coherence;
	choice_p->param = attr->coherence == DDSS_COHERENCE_DELTA ? attr->delta : 0;
	return 0;
}

static bool param_ok(uint32_t coherence, uint32_t param)
{
	switch (coherence) {
	case DDSS_COHERENCE_DELTA: return param >= 1 && param <= DDSS_DELTA_MAX;
	case DDSS_COHERENCE_TEMPORAL: return param >= 1;
	default: return param == 0;
	}
}

/* As src/coherence: the model and its parameter are checked, the size must be >= 1. */
int ddss_coh_data_len(uint32_t coherence, uint32_t param, uint64_t size, uint64_t *len_p)
{
	if (coherence > DDSS_COHERENCE_TEMPORAL || !param_ok(coherence, param) || size == 0)
		return -EINVAL;
	*len_p = size;
	return 0;
}

/* The fuzzed group's transport has atomics: every model may be allocated. */
int ddss_coh_check_caps(uint32_t coherence, bool atomics, const char *device)
{
	(void)coherence;
	(void)device;
	return atomics ? 0 : -EOPNOTSUPP;
}

uint32_t ddss_name_home(const char *name, uint32_t size)
{
	return (uint32_t)(strlen(name) % size) + 1;
}

const struct ddss_seg_desc *ddss_seg_cache_get(struct ddss_seg_cache *cache, uint64_t key)
{
	return NULL; /* always a miss: every stat asks the home */
}

void ddss_seg_cache_put(const struct ddss_seg_desc *desc)
{
	FUZZ_CHECK(desc == &cached);
}

struct ddss_seg_pending *ddss_seg_cache_begin(struct ddss_seg_cache *cache, uint64_t key)
{
	return malloc(1);
}

void ddss_seg_cache_cancel(struct ddss_seg_cache *cache, struct ddss_seg_pending *pending)
{
	free(pending);
}

int ddss_seg_cache_end(struct ddss_seg_cache *cache, struct ddss_seg_pending *pending,
		       const struct ddss_seg_loc *loc, uint32_t home,
		       const struct ddss_seg_desc **desc_p)
{
	struct ddss_key_parts k;

	free(pending);
#ifndef FUZZ_KNOWN_DESC_RANGE
	FUZZ_CHECK(ddss_key_parse(loc->key, &k) == 0 && k.rank == home);
	FUZZ_CHECK(loc->coherence <= DDSS_COHERENCE_TEMPORAL);
	FUZZ_CHECK(param_ok(loc->coherence, loc->param));
	FUZZ_CHECK(loc->size >= 1 && loc->data_off >= DDSS_SEG_HDR_LEN);
#else
	(void)k;
	(void)param_ok;
#endif
	cached = (struct ddss_seg_desc){ .key = loc->key, .home = home, .data_off = loc->data_off,
					 .size = loc->size, .coherence = loc->coherence,
					 .param = loc->param };
	*desc_p = &cached;
	return 0;
}

/* ---- the target ---- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static struct ddss_rpc *rpc;

	FUZZ_CHECK(ddss_rpc_open((struct ddss_net *)&ctx, NULL, NULL, &rpc) == 0);
	ctx.rpc = rpc;
	ctx.tp = &tp;
	ctx.connect_timeout_ms = 30000;
	return 0;
}

static void result_ok(int r)
{
#ifndef FUZZ_KNOWN_RPC_STATUS
	FUZZ_CHECK(r == 0 || (r < 0 && r >= -4095));
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ddss_seg_attr attr = { 0 };
	struct ddss_seg_info info;
	struct ddss_key_parts k;
	uint8_t call;
	uint32_t rank, slot;
	ddss_key_t key = 0;
	int r;

	in = (struct fuzz_in){ data, size };
	call = fuzz_u8(&in);
	ctx.size = fuzz_u8(&in) % 64 + 1;
	ctx.rank = 1;
	rank = fuzz_u16(&in) % ctx.size + 1;
	slot = fuzz_u32(&in) & DDSS_KEY_MAX_SLOT;
	switch (call % 5) {
	case 0:
	case 1:
		attr.placement = DDSS_PLACE_RANK;
		attr.rank = rank;
		attr.name = call % 5 ? "fuzz-segment" : NULL;
		r = ddss_segment_allocate(&ctx, 4096, &attr, &key);
		result_ok(r);
#ifndef FUZZ_KNOWN_DESC_RANGE
		if (r == 0)
			FUZZ_CHECK(ddss_key_parse(key, &k) == 0 && k.rank <= ctx.size);
#endif
		break;
	case 2:
		r = ddss_segment_lookup(&ctx, "fuzz-segment", &key);
		result_ok(r);
#ifndef FUZZ_KNOWN_DESC_RANGE
		if (r == 0)
			FUZZ_CHECK(ddss_key_parse(key, &k) == 0 && k.rank <= ctx.size);
#endif
		break;
	case 3:
		r = ddss_segment_release(&ctx, ddss_key_make(rank, slot, 1));
		result_ok(r);
		break;
	case 4:
		r = ddss_segment_stat(&ctx, ddss_key_make(rank, slot, 1), &info);
		result_ok(r);
		if (r == 0)
			FUZZ_CHECK(info.home == rank);
		break;
	}
	(void)k;
	return 0;
}
