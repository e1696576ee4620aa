/*
 * The etcd client (src/coord/etcd.h) against a real etcd (run under with_etcd.sh):
 * keys, prefixes, compare-and-swap, leases, watch order, and clear errors for bad input
 * and for endpoints that do not answer.
 */
#include "common/test_util.h"
#include "coord/etcd.h"
#include "coord/etcd_int.h"
#include "delay_proxy.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct ddss_etcd *etcd;
static char prefix[64];

static void key(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s%s", prefix, name);
}

static void test_bad_input(void)
{
	struct ddss_etcd *e;

	CU_ASSERT_EQUAL(ddss_etcd_open("", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_open("127.0.0.1", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_open("127.0.0.1:0", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_open("127.0.0.1:70000", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_open("127.0.0.1:2379,", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_open("http://x/y:1", 0, &e), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_lease_grant(etcd, 0, &(int64_t){ 0 }), -EINVAL);
	CU_ASSERT_EQUAL(ddss_etcd_delete_if(etcd, "/x", 0), -EINVAL);
}

static void test_unreachable(void)
{
	struct ddss_etcd *e;
	struct ddss_etcd_kvs kvs;
	double t0;
	int r;

	/* Port 1 on loopback: nobody listens, the answer is a refusal, at once. */
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open("127.0.0.1:1", 500, &e), 0);
	t0 = test_now_ms();
	r = ddss_etcd_get(e, "/x", false, &kvs);
	CU_ASSERT_EQUAL(r, -ECONNREFUSED);
	CU_ASSERT(test_now_ms() - t0 < 2000);
	ddss_etcd_close(e);
}

/* A member that takes the connection but never answers (stalled, like a frozen etcd):
 * -ETIMEDOUT, never -ECONNREFUSED, even when another endpoint refuses: only a refusal
 * everywhere says that no etcd runs (coordinator mode's outage rule rests on that). */
static void test_silent(void)
{
	char list[64];
	struct ddss_etcd *e;
	struct ddss_etcd_kvs kvs;
	unsigned port;
	int s = test_listen_loopback(&port); /* listens; nobody accepts or answers */

	CU_ASSERT_FATAL(s >= 0);
	snprintf(list, sizeof(list), "127.0.0.1:%u", port);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 300, &e), 0);
	CU_ASSERT_EQUAL(ddss_etcd_get(e, "/x", false, &kvs), -ETIMEDOUT);
	ddss_etcd_close(e);
	snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:1", port);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 300, &e), 0);
	CU_ASSERT_EQUAL(ddss_etcd_get(e, "/x", false, &kvs), -ETIMEDOUT);
	ddss_etcd_close(e);
	close(s);
}

static void test_failover(void)
{
	char list[512], k[128];
	struct ddss_etcd *e;
	struct ddss_etcd_kvs kvs;

	/* A dead endpoint first: the next one answers. */
	snprintf(list, sizeof(list), "127.0.0.1:1,%s", getenv("DDSS_TEST_ETCD"));
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 1000, &e), 0);
	key(k, sizeof(k), "failover");
	CU_ASSERT_EQUAL(ddss_etcd_put(e, k, "v", 1, 0, NULL), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(e, k, false, &kvs), 0);
	CU_ASSERT_EQUAL(kvs.count, 1);
	ddss_etcd_kvs_free(&kvs);
	ddss_etcd_close(e);
}

