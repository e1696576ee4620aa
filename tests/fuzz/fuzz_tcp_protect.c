/*
 * Protected tcp frames (src/net/tcp/tcp_protect.c, DDSS_TCP_PROTECT): gathering a sealed
 * frame from a byte stream and opening it.
 *
 * Input: mode u8 | session key 32 | pool lengths 2 x 8 | then up to 4 rounds of [header 48 | payload length u16 |
 * action u8 | where u16 | chunk u8] with the payload bytes after each, then the rest:
 * bytes an attacker sends on a protected connection.
 * Rounds: the initiator seals a frame, the stream delivers it (action 0), with one bit
 * flipped (1), not at all (2) or twice (3), in chunks of the given size, and the target
 * gathers and opens what arrives.
 * Invariants: an intact frame in order opens to exactly what was sealed; a flipped, missing
 * (the next one then arrives out of order) or replayed frame never opens, and a failed open
 * does not move the counter (after a failure the connection is closed: the round ends the
 * stream); bytes the fuzzer made up never open (it has no key for the target's stream: the
 * session key it chose is not the one used for them); gathering takes no more than offered
 * and says "whole" exactly when the frame is, refusing a length over the bound.
 */
#include "fuzz_common.h"
#include "net/tcp/tcp_protect.h"
#include "net/tcp/tcp_wire.h"

#include <errno.h>

#define MAX_PAYLOAD 5000u

/* Feed @len bytes of @bytes to @f in chunks of @chunk; the result of the last gather (1:
 * a whole frame, with nothing left over). */
static int feed(struct tcp_pframe *f, const unsigned char *bytes, size_t len, size_t chunk,
		uint64_t max, size_t *fed_p)
{
	size_t at = 0;
	int r = 0;

	while (at < len) {
		size_t n = len - at < chunk ? len - at : chunk, used = 0;

		r = tcp_pframe_gather(f, bytes + at, n, max, &used);
		FUZZ_CHECK(used <= n);
		FUZZ_CHECK(r == 0 || r == 1 || r == -EPROTO);
		at += used;
		if (r)
			break;
		FUZZ_CHECK(used == n); /* not whole yet: it took everything */
	}
	if (r == 1)
		FUZZ_CHECK(f->got == f->need && f->need >= TCP_WIRE_HDR_LEN + TCP_PROTECT_TAG_LEN &&
			   f->need <= tcp_protect_frame_len(max));
	*fed_p = at;
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	enum ddss_tp_protect mode = fuzz_u8(&in) & 1 ? DDSS_TP_PROTECT_ENCRYPT :
						       DDSS_TP_PROTECT_INTEGRITY;
	unsigned char session[DDSS_AUTH_KEY_LEN], other[DDSS_AUTH_KEY_LEN];
	static unsigned char payload[MAX_PAYLOAD], sealed[48 + MAX_PAYLOAD + 16];
	static unsigned char twice[2 * sizeof(sealed)];
	struct tcp_protect ini, tgt, spy;
	struct tcp_pframe f = { 0 };
	uint64_t pools[2];
	bool open = true;

	fuzz_bytes(&in, session, sizeof(session));
	fuzz_bytes(&in, pools, sizeof(pools));
	tcp_protect_init(&ini, mode, session, pools, true);
	tcp_protect_init(&tgt, mode, session, pools, false);
	for (int round = 0; open && round < 4 && in.left; round++) {
		unsigned char hdr[TCP_WIRE_HDR_LEN];
		size_t len, flen, fed, chunk, where;
		uint8_t action;
		uint64_t before = tgt.rx.ctr;
		int r;

		fuzz_bytes(&in, hdr, sizeof(hdr));
		len = fuzz_u16(&in) % (MAX_PAYLOAD + 1);
		/* The length field travels in the header: make it say what follows. */
		hdr[4] = (unsigned char)len;
		hdr[5] = (unsigned char)(len >> 8);
		hdr[6] = hdr[7] = 0;
		action = fuzz_u8(&in) % 4;
		where = fuzz_u16(&in);
		chunk = (size_t)fuzz_u8(&in) + 1;
		fuzz_bytes(&in, payload, len);
		flen = tcp_protect_frame_len(len);
		FUZZ_CHECK(tcp_protect_seal(&ini, hdr, payload, len, sealed) == 0);
		FUZZ_CHECK(ini.tx.ctr == (uint64_t)round + 1);
		FUZZ_CHECK(!memcmp(sealed, hdr, sizeof(hdr))); /* the header goes in clear */
		if (mode == DDSS_TP_PROTECT_INTEGRITY)
			FUZZ_CHECK(!len || !memcmp(sealed + TCP_WIRE_HDR_LEN, payload, len));
		if (action == 2)
			continue; /* lost on the way: the next frame is out of order */
		if (action == 1)
			sealed[where % flen] ^= (unsigned char)(1u << (where >> 13));
		memcpy(twice, sealed, flen);
		memcpy(twice + flen, sealed, flen);
		r = feed(&f, twice, action == 3 ? 2 * flen : flen, chunk, MAX_PAYLOAD, &fed);
		if (r != 1) {
			/* Only a flipped length can make it wait for more, or refuse it. */
			FUZZ_CHECK(action == 1 && where % flen >= 4 && where % flen < 8);
			break;
		}
		FUZZ_CHECK(fed == flen || action == 1);
		r = tcp_protect_open(&tgt, f.buf, tcp_pframe_payload_len(&f));
		if (action == 1 || round != (int)before) {
			/* Altered, or a frame before it was lost. */
			FUZZ_CHECK(r == -EBADMSG && tgt.rx.ctr == before);
			open = false;
			break;
		}
		FUZZ_CHECK(r == 0 && tgt.rx.ctr == before + 1);
		FUZZ_CHECK(!memcmp(f.buf, hdr, sizeof(hdr)));
		FUZZ_CHECK(!len || !memcmp(f.buf + TCP_WIRE_HDR_LEN, payload, len));
		tcp_pframe_done(&f);
		if (action == 3) {
			/* The replayed copy, right behind it, never opens. */
			r = feed(&f, twice + flen, flen, chunk, MAX_PAYLOAD, &fed);
			FUZZ_CHECK(r == 1 && fed == flen);
			FUZZ_CHECK(tcp_protect_open(&tgt, f.buf, len) == -EBADMSG);
			FUZZ_CHECK(tgt.rx.ctr == before + 1);
			open = false;
		}
	}
	tcp_pframe_free(&f);

	/*
	 * The rest: what an attacker sends. It knows a session key, but not this stream's (one
	 * derived from a key made of the input, flipped: never the same as @spy's).
	 */
	memcpy(other, session, sizeof(other));
	other[0] ^= 0x80;
	tcp_protect_init(&spy, mode, other, pools, false);
	while (in.left) {
		uint64_t max = fuzz_u16(&in);
		size_t chunk = (size_t)fuzz_u8(&in) + 1, fed;
		int r = feed(&f, in.p, in.left, chunk, max, &fed);

		in.p += fed;
		in.left -= fed;
		if (r < 0)
			break;
		if (r == 1) {
			FUZZ_CHECK(tcp_protect_open(&spy, f.buf, tcp_pframe_payload_len(&f)) ==
				   -EBADMSG);
			FUZZ_CHECK(spy.rx.ctr == 0);
			tcp_pframe_done(&f);
		}
	}
	tcp_pframe_free(&f);
	tcp_protect_clear(&ini);
	tcp_protect_clear(&tgt);
	tcp_protect_clear(&spy);
	FUZZ_CHECK(tgt.mode == DDSS_TP_PROTECT_OFF);
	return 0;
}
