/*
 * The messages of lock recovery on the wire (tag DDSS_MSG_LOCK): lock_recover.c (a
 * closer's drain that only dead shared holders owe), lock_agent.c (a lock whose queue runs
 * through a dead or failed request), lock_census.c (what every member has on a lock).
 * docs/failure.md tells the protocol. Every message is one header; a census report is
 * followed by one triple per request. lock_rc_decode checks all of it, so the handlers
 * only ever see well-formed messages.
 */
#ifndef DDSS_LOCK_RECOVER_WIRE_H
#define DDSS_LOCK_RECOVER_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum rc_type {
	/* lock_recover.c */
	RC_CHECK = 1, /* waiter -> home: id = check id; hdr; arg = kind: RC_KIND_DRAIN (a
		       * closer; pred = the epoch's tail) or RC_KIND_TURN (pred = the turn's
		       * ticket, low 32 bits) */
	RC_SURVEY,    /* home -> every member: id = survey id; hdr, pred as the check; arg =
		       * kind | FLUSH messages to wait for << RC_FLUSHERS_SHIFT (drain) */
	RC_FLUSH,     /* p's rank -> every member: id = survey id, arg = the home */
	RC_REPORT,    /* member -> home: id = survey id, arg = busy (0 or 1) */
	RC_ANSWER,    /* home -> closer: id = check id, arg = clear (0 or 1) */
	/* lock_agent.c, lock_census.c */
	RC_AGENT_FIRST = 16,
	RC_RECOVER = RC_AGENT_FIRST, /* asker -> home: id = ask id (0: no answer), hdr = key */
	RC_RECOVERED, /* home -> asker: id = ask id, arg = -status (0..4095) */
	RC_XSURVEY,   /* census taker -> every member: id = census id, hdr, pred = the home */
	RC_XREPORT,   /* member -> taker: id, arg = RC_CENSUS_* flags, pred = n; n triples */
	/* lock_gone.c */
	RC_GONE,      /* asker -> home: id = ask id, pred = a rank: is it cut off there?
		       * Answered with RC_RECOVERED (0: yes, -EAGAIN: being cut, -EBUSY: no) */
};

#define RC_KIND_DRAIN 0u /* whose shared releases does this epoch still wait for? */
#define RC_KIND_TURN 1u  /* who holds this fair-mode ticket? */
#define RC_KIND_MASK 0xffu
#define RC_FLUSHERS_SHIFT 8 /* a drain survey's arg: how many ranks FLUSH (<= the size) */

struct rc_msg {
	uint32_t type;
	uint32_t id;
	uint64_t hdr;
	uint32_t pred;
	uint32_t arg;
};

/* A census report's flags (arg) and the flags of each request triple [id, pred, flags]. */
#define RC_CENSUS_SHARED 1u   /* the member holds the lock shared or is releasing a hold */
#define RC_CENSUS_UNPLACED 2u /* a request of the member has its first atomic out */
#define RC_REQ_WAITING 1u     /* the request is not granted yet */
#define RC_REQ_SHARED 2u
#define RC_REQ_TRYING 4u      /* a try-lock whose CAS may be out */
#define RC_REQ_WORDS 3u

/*
 * Check a message of @len bytes at @buf from a peer, in a group of @size ranks: 0 with its
 * header in *m (a report's triples follow the header in @buf), or -EPROTO. Types, lengths,
 * flags, ranks and waiter ids ([rank : 16 | sleeps : 1 | slot : 15], slot below
 * DDSS_LOCK_SLOTS) are all in range.
 */
int lock_rc_decode(const void *buf, size_t len, uint32_t size, struct rc_msg *m);

#endif /* DDSS_LOCK_RECOVER_WIRE_H */
