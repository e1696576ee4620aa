/*
 * Replay protection for single-message connect requests (verbs): authenticators and the
 * cache that accepts each one once (docs/security.md).
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
 * than DDSS_AUTH_SKEW_S (the group's clocks must agree that closely); a recorded request
 * replayed later, or twice, is refused.
 */
#define DDSS_AUTH_SKEW_S 120
#define DDSS_AUTH_REPLAY_SLOTS 1024u

struct ddss_auth_replay {
	pthread_mutex_t mu;
	unsigned next;
	int64_t floor_s; /* authenticators not newer than this were forgotten: refused */
	unsigned char seen[DDSS_AUTH_REPLAY_SLOTS][DDSS_AUTH_NONCE_LEN];
};

/** A fresh authenticator for now. */
void ddss_auth_stamp(unsigned char nonce[DDSS_AUTH_NONCE_LEN]);
void ddss_auth_replay_init(struct ddss_auth_replay *rp);
void ddss_auth_replay_destroy(struct ddss_auth_replay *rp);
/** 0 and remembered if @nonce is an authenticator in its window never seen before, else
 * -EACCES. Call only after its proof was checked (strangers must not fill the cache). */
int ddss_auth_replay_check(struct ddss_auth_replay *rp, const unsigned char nonce[DDSS_AUTH_NONCE_LEN]);

#endif /* DDSS_NET_AUTH_REPLAY_H */
