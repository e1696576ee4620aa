/*
 * The agreed view: read once at a revision, then followed change by change through an
 * etcd watch from the next revision, so every member goes through the same views.
 */
#include "coord/member_int.h"
#include "core/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t member_slot_of(const struct ddss_member *m, const char *key, const char *kind)
{
	size_t plen = strlen(m->prefix), klen = strlen(kind);
	char *end;
	unsigned long s;

	if (strncmp(key, m->prefix, plen) || strncmp(key + plen, kind, klen))
		return 0;
	key += plen + klen;
	if (strlen(key) != 5)
		return 0;
	s = strtoul(key, &end, 10);
	return *end || s < 1 || s > m->max ? 0 : (uint32_t)s;
}

/* The "addr" and "gen" of a member value; false if it is not one. */
static bool value_addr(const char *value, char *addr, uint32_t *gen_p)
{
	json_object *o = json_tokener_parse(value), *a, *g;
	bool ok = false;

	*gen_p = 0;
	if (o && json_object_object_get_ex(o, "addr", &a) && json_object_is_type(a, json_type_string) &&
	    strlen(json_object_get_string(a)) < DDSS_MEMBER_ADDR_MAX) {
		strcpy(addr, json_object_get_string(a));
		ok = true;
	}
	if (ok && json_object_object_get_ex(o, "gen", &g) && json_object_is_type(g, json_type_int))
		*gen_p = (uint32_t)json_object_get_int64(g);
	json_object_put(o);
	return ok;
}

/* mu held: slot @slot's member is now @kv (or none if @kv is NULL). */
static void view_set(struct ddss_member *m, uint32_t slot, const struct ddss_etcd_kv *kv)
{
	struct ddss_view *v = &m->view;
	size_t i = 0;

	while (i < v->count && v->members[i].slot < slot)
		i++;
	if (i < v->count && v->members[i].slot == slot) {
		if (!kv) {
			memmove(&v->members[i], &v->members[i + 1],
				(v->count - i - 1) * sizeof(v->members[0]));
			v->count--;
			m->view_lease[slot] = 0;
			return;
		}
	} else if (kv) {
		/* members has room for max entries (member_view_start). */
		memmove(&v->members[i + 1], &v->members[i], (v->count - i) * sizeof(v->members[0]));
		v->count++;
	} else {
		return;
	}
	v->members[i].slot = slot;
	v->members[i].incarnation = kv->create_rev;
	if (!value_addr(kv->value, v->members[i].addr, &v->members[i].generation))
		v->members[i].addr[0] = 0;
	m->view_lease[slot] = kv->lease;
}

static void on_change(void *arg, enum ddss_etcd_event ev, const struct ddss_etcd_kv *kv)
{
	struct ddss_member *m = arg;
	uint32_t slot;

	if ((slot = member_slot_of(m, kv->key, "members/"))) {
		bool leaving;

		pthread_mutex_lock(&m->mu);
		view_set(m, slot, ev == DDSS_ETCD_PUT ? kv : NULL);
		m->view.number = kv->mod_rev;
		leaving = m->stop;
		pthread_mutex_unlock(&m->mu);
		if (slot == m->slot && ev == DDSS_ETCD_DELETE && !leaving)
			member_fence(m, -EHOSTDOWN, "its member key is gone (its lease expired)");
		/* Only this thread changes the view: it is stable during the call. */
		if (m->on_view)
			m->on_view(m->arg, &m->view);
	} else if ((slot = member_slot_of(m, kv->key, "suspect/")) && ev == DDSS_ETCD_PUT &&
		   slot == m->slot && strtoll(kv->value, NULL, 10) == m->incarnation) {
		/* A member stopped hearing us: stop acting, then let the slot go (renewal thread). */
		member_fence(m, -EHOSTDOWN, "a member reported it silent");
	}
	/* After the view's change above: who waits for this revision sees the view of it. */
	__atomic_store_n(&m->seen_rev, kv->mod_rev, __ATOMIC_RELEASE);
}

static void on_watch_state(void *arg, int err)
{
	struct ddss_member *m = arg;

	if (err)
		DDSS_WARN("membership: lost the view's watch on %s: %s; following again when etcd "
			  "answers", m->prefix, strerror(-err));
	else
		DDSS_INFO("membership: following the view of %s", m->prefix);
}

/*
 * Read the members anew into the view, every slot (a slot with no key has no member);
 * the store's revision it was read at in *rev_p. Whether our own slot is still ours.
 */
