/*
 * Pair keys: what two ranks prove themselves to each other with (net/auth.h). With a group
 * secret each pair key is a keyed hash of the pair under the group key; with a keys file
 * (DDSS_KEYS_FILE) a rank has only the keys of its own pairs, so it cannot speak as anyone
 * else.
 */
#include "net/auth_keys.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

struct ddss_auth_row {
	int refs;
	uint32_t rank, size;
	unsigned char pair[]; /* size x DDSS_AUTH_KEY_LEN: the key shared with rank i at i - 1 */
};

/* Domain separation from the group key's other uses (proofs, session keys). */
static const char PAIR_CONTEXT[] = "ddss pair key v1";

void ddss_auth_row_get(struct ddss_auth_row *row)
{
	if (row)
		__atomic_add_fetch(&row->refs, 1, __ATOMIC_RELAXED);
}

void ddss_auth_row_put(struct ddss_auth_row *row)
{
	if (!row || __atomic_sub_fetch(&row->refs, 1, __ATOMIC_ACQ_REL))
		return;
	sodium_memzero(row->pair, (size_t)row->size * DDSS_AUTH_KEY_LEN);
	free(row);
}

int ddss_auth_pair_key(const struct ddss_auth_key *key, uint32_t a, uint32_t b,
		       unsigned char out[DDSS_AUTH_KEY_LEN])
{
	unsigned char msg[sizeof(PAIR_CONTEXT) - 1 + 8];
	uint32_t lo = a < b ? a : b, hi = a < b ? b : a, other;

	if (!key || !key->on)
		return -EACCES;
	if (key->row) {
		const struct ddss_auth_row *row = key->row;

		if (a != row->rank && b != row->rank)
			return -EACCES; /* another pair's key: not ours to know */
		other = a == row->rank ? b : a;
		if (other < 1 || other > row->size)
			return -EACCES;
		memcpy(out, row->pair + (size_t)(other - 1) * DDSS_AUTH_KEY_LEN, DDSS_AUTH_KEY_LEN);
		return 0;
	}
	lo = htole32(lo);
	hi = htole32(hi);
	memcpy(msg, PAIR_CONTEXT, sizeof(PAIR_CONTEXT) - 1);
	memcpy(msg + sizeof(PAIR_CONTEXT) - 1, &lo, 4);
	memcpy(msg + sizeof(PAIR_CONTEXT) - 1 + 4, &hi, 4);
	crypto_generichash(out, DDSS_AUTH_KEY_LEN, msg, sizeof(msg), key->key, sizeof(key->key));
	return 0;
}

/* The whole of @fd (a keys file of @expect bytes) into @buf; 0 or -EINVAL. */
static int read_exact(int fd, unsigned char *buf, size_t expect)
{
	size_t n = 0;
	ssize_t got;
	unsigned char extra;

	while (n < expect && (got = read(fd, buf + n, expect - n)) > 0)
		n += (size_t)got;
	if (n != expect || read(fd, &extra, 1) != 0)
		return -EINVAL;
	return 0;
}

int ddss_auth_keys_load(uint32_t rank, uint32_t size, struct ddss_auth_key *key)
{
	const char *path = getenv("DDSS_KEYS_FILE");
	unsigned char hdr[DDSS_AUTH_KEYS_HDR_LEN];
	struct ddss_auth_row *row;
	uint32_t frank, fsize;
	struct stat st;
	int fd, r;

	if (!path)
		return 0;
	if (!*path) {
		DDSS_ERR("DDSS_KEYS_FILE is set but empty");
		return -EINVAL;
	}
	if (key->on) {
		DDSS_ERR("DDSS_KEYS_FILE and a group secret are both set: use one");
		return -EINVAL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		DDSS_ERR("cannot read DDSS_KEYS_FILE=%s", path);
		return -ENOENT;
	}
	r = fstat(fd, &st) || !S_ISREG(st.st_mode) ? -EINVAL : 0;
	if (!r && (st.st_mode & (S_IRWXG | S_IRWXO))) {
		DDSS_ERR("DDSS_KEYS_FILE=%s: the group or others may read or write it (mode %03o); "
			 "chmod 600 it", path, (unsigned)(st.st_mode & 0777));
		close(fd);
		return -EACCES;
	}
	if (!r)
		r = read(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr) &&
				    !memcmp(hdr, DDSS_AUTH_KEYS_MAGIC, 8) ? 0 : -EINVAL;
	if (!r) {
		memcpy(&frank, hdr + 8, 4);
		memcpy(&fsize, hdr + 12, 4);
		frank = le32toh(frank);
		fsize = le32toh(fsize);
		if (frank != rank || fsize != size) {
			DDSS_ERR("DDSS_KEYS_FILE=%s is rank %u's of a group of %u, not rank %u's of %u",
				 path, frank, fsize, rank, size);
			close(fd);
			return -EINVAL;
		}
	}
	row = r ? NULL : malloc(sizeof(*row) + (size_t)size * DDSS_AUTH_KEY_LEN);
	if (!r && !row)
		r = -ENOMEM;
	if (!r)
		r = read_exact(fd, row->pair, (size_t)size * DDSS_AUTH_KEY_LEN);
	close(fd);
	if (r) {
		if (r == -EINVAL)
			DDSS_ERR("DDSS_KEYS_FILE=%s is not a DDSS keys file (ddssrun --write-keys)", path);
		free(row);
		return r;
	}
	if (sodium_init() < 0) {
		free(row);
		DDSS_ERR("libsodium cannot start: no group authentication");
		return -ENOSYS;
	}
	row->refs = 1;
	row->rank = rank;
	row->size = size;
	key->row = row;
	key->on = true;
	return 0;
}
