/*
 * The tcp provider's wire format: a fixed 48-byte little-endian header, then `len` bytes
 * of payload. Decoders validate everything a peer controls; a frame that fails validation
 * is a protocol error and closes the connection.
 */
#ifndef DDSS_NET_TCP_WIRE_H
#define DDSS_NET_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TCP_WIRE_HDR_LEN 48u
#define TCP_WIRE_MAGIC 0x53534444u /* "DDSS" */
#define TCP_WIRE_VERSION 6u /* 3: the fence flag; 4: protected frames (tcp_protect.h);
			     * 5: the bound flag; 6: lock records sealed a nibble a byte
			     * (lock_int.h): a rank of 5 would misread them */
#define TCP_WIRE_HELLO_LEN 88u
#define TCP_WIRE_HELLO_AUTH 1u /* hello flag: the sender has a group secret */
/* Hello flags: the sender protects frames (DDSS_TCP_PROTECT); both sides must agree, and
 * the mode is mixed into the frame keys (tcp_protect.h), so a relay cannot change it. */
#define TCP_WIRE_HELLO_INTEGRITY 2u
#define TCP_WIRE_HELLO_ENCRYPT 4u
#define TCP_WIRE_HELLO_FLAGS (TCP_WIRE_HELLO_AUTH | TCP_WIRE_HELLO_INTEGRITY | TCP_WIRE_HELLO_ENCRYPT)

enum tcp_wire_kind {
	TCP_K_READ = 1,  /* off, a = length; reply carries the bytes */
	TCP_K_WRITE,     /* off, payload = bytes; reply empty */
	TCP_K_CAS,       /* off, a = compare, b = swap; reply a = old */
	TCP_K_FADD,      /* off, a = add; reply a = old */
	TCP_K_NOTIFY,    /* a = value; no reply */
	TCP_K_MSG,       /* tag, payload = message; no reply */
	TCP_K_REPLY,     /* seq, status, a = result, payload = read bytes */
	TCP_K_HELLO,     /* payload = struct tcp_wire_hello (initiator -> target) */
	TCP_K_HELLO_ACK, /* status, payload = struct tcp_wire_hello (target -> initiator) */
	TCP_K_AUTH,      /* with a secret: payload = hello with the initiator's proof, pool_len */
	TCP_K_AUTH_ACK,  /* with a secret: status, payload = hello with the target's pool_len */
	TCP_K_MAX_
};

/* Header flags (the byte after kind); any other bit is a protocol error. */
enum tcp_wire_flags {
	/* Requests (READ, WRITE, CAS, FADD) only: posted with DDSS_TP_FENCE; start only after
	 * every earlier READ and atomic of the connection completed (tcp_serve.c, weak mode). */
	TCP_WIRE_F_FENCE = 1u << 0,
	/* Requests only: posted with DDSS_TP_BOUND; never served once the connection is
	 * superseded (tcp_serve.c). */
	TCP_WIRE_F_BOUND = 1u << 1,
};

struct tcp_wire_hdr {
	uint8_t kind;
	uint8_t flags;  /* enum tcp_wire_flags */
	uint16_t tag;
	uint32_t len;   /* payload bytes that follow */
	int32_t status; /* replies: 0 or -errno */
	uint64_t seq;
	uint64_t off;
	uint64_t a;
	uint64_t b;
};

/*
 * What each side tells the other when a connection opens. Without a group secret: HELLO,
 * HELLO_ACK (pool lengths in both). With one (net/auth.h): HELLO carries the initiator's
 * nonce, HELLO_ACK the target's nonce and proof, then AUTH the initiator's proof; pool
 * lengths travel only in AUTH and AUTH_ACK, after the proofs were checked.
 */
struct tcp_wire_hello {
	uint32_t magic;
	uint32_t version;
	uint32_t from_rank; /* sender's rank */
	uint32_t to_rank;   /* the rank the sender believes it talks to */
	uint32_t size;      /* group size the sender was configured with */
	uint32_t flags;     /* TCP_WIRE_HELLO_* */
	uint64_t group;     /* group id (DDSS_GROUP); both sides must agree */
	uint64_t pool_len;  /* sender's exposed pool length (see above for when) */
	unsigned char nonce[16];
	unsigned char proof[32];
};

void tcp_wire_encode_hdr(const struct tcp_wire_hdr *h, unsigned char out[TCP_WIRE_HDR_LEN]);
/** Decode and check the kind and flags (a fence only on a one-sided request); 0 or -EPROTO. */
int tcp_wire_decode_hdr(const unsigned char in[TCP_WIRE_HDR_LEN], struct tcp_wire_hdr *h);

void tcp_wire_encode_hello(const struct tcp_wire_hello *hello,
			   unsigned char out[TCP_WIRE_HELLO_LEN]);
/** Decode; checks magic and version: 0, -EPROTO (not DDSS) or -EPROTONOSUPPORT. */
int tcp_wire_decode_hello(const unsigned char in[TCP_WIRE_HELLO_LEN], struct tcp_wire_hello *hello);

/**
 * Check a request header received from a peer against our pool of @pool_len bytes.
 * Returns 0 if it can be served, -ERANGE/-EINVAL if it must be answered with that error
 * (payload still to be drained), or -EPROTO if the stream cannot be trusted any more.
 */
int tcp_wire_check_request(const struct tcp_wire_hdr *h, uint64_t pool_len);

/** True when [off, off+len) lies inside a region of @pool_len bytes (overflow-safe). */
static inline int tcp_wire_in_range(uint64_t off, uint64_t len, uint64_t pool_len)
{
	return off <= pool_len && len <= pool_len - off;
}

#endif /* DDSS_NET_TCP_WIRE_H */
