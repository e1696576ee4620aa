/*
 * Per-frame protection of tcp connections (DDSS_TCP_PROTECT, docs/security.md).
 *
 * After an authenticated handshake both sides hold the connection's session key
 * (ddss_auth_session_key: bound to both nonces and both ranks). From it each side derives
 * one key per direction, with the mode and the pool lengths mixed in, so a relay that
 * rewrote the mode in a hello, or a pool length, gets two sides whose frames never verify. Every frame after the handshake is then
 * sent as
 *
 *   header (48 bytes, in clear) | payload | tag (16 bytes)
 *
 * sealed with ChaCha20-Poly1305 (IETF, libsodium) under the direction's key, with the
 * direction's frame counter as the nonce (0, 1, 2, ... never reused: a key lives for one
 * connection). integrity: the header and the payload are the additional data, the
 * plaintext is empty (the payload travels in clear); encrypt: the header is the additional
 * data, the payload is encrypted. A frame that was injected, altered, replayed, dropped or
 * reordered fails to open: the receiver closes the connection, nothing of the frame is used.
 *
 * Concurrency: a tcp_protect_dir belongs to the one thread that sends (send_mu) or
 * receives (rx owner, progress thread) on its connection.
 */
#ifndef DDSS_NET_TCP_PROTECT_H
#define DDSS_NET_TCP_PROTECT_H

#include "net/auth.h"
#include "net/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCP_PROTECT_TAG_LEN 16u
#define TCP_PROTECT_KEY_LEN 32u

/* One direction of one connection. */
struct tcp_protect_dir {
	unsigned char key[TCP_PROTECT_KEY_LEN];
	uint64_t ctr; /* the next frame's number (its nonce) */
};

struct tcp_protect {
	enum ddss_tp_protect mode; /* DDSS_TP_PROTECT_OFF: frames travel bare */
	struct tcp_protect_dir tx, rx;
};

/** "off", "integrity" or "encrypt". */
const char *tcp_protect_name(enum ddss_tp_protect mode);

/**
 * Derive both direction keys of a connection from its session key (@session, from
 * ddss_auth_session_key), @mode (not OFF) and what the handshake carried outside the proofs
 * (@pools: the initiator's and the target's pool lengths, as this side sent or received
 * them), so a relay that altered any of it gets two sides whose frames never open.
 * @initiator: this side opened the connection. Counters start at 0.
 */
void tcp_protect_init(struct tcp_protect *p, enum ddss_tp_protect mode,
		      const unsigned char session[DDSS_AUTH_KEY_LEN], const uint64_t pools[2],
		      bool initiator);

/** Wipe the keys; the mode becomes OFF. */
void tcp_protect_clear(struct tcp_protect *p);

/** Bytes a frame of @payload_len payload bytes takes on the wire once sealed. */
static inline size_t tcp_protect_frame_len(size_t payload_len)
{
	return 48u + payload_len + TCP_PROTECT_TAG_LEN;
}

/**
 * Seal the next outgoing frame: @out (tcp_protect_frame_len(@len) bytes) receives the
 * encoded header @hdr, the payload (in clear or encrypted) and the tag. @payload may be
 * NULL when @len is 0. 0, or -EOVERFLOW when the counter ran out (never in practice).
 */
int tcp_protect_seal(struct tcp_protect *p, const unsigned char hdr[48], const void *payload,
		     size_t len, unsigned char *out);

/**
 * Open the next incoming frame in place: @frame holds header, @len payload bytes and the
 * tag. On success (0) the payload is in clear (decrypted in place) and the counter moves
 * on; -EBADMSG when the frame is not the next one its sender sealed under this key (forged,
 * altered, replayed, dropped or reordered). The payload must not be used after a failure.
 */
int tcp_protect_open(struct tcp_protect *p, unsigned char *frame, size_t len);

/*
 * A protected connection's frame being received (tcp_protect.h): it is gathered whole
 * (header, payload, tag) and opened before any of it is used. Plain connections leave it
 * empty.
 */
struct tcp_pframe {
	unsigned char *buf;
	size_t cap;
	size_t got;  /* bytes gathered */
	size_t need; /* the whole sealed frame's length, once its header is in (else 0) */
};

/**
 * Protected connections: move bytes of the next frame from @in (@avail bytes) into @f, at
 * most what the frame still needs; once its header is in, its payload length (unchecked
 * until opened) must be at most @max_payload. Sets *used_p to the bytes taken. 1 when the
 * whole sealed frame is in @f, 0 when it needs more, -EPROTO (a header no frame of ours
 * has), -ENOMEM.
 */
int tcp_pframe_gather(struct tcp_pframe *f, const unsigned char *in, size_t avail,
		      uint64_t max_payload, size_t *used_p);
/** Payload bytes of the frame in @f (its header is in). */
size_t tcp_pframe_payload_len(const struct tcp_pframe *f);
/* A frame buffer larger than this is freed once its frame was used. */
#define TCP_PFRAME_KEEP (1u << 20)
/** The frame in @f was used: gather the next one. */
void tcp_pframe_done(struct tcp_pframe *f);
/** Wipe and free. */
void tcp_pframe_free(struct tcp_pframe *f);
/** Make *buf_p hold at least @len bytes (grown, contents kept): 0 or -ENOMEM. */
int tcp_buf_reserve(unsigned char **buf_p, size_t *cap_p, size_t len);

#endif /* DDSS_NET_TCP_PROTECT_H */
