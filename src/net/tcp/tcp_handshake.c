/*
 * The opening of a tcp connection, both sides: the initiator's hello and the target's
 * answer, and with a group secret the proofs of net/auth.h (mutual: each side checks the
 * other's before it sends its pool length or, on the target, serves anything).
 *
 *   initiator                                   target
 *   HELLO     ranks, group, flags, nonce_i  ->
 *                                           <-  HELLO_ACK status, flags, nonce_t, proof_t
 *   (no secret: pool lengths were in HELLO and HELLO_ACK; done)
 *   AUTH      proof_i, pool_len             ->
 *                                           <-  AUTH_ACK  status, pool_len
 *
 * With DDSS_TCP_PROTECT both hellos carry the mode (a flag); a side configured otherwise
 * refuses. Every later frame is sealed under keys derived from the session key of this
 * transcript and the mode (tcp_protect.h).
 */
#include "net/tcp/tcp.h"
#include "net/auth.h"
#include "core/log.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>

#define FRAME_LEN (TCP_WIRE_HDR_LEN + TCP_WIRE_HELLO_LEN)

/*
 * A refusal (@status != 0) carries a hello of zeros: a peer that is turned away learns the
 * status and nothing else (not our group id, size or rank, which would let it try again
 * as a member).
 */
static int send_frame(int fd, uint8_t kind, int status, const struct tcp_wire_hello *hello)
{
	struct tcp_wire_hdr h = { .kind = kind, .len = TCP_WIRE_HELLO_LEN, .status = status };
	unsigned char buf[FRAME_LEN] = { 0 };

	tcp_wire_encode_hdr(&h, buf);
	if (!status)
		tcp_wire_encode_hello(hello, buf + TCP_WIRE_HDR_LEN);
	return send(fd, buf, sizeof(buf), MSG_NOSIGNAL) == (ssize_t)sizeof(buf) ? 0 : -ECONNRESET;
}

/* Decode a frame of @kind: 0 with its status in *status_p, or -EPROTO (not ours). */
static int decode_frame(const unsigned char buf[FRAME_LEN], uint8_t kind, int *status_p,
			struct tcp_wire_hello *hello)
{
	struct tcp_wire_hdr h;

	if (tcp_wire_decode_hdr(buf, &h) || h.kind != kind || h.len != TCP_WIRE_HELLO_LEN)
		return -EPROTO;
	*status_p = h.status;
	/* A refusal carries a hello too, but only its status matters. */
	if (h.status)
		return 0;
	return tcp_wire_decode_hello(buf + TCP_WIRE_HDR_LEN, hello) ? -EPROTO : 0;
}

/* Receive a frame of @kind: 0 with its status in *status_p, or -errno (-EPROTO: not ours;
 * -EHOSTDOWN: @peer refused meanwhile, as tcp_recv_full). */
static int recv_frame(const struct tcp_tp *t, uint32_t peer, int fd, uint8_t kind,
		      int64_t deadline, int *status_p, struct tcp_wire_hello *hello)
{
	unsigned char buf[FRAME_LEN];
	int r = tcp_recv_full(fd, buf, sizeof(buf), deadline, &t->base, peer);

	return r ? r : decode_frame(buf, kind, status_p, hello);
}

static uint32_t protect_flag(enum ddss_tp_protect mode)
{
	return mode == DDSS_TP_PROTECT_INTEGRITY ? TCP_WIRE_HELLO_INTEGRITY :
	       mode == DDSS_TP_PROTECT_ENCRYPT	 ? TCP_WIRE_HELLO_ENCRYPT :
						   0;
}

static const char *protect_flag_name(uint32_t flags)
{
	return flags & TCP_WIRE_HELLO_INTEGRITY ? "integrity" :
	       flags & TCP_WIRE_HELLO_ENCRYPT	? "encrypt" :
						  "off";
}

/* 0 when the peer's hello asks for our protection mode, else -EACCES (logged). */
static int protect_agree(const struct ddss_tp_config *cfg, uint32_t peer, uint32_t flags)
{
	uint32_t theirs = flags & (TCP_WIRE_HELLO_INTEGRITY | TCP_WIRE_HELLO_ENCRYPT);

	if (theirs == protect_flag(cfg->tcp_protect))
		return 0;
	DDSS_WARN("rank %u protects tcp frames with DDSS_TCP_PROTECT=%s and we with %s: not "
		  "talking to it (every rank of a group needs the same mode)",
		  peer, protect_flag_name(theirs), tcp_protect_name(cfg->tcp_protect));
	return -EACCES;
}

/*
 * Authenticated: the frame keys of the connection whose transcript is @tr and whose pool
 * lengths (initiator's, target's) went by in AUTH and AUTH_ACK, outside the proofs.
 */
