/*
 * The tcp provider's wire (src/net/tcp/tcp_wire.c): the 48-byte frame header, the 88-byte
 * hello (also the AUTH frames' payload), and the serving side's check of a request header
 * against its pool.
 *
 * Input: [header 48][hello 88][pool_len 8] (missing bytes read as zeros).
 * Invariants: a header or hello that decodes re-encodes to the same bytes (the hello has
 * no reserved bytes: unknown flags are refused); an accepted kind is in range, and its
 * header flags hold only the fence, and only on a one-sided request (READ, WRITE, CAS,
 * FADD); a request
 * the check accepts lies inside the pool, with the per-kind rules of tcp_wire_check_request;
 * the check answers only 0, -EINVAL, -ERANGE or -EPROTO.
 */
#include "fuzz_common.h"
#include "net/tcp/tcp_wire.h"
#include "net/transport.h"

#include <errno.h>

static int in_range_ref(uint64_t off, uint64_t len, uint64_t pool_len)
{
	return (unsigned __int128)off + len <= pool_len;
}

static void check_request(const struct tcp_wire_hdr *h, uint64_t pool_len)
{
	int r = tcp_wire_check_request(h, pool_len);

	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE || r == -EPROTO);
	if (r == -EINVAL || r == -ERANGE)
		/* Answered with an error after draining the payload: only for a sane length. */
		FUZZ_CHECK(h->len <= pool_len);
	if (r)
		return;
	switch (h->kind) {
	case TCP_K_READ:
		FUZZ_CHECK(h->len == 0 && h->a > 0 && in_range_ref(h->off, h->a, pool_len));
		break;
	case TCP_K_WRITE:
		FUZZ_CHECK(h->len > 0 && in_range_ref(h->off, h->len, pool_len));
		break;
	case TCP_K_CAS:
	case TCP_K_FADD:
		FUZZ_CHECK(h->len == 0 && h->off % 8 == 0 && in_range_ref(h->off, 8, pool_len));
		break;
	case TCP_K_NOTIFY:
		FUZZ_CHECK(h->len == 0 && h->a <= UINT32_MAX);
		break;
	case TCP_K_MSG:
		FUZZ_CHECK(h->len <= DDSS_TP_MSG_MAX);
		break;
	default:
		FUZZ_CHECK(!"a reply or handshake kind accepted as a request");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	unsigned char raw[TCP_WIRE_HDR_LEN], hraw[TCP_WIRE_HELLO_LEN], out[TCP_WIRE_HDR_LEN];
	struct tcp_wire_hdr h, h2;
	struct tcp_wire_hello hello, hello2;
	uint64_t pool_len;
	int r;

	fuzz_bytes(&in, raw, sizeof(raw));
	fuzz_bytes(&in, hraw, sizeof(hraw));
	pool_len = fuzz_u64(&in);

	if (tcp_wire_decode_hdr(raw, &h) == 0) {
		FUZZ_CHECK(h.kind >= TCP_K_READ && h.kind < TCP_K_MAX_);
		FUZZ_CHECK((h.flags & ~(TCP_WIRE_F_FENCE | TCP_WIRE_F_BOUND)) == 0);
		FUZZ_CHECK(!h.flags || h.kind == TCP_K_READ || h.kind == TCP_K_WRITE ||
			   h.kind == TCP_K_CAS || h.kind == TCP_K_FADD);
		tcp_wire_encode_hdr(&h, out);
		FUZZ_CHECK(memcmp(out, raw, sizeof(raw)) == 0);
		FUZZ_CHECK(tcp_wire_decode_hdr(out, &h2) == 0);
		FUZZ_CHECK(h2.kind == h.kind && h2.flags == h.flags && h2.tag == h.tag &&
			   h2.len == h.len &&
			   h2.status == h.status && h2.seq == h.seq && h2.off == h.off &&
			   h2.a == h.a && h2.b == h.b);
		check_request(&h, pool_len);
	}
	/* The check also sees headers no decoder produced (kind out of range, etc.). */
	memset(&h2, 0, sizeof(h2));
	memcpy(&h2.kind, raw, 1);
	memcpy(&h2.len, raw + 4, 4);
	memcpy(&h2.off, raw + 24, 8);
	memcpy(&h2.a, raw + 32, 8);
	r = tcp_wire_check_request(&h2, pool_len);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE || r == -EPROTO);
	FUZZ_CHECK(tcp_wire_in_range(h2.off, h2.a, pool_len) == in_range_ref(h2.off, h2.a, pool_len));

	r = tcp_wire_decode_hello(hraw, &hello);
	FUZZ_CHECK(r == 0 || r == -EPROTO || r == -EPROTONOSUPPORT);
	if (r == 0) {
		unsigned char hout[TCP_WIRE_HELLO_LEN];

		FUZZ_CHECK(hello.magic == TCP_WIRE_MAGIC && hello.version == TCP_WIRE_VERSION);
		tcp_wire_encode_hello(&hello, hout);
		FUZZ_CHECK(memcmp(hout, hraw, sizeof(hout)) == 0);
		FUZZ_CHECK((hello.flags & ~TCP_WIRE_HELLO_FLAGS) == 0);
		memset(&hello2, 0xa5, sizeof(hello2));
		FUZZ_CHECK(tcp_wire_decode_hello(hout, &hello2) == 0);
		FUZZ_CHECK(hello2.from_rank == hello.from_rank && hello2.to_rank == hello.to_rank &&
			   hello2.size == hello.size && hello2.group == hello.group &&
			   hello2.pool_len == hello.pool_len && hello2.flags == hello.flags &&
			   !memcmp(hello2.nonce, hello.nonce, sizeof(hello.nonce)) &&
			   !memcmp(hello2.proof, hello.proof, sizeof(hello.proof)));
	}
	return 0;
}