static void test_put_get(void)
{
	char k[128], p[128];
	struct ddss_etcd_kvs kvs;
	const char bin[5] = { 'a', 0, 'b', '\n', (char)0xff };
	int64_t rev1, rev2;

	key(k, sizeof(k), "kv/one");
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, bin, sizeof(bin), 0, &rev1), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL_FATAL(kvs.count, 1);
	CU_ASSERT_STRING_EQUAL(kvs.kv[0].key, k);
	CU_ASSERT_EQUAL(kvs.kv[0].value_len, sizeof(bin));
	CU_ASSERT(memcmp(kvs.kv[0].value, bin, sizeof(bin)) == 0);
	CU_ASSERT_EQUAL(kvs.kv[0].create_rev, rev1);
	CU_ASSERT_EQUAL(kvs.kv[0].mod_rev, rev1);
	CU_ASSERT(kvs.revision >= rev1);
	ddss_etcd_kvs_free(&kvs);
	/* Overwrite: same create revision, a later mod revision. An empty value reads back. */
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, "", 0, 0, &rev2), 0);
	CU_ASSERT(rev2 > rev1);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL_FATAL(kvs.count, 1);
	CU_ASSERT_EQUAL(kvs.kv[0].value_len, 0);
	CU_ASSERT_EQUAL(kvs.kv[0].create_rev, rev1);
	CU_ASSERT_EQUAL(kvs.kv[0].mod_rev, rev2);
	ddss_etcd_kvs_free(&kvs);
	/* A prefix: its keys and no others. */
	key(k, sizeof(k), "kv/two");
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, "2", 1, 0, NULL), 0);
	key(k, sizeof(k), "kv0"); /* just past the prefix "kv/" */
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, "x", 1, 0, NULL), 0);
	key(p, sizeof(p), "kv/");
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, p, true, &kvs), 0);
	CU_ASSERT_EQUAL(kvs.count, 2);
	ddss_etcd_kvs_free(&kvs);
	CU_ASSERT_EQUAL(ddss_etcd_delete(etcd, p, true), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, p, true, &kvs), 0);
	CU_ASSERT_EQUAL(kvs.count, 0);
	ddss_etcd_kvs_free(&kvs);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL(kvs.count, 1); /* "kv0" was outside it */
	ddss_etcd_kvs_free(&kvs);
}

static void test_compare_and_swap(void)
{
	char k[128];
	int64_t rev, rev2;
	struct ddss_etcd_kvs kvs;

	key(k, sizeof(k), "cas");
	CU_ASSERT_EQUAL(ddss_etcd_create(etcd, k, "a", 1, 0, &rev), 0);
	CU_ASSERT_EQUAL(ddss_etcd_create(etcd, k, "b", 1, 0, &rev2), -EEXIST);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL_FATAL(kvs.count, 1);
	CU_ASSERT_STRING_EQUAL(kvs.kv[0].value, "a"); /* the loser changed nothing */
	CU_ASSERT_EQUAL(kvs.kv[0].create_rev, rev);
	ddss_etcd_kvs_free(&kvs);
	CU_ASSERT_EQUAL(ddss_etcd_delete_if(etcd, k, rev + 1000), -ESTALE);
	CU_ASSERT_EQUAL(ddss_etcd_delete_if(etcd, k, rev), 0);
	CU_ASSERT_EQUAL(ddss_etcd_delete_if(etcd, k, rev), -ESTALE); /* gone */
	/* Created again: a new, larger create revision. */
	CU_ASSERT_EQUAL(ddss_etcd_create(etcd, k, "c", 1, 0, &rev2), 0);
	CU_ASSERT(rev2 > rev);
}

static void test_leases(void)
{
	char k[128];
	int64_t lease;
	int ttl = 0;
	struct ddss_etcd_kvs kvs;

	CU_ASSERT_EQUAL_FATAL(ddss_etcd_lease_grant(etcd, 30, &lease), 0);
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(etcd, lease, &ttl), 0);
	CU_ASSERT(ttl >= 29 && ttl <= 30);
	key(k, sizeof(k), "leased");
	CU_ASSERT_EQUAL(ddss_etcd_create(etcd, k, "v", 1, lease, NULL), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL_FATAL(kvs.count, 1);
	CU_ASSERT_EQUAL(kvs.kv[0].lease, lease);
	ddss_etcd_kvs_free(&kvs);
	/* Revoked: its keys go with it, and it cannot be renewed. */
	CU_ASSERT_EQUAL(ddss_etcd_lease_revoke(etcd, lease), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, k, false, &kvs), 0);
	CU_ASSERT_EQUAL(kvs.count, 0);
	ddss_etcd_kvs_free(&kvs);
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(etcd, lease, &ttl), -ENOENT);
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, "v", 1, lease, NULL), -ENOENT);
}