static void protect_keys(const struct ddss_tp_config *cfg, const struct ddss_auth_transcript *tr,
			 uint64_t pool_i, uint64_t pool_t, bool initiator,
			 struct tcp_protect *prot_p)
{
	unsigned char session[DDSS_AUTH_KEY_LEN];
	const uint64_t pools[2] = { pool_i, pool_t };

	if (cfg->tcp_protect == DDSS_TP_PROTECT_OFF)
		return;
	ddss_auth_session_key(cfg->auth, tr, session);
	tcp_protect_init(prot_p, cfg->tcp_protect, session, pools, initiator);
	sodium_memzero(session, sizeof(session));
}

/* The group id is the pair's (ddss_tp_pair_group): an old incarnation of @to_rank, or of
 * us, cannot pass for the current one. */
static struct tcp_wire_hello my_hello(const struct tcp_tp *t, uint32_t to_rank)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;

	return (struct tcp_wire_hello){
		.magic = TCP_WIRE_MAGIC, .version = TCP_WIRE_VERSION, .from_rank = cfg->rank,
		.to_rank = to_rank, .size = cfg->size, .group = ddss_tp_pair_group(&t->base, to_rank),
		.flags = (cfg->auth ? TCP_WIRE_HELLO_AUTH : 0) | protect_flag(cfg->tcp_protect),
	};
}

/* Only trust errno values a target is known to send. */
static int refusal(uint32_t peer, int status)
{
	int r = status == -EACCES || status == -EPROTO || status == -EINVAL ? status
									   : -ECONNREFUSED;

	DDSS_WARN("rank %u refused our handshake: %s%s", peer, strerror(-r),
		  r == -EACCES ? " (another group, secret or keys, or another DDSS_TCP_PROTECT: "
				 "its log says which)" : "");
	return r;
}

/* ---- initiator ---- */

/* Send @me as @kind and take the target's answer of kind @ack: 0, or why not. */
static int ask(const struct tcp_tp *t, int fd, uint32_t peer, uint8_t kind,
	       const struct tcp_wire_hello *me, uint8_t ack, int64_t deadline,
	       struct tcp_wire_hello *them)
{
	int status, r = send_frame(fd, kind, 0, me);

	if (!r)
		r = recv_frame(t, peer, fd, ack, deadline, &status, them);
	if (!r && status)
		r = refusal(peer, status);
	return r;
}

int tcp_handshake_connect(struct tcp_tp *t, uint32_t peer, int fd, int64_t deadline,
			  uint64_t *pool_len_p, struct tcp_protect *prot_p)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;
	struct tcp_wire_hello me = my_hello(t, peer), them;
	struct ddss_auth_transcript tr = { .group = me.group, .initiator = cfg->rank,
					   .target = peer, .size = cfg->size };
	int r;

	if (cfg->auth)
		ddss_auth_nonce(me.nonce);
	else
		me.pool_len = t->pool_len;
	r = ask(t, fd, peer, TCP_K_HELLO, &me, TCP_K_HELLO_ACK, deadline, &them);
	if (r)
		return r;
	if (them.from_rank != peer || them.to_rank != cfg->rank || them.size != cfg->size ||
	    them.group != me.group) {
		DDSS_WARN("rank %u answered as rank %u of %u (group %llx)", peer, them.from_rank,
			  them.size, (unsigned long long)them.group);
		return -EPROTO;
	}
	if (protect_agree(cfg, peer, them.flags))
		return -EACCES;
	if (!cfg->auth) {
		/* A target with a secret refuses us before this; one that accepts must not ask. */
		if (them.flags & TCP_WIRE_HELLO_AUTH)
			return -EPROTO;
		*pool_len_p = them.pool_len;
		return 0;
	}
	memcpy(tr.nonce_i, me.nonce, sizeof(tr.nonce_i));
	memcpy(tr.nonce_t, them.nonce, sizeof(tr.nonce_t));
	if (!(them.flags & TCP_WIRE_HELLO_AUTH) ||
	    ddss_auth_check(cfg->auth, DDSS_AUTH_TARGET, &tr, them.proof, sizeof(them.proof))) {
		DDSS_WARN("rank %u cannot prove it is (wrong group secret or keys): not talking "
			  "to it", peer);
		return -EACCES;
	}
	ddss_auth_prove(cfg->auth, DDSS_AUTH_INITIATOR, &tr, me.proof);
	me.pool_len = t->pool_len;
	r = ask(t, fd, peer, TCP_K_AUTH, &me, TCP_K_AUTH_ACK, deadline, &them);
	if (r)
		return r;
	*pool_len_p = them.pool_len;
	protect_keys(cfg, &tr, t->pool_len, them.pool_len, true, prot_p);
	return 0;
}

/* ---- target ---- */

