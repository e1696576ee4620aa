#include "net/auth.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

_Static_assert(DDSS_AUTH_PROOF_LEN == crypto_auth_BYTES, "proof is one crypto_auth tag");
_Static_assert(DDSS_AUTH_KEY_LEN == crypto_auth_KEYBYTES, "group key is a crypto_auth key");

/* Domain separation: the same secret used elsewhere never yields this key. */
static const char KEY_CONTEXT[] = "ddss group key v1";

/* Read at most DDSS_AUTH_SECRET_MAX + 1 bytes of @path into @buf; the length or -errno. */
static long read_secret_file(const char *path, unsigned char *buf)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f)
		return -ENOENT;
	n = fread(buf, 1, DDSS_AUTH_SECRET_MAX + 1, f);
	fclose(f);
	/* An editor's trailing newline is not part of the secret. */
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	return (long)n;
}

int ddss_auth_key_load(const char *attr_secret, struct ddss_auth_key *key)
{
	const char *file = getenv("DDSS_SECRET_FILE"), *env = getenv("DDSS_SECRET");
	unsigned char buf[DDSS_AUTH_SECRET_MAX + 1];
	const char *what;
	long n;
	int r = 0;

	memset(key, 0, sizeof(*key));
	if (file && *file) {
		what = "DDSS_SECRET_FILE";
		n = read_secret_file(file, buf);
		if (n < 0) {
			DDSS_ERR("cannot read DDSS_SECRET_FILE=%s", file);
			return (int)n;
		}
	} else if (env) {
		what = "DDSS_SECRET";
		n = (long)strnlen(env, DDSS_AUTH_SECRET_MAX + 1);
		memcpy(buf, env, (size_t)n);
	} else if (attr_secret) {
		what = "ddss_attr.secret";
		n = (long)strnlen(attr_secret, DDSS_AUTH_SECRET_MAX + 1);
		memcpy(buf, attr_secret, (size_t)n);
	} else {
		return 0;
	}
	if (n == 0 || n > (long)DDSS_AUTH_SECRET_MAX) {
		DDSS_ERR("%s: a group secret must have 1..%u bytes", what, DDSS_AUTH_SECRET_MAX);
		r = -EINVAL;
	} else if (sodium_init() < 0) {
		DDSS_ERR("libsodium cannot start: no group authentication");
		r = -ENOSYS;
	} else {
		crypto_generichash(key->key, sizeof(key->key), buf, (size_t)n,
				   (const unsigned char *)KEY_CONTEXT, sizeof(KEY_CONTEXT) - 1);
		key->on = true;
	}
	sodium_memzero(buf, sizeof(buf));
	return r;
}

void ddss_auth_key_clear(struct ddss_auth_key *key)
{
	sodium_memzero(key, sizeof(*key));
}

void ddss_auth_nonce(unsigned char nonce[DDSS_AUTH_NONCE_LEN])
{
	randombytes_buf(nonce, DDSS_AUTH_NONCE_LEN);
}

/* The bytes a proof covers: role | group | initiator | target | size | nonce_i | nonce_t. */
#define TRANSCRIPT_LEN (1 + 8 + 4 + 4 + 4 + 2 * DDSS_AUTH_NONCE_LEN)

static void encode(enum ddss_auth_role role, const struct ddss_auth_transcript *t,
		   unsigned char out[TRANSCRIPT_LEN])
{
	uint64_t g = htole64(t->group);
	uint32_t v[3] = { htole32(t->initiator), htole32(t->target), htole32(t->size) };

	out[0] = (unsigned char)role;
	memcpy(out + 1, &g, 8);
	memcpy(out + 9, v, 12);
	memcpy(out + 21, t->nonce_i, DDSS_AUTH_NONCE_LEN);
	memcpy(out + 21 + DDSS_AUTH_NONCE_LEN, t->nonce_t, DDSS_AUTH_NONCE_LEN);
}

void ddss_auth_prove(const struct ddss_auth_key *key, enum ddss_auth_role role,
		     const struct ddss_auth_transcript *t, unsigned char proof[DDSS_AUTH_PROOF_LEN])
{
	unsigned char msg[TRANSCRIPT_LEN];

	encode(role, t, msg);
	crypto_auth(proof, msg, sizeof(msg), key->key);
}

int ddss_auth_check(const struct ddss_auth_key *key, enum ddss_auth_role role,
		    const struct ddss_auth_transcript *t,
		    const unsigned char proof[DDSS_AUTH_PROOF_LEN])
{
	unsigned char msg[TRANSCRIPT_LEN];

	if (!key->on)
		return -EACCES;
	encode(role, t, msg);
	return crypto_auth_verify(proof, msg, sizeof(msg), key->key) == 0 ? 0 : -EACCES;
}