/*
 * A renewal has a deadline: when its member does not answer within 200 ms, it asks the
 * others too, so a silent member (frozen, cut off) costs it little. Until 2026-12-07 it
 * waited out the silent member's timeout (2 s of a 5 s lease in coord_member_cluster)
 * before it tried the next, and a leader election on top let members' deadlines pass.
 * The errors stay those of etcd_post: the first real answer wins; a silence anywhere
 * makes "nobody answered" a timeout, not a refusal.
 */
static void test_renew_beside_silent(void)
{
	char list[512];
	struct ddss_etcd *e;
	int64_t lease;
	int ttl = 0;
	unsigned port;
	double t0, took;
	int s = test_listen_loopback(&port); /* listens; nobody accepts or answers */

	CU_ASSERT_FATAL(s >= 0);
	snprintf(list, sizeof(list), "127.0.0.1:%u,%s", port, getenv("DDSS_TEST_ETCD"));
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 2000, &e), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_lease_grant(e, 30, &lease), 0);
	ddss_etcd_close(e); /* a fresh client: the silent member is again the first in turn */
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 2000, &e), 0);
	t0 = test_now_ms();
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(e, lease, &ttl), 0);
	took = test_now_ms() - t0;
	printf("\n    renewal beside a silent member: %.0f ms (its timeout: 2000 ms) ", took);
	CU_ASSERT(took < 1000);
	CU_ASSERT(ttl >= 29 && ttl <= 30);
	CU_ASSERT_EQUAL(ddss_etcd_lease_revoke(e, lease), 0);
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(e, lease, &ttl), -ENOENT);
	ddss_etcd_close(e);
	/* Nobody answers: a refusal only if every member refused. */
	snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:1", port);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 300, &e), 0);
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(e, lease, &ttl), -ETIMEDOUT);
	ddss_etcd_close(e);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open("127.0.0.1:1,127.0.0.1:1", 300, &e), 0);
	CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(e, lease, &ttl), -ECONNREFUSED);
	ddss_etcd_close(e);
	close(s);
}

/* A member that answers in time gets the renewal alone: etcd sees one request per renewal,
 * not one per member (docs/scale.md counts them). */
static void test_renew_one_request(void)
{
	char list[512], via[32];
	struct delay_proxy *p;
	struct ddss_etcd *e;
	int64_t lease;
	int ttl = 0;

	CU_ASSERT_EQUAL_FATAL(delay_proxy_start(getenv("DDSS_TEST_ETCD"),
						"POST /v3/lease/keepalive", 0, &p, via), 0);
	snprintf(list, sizeof(list), "%s,%s", getenv("DDSS_TEST_ETCD"), via);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(list, 2000, &e), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_lease_grant(e, 30, &lease), 0);
	for (int i = 0; i < 10; i++)
		CU_ASSERT_EQUAL(ddss_etcd_lease_keepalive(e, lease, &ttl), 0);
	/* A renewal slower than 200 ms (a loaded machine) is hedged: a few may go there. */
	printf("renewals through the second member: %u of 10 ", delay_proxy_delayed(p));
	CU_ASSERT(delay_proxy_delayed(p) <= 3);
	CU_ASSERT_EQUAL(ddss_etcd_lease_revoke(e, lease), 0);
	ddss_etcd_close(e);
	delay_proxy_stop(p);
}

struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned n;
	enum ddss_etcd_event ev[16];
	char key[16][128];
	char value[16][16];
	int64_t rev[16];
};

