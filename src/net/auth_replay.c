#include "net/auth_replay.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

static int64_t wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

void ddss_auth_bind(uint64_t epoch, const unsigned char gid[16], uint32_t qpn,
		    unsigned char out[DDSS_AUTH_NONCE_LEN])
{
	static const char ctx[] = "ddss verbs bind 1";
	crypto_generichash_state st;
	uint64_t e = htole64(epoch);
	uint32_t q = htole32(qpn);

	crypto_generichash_init(&st, NULL, 0, DDSS_AUTH_NONCE_LEN);
	crypto_generichash_update(&st, (const unsigned char *)ctx, sizeof(ctx));
	crypto_generichash_update(&st, (const unsigned char *)&e, sizeof(e));
	crypto_generichash_update(&st, gid, 16);
	crypto_generichash_update(&st, (const unsigned char *)&q, sizeof(q));
	crypto_generichash_final(&st, out, DDSS_AUTH_NONCE_LEN);
}

void ddss_auth_stamp(unsigned char nonce[DDSS_AUTH_NONCE_LEN])
{
	uint64_t t = htole64((uint64_t)wall_s());

	memcpy(nonce, &t, 8);
	randombytes_buf(nonce + 8, DDSS_AUTH_NONCE_LEN - 8);
}

static int64_t stamp_time(const unsigned char nonce[DDSS_AUTH_NONCE_LEN])
{
	uint64_t t;

	memcpy(&t, nonce, 8);
	return (int64_t)le64toh(t);
}

void ddss_auth_replay_init(struct ddss_auth_replay *rp)
{
	memset(rp, 0, sizeof(*rp));
	pthread_mutex_init(&rp->mu, NULL);
	rp->floor_s = INT64_MIN;
}

void ddss_auth_replay_destroy(struct ddss_auth_replay *rp)
{
	pthread_mutex_destroy(&rp->mu);
}

int ddss_auth_replay_check(struct ddss_auth_replay *rp, const unsigned char nonce[DDSS_AUTH_NONCE_LEN])
{
	int64_t t = stamp_time(nonce), now = wall_s();
	static const unsigned char zero[DDSS_AUTH_NONCE_LEN];
	unsigned char *slot;
	int r = 0;

	/* Far less room ahead than behind: a stamp from the future raises the floor (below)
	 * until it is no longer in the future. */
	if (t < now - DDSS_AUTH_SKEW_S || t > now + DDSS_AUTH_FUTURE_S) {
		DDSS_WARN("refusing a connect request stamped %lld s from now (clocks must agree "
			  "within %d s, and be at most %d s ahead)", (long long)(t - now),
			  DDSS_AUTH_SKEW_S, DDSS_AUTH_FUTURE_S);
		return -EACCES;
	}
	pthread_mutex_lock(&rp->mu);
	if (t <= rp->floor_s)
		r = -EACCES;
	for (unsigned i = 0; !r && i < DDSS_AUTH_REPLAY_SLOTS; i++)
		if (!memcmp(rp->seen[i], nonce, DDSS_AUTH_NONCE_LEN))
			r = -EACCES;
	if (!r) {
		/* Forgetting an authenticator still in its window would let it be replayed:
		 * refuse everything not newer than it instead. */
		slot = rp->seen[rp->next];
		if (memcmp(slot, zero, sizeof(zero)) && stamp_time(slot) > rp->floor_s)
			rp->floor_s = stamp_time(slot);
		memcpy(slot, nonce, DDSS_AUTH_NONCE_LEN);
		rp->next = (rp->next + 1) % DDSS_AUTH_REPLAY_SLOTS;
	} else {
		DDSS_WARN("refusing a replayed connect request");
	}
	pthread_mutex_unlock(&rp->mu);
	return r;
}