/* Validate a connecting peer's hello: 0 to accept, else the status to refuse it with. */
static int check_hello(struct tcp_tp *t, const struct tcp_wire_hello *hello)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;

	uint64_t group = ddss_tp_pair_group(&t->base, hello->from_rank);

	if (hello->size != cfg->size || hello->group != group || hello->to_rank != cfg->rank ||
	    hello->from_rank < 1 || hello->from_rank > cfg->size) {
		/* Coordinator mode: also a process of an incarnation the view has replaced. */
		DDSS_WARN("refusing a peer claiming rank %u of %u, group %llx (we are %u of %u, "
			  "group %llx for that rank)", hello->from_rank, hello->size,
			  (unsigned long long)hello->group, cfg->rank, cfg->size,
			  (unsigned long long)group);
		return -EACCES;
	}
	if (!(hello->flags & TCP_WIRE_HELLO_AUTH) != !cfg->auth) {
		DDSS_WARN("refusing rank %u: %s", hello->from_rank,
			  cfg->auth ? "it has no group secret and we do"
				    : "it has a group secret and we have none");
		return -EACCES;
	}
	if (protect_agree(cfg, hello->from_rank, hello->flags))
		return -EACCES;
	if (ddss_tp_peer_refused(&t->base, hello->from_rank)) {
		DDSS_WARN("refusing rank %u: it was declared dead", hello->from_rank);
		return -ECONNREFUSED;
	}
	return 0;
}

/* With a secret: the initiator's AUTH frame, checked. 0, or the status to refuse with. */
static int check_auth(struct tcp_tp *t, const unsigned char *frame,
		      const struct ddss_auth_transcript *tr, uint64_t *pool_len_p)
{
	struct tcp_wire_hello them;
	int status, r = decode_frame(frame, TCP_K_AUTH, &status, &them);

	if (r || status || them.from_rank != tr->initiator || them.to_rank != tr->target)
		return -EPROTO;
	if (ddss_auth_check(t->base.cfg.auth, DDSS_AUTH_INITIATOR, tr, them.proof,
			    sizeof(them.proof))) {
		DDSS_WARN("refusing rank %u: it cannot prove it is (wrong group secret or keys)",
			  tr->initiator);
		return -EACCES;
	}
	*pool_len_p = them.pool_len;
	return 0;
}

int tcp_handshake_accept_hello(struct tcp_tp *t, int fd, const unsigned char *frame,
			       struct tcp_accept_hs *hs)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;
	struct tcp_wire_hello hello = { 0 }, me;
	int status, r;

	memset(hs, 0, sizeof(*hs));
	hs->tr = (struct ddss_auth_transcript){ .group = cfg->group, .target = cfg->rank,
						.size = cfg->size };
	r = decode_frame(frame, TCP_K_HELLO, &status, &hello);
	/* Read on both sides of the check: a readmission in between makes it unclear which
	 * process the hello was checked against, so it is refused (the initiator tries
	 * again). One after the answer shows as a newer generation at tcp_serve_add. */
	hs->gen = ddss_tp_peer_generation(&t->base, hello.from_rank);
	status = r || status ? -EPROTO : check_hello(t, &hello);
	if (!status && hs->gen != ddss_tp_peer_generation(&t->base, hello.from_rank))
		status = -ECONNREFUSED;
	me = my_hello(t, hello.from_rank);
	hs->tr.group = me.group;
	/* Only a member learns anything about our pool; with a secret, only after its proof. */
	if (!status && !cfg->auth)
		me.pool_len = t->pool_len;
	if (!status && cfg->auth) {
		hs->tr.initiator = hello.from_rank;
		memcpy(hs->tr.nonce_i, hello.nonce, sizeof(hs->tr.nonce_i));
		ddss_auth_nonce(me.nonce);
		memcpy(hs->tr.nonce_t, me.nonce, sizeof(hs->tr.nonce_t));
		ddss_auth_prove(cfg->auth, DDSS_AUTH_TARGET, &hs->tr, me.proof);
	}
	r = send_frame(fd, TCP_K_HELLO_ACK, status, &me);
	if (r || status)
		return r ? r : status;
	hs->peer = hello.from_rank;
	hs->need_auth = cfg->auth != NULL;
	if (!hs->need_auth)
		hs->pool_len = hello.pool_len;
	return 0;
}

int tcp_handshake_accept_auth(struct tcp_tp *t, int fd, const unsigned char *frame,
			      struct tcp_accept_hs *hs, struct tcp_protect *prot_p)
{
	const struct ddss_tp_config *cfg = &t->base.cfg;
	int status = check_auth(t, frame, &hs->tr, &hs->pool_len), r;
	struct tcp_wire_hello me = my_hello(t, hs->peer);

	if (!status)
		me.pool_len = t->pool_len;
	r = send_frame(fd, TCP_K_AUTH_ACK, status, &me);
	if (!r && !status) {
		hs->need_auth = false;
		protect_keys(cfg, &hs->tr, hs->pool_len, t->pool_len, false, prot_p);
	}
	return r ? r : status;
}