static void on_event(void *arg, enum ddss_etcd_event ev, const struct ddss_etcd_kv *kv)
{
	struct seen *s = arg;

	pthread_mutex_lock(&s->mu);
	if (s->n < 16) {
		s->ev[s->n] = ev;
		snprintf(s->key[s->n], sizeof(s->key[0]), "%s", kv->key);
		snprintf(s->value[s->n], sizeof(s->value[0]), "%s", kv->value);
		s->rev[s->n] = kv->mod_rev;
		s->n++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static bool wait_seen(struct seen *s, unsigned want)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&s->mu);
	while (s->n < want && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
		;
	pthread_mutex_unlock(&s->mu);
	return s->n >= want;
}

static void test_watch(void)
{
	struct seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct ddss_etcd_watch *w;
	char p[128], k1[128], k2[128], other[128];
	int64_t r0, r1, r2, r3;

	key(p, sizeof(p), "w/");
	key(k1, sizeof(k1), "w/1");
	key(k2, sizeof(k2), "w/2");
	key(other, sizeof(other), "x/1");
	CU_ASSERT_EQUAL(ddss_etcd_watch_start(etcd, "/no-slash", 1, on_event, NULL, NULL, &s, &w),
			-EINVAL);
	/* A change made before the watch starts, from its start revision, is delivered. */
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_put(etcd, k1, "a", 1, 0, &r0), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_watch_start(etcd, p, r0, on_event, NULL, NULL, &s, &w), 0);
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, other, "no", 2, 0, NULL), 0); /* not watched */
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k2, "b", 1, 0, &r1), 0);
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k1, "c", 1, 0, &r2), 0);
	CU_ASSERT_EQUAL(ddss_etcd_delete(etcd, k2, false), 0);
	CU_ASSERT(wait_seen(&s, 4));
	ddss_etcd_watch_stop(w);
	CU_ASSERT_EQUAL_FATAL(s.n, 4);
	CU_ASSERT(s.ev[0] == DDSS_ETCD_PUT && !strcmp(s.key[0], k1) && !strcmp(s.value[0], "a"));
	CU_ASSERT_EQUAL(s.rev[0], r0);
	CU_ASSERT(s.ev[1] == DDSS_ETCD_PUT && !strcmp(s.key[1], k2) && !strcmp(s.value[1], "b"));
	CU_ASSERT_EQUAL(s.rev[1], r1);
	CU_ASSERT(s.ev[2] == DDSS_ETCD_PUT && !strcmp(s.key[2], k1) && !strcmp(s.value[2], "c"));
	CU_ASSERT_EQUAL(s.rev[2], r2);
	CU_ASSERT(s.ev[3] == DDSS_ETCD_DELETE && !strcmp(s.key[3], k2));
	CU_ASSERT(s.rev[3] > r2);
	/* Stopped: nothing more arrives. */
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k1, "d", 1, 0, &r3), 0);
	CU_ASSERT_EQUAL(s.n, 4);
}

/*
 * A revoked lease deletes all its keys in one revision: the watch delivers every one.
 * (It delivered the first only: each later event of the revision looked like one seen
 * before a reopen.)
 */
static void test_watch_one_revision(void)
{
	struct seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct ddss_etcd_watch *w;
	char p[128], k[3][140];
	int64_t lease, rev = 0;

	key(p, sizeof(p), "lw/");
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_lease_grant(etcd, 30, &lease), 0);
	for (unsigned i = 0; i < 3; i++) {
		snprintf(k[i], sizeof(k[i]), "%s%c", p, 'a' + i);
		CU_ASSERT_EQUAL_FATAL(ddss_etcd_create(etcd, k[i], "v", 1, lease, &rev), 0);
	}
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_watch_start(etcd, p, rev + 1, on_event, NULL, NULL, &s, &w), 0);
	CU_ASSERT_EQUAL(ddss_etcd_lease_revoke(etcd, lease), 0);
	CU_ASSERT(wait_seen(&s, 3));
	ddss_etcd_watch_stop(w);
	printf("%u of 3 deletes delivered ", s.n);
	CU_ASSERT_EQUAL_FATAL(s.n, 3);
	for (unsigned i = 0; i < 3; i++) {
		bool found = false;

		CU_ASSERT(s.ev[i] == DDSS_ETCD_DELETE);
		CU_ASSERT_EQUAL(s.rev[i], s.rev[0]); /* one revision */
		for (unsigned j = 0; j < 3; j++)
			found |= !strcmp(s.key[j], k[i]);
		CU_ASSERT(found);
	}
}

