#include "net/auth.h"
#include "net/auth_keys.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

_Static_assert(DDSS_AUTH_PROOF_LEN == crypto_auth_BYTES, "proof is one crypto_auth tag");
_Static_assert(DDSS_AUTH_KEY_LEN == crypto_auth_KEYBYTES, "group key is a crypto_auth key");

/* Domain separation: the same secret used elsewhere never yields this key. */
static const char KEY_CONTEXT[] = "ddss group key v1";

/*
 * Read at most DDSS_AUTH_SECRET_MAX + 1 bytes of @path into @buf; the length or -errno.
 * A file the group or others may read or write is refused (-EACCES): its secret is not one.
 */
static long read_secret_file(const char *path, unsigned char *buf)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t got;
	size_t n = 0;

	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		DDSS_ERR("DDSS_SECRET_FILE=%s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		close(fd);
		DDSS_ERR("DDSS_SECRET_FILE=%s: the group or others may read or write it (mode %03o); "
			 "chmod 600 it", path, (unsigned)(st.st_mode & 0777));
		return -EACCES;
	}
	while (n < DDSS_AUTH_SECRET_MAX + 1 &&
	       (got = read(fd, buf + n, DDSS_AUTH_SECRET_MAX + 1 - n)) > 0)
		n += (size_t)got;
	close(fd);
	/* An editor's trailing newline is not part of the secret. */
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	return (long)n;
}

/* DDSS_SECRET as this process read it (the variable itself is gone by then). */
static struct {
	pthread_mutex_t mu;
	bool set;
	size_t len;
	unsigned char buf[DDSS_AUTH_SECRET_MAX + 1];
} env_secret = { .mu = PTHREAD_MUTEX_INITIALIZER };

void ddss_auth_env_secret_forget(void)
{
	pthread_mutex_lock(&env_secret.mu);
	sodium_memzero(env_secret.buf, sizeof(env_secret.buf));
	env_secret.set = false;
	env_secret.len = 0;
	pthread_mutex_unlock(&env_secret.mu);
}

int ddss_auth_key_load(const char *attr_secret, struct ddss_auth_key *key)
{
	const char *file = getenv("DDSS_SECRET_FILE"), *env = getenv("DDSS_SECRET");
	unsigned char buf[DDSS_AUTH_SECRET_MAX + 1];
	const char *what;
	long n = 0;
	int r = 0;

	memset(key, 0, sizeof(*key));
	if (file && !*file) {
		/* Set but empty: a mistake (an unset variable in a script), not "no secret". */
		DDSS_ERR("DDSS_SECRET_FILE is set but empty");
		return -EINVAL;
	}
	pthread_mutex_lock(&env_secret.mu);
	if (env) {
		/* Read once, then out of the environment: children do not inherit it. The
		 * process keeps a valid one, for a later ddss_init (a context closed and opened
		 * again). */
		n = (long)strnlen(env, DDSS_AUTH_SECRET_MAX + 1);
		memcpy(buf, env, (size_t)n);
		if (n >= 1 && n <= (long)DDSS_AUTH_SECRET_MAX) {
			memcpy(env_secret.buf, env, (size_t)n);
			env_secret.len = (size_t)n;
			env_secret.set = true;
		}
		sodium_memzero((void *)env, (size_t)n);
		unsetenv("DDSS_SECRET");
	} else if (env_secret.set) {
		n = (long)env_secret.len;
		memcpy(buf, env_secret.buf, env_secret.len);
		env = "";
	}
	pthread_mutex_unlock(&env_secret.mu);
	if (file) {
		what = "DDSS_SECRET_FILE";
		n = read_secret_file(file, buf);
		if (n == -ENOENT)
			DDSS_ERR("cannot read DDSS_SECRET_FILE=%s", file);
		if (n < 0) {
			sodium_memzero(buf, sizeof(buf));
			return (int)n;
		}
	} else if (env) {
		what = "DDSS_SECRET";
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
	ddss_auth_row_put(key->row);
	sodium_memzero(key, sizeof(*key));
}

void ddss_auth_key_copy(struct ddss_auth_key *dst, const struct ddss_auth_key *src)
{
	*dst = *src;
	ddss_auth_row_get(dst->row);
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
	unsigned char msg[TRANSCRIPT_LEN], pair[DDSS_AUTH_KEY_LEN];

	if (ddss_auth_pair_key(key, t->initiator, t->target, pair)) {
		randombytes_buf(proof, DDSS_AUTH_PROOF_LEN);
		return;
	}
	encode(role, t, msg);
	crypto_auth(proof, msg, sizeof(msg), pair);
	sodium_memzero(pair, sizeof(pair));
}

void ddss_auth_session_key(const struct ddss_auth_key *key, const struct ddss_auth_transcript *t,
			   unsigned char out[DDSS_AUTH_KEY_LEN])
{
	unsigned char msg[TRANSCRIPT_LEN], pair[DDSS_AUTH_KEY_LEN];

	if (ddss_auth_pair_key(key, t->initiator, t->target, pair)) {
		randombytes_buf(out, DDSS_AUTH_KEY_LEN); /* nobody else has it: frames fail */
		return;
	}
	/* Role byte 'S': no proof either side sends is ever this hash's input. */
	encode((enum ddss_auth_role)'S', t, msg);
	crypto_generichash(out, DDSS_AUTH_KEY_LEN, msg, sizeof(msg), pair, sizeof(pair));
	sodium_memzero(msg, sizeof(msg));
	sodium_memzero(pair, sizeof(pair));
}

int ddss_auth_check(const struct ddss_auth_key *key, enum ddss_auth_role role,
		    const struct ddss_auth_transcript *t, const unsigned char *proof, size_t len)
{
	unsigned char want[DDSS_AUTH_PROOF_LEN];
	int r;

	if (!key || !key->on || len < 16 || len > DDSS_AUTH_PROOF_LEN)
		return -EACCES;
	if (ddss_auth_pair_key(key, t->initiator, t->target, want)) /* a pair not ours */
		return -EACCES;
	ddss_auth_prove(key, role, t, want);
	r = sodium_memcmp(want, proof, len) == 0 ? 0 : -EACCES;
	sodium_memzero(want, sizeof(want));
	return r;
}
