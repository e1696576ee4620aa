/*
 * Group-secret authentication (docs/security.md). When a secret is configured, two ranks
 * that open a connection prove to each other that they know it before either learns
 * anything about the other's pool or serves an operation: each sends a fresh random nonce,
 * and each answers with a MAC (libsodium crypto_auth, HMAC-SHA-512-256) keyed by the group
 * key over both nonces, both ranks, the group id and its own role. Nothing secret crosses
 * the wire, a recorded answer is useless against a new nonce, and one side's answer cannot
 * be replayed as the other's (the role is in the MAC).
 *
 * The group key is a BLAKE2b hash of the secret (crypto_generichash). The secret comes from
 * (first that is set): DDSS_SECRET_FILE (the file's bytes, a trailing newline dropped),
 * DDSS_SECRET, ddss_attr.secret. Without one, connections are not authenticated; a rank
 * with a secret refuses a peer without one and the other way round.
 */
#ifndef DDSS_NET_AUTH_H
#define DDSS_NET_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DDSS_AUTH_KEY_LEN 32u
#define DDSS_AUTH_NONCE_LEN 16u
#define DDSS_AUTH_PROOF_LEN 32u
#define DDSS_AUTH_SECRET_MAX 4096u

struct ddss_auth_row;

/*
 * Two ranks prove themselves to each other with the key of their *pair*. From a group
 * secret every pair key can be derived (a keyed hash of the two ranks under the group key),
 * so with a secret any member can pass for any other: it authenticates the group, not the
 * rank. From a keys file (DDSS_KEYS_FILE, written by `ddssrun --write-keys`, which ddssrun
 * also does for every group it starts) a rank holds only the keys of its own pairs, random
 * and unrelated: it cannot prove any other rank's identity, so what arrives on a connection
 * comes from the rank it claims (docs/security.md, "Rank identity").
 */
struct ddss_auth_key {
	bool on;                               /* a secret or a keys file is configured */
	unsigned char key[DDSS_AUTH_KEY_LEN];  /* group key (when on without a row) */
	struct ddss_auth_row *row;             /* keys file: this rank's pair keys (shared by copies) */
};

/* Which side of a connection computes a proof: the one that connected, or the one that
 * accepted. */
enum ddss_auth_role { DDSS_AUTH_INITIATOR = 'I', DDSS_AUTH_TARGET = 'T' };

/* What both sides of one connection agree on; a proof covers all of it. */
struct ddss_auth_transcript {
	uint64_t group;
	uint32_t initiator, target, size;
	unsigned char nonce_i[DDSS_AUTH_NONCE_LEN];
	unsigned char nonce_t[DDSS_AUTH_NONCE_LEN];
};

/**
 * Load the group key from the environment (DDSS_SECRET_FILE, else DDSS_SECRET), else from
 * @attr_secret (may be NULL). Off (0 returned, key->on false) when no secret is
 * configured. DDSS_SECRET is removed from the environment once read (children do not
 * inherit it); this process remembers it for later calls. -EINVAL (logged) for an empty
 * secret, a
 * DDSS_SECRET_FILE set but empty, or a secret longer than DDSS_AUTH_SECRET_MAX; -ENOENT
 * for an unreadable secret file, -EACCES for one the group or others may read or write;
 * -ENOSYS if libsodium cannot start.
 */
int ddss_auth_key_load(const char *attr_secret, struct ddss_auth_key *key);
/** Tests: forget the DDSS_SECRET this process read (as if it had never been set). */
void ddss_auth_env_secret_forget(void);

/** Wipe the key from memory. */
void ddss_auth_key_clear(struct ddss_auth_key *key);
/** @dst (not yet holding a key) becomes a copy of @src; clear both. */
void ddss_auth_key_copy(struct ddss_auth_key *dst, const struct ddss_auth_key *src);

/*
 * A keys file: "DDSSKEY1", the rank (le32), the group size (le32), then for each rank 1..size
 * the 32-byte key this rank shares with it (its own entry: the key of its connection to
 * itself). Mode 0600 or stricter.
 */
#define DDSS_AUTH_KEYS_MAGIC "DDSSKEY1"
#define DDSS_AUTH_KEYS_HDR_LEN 16u

/**
 * Load DDSS_KEYS_FILE, if set, for rank @rank of a group of @size into @key. 0 when unset
 * (@key unchanged). -EINVAL (logged) when a group secret is also set (one or the other), or
 * for an empty variable, a malformed file or one written for another rank or size; -ENOENT
 * unreadable; -EACCES when the group or others may read or write it.
 */
int ddss_auth_keys_load(uint32_t rank, uint32_t size, struct ddss_auth_key *key);

/**
 * The key ranks @a and @b share (0), or -EACCES when @key cannot know it (a keys file
 * holds only its own rank's pairs, and only for ranks 1..size).
 */
int ddss_auth_pair_key(const struct ddss_auth_key *key, uint32_t a, uint32_t b,
		       unsigned char out[DDSS_AUTH_KEY_LEN]);

/** Fill @nonce with fresh random bytes. */
void ddss_auth_nonce(unsigned char nonce[DDSS_AUTH_NONCE_LEN]);

/** The proof @role sends for @t under the key of @t's pair (@key must be on). A pair @key
 * cannot know (never one with its own rank) gets a random proof, which no check passes. */
void ddss_auth_prove(const struct ddss_auth_key *key, enum ddss_auth_role role,
		     const struct ddss_auth_transcript *t, unsigned char proof[DDSS_AUTH_PROOF_LEN]);

/**
 * 0 if @proof's @len bytes (16..DDSS_AUTH_PROOF_LEN) are the leading bytes of what @role
 * must send for @t under @key (constant time), else -EACCES.
 */
int ddss_auth_check(const struct ddss_auth_key *key, enum ddss_auth_role role,
		    const struct ddss_auth_transcript *t, const unsigned char *proof, size_t len);

/**
 * The key of one authenticated connection (DDSS_TCP_PROTECT): a keyed hash, under the key
 * the two ranks of @t share, of the whole transcript with both nonces, so every connection
 * has its own and nobody without that key can compute it. Callers derive one key per
 * direction from it. @key must be on.
 */
void ddss_auth_session_key(const struct ddss_auth_key *key, const struct ddss_auth_transcript *t,
			   unsigned char out[DDSS_AUTH_KEY_LEN]);

#endif /* DDSS_NET_AUTH_H */
