/*
 * Sealing and opening tcp frames (tcp_protect.h). Only libsodium's AEAD is used; the
 * frame is contiguous, so the integrity mode's additional data (header and payload) is one
 * buffer and its plaintext is empty, exactly crypto_aead_chacha20poly1305_ietf with
 * everything as additional data.
 */
#include "net/tcp/tcp_protect.h"

#include <endian.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR_LEN 48u

const char *tcp_protect_name(enum ddss_tp_protect mode)
{
	switch (mode) {
	case DDSS_TP_PROTECT_INTEGRITY:
		return "integrity";
	case DDSS_TP_PROTECT_ENCRYPT:
		return "encrypt";
	default:
		return "off";
	}
}

/*
 * BLAKE2b keyed by the session key over a label naming the direction and the mode, then
 * both pool lengths (le64).
 */
static void derive(unsigned char out[TCP_PROTECT_KEY_LEN], const unsigned char *session,
		   enum ddss_tp_protect mode, const uint64_t pools[2], char dir)
{
	crypto_generichash_state st;
	char label[48];
	int n = snprintf(label, sizeof(label), "ddss tcp protect v1 %c %s", dir,
			 tcp_protect_name(mode));

	crypto_generichash_init(&st, session, DDSS_AUTH_KEY_LEN, TCP_PROTECT_KEY_LEN);
	crypto_generichash_update(&st, (const unsigned char *)label, (size_t)n);
	for (int i = 0; i < 2; i++) {
		uint64_t le = htole64(pools[i]);

		crypto_generichash_update(&st, (const unsigned char *)&le, sizeof(le));
	}
	crypto_generichash_final(&st, out, TCP_PROTECT_KEY_LEN);
	sodium_memzero(&st, sizeof(st));
}

void tcp_protect_init(struct tcp_protect *p, enum ddss_tp_protect mode,
		      const unsigned char session[DDSS_AUTH_KEY_LEN], const uint64_t pools[2],
		      bool initiator)
{
	/* 'I': what the initiator sends (requests), 'T': what the target sends (replies). */
	p->mode = mode;
	derive(p->tx.key, session, mode, pools, initiator ? 'I' : 'T');
	derive(p->rx.key, session, mode, pools, initiator ? 'T' : 'I');
	p->tx.ctr = p->rx.ctr = 0;
}

void tcp_protect_clear(struct tcp_protect *p)
{
	sodium_memzero(p, sizeof(*p));
	p->mode = DDSS_TP_PROTECT_OFF;
}

static void nonce_of(uint64_t ctr, unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES])
{
	uint64_t le = htole64(ctr);

	memset(nonce, 0, crypto_aead_chacha20poly1305_IETF_NPUBBYTES);
	memcpy(nonce, &le, sizeof(le));
}

int tcp_protect_seal(struct tcp_protect *p, const unsigned char hdr[HDR_LEN], const void *payload,
		     size_t len, unsigned char *out)
{
	unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
	unsigned char *tag = out + HDR_LEN + len;
	unsigned char none[1] = { 0 }; /* the empty plaintext (integrity) */

	if (p->tx.ctr == UINT64_MAX)
		return -EOVERFLOW;
	nonce_of(p->tx.ctr++, nonce);
	memcpy(out, hdr, HDR_LEN);
	if (len)
		memcpy(out + HDR_LEN, payload, len);
	if (p->mode == DDSS_TP_PROTECT_ENCRYPT)
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(out + HDR_LEN, tag, NULL,
								   out + HDR_LEN, len, out, HDR_LEN,
								   NULL, nonce, p->tx.key);
	else
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag, NULL, none, 0, out,
								   HDR_LEN + len, NULL, nonce,
								   p->tx.key);
	return 0;
}

int tcp_protect_open(struct tcp_protect *p, unsigned char *frame, size_t len)
{
	unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
	const unsigned char *tag = frame + HDR_LEN + len;
	unsigned char none[1] = { 0 }; /* the empty plaintext (integrity) */
	int r;

	if (p->rx.ctr == UINT64_MAX)
		return -EBADMSG;
	nonce_of(p->rx.ctr, nonce);
	if (p->mode == DDSS_TP_PROTECT_ENCRYPT)
		r = crypto_aead_chacha20poly1305_ietf_decrypt_detached(frame + HDR_LEN, NULL,
								       frame + HDR_LEN, len, tag,
								       frame, HDR_LEN, nonce,
								       p->rx.key);
	else
		r = crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, NULL, none, 0, tag,
								       frame, HDR_LEN + len, nonce,
								       p->rx.key);
	if (r)
		return -EBADMSG;
	p->rx.ctr++;
	return 0;
}

int tcp_buf_reserve(unsigned char **buf_p, size_t *cap_p, size_t len)
{
	unsigned char *b;
	size_t cap = *cap_p ? *cap_p : 256;

	if (len <= *cap_p)
		return 0;
	while (cap < len)
		cap = cap > SIZE_MAX / 2 ? len : cap * 2;
	b = malloc(cap);
	if (!b)
		return -ENOMEM;
	if (*buf_p) {
		memcpy(b, *buf_p, *cap_p);
		sodium_memzero(*buf_p, *cap_p);
	}
	free(*buf_p);
	*buf_p = b;
	*cap_p = cap;
	return 0;
}

size_t tcp_pframe_payload_len(const struct tcp_pframe *f)
{
	return f->need - HDR_LEN - TCP_PROTECT_TAG_LEN;
}

int tcp_pframe_gather(struct tcp_pframe *f, const unsigned char *in, size_t avail,
		      uint64_t max_payload, size_t *used_p)
{
	size_t used = 0, n;

	if (!f->need) {
		if (tcp_buf_reserve(&f->buf, &f->cap, HDR_LEN))
			return -ENOMEM;
		n = HDR_LEN - f->got < avail ? HDR_LEN - f->got : avail;
		memcpy(f->buf + f->got, in, n);
		f->got += n;
		used = n;
		if (f->got < HDR_LEN) {
			*used_p = used;
			return 0;
		}
		/* The length is not authenticated yet: it only bounds what is gathered. */
		uint32_t len;

		memcpy(&len, f->buf + 4, sizeof(len));
		len = le32toh(len);
		if (len > max_payload)
			return -EPROTO;
		f->need = tcp_protect_frame_len(len);
		if (tcp_buf_reserve(&f->buf, &f->cap, f->need))
			return -ENOMEM;
	}
	n = f->need - f->got < avail - used ? f->need - f->got : avail - used;
	memcpy(f->buf + f->got, in + used, n);
	f->got += n;
	*used_p = used + n;
	return f->got == f->need;
}

void tcp_pframe_done(struct tcp_pframe *f)
{
	f->got = f->need = 0;
	if (f->cap > TCP_PFRAME_KEEP)
		tcp_pframe_free(f);
}

void tcp_pframe_free(struct tcp_pframe *f)
{
	if (f->buf)
		sodium_memzero(f->buf, f->cap);
	free(f->buf);
	memset(f, 0, sizeof(*f));
}
