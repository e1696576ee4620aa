/*
 * The verbs provider's wire (src/net/verbs/verbs_wire.c): rdma_cm private data (hello,
 * authenticated connect request with the target's epoch, reject reason and epoch) and the
 * header of a control message. Pure functions, no device needed.
 *
 * Input: the whole input is offered to each decoder, as a peer's private data or a
 * received message would be. Invariants: what a decoder accepts re-encodes to the same
 * leading bytes; a reject reason is 0 (not ours, and then no epoch), -EPROTO or -errno in
 * 1..4095, its epoch what its bytes 8..15 say (0 if shorter); an accepted
 * message header says exactly the bytes that arrived and at most DDSS_TP_MSG_MAX.
 */
#include "fuzz_common.h"
#include "net/verbs/verbs_int.h"

#include <errno.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct verbs_hello h, h2;
	unsigned char out[VERBS_HELLO_LEN];
	uint16_t tag;
	uint32_t len;
	int r;

	if (verbs_hello_decode(data, size, &h) == 0) {
		FUZZ_CHECK(size >= VERBS_HELLO_LEN);
		verbs_hello_encode(&h, out);
		FUZZ_CHECK(memcmp(out, data, VERBS_HELLO_LEN) == 0);
		FUZZ_CHECK(verbs_hello_decode(out, sizeof(out), &h2) == 0);
		FUZZ_CHECK(h2.group == h.group && h2.rank == h.rank && h2.size == h.size &&
			   h2.pool_addr == h.pool_addr && h2.pool_len == h.pool_len &&
			   h2.rkey == h.rkey && h2.flags == h.flags);
	}

	struct verbs_auth_req a, a2;
	unsigned char aout[VERBS_AUTH_REQ_LEN];

	if (verbs_auth_req_decode(data, size, &a) == 0) {
		FUZZ_CHECK(size >= VERBS_AUTH_REQ_LEN);
		verbs_auth_req_encode(&a, aout);
		FUZZ_CHECK(memcmp(aout, data, VERBS_AUTH_REQ_LEN) == 0);
		FUZZ_CHECK(verbs_auth_req_decode(aout, sizeof(aout), &a2) == 0);
		FUZZ_CHECK(a2.group == a.group && a2.rank == a.rank && a2.epoch == a.epoch &&
			   a2.flags == a.flags &&
			   !memcmp(a2.nonce, a.nonce, sizeof(a.nonce)) &&
			   !memcmp(a2.proof, a.proof, sizeof(a.proof)));
	}

	uint64_t epoch = 1, epoch2;

	r = verbs_reject_decode(data, size, &epoch);
	FUZZ_CHECK(r == 0 || r == -EPROTO || (r < 0 && r > -4096));
	FUZZ_CHECK(r || epoch == 0);
	FUZZ_CHECK(size >= VERBS_REJECT_LEN || epoch == 0);
	if (r && r != -EPROTO) {
		unsigned char rej[VERBS_REJECT_LEN];
		size_t n = size < VERBS_REJECT_LEN ? 8 : VERBS_REJECT_LEN;

		verbs_reject_encode(r, epoch, rej);
		FUZZ_CHECK(memcmp(rej, data, n) == 0);
		FUZZ_CHECK(verbs_reject_decode(rej, sizeof(rej), &epoch2) == r && epoch2 == epoch);
		FUZZ_CHECK(verbs_reject_decode(rej, 8, &epoch2) == r && epoch2 == 0);
	}

	if (verbs_msg_hdr_decode(data, size, &tag, &len) == 0) {
		unsigned char m[VERBS_MSG_HDR_LEN];
		uint16_t tag2;
		uint32_t len2;

		FUZZ_CHECK(len <= DDSS_TP_MSG_MAX && size == VERBS_MSG_HDR_LEN + (size_t)len);
		verbs_msg_hdr_encode(tag, len, m);
		FUZZ_CHECK(memcmp(m, data, VERBS_MSG_HDR_LEN) == 0);
		FUZZ_CHECK(verbs_msg_hdr_decode(m, VERBS_MSG_HDR_LEN + (size_t)len, &tag2, &len2) == 0 &&
			   tag2 == tag && len2 == len);
	}
	return 0;
}