static int view_read(struct ddss_member *m, int64_t *rev_p, bool *mine_p)
{
	char prefix[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	int r;

	snprintf(prefix, sizeof(prefix), "%smembers/", m->prefix);
	r = ddss_etcd_get(m->etcd, prefix, true, &kvs);
	if (r)
		return r;
	/* The view is the answer, and nothing else: built again in one pass over it. */
	pthread_mutex_lock(&m->mu);
	m->view.count = 0;
	memset(m->view_lease, 0, (m->max + 1) * sizeof(*m->view_lease));
	*mine_p = false;
	for (size_t i = 0; i < kvs.count; i++) {
		uint32_t slot = member_slot_of(m, kvs.kv[i].key, "members/");

		if (!slot)
			continue;
		view_set(m, slot, &kvs.kv[i]);
		if (slot == m->slot)
			*mine_p = kvs.kv[i].create_rev == m->incarnation;
	}
	m->view.number = kvs.revision;
	pthread_mutex_unlock(&m->mu);
	*rev_p = kvs.revision;
	ddss_etcd_kvs_free(&kvs);
	return 0;
}

/* Whether a member reported us silent (our suspect key, with our incarnation). */
static bool reported(struct ddss_member *m)
{
	char key[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	bool yes = false;

	member_key(m, "suspect", m->slot, key, sizeof(key));
	if (ddss_etcd_get(m->etcd, key, false, &kvs))
		return false; /* the watch goes on from the members' revision; it shows later */
	yes = kvs.count == 1 && strtoll(kvs.kv[0].value, NULL, 10) == m->incarnation;
	ddss_etcd_kvs_free(&kvs);
	return yes;
}

/*
 * Watch thread: etcd compacted the revisions the watch had not delivered yet (it was cut
 * off meanwhile). Read the view again, and act as on_change would have on what it missed:
 * our member key gone, or a report of us.
 */
static int64_t on_resync(void *arg)
{
	struct ddss_member *m = arg;
	bool mine = true, leaving;
	int64_t rev;
	int r = view_read(m, &rev, &mine);

	if (r)
		return r;
	pthread_mutex_lock(&m->mu);
	leaving = m->stop;
	pthread_mutex_unlock(&m->mu);
	if (m->slot && !leaving) {
		if (!mine)
			member_fence(m, -EHOSTDOWN, "its member key is gone (seen on reading the "
				     "view again after a compaction)");
		else if (reported(m))
			member_fence(m, -EHOSTDOWN, "a member reported it silent (seen on reading "
				     "the view again after a compaction)");
	}
	if (m->on_view)
		m->on_view(m->arg, &m->view);
	__atomic_store_n(&m->seen_rev, rev, __ATOMIC_RELEASE);
	return rev;
}

int member_view_start(struct ddss_member *m)
{
	bool mine;
	int64_t rev;
	int r;

	m->view.max = m->max;
	m->view.members = calloc(m->max, sizeof(*m->view.members));
	m->view_lease = calloc(m->max + 1, sizeof(*m->view_lease));
	if (!m->view.members || !m->view_lease) {
		r = -ENOMEM;
		goto err;
	}
	r = view_read(m, &rev, &mine);
	if (r)
		goto err;
	__atomic_store_n(&m->seen_rev, rev, __ATOMIC_RELEASE);
	if (m->on_view)
		m->on_view(m->arg, &m->view);
	r = ddss_etcd_watch_start(m->etcd, m->prefix, rev + 1, on_change, on_watch_state,
				  on_resync, m, &m->watch);
	if (r)
		goto err;
	return 0;
err:
	free(m->view.members);
	free(m->view_lease);
	m->view.members = NULL;
	m->view_lease = NULL;
	return r;
}

void member_view_stop(struct ddss_member *m)
{
	ddss_etcd_watch_stop(m->watch);
	m->watch = NULL;
	free(m->view.members);
	free(m->view_lease);
	m->view.members = NULL;
	m->view_lease = NULL;
}

int64_t ddss_member_seen_rev(struct ddss_member *m)
{
	return __atomic_load_n(&m->seen_rev, __ATOMIC_ACQUIRE);
}

int ddss_member_view(struct ddss_member *m, struct ddss_view *v_p)
{
	struct ddss_view v;

	pthread_mutex_lock(&m->mu);
	v = m->view;
	v.members = malloc((v.count ? v.count : 1) * sizeof(*v.members));
	if (v.members)
		memcpy(v.members, m->view.members, v.count * sizeof(*v.members));
	pthread_mutex_unlock(&m->mu);
	if (!v.members)
		return -ENOMEM;
	*v_p = v;
	return 0;
}

void ddss_view_free(struct ddss_view *v)
{
	free(v->members);
	v->members = NULL;
	v->count = 0;
}

const struct ddss_view_member *ddss_view_find(const struct ddss_view *v, uint32_t slot)
{
	for (size_t i = 0; i < v->count; i++)
		if (v->members[i].slot == slot)
			return &v->members[i];
	return NULL;
}
