/*
 * The directory of segment names in etcd (coordinator mode), so that it survives the death
 * of any rank: in static mode each name lives at the rank its hash picks, and goes with it.
 *
 * One key per name, P names/<name>:
 *   "pending <slot> <incarnation> <call>"  a creator is allocating the segment (<call>: a
 *                                   random number of the create). On the creator's
 *                                   lease: if it dies, the name is free again by itself.
 *   "bound <key> <home slot> <home incarnation>"  no lease: the name outlives its creator.
 *                                   It lasts as long as the segment, which lasts as long
 *                                   as its home's incarnation (until replication exists).
 * A bound name whose home incarnation has left the view is stale: a lookup says
 * -EHOSTDOWN (the segment went with its home), a create replaces it (one transaction on
 * its create revision, so two creators never both replace it).
 */
#include "coord/member_int.h"
#include "core/log.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PENDING_POLL_NS (20 * 1000000ll)

static int name_key(const struct ddss_member *m, const char *name, char *key, size_t len)
{
	int n = snprintf(key, len, "%snames/%s", m->prefix, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The current value of @name's key: 0 with @kv filled (free @kvs), -ENOENT, or an error. */
static int name_get(struct ddss_member *m, const char *key, struct ddss_etcd_kvs *kvs)
{
	int r = ddss_etcd_get(m->etcd, key, false, kvs);

	if (!r && !kvs->count) {
		ddss_etcd_kvs_free(kvs);
		return -ENOENT;
	}
	return r;
}

/* Whether slot @slot's member in the view is still incarnation @inc. */
static bool home_alive(struct ddss_member *m, uint32_t slot, int64_t inc)
{
	const struct ddss_view_member *vm;
	struct ddss_view v;
	bool alive;

	if (ddss_member_view(m, &v))
		return true; /* no memory: do not call it stale */
	vm = ddss_view_find(&v, slot);
	alive = vm && vm->incarnation == inc;
	ddss_view_free(&v);
	return alive;
}

/*
 * Create @key as pending under us. The value names this call (a random number besides our
 * slot and incarnation): a create carried out where no answer came back in time shows up
 * at the next endpoint as -EEXIST, or at none, and then the key's value says whether it
 * was ours, and not another thread's of this process. 0, -EEXIST or an error.
 */
static int name_create(struct ddss_member *m, const char *key, char *val, size_t len)
{
	struct ddss_etcd_kvs kvs;
	int64_t rev;
	int r;

	snprintf(val, len, "pending %" PRIu32 " %" PRId64 " %08" PRIx32 "%08" PRIx32, m->slot,
		 m->incarnation, randombytes_random(), randombytes_random());
	r = ddss_etcd_create(m->etcd, key, val, strlen(val), m->lease, &rev);
	if (r != -EEXIST && r != -ETIMEDOUT && r != -ECONNREFUSED)
		return r;
	if (name_get(m, key, &kvs))
		return r;
	if (kvs.kv[0].value_len == strlen(val) && !memcmp(kvs.kv[0].value, val, strlen(val)))
		r = 0;
	ddss_etcd_kvs_free(&kvs);
	return r;
}

int ddss_member_name_acquire(struct ddss_member *m, const char *name, bool create,
			     uint64_t *key_p)
{
	char key[DDSS_MEMBER_KEY_MAX], val[96];
	struct ddss_etcd_kvs kvs;
	uint64_t segkey;
	uint32_t slot;
	int64_t inc, rev;
	int r = name_key(m, name, key, sizeof(key));

	if (r)
		return r;
	r = name_get(m, key, &kvs);
	if (r == -ENOENT) {
		if (!create)
			return -ENOENT;
		r = name_create(m, key, val, sizeof(val));
		return r == -EEXIST ? -EAGAIN : r ? r : DDSS_MEMBER_NAME_CREATE;
	}
	if (r)
		return r;
	snprintf(val, sizeof(val), "%.*s", (int)kvs.kv[0].value_len, kvs.kv[0].value);
	rev = kvs.kv[0].create_rev;
	ddss_etcd_kvs_free(&kvs);
	if (sscanf(val, "bound %" SCNx64 " %" SCNu32 " %" SCNd64, &segkey, &slot, &inc) == 3) {
		if (home_alive(m, slot, inc)) {
			*key_p = segkey;
			return 0;
		}
		if (!create)
			return -EHOSTDOWN; /* its segment went with its home */
		r = ddss_etcd_delete_if(m->etcd, key, rev);
		return r == -ESTALE || !r ? -EAGAIN : r; /* then create it anew */
	}
	if (!strncmp(val, "pending ", 8)) {
		/* Its creator is allocating it (or died: its lease ends the entry). */
		struct timespec ts = { 0, PENDING_POLL_NS };

		nanosleep(&ts, NULL);
		return -EAGAIN;
	}
	DDSS_WARN("coordinator: name '%s' has a value this version cannot read", name);
	return -EPROTO;
}

int ddss_member_name_bind(struct ddss_member *m, const char *name, uint64_t segkey,
			  uint32_t home)
{
	char key[DDSS_MEMBER_KEY_MAX], val[96];
	const struct ddss_view_member *vm;
	struct ddss_view v;
	int64_t inc;
	int r = name_key(m, name, key, sizeof(key));

	if (r)
		return r;
	r = ddss_member_view(m, &v);
	if (r)
		return r;
	vm = ddss_view_find(&v, home);
	inc = vm ? vm->incarnation : 0;
	ddss_view_free(&v);
	if (!inc)
		return -EHOSTDOWN; /* the home left the view already */
	snprintf(val, sizeof(val), "bound %" PRIx64 " %" PRIu32 " %" PRId64, segkey, home, inc);
	/* Our pending entry is on our lease: while we act, nobody else can have the name. */
	return ddss_etcd_put(m->etcd, key, val, strlen(val), 0, NULL);
}

/* Delete @name's key if its value is @want (@prefix: starts with it). */
static int name_delete_if(struct ddss_member *m, const char *name, const char *want,
			  bool prefix)
{
	char key[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	bool ours;
	int64_t rev;
	int r = name_key(m, name, key, sizeof(key));

	if (!r)
		r = name_get(m, key, &kvs);
	if (r)
		return r == -ENOENT ? 0 : r;
	ours = (prefix ? kvs.kv[0].value_len >= strlen(want) :
			 kvs.kv[0].value_len == strlen(want)) &&
	       !memcmp(kvs.kv[0].value, want, strlen(want));
	rev = kvs.kv[0].create_rev;
	ddss_etcd_kvs_free(&kvs);
	if (!ours)
		return 0; /* someone else's by now */
	r = ddss_etcd_delete_if(m->etcd, key, rev);
	return r == -ESTALE ? 0 : r;
}

int ddss_member_name_abandon(struct ddss_member *m, const char *name)
{
	char want[64];

	/* Ours whatever call made it (the number after our incarnation). */
	snprintf(want, sizeof(want), "pending %" PRIu32 " %" PRId64 " ", m->slot, m->incarnation);
	return name_delete_if(m, name, want, true);
}

int ddss_member_name_unbind(struct ddss_member *m, const char *name, uint64_t segkey)
{
	char want[32];

	snprintf(want, sizeof(want), "bound %" PRIx64 " ", segkey);
	return name_delete_if(m, name, want, true);
}
