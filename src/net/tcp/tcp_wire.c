#include "net/tcp/tcp_wire.h"
#include "net/transport.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

static void put16(unsigned char *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(unsigned char *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t get16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* Layout: kind u8 | flags u8 | tag u16 | len u32 | status i32 | rsvd u32 | seq | off | a | b */
void tcp_wire_encode_hdr(const struct tcp_wire_hdr *h, unsigned char out[TCP_WIRE_HDR_LEN])
{
	out[0] = h->kind;
	out[1] = h->flags;
	put16(out + 2, h->tag);
	put32(out + 4, h->len);
	put32(out + 8, (uint32_t)h->status);
	put32(out + 12, 0);
	put64(out + 16, h->seq);
	put64(out + 24, h->off);
	put64(out + 32, h->a);
	put64(out + 40, h->b);
}

int tcp_wire_decode_hdr(const unsigned char in[TCP_WIRE_HDR_LEN], struct tcp_wire_hdr *h)
{
	if (in[0] == 0 || in[0] >= TCP_K_MAX_ || (in[1] & ~(TCP_WIRE_F_FENCE | TCP_WIRE_F_BOUND)) ||
	    get32(in + 12) != 0)
		return -EPROTO;
	/* Both flags qualify a one-sided request; on anything else they are garbage. */
	if (in[1] && in[0] != TCP_K_READ && in[0] != TCP_K_WRITE && in[0] != TCP_K_CAS &&
	    in[0] != TCP_K_FADD)
		return -EPROTO;
	h->kind = in[0];
	h->flags = in[1];
	h->tag = get16(in + 2);
	h->len = get32(in + 4);
	h->status = (int32_t)get32(in + 8);
	h->seq = get64(in + 16);
	h->off = get64(in + 24);
	h->a = get64(in + 32);
	h->b = get64(in + 40);
	return 0;
}

/* Layout: magic | version | from | to | size | flags | group u64 | pool_len u64 | nonce 16 |
 * proof 32 */
void tcp_wire_encode_hello(const struct tcp_wire_hello *hello, unsigned char out[TCP_WIRE_HELLO_LEN])
{
	put32(out, hello->magic);
	put32(out + 4, hello->version);
	put32(out + 8, hello->from_rank);
	put32(out + 12, hello->to_rank);
	put32(out + 16, hello->size);
	put32(out + 20, hello->flags);
	put64(out + 24, hello->group);
	put64(out + 32, hello->pool_len);
	memcpy(out + 40, hello->nonce, sizeof(hello->nonce));
	memcpy(out + 56, hello->proof, sizeof(hello->proof));
}

int tcp_wire_decode_hello(const unsigned char in[TCP_WIRE_HELLO_LEN], struct tcp_wire_hello *hello)
{
	hello->magic = get32(in);
	hello->version = get32(in + 4);
	if (hello->magic != TCP_WIRE_MAGIC)
		return -EPROTO;
	if (hello->version != TCP_WIRE_VERSION)
		return -EPROTONOSUPPORT;
	hello->from_rank = get32(in + 8);
	hello->to_rank = get32(in + 12);
	hello->size = get32(in + 16);
	hello->flags = get32(in + 20);
	if ((hello->flags & ~TCP_WIRE_HELLO_FLAGS) ||
	    (hello->flags & TCP_WIRE_HELLO_INTEGRITY && hello->flags & TCP_WIRE_HELLO_ENCRYPT))
		return -EPROTO;
	hello->group = get64(in + 24);
	hello->pool_len = get64(in + 32);
	memcpy(hello->nonce, in + 40, sizeof(hello->nonce));
	memcpy(hello->proof, in + 56, sizeof(hello->proof));
	return 0;
}

int tcp_wire_check_request(const struct tcp_wire_hdr *h, uint64_t pool_len)
{
	switch (h->kind) {
	case TCP_K_READ:
		if (h->len != 0)
			return -EPROTO;
		if (h->a == 0)
			return -EINVAL;
		return tcp_wire_in_range(h->off, h->a, pool_len) ? 0 : -ERANGE;
	case TCP_K_WRITE:
		/* A payload larger than our whole pool can only be garbage: don't drain it. */
		if (h->len > pool_len)
			return -EPROTO;
		if (h->len == 0)
			return -EINVAL;
		return tcp_wire_in_range(h->off, h->len, pool_len) ? 0 : -ERANGE;
	case TCP_K_CAS:
	case TCP_K_FADD:
		if (h->len != 0)
			return -EPROTO;
		if (h->off % 8)
			return -EINVAL;
		return tcp_wire_in_range(h->off, 8, pool_len) ? 0 : -ERANGE;
	case TCP_K_NOTIFY:
		return h->len == 0 && h->a <= UINT32_MAX ? 0 : -EPROTO;
	case TCP_K_MSG:
		return h->len <= DDSS_TP_MSG_MAX ? 0 : -EPROTO;
	default:
		/* Replies and handshakes never travel towards a serving rank. */
		return -EPROTO;
	}
}
