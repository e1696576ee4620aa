/*
 * Encoding of what travels outside RDMA operations: the rdma_cm handshake (private data of
 * connect and accept), reject reasons, and the header of a control message. Fixed layouts,
 * little-endian, checked field by field: a peer is not trusted to send sane bytes.
 */
#include "net/verbs/verbs_int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#define HELLO_MAGIC 0x56535344u  /* "DDSV" */
#define REJECT_MAGIC 0x52535344u /* "DDSR" */
#define MSG_MAGIC 0x4d44u        /* "DM" */
#define PROTO_VERSION 2u /* 2: lock records sealed a nibble a byte (lock_int.h) */

static void put32(unsigned char *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* magic 4 | version 4 | group 8 | rank 4 | size 4 | pool_addr 8 | pool_len 8 | rkey 4 | flags 4
 * (flags was 0 before VERBS_HELLO_TAKES_MSGS: an older rank refuses a hello that sets it) */
void verbs_hello_encode(const struct verbs_hello *h, unsigned char out[VERBS_HELLO_LEN])
{
	memset(out, 0, VERBS_HELLO_LEN);
	put32(out, HELLO_MAGIC);
	put32(out + 4, PROTO_VERSION);
	put64(out + 8, h->group);
	put32(out + 16, h->rank);
	put32(out + 20, h->size);
	put64(out + 24, h->pool_addr);
	put64(out + 32, h->pool_len);
	put32(out + 40, h->rkey);
	put32(out + 44, h->flags);
}

int verbs_hello_decode(const void *buf, size_t len, struct verbs_hello *h)
{
	const unsigned char *p = buf;

	/* Transports may pad private data (IB CM rounds it up), so only a minimum is checked. */
	if (!p || len < VERBS_HELLO_LEN || get32(p) != HELLO_MAGIC || get32(p + 4) != PROTO_VERSION ||
	    (get32(p + 44) & ~VERBS_HELLO_TAKES_MSGS) != 0)
		return -EPROTO;
	h->group = get64(p + 8);
	h->rank = get32(p + 16);
	h->size = get32(p + 20);
	h->pool_addr = get64(p + 24);
	h->pool_len = get64(p + 32);
	h->rkey = get32(p + 40);
	h->flags = get32(p + 44);
	return 0;
}

/* Version 2 (epoch, no size) has a magic of its own: "DDA2"; "DDA3" is the same request
 * from an initiator that takes SENDs on its outgoing QP (VERBS_HELLO_TAKES_MSGS). */
#define AUTH_REQ_MAGIC 0x32414444u
#define AUTH_REQ_MAGIC_MSGS 0x33414444u

/* magic 4 | group 8 | rank 4 | epoch 8 | nonce 16 | proof 16 */
void verbs_auth_req_encode(const struct verbs_auth_req *a, unsigned char out[VERBS_AUTH_REQ_LEN])
{
	put32(out, a->flags & VERBS_HELLO_TAKES_MSGS ? AUTH_REQ_MAGIC_MSGS : AUTH_REQ_MAGIC);
	put64(out + 4, a->group);
	put32(out + 12, a->rank);
	put64(out + 16, a->epoch);
	memcpy(out + 24, a->nonce, sizeof(a->nonce));
	memcpy(out + 40, a->proof, sizeof(a->proof));
}

int verbs_auth_req_decode(const void *buf, size_t len, struct verbs_auth_req *a)
{
	const unsigned char *p = buf;

	if (!p || len < VERBS_AUTH_REQ_LEN ||
	    (get32(p) != AUTH_REQ_MAGIC && get32(p) != AUTH_REQ_MAGIC_MSGS))
		return -EPROTO;
	a->flags = get32(p) == AUTH_REQ_MAGIC_MSGS ? VERBS_HELLO_TAKES_MSGS : 0;
	a->group = get64(p + 4);
	a->rank = get32(p + 12);
	a->epoch = get64(p + 16);
	memcpy(a->nonce, p + 24, sizeof(a->nonce));
	memcpy(a->proof, p + 40, sizeof(a->proof));
	return 0;
}

/* magic 4 | errno 4 | epoch 8 (older peers sent the first 8 bytes only) */
void verbs_reject_encode(int err, uint64_t epoch, unsigned char out[VERBS_REJECT_LEN])
{
	put32(out, REJECT_MAGIC);
	put32(out + 4, (uint32_t)(err < 0 ? -err : err));
	put64(out + 8, epoch);
}

int verbs_reject_decode(const void *buf, size_t len, uint64_t *epoch_p)
{
	const unsigned char *p = buf;
	uint32_t e;

	if (epoch_p)
		*epoch_p = 0;
	if (!p || len < 8 || get32(p) != REJECT_MAGIC)
		return 0;
	e = get32(p + 4);
	if (epoch_p && len >= VERBS_REJECT_LEN)
		*epoch_p = get64(p + 8);
	return e > 0 && e < 4096 ? -(int)e : -EPROTO;
}

/* magic 2 | tag 2 | len 4, then len payload bytes */
void verbs_msg_hdr_encode(uint16_t tag, uint32_t len, unsigned char out[VERBS_MSG_HDR_LEN])
{
	out[0] = MSG_MAGIC & 0xff;
	out[1] = MSG_MAGIC >> 8;
	out[2] = tag & 0xff;
	out[3] = tag >> 8;
	put32(out + 4, len);
}

int verbs_msg_hdr_decode(const void *buf, size_t total, uint16_t *tag_p, uint32_t *len_p)
{
	const unsigned char *p = buf;
	uint32_t len;

	if (total < VERBS_MSG_HDR_LEN || (p[0] | p[1] << 8) != MSG_MAGIC)
		return -EPROTO;
	len = get32(p + 4);
	if (len > DDSS_TP_MSG_MAX || total != VERBS_MSG_HDR_LEN + (size_t)len)
		return -EPROTO;
	*tag_p = (uint16_t)(p[2] | p[3] << 8);
	*len_p = len;
	return 0;
}
