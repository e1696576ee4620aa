/*
 * Replay protection for single-message connect requests (verbs): authenticators, the
 * cache that accepts each one once, and the binding of a request to one boot of its
 * target and to the requester's address and QP (docs/security.md).
 */
#ifndef DDSS_NET_AUTH_REPLAY_H
#define DDSS_NET_AUTH_REPLAY_H

#include "net/auth.h"

#include <pthread.h>
#include <stdint.h>

/*
 * Where a round trip for a challenge cannot be had (the verbs connect request is a single
 * message), the initiator's nonce is an *authenticator*: its creation time (8 bytes,
 * seconds) and 8 random bytes. The target accepts it once, and only while it is younger
 * than DDSS_AUTH_SKEW_S and at most DDSS_AUTH_FUTURE_S ahead of its clock (the group's
 * clocks must agree that closely); a recorded request replayed later, or twice, is refused.
 *
 * One cache per initiator rank (the caller keeps them apart): a cache that is full raises
 * its floor (see below), which refuses that rank's older stamps only, and a stamp from
 * the future can hold the floor up for at most DDSS_AUTH_FUTURE_S, so one member's flood
 * locks out nobody else, and itself only for seconds.
 */
#define DDSS_AUTH_SKEW_S 120
#define DDSS_AUTH_FUTURE_S 5
#define DDSS_AUTH_REPLAY_SLOTS 1024u

struct ddss_auth_replay {
	pthread_mutex_t mu;
	unsigned next;
	int64_t floor_s; /* authenticators not newer than this were forgotten: refused */
	unsigned char seen[DDSS_AUTH_REPLAY_SLOTS][DDSS_AUTH_NONCE_LEN];
};

/**
 * The target's nonce of a single-message connect (the transcript's nonce_t): a hash of
 * the target's @epoch (random, new every time it starts) and the requester's @gid and
 * @qpn as the target sees them in the request. A proof over it is good for one boot of
 * the target and one QP of the requester: replayed after a restart, or from another host
 * or QP, it fails.
 */
void ddss_auth_bind(uint64_t epoch, const unsigned char gid[16], uint32_t qpn,
		    unsigned char out[DDSS_AUTH_NONCE_LEN]);
/** A fresh authenticator for now. */
void ddss_auth_stamp(unsigned char nonce[DDSS_AUTH_NONCE_LEN]);
void ddss_auth_replay_init(struct ddss_auth_replay *rp);
void ddss_auth_replay_destroy(struct ddss_auth_replay *rp);
/** 0 and remembered if @nonce is an authenticator in its window never seen before, else
 * -EACCES. Call only after its proof was checked (strangers must not fill the cache), on
 * the cache of the rank that proof speaks for. */
int ddss_auth_replay_check(struct ddss_auth_replay *rp, const unsigned char nonce[DDSS_AUTH_NONCE_LEN]);

#endif /* DDSS_NET_AUTH_REPLAY_H */
