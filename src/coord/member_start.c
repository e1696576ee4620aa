/*
 * The group's founders (P start): the members that start the group together, through the
 * start barrier. A group may start below its maximum size (DDSS_SIZE of DDSS_MAX_SIZE
 * slots) and grow into the free slots later, so "the view holds every slot" no longer
 * says when it has formed, and two processes that read the view at different revisions
 * could disagree on who started it. So the first member that sees the view reach the
 * start size writes that view's members down, once (create if absent), and everyone
 * reads the same list: a process not on it joins a running group instead.
 *
 * The key has no lease (it must outlive any one member). A list none of whose members is
 * in the view any more was written by an earlier run of the group: it is replaced.
 */
#include "coord/member_int.h"
#include "core/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "S:I S:I ..." into @f (room for m->max); -EPROTO if it is not that. */
static int start_parse(const struct ddss_member *m, const char *text,
		       struct ddss_member_founder *f, uint32_t *n_p)
{
	uint32_t n = 0;

	while (*text) {
		char *end;
		unsigned long s = strtoul(text, &end, 10);
		long long inc;

		if (end == text || *end != ':' || s < 1 || s > m->max || n >= m->max)
			return -EPROTO;
		text = end + 1;
		inc = strtoll(text, &end, 10);
		if (end == text || inc <= 0 || (*end && *end != ' '))
			return -EPROTO;
		f[n++] = (struct ddss_member_founder){ (uint32_t)s, inc };
		text = *end ? end + 1 : end;
	}
	*n_p = n;
	return n ? 0 : -EPROTO;
}

/* Whether any founder of the list is still a member: else it is an earlier run's. */
static bool start_current(const struct ddss_view *v, const struct ddss_member_founder *f,
			  uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct ddss_view_member *vm = ddss_view_find(v, f[i].slot);

		if (vm && vm->incarnation == f[i].incarnation)
			return true;
	}
	return false;
}

/* Write the view's members as the founders, if nobody has. */
static int start_create(struct ddss_member *m, const char *key, const struct ddss_view *v,
			struct ddss_member_founder *f, uint32_t *n_p, int64_t *rev_p)
{
	size_t len = v->count * 32 + 1, off = 0;
	char *text = malloc(len);
	int r;

	if (!text)
		return -ENOMEM;
	text[0] = 0;
	for (size_t i = 0; i < v->count; i++) {
		f[i] = (struct ddss_member_founder){ v->members[i].slot,
						     v->members[i].incarnation };
		off += (size_t)snprintf(text + off, len - off, "%s%" PRIu32 ":%" PRId64,
					i ? " " : "", f[i].slot, f[i].incarnation);
	}
	r = ddss_etcd_create(m->etcd, key, text, off, 0, rev_p);
	free(text);
	if (r == -EEXIST)
		return -EAGAIN; /* another member was first: read its list */
	if (!r) {
		*n_p = (uint32_t)v->count;
		DDSS_INFO("membership: %s starts with %zu member(s) (view %" PRId64 ")", m->prefix,
			  v->count, v->number);
	}
	return r;
}

int ddss_member_start(struct ddss_member *m, uint32_t size, struct ddss_member_founder *f,
		      uint32_t *n_p, int64_t *rev_p)
{
	char key[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	struct ddss_view v;
	int r;

	if (size < 1 || size > m->max)
		return -EINVAL;
	snprintf(key, sizeof(key), "%sstart", m->prefix);
	r = ddss_member_view(m, &v);
	if (r)
		return r;
	r = ddss_etcd_get(m->etcd, key, false, &kvs);
	if (r)
		goto out;
	if (kvs.count == 1) {
		r = start_parse(m, kvs.kv[0].value, f, n_p);
		if (r)
			DDSS_WARN("membership: %s holds no list of founders: replaced", key);
		if (!r && start_current(&v, f, *n_p)) {
			*rev_p = kvs.kv[0].mod_rev;
			goto out_kvs;
		}
		/* An earlier run's, or unreadable: replace it (on its revision: one replacer). */
		r = ddss_etcd_delete_if(m->etcd, key, kvs.kv[0].create_rev);
		if (!r || r == -ESTALE)
			r = -EAGAIN;
		goto out_kvs;
	}
	r = v.count < size ? -EAGAIN : start_create(m, key, &v, f, n_p, rev_p);
out_kvs:
	ddss_etcd_kvs_free(&kvs);
out:
	ddss_view_free(&v);
	return r;
}