/* The resync callback: how often it was asked, and the revision it read at. */
struct resynced {
	struct seen seen;
	unsigned calls;
	int64_t rev;
	int state_err;
	char prefix[128];
};

static int64_t on_resync(void *arg)
{
	struct resynced *rs = arg;
	struct ddss_etcd_kvs kvs;
	int r = ddss_etcd_get(etcd, rs->prefix, true, &kvs);

	if (r)
		return r;
	pthread_mutex_lock(&rs->seen.mu);
	rs->calls++;
	rs->rev = kvs.revision;
	pthread_cond_broadcast(&rs->seen.cv);
	pthread_mutex_unlock(&rs->seen.mu);
	ddss_etcd_kvs_free(&kvs);
	return rs->rev;
}

static bool wait_resynced(struct resynced *rs)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&rs->seen.mu);
	while (!rs->calls && pthread_cond_timedwait(&rs->seen.cv, &rs->seen.mu, &ts) == 0)
		;
	pthread_mutex_unlock(&rs->seen.mu);
	return rs->calls > 0;
}

static void on_state(void *arg, int err)
{
	struct resynced *rs = arg;

	if (err)
		rs->state_err = err;
}

static void on_resynced_event(void *arg, enum ddss_etcd_event ev, const struct ddss_etcd_kv *kv)
{
	on_event(&((struct resynced *)arg)->seen, ev, kv);
}

/*
 * A watch from a revision etcd has compacted (as after a stream that was down while it
 * compacted): told -ERANGE, its consumer is asked to read again, and the watch goes on
 * from there. (It ended for good: a member followed a frozen view.)
 */
static void test_watch_compacted(void)
{
	struct resynced rs = { .seen = { .mu = PTHREAD_MUTEX_INITIALIZER,
					 .cv = PTHREAD_COND_INITIALIZER } };
	struct ddss_etcd_watch *w;
	char k1[160], k2[160];
	int64_t r0, r1, r2;
	json_object *req = json_object_new_object(), *resp = NULL;
	char rev[24];

	key(rs.prefix, sizeof(rs.prefix), "cw/");
	snprintf(k1, sizeof(k1), "%s1", rs.prefix);
	snprintf(k2, sizeof(k2), "%s2", rs.prefix);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_put(etcd, k1, "a", 1, 0, &r0), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_put(etcd, k1, "b", 1, 0, &r1), 0);
	snprintf(rev, sizeof(rev), "%lld", (long long)r1);
	json_object_object_add(req, "revision", json_object_new_string(rev));
	CU_ASSERT_EQUAL_FATAL(etcd_post(etcd, "/v3/kv/compaction", req, &resp), 0);
	json_object_put(resp);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_watch_start(etcd, rs.prefix, r0, on_resynced_event,
						    on_state, on_resync, &rs, &w), 0);
	CU_ASSERT(wait_resynced(&rs));
	CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k2, "c", 1, 0, &r2), 0);
	CU_ASSERT(wait_seen(&rs.seen, 1));
	ddss_etcd_watch_stop(w);
	printf("resync asked %u time(s), read at %lld; %u event(s) after ", rs.calls,
	       (long long)rs.rev, rs.seen.n);
	CU_ASSERT_EQUAL(rs.state_err, -ERANGE);
	CU_ASSERT_EQUAL(rs.calls, 1);
	CU_ASSERT(rs.rev >= r1 && rs.rev < r2);
	CU_ASSERT_EQUAL_FATAL(rs.seen.n, 1);
	CU_ASSERT(rs.seen.ev[0] == DDSS_ETCD_PUT && !strcmp(rs.seen.key[0], k2));
	CU_ASSERT_EQUAL(rs.seen.rev[0], r2);
}

/*
 * A watch asks its member for a quorum read only after 3 s without a byte on the stream
 * (a frozen member keeps an idle stream open): while events come, none. The reads are
 * counted by a proxy in front of etcd. (The watch asked every 3 s, events or not: one
 * read per member every 3 s for etcd to serve.)
 */
static void test_watch_probe_when_silent(void)
{
	struct seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct timespec pace = { 0, 300 * 1000000 }, tick = { 0, 50 * 1000000 };
	struct ddss_etcd_watch *w;
	struct delay_proxy *p;
	struct ddss_etcd *via_proxy;
	char p_key[128], k[160], via[32];
	unsigned during, i;
	double last_event = test_now_ms(), silent_ms;
	bool seen_all = true;
	int64_t from;

	key(p_key, sizeof(p_key), "pw/");
	snprintf(k, sizeof(k), "%s1", p_key);
	CU_ASSERT_EQUAL_FATAL(delay_proxy_start(getenv("DDSS_TEST_ETCD"), "POST /v3/kv/range",
						0, &p, via), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(via, 0, &via_proxy), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_put(etcd, k, "-", 1, 0, &from), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_watch_start(via_proxy, p_key, from + 1, on_event, NULL,
						    NULL, &s, &w), 0);
	/* 14 events, 300 ms apart: 4.2 s of a stream that is never silent for 3 s. */
	for (i = 0; i < 14 && seen_all; i++) {
		char v[8];

		snprintf(v, sizeof(v), "%u", i);
		CU_ASSERT_EQUAL(ddss_etcd_put(etcd, k, v, strlen(v), 0, NULL), 0);
		seen_all = wait_seen(&s, i + 1);
		last_event = test_now_ms();
		nanosleep(&pace, NULL);
	}
	during = delay_proxy_delayed(p);
	/* Silent from here: the member is asked 3 s after the last byte (a libcurl tick or
	 * two later). */
	while (delay_proxy_delayed(p) == during && test_now_ms() - last_event < 8000)
		nanosleep(&tick, NULL);
	silent_ms = test_now_ms() - last_event;
	ddss_etcd_watch_stop(w);
	ddss_etcd_close(via_proxy);
	printf("reads of the member: %u in 4.2 s of events, then one %.0f ms after the last ",
	       during, silent_ms);
	CU_ASSERT(seen_all);
	CU_ASSERT_EQUAL(during, 0);
	CU_ASSERT(delay_proxy_delayed(p) > during);
	CU_ASSERT(silent_ms >= 2500);
	delay_proxy_stop(p);
}

int main(void)
{
	const char *ep = getenv("DDSS_TEST_ETCD");
	CU_pSuite suite;
	unsigned failed;

	if (!ep) {
		printf("SKIP: run under tests/coord/with_etcd.sh (no DDSS_TEST_ETCD)\n");
		return TEST_SKIP_EXIT;
	}
	snprintf(prefix, sizeof(prefix), "/ddss-test/%d/", (int)getpid());
	if (ddss_etcd_open(ep, 0, &etcd)) {
		fprintf(stderr, "cannot open the etcd client for %s\n", ep);
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("etcd_client", NULL, NULL);
	CU_add_test(suite, "bad input: -EINVAL, nothing sent", test_bad_input);
	CU_add_test(suite, "no endpoint answers: -ECONNREFUSED at once", test_unreachable);
	CU_add_test(suite, "a silent endpoint: -ETIMEDOUT, never a refusal", test_silent);
	CU_add_test(suite, "a dead endpoint first: the next one answers", test_failover);
	CU_add_test(suite, "put, get, prefix, binary values", test_put_get);
	CU_add_test(suite, "create only if absent, delete only at a revision", test_compare_and_swap);
	CU_add_test(suite, "leases: keys go with them", test_leases);
	CU_add_test(suite, "a renewal does not wait on a silent member", test_renew_beside_silent);
	CU_add_test(suite, "a renewal goes to one member when it answers", test_renew_one_request);
	CU_add_test(suite, "watch: every change under a prefix, in order", test_watch);
	CU_add_test(suite, "watch: every key of one revision (a revoked lease)",
		    test_watch_one_revision);
	CU_add_test(suite, "watch from a compacted revision: read again, then on",
		    test_watch_compacted);
	CU_add_test(suite, "watch: its member is asked only after 3 s of silence",
		    test_watch_probe_when_silent);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_etcd_close(etcd);
	return failed ? 1 : 0;
}
