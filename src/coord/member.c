/*
 * Group membership agreed through etcd: join, the lease and its deadline, reports.
 * The view itself is kept by member_view.c; the keys are described in member.h.
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

/*
 * Renewals per TTL. The deadline is 0.79 TTL after a renewal was sent (deadline_after), so
 * the first two after it may be lost. More often also puts the last renewal before an etcd
 * leader dies closer to that death: with TTL/3 a 5 s lease rode out 2.3 s without a leader
 * at worst, and coord_member_cluster's killed leader took longer under CI's load.
 */
#define RENEWS_PER_TTL 4
/* How soon to try again after a renewal failed (etcd unreachable, no leader). */
#define RENEW_RETRY_MS 250

int64_t member_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void member_key(const struct ddss_member *m, const char *kind, uint32_t slot, char *key,
		size_t len)
{
	snprintf(key, len, "%s%s/%05" PRIu32, m->prefix, kind, slot);
}

/*
 * The deadline after a renewal sent at @sent_ns and granted @ttl_s: etcd's lease runs
 * until at least its receipt plus the TTL, which is after we sent it. Our clock may run
 * slow against the leader's by DDSS_MEMBER_DRIFT; the margin covers the rest (the time
 * from the check to the end of an operation already under way). docs/failure.md.
 */
static int64_t deadline_after(const struct ddss_member *m, int64_t sent_ns, int ttl_s)
{
	int64_t ttl_ns = (int64_t)ttl_s * 1000000000;

	return sent_ns + ttl_ns - ttl_ns / DDSS_MEMBER_DRIFT_DIV - m->margin_ns;
}

void member_fence(struct ddss_member *m, int why, const char *what)
{
	int none = 0;

	if (__atomic_compare_exchange_n(&m->fenced, &none, why, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		DDSS_ERR("membership: slot %" PRIu32 " (incarnation %" PRId64 ") stops acting: %s",
			 m->slot, m->incarnation, what);
		pthread_mutex_lock(&m->mu);
		pthread_cond_broadcast(&m->cv); /* the renewal thread revokes the lease */
		pthread_mutex_unlock(&m->mu);
	}
}

int ddss_member_acting(struct ddss_member *m)
{
	int f = __atomic_load_n(&m->fenced, __ATOMIC_ACQUIRE);

	if (f)
		return f;
	if (member_now_ns() >= __atomic_load_n(&m->deadline_ns, __ATOMIC_ACQUIRE)) {
		member_fence(m, -ENOLINK, "its lease was not renewed before its deadline");
		return __atomic_load_n(&m->fenced, __ATOMIC_ACQUIRE);
	}
	return 0;
}

/* Wait on m->cv until @until_ns or a stop; true if stopping. */
static bool renew_wait(struct ddss_member *m, int64_t until_ns)
{
	struct timespec ts = { .tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000 };
	bool stop;

	pthread_mutex_lock(&m->mu);
	while (!m->stop && !__atomic_load_n(&m->fenced, __ATOMIC_ACQUIRE) &&
	       pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0)
		;
	stop = m->stop;
	pthread_mutex_unlock(&m->mu);
	return stop;
}

static void *renew_main(void *arg)
{
	struct ddss_member *m = arg;
	int64_t period = (int64_t)m->ttl_s * 1000000000 / RENEWS_PER_TTL;
	/* From the grant, not from now: a join that took long (racing joiners) has used up
	 * part of the first deadline already. */
	int64_t next = m->granted_ns + period;

	ddss_log_set_rank(m->slot);
	while (!renew_wait(m, next) && !__atomic_load_n(&m->fenced, __ATOMIC_ACQUIRE)) {
		int64_t sent = member_now_ns();
		int ttl = 0, r = ddss_etcd_lease_keepalive(m->etcd, m->lease, &ttl);

		if (r == 0) {
			__atomic_store_n(&m->deadline_ns, deadline_after(m, sent, ttl),
					 __ATOMIC_RELEASE);
			if (__atomic_exchange_n(&m->etcd_err, 0, __ATOMIC_ACQ_REL))
				DDSS_INFO("membership: etcd reachable again; lease renewed");
			next = sent + period;
		} else if (r == -ENOENT) {
			member_fence(m, -EHOSTDOWN, "its lease expired (the group has moved on)");
		} else {
			if (!__atomic_exchange_n(&m->etcd_err, r, __ATOMIC_ACQ_REL))
				DDSS_WARN("membership: cannot renew the lease: %s; data and locks go on, "
					  "membership changes are refused until etcd answers",
					  strerror(-r));
			next = member_now_ns() + (int64_t)RENEW_RETRY_MS * 1000000;
		}
	}
	/* Stopped acting (or leaving): the slot may go at once. Best effort: else it expires. */
	if (ddss_etcd_lease_revoke(m->etcd, m->lease) == 0)
		DDSS_INFO("membership: lease revoked; slot %" PRIu32 " is free", m->slot);
	return NULL;
}

/* The group's maximum size: created by the first joiner, read by the others. */
static int group_max(struct ddss_member *m, uint32_t want)
{
	char key[DDSS_MEMBER_KEY_MAX], text[16];
	struct ddss_etcd_kvs kvs;
	int r;

	snprintf(key, sizeof(key), "%smax", m->prefix);
	snprintf(text, sizeof(text), "%" PRIu32, want);
	r = ddss_etcd_create(m->etcd, key, text, strlen(text), 0, NULL);
	if (r == 0) {
		m->max = want;
		return 0;
	}
	if (r != -EEXIST)
		return r;
	r = ddss_etcd_get(m->etcd, key, false, &kvs);
	if (r)
		return r;
	if (kvs.count != 1 || (m->max = (uint32_t)strtoul(kvs.kv[0].value, NULL, 10)) < 1 ||
	    m->max > DDSS_MEMBER_SLOTS_MAX) {
		ddss_etcd_kvs_free(&kvs);
		DDSS_ERR("membership: %s holds no valid group size", key);
		return -EPROTO;
	}
	ddss_etcd_kvs_free(&kvs);
	if (m->max != want)
		DDSS_INFO("membership: the group's maximum size is %" PRIu32 " (asked for %" PRIu32
			  ")", m->max, want);
	return 0;
}

/* Our member value: where to reach us, a nonce that tells our own key from another's, and
 * our generation of the slot. */
static char *member_value(struct ddss_member *m, uint32_t generation)
{
	json_object *o = json_object_new_object();
	char *s;

	json_object_object_add(o, "addr", json_object_new_string(m->addr));
	json_object_object_add(o, "nonce", json_object_new_string(m->nonce));
	json_object_object_add(o, "gen", json_object_new_int64(generation));
	s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return s;
}

/*
 * A create whose answer was lost (timeout, member failover) may have happened: the key
 * with our nonce is ours. Its create revision in *rev_p.
 */
static bool ours_after_all(struct ddss_member *m, const char *key, int64_t *rev_p)
{
	struct ddss_etcd_kvs kvs;
	bool ours = false;

	if (ddss_etcd_get(m->etcd, key, false, &kvs))
		return false;
	if (kvs.count == 1 && strstr(kvs.kv[0].value, m->nonce)) {
		*rev_p = kvs.kv[0].create_rev;
		ours = true;
	}
	ddss_etcd_kvs_free(&kvs);
	return ours;
}

/* Slot @s's generation so far: how many members it has had (P gen/SSSSS; absent: 0). */
static int slot_generation(struct ddss_member *m, uint32_t s, uint32_t *gen_p)
{
	char key[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	int r;

	member_key(m, "gen", s, key, sizeof(key));
	r = ddss_etcd_get(m->etcd, key, false, &kvs);
	if (r)
		return r;
	*gen_p = kvs.count == 1 ? (uint32_t)strtoul(kvs.kv[0].value, NULL, 10) : 0;
	ddss_etcd_kvs_free(&kvs);
	return 0;
}

/*
 * Slot @s, if it has no member: the member key and the slot's next generation in one
 * transaction. Only the slot's member writes its generation, and only in the transaction
 * that makes it the member, so each member of a slot has a generation of its own, one
 * more than the one before (a replaced process's lock ids never pass for the new one's).
 */
static int claim_one(struct ddss_member *m, uint32_t s)
{
	char key[DDSS_MEMBER_KEY_MAX], gkey[DDSS_MEMBER_KEY_MAX], gtext[16], *value;
	uint32_t gen;
	int64_t rev;
	int r = slot_generation(m, s, &gen);

	if (r)
		return r;
	gen++;
	value = member_value(m, gen);
	if (!value)
		return -ENOMEM;
	member_key(m, "members", s, key, sizeof(key));
	member_key(m, "gen", s, gkey, sizeof(gkey));
	snprintf(gtext, sizeof(gtext), "%" PRIu32, gen);
	r = ddss_etcd_create_and_put(m->etcd, key, value, strlen(value), m->lease, gkey, gtext,
				     strlen(gtext), &rev);
	/* Our transaction may have been carried out where no answer came back in time: the
	 * next endpoint then finds the key there already (-EEXIST), or none answers. */
	if (r == -ETIMEDOUT || r == -ECONNREFUSED || r == -EEXIST)
		r = ours_after_all(m, key, &rev) ? 0 : r;
	if (r == 0) {
		m->slot = s;
		m->incarnation = rev;
		m->generation = gen;
	}
	free(value);
	return r;
}

/* Take the first slot without a member, in one transaction each. */
static int claim_slot(struct ddss_member *m, uint32_t want)
{
	char prefix[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	uint8_t *taken = calloc(m->max + 1, 1);
	int r;

	if (!taken) {
		r = -ENOMEM;
		goto out;
	}
	snprintf(prefix, sizeof(prefix), "%smembers/", m->prefix);
	r = ddss_etcd_get(m->etcd, prefix, true, &kvs);
	if (r)
		goto out;
	for (size_t i = 0; i < kvs.count; i++) {
		uint32_t s = member_slot_of(m, kvs.kv[i].key, "members/");

		if (s >= 1 && s <= m->max)
			taken[s] = 1;
	}
	ddss_etcd_kvs_free(&kvs);
	r = -ENOSPC;
	for (uint32_t s = want ? want : 1; s <= (want ? want : m->max); s++) {
		if (taken[s] && want) {
			r = -EBUSY;
			break;
		}
		if (taken[s])
			continue;
		r = claim_one(m, s);
		if (r != -EEXIST) /* 0, or an error; -EEXIST: taken meanwhile, the next one */
			break;
		r = want ? -EBUSY : -ENOSPC;
	}
out:
	free(taken);
	return r;
}

static int cfg_check(const struct ddss_member_cfg *cfg)
{
	size_t plen;

	if (!cfg || !cfg->endpoints || !cfg->prefix || !cfg->addr || cfg->ttl_ms < 1 ||
	    cfg->max < 1 || cfg->max > DDSS_MEMBER_SLOTS_MAX || cfg->slot > DDSS_MEMBER_SLOTS_MAX)
		return -EINVAL;
	plen = strlen(cfg->prefix);
	if (plen < 2 || cfg->prefix[0] != '/' || cfg->prefix[plen - 1] != '/' ||
	    plen > DDSS_MEMBER_KEY_MAX - 32 || strlen(cfg->addr) >= DDSS_MEMBER_ADDR_MAX)
		return -EINVAL;
	return 0;
}

int ddss_member_join(const struct ddss_member_cfg *cfg, struct ddss_member **m_p)
{
	struct ddss_member *m;
	unsigned char raw[8];
	int64_t sent;
	int ttl_s, r;

	r = cfg_check(cfg);
	if (r)
		return r;
	if (sodium_init() < 0)
		return -ENOMEM;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&m->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	m->prefix = strdup(cfg->prefix);
	m->addr = strdup(cfg->addr);
	m->on_view = cfg->on_view;
	m->arg = cfg->arg;
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2hex(m->nonce, sizeof(m->nonce), raw, sizeof(raw));
	if (!m->prefix || !m->addr) {
		r = -ENOMEM;
		goto err;
	}
	r = ddss_etcd_open(cfg->endpoints, 0, &m->etcd);
	if (r)
		goto err;
	r = group_max(m, cfg->max);
	if (!r && cfg->slot > m->max) {
		DDSS_ERR("membership: slot %" PRIu32 " asked for, but %s has %" PRIu32 " slots",
			 cfg->slot, m->prefix, m->max);
		r = -EINVAL;
	}
	if (r)
		goto err;
	ttl_s = (cfg->ttl_ms + 999) / 1000;
	sent = member_now_ns();
	r = ddss_etcd_lease_grant(m->etcd, ttl_s, &m->lease);
	if (r)
		goto err;
	/* etcd may grant more than asked (its minimum TTL); we plan with what we asked. */
	m->ttl_s = ttl_s;
	m->margin_ns = (int64_t)ttl_s * 1000000000 / DDSS_MEMBER_MARGIN_DIV;
	m->deadline_ns = deadline_after(m, sent, ttl_s);
	m->granted_ns = sent;
	r = claim_slot(m, cfg->slot);
	if (r) {
		if (r == -ENOSPC)
			DDSS_ERR("membership: all %" PRIu32 " slots of %s are taken", m->max,
				 m->prefix);
		if (r == -EBUSY) /* the caller may wait for it (net/coordinator.c) */
			DDSS_DBG("membership: slot %" PRIu32 " of %s has a member", cfg->slot,
				 m->prefix);
		goto err_lease;
	}
	r = member_view_start(m);
	if (r)
		goto err_lease;
	r = -pthread_create(&m->renew_thread, NULL, renew_main, m);
	if (r) {
		member_view_stop(m);
		goto err_lease;
	}
	DDSS_INFO("membership: joined %s as slot %" PRIu32 " (incarnation %" PRId64
		  ", lease %ds), view %" PRId64 " has %zu member(s)", m->prefix, m->slot,
		  m->incarnation, m->ttl_s, m->view.number, m->view.count);
	*m_p = m;
	return 0;
err_lease:
	ddss_etcd_lease_revoke(m->etcd, m->lease);
err:
	ddss_etcd_close(m->etcd);
	free(m->prefix);
	free(m->addr);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	free(m);
	return r;
}

void ddss_member_leave(struct ddss_member *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->renew_thread, NULL); /* it revokes the lease on its way out */
	member_view_stop(m);
	ddss_etcd_close(m->etcd);
	free(m->prefix);
	free(m->addr);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	free(m);
}

uint32_t ddss_member_slot(const struct ddss_member *m)
{
	return m->slot;
}

int64_t ddss_member_incarnation(const struct ddss_member *m)
{
	return m->incarnation;
}

uint32_t ddss_member_max(const struct ddss_member *m)
{
	return m->max;
}

uint32_t ddss_member_generation(const struct ddss_member *m)
{
	return m->generation;
}

int ddss_member_etcd_state(struct ddss_member *m)
{
	return __atomic_load_n(&m->etcd_err, __ATOMIC_ACQUIRE) ? -EAGAIN : 0;
}

bool ddss_member_etcd_lost(struct ddss_member *m)
{
	int e = __atomic_load_n(&m->etcd_err, __ATOMIC_ACQUIRE);

	return e == -ECONNREFUSED || e == -EAGAIN;
}

int ddss_member_report(struct ddss_member *m, uint32_t slot, int64_t incarnation)
{
	const struct ddss_view_member *vm;
	char key[DDSS_MEMBER_KEY_MAX], guard[DDSS_MEMBER_KEY_MAX], text[24];
	int64_t lease = 0;
	int r;

	if (slot < 1 || slot > m->max || incarnation <= 0)
		return -EINVAL;
	r = ddss_member_acting(m);
	if (r)
		return r;
	pthread_mutex_lock(&m->mu);
	vm = ddss_view_find(&m->view, slot);
	if (vm && vm->incarnation == incarnation)
		lease = m->view_lease[slot];
	pthread_mutex_unlock(&m->mu);
	if (!lease)
		return -ESTALE;
	/* On the reported member's own lease: the report goes with that member. Only while
	 * nobody has reported us: of two members cut off from each other only (each hearing
	 * the rest), the first report stands and the other's fails, so one of them stays. */
	member_key(m, "suspect", slot, key, sizeof(key));
	member_key(m, "suspect", m->slot, guard, sizeof(guard));
	snprintf(text, sizeof(text), "%" PRId64, incarnation);
	r = ddss_etcd_put_unless(m->etcd, key, text, strlen(text), lease, guard);
	if (r == -ENOENT) /* its lease is gone already */
		r = -ESTALE;
	if (r == -EEXIST) {
		DDSS_WARN("membership: not reporting slot %" PRIu32 ": this member was reported "
			  "first", slot);
		return -EPERM;
	}
	if (!r)
		DDSS_WARN("membership: reported slot %" PRIu32 " (incarnation %" PRId64 ") silent",
			  slot, incarnation);
	return r;
}

int64_t ddss_member_time_left(struct ddss_member *m)
{
	if (__atomic_load_n(&m->fenced, __ATOMIC_ACQUIRE))
		return 0;
	return __atomic_load_n(&m->deadline_ns, __ATOMIC_ACQUIRE) - member_now_ns();
}

int ddss_member_extend(struct ddss_member *m, int64_t until_ns)
{
	int64_t cur;
	int r = ddss_member_acting(m);

	if (r)
		return r;
	if (!__atomic_load_n(&m->etcd_err, __ATOMIC_ACQUIRE))
		return -EALREADY;
	cur = __atomic_load_n(&m->deadline_ns, __ATOMIC_ACQUIRE);
	while (until_ns > cur &&
	       !__atomic_compare_exchange_n(&m->deadline_ns, &cur, until_ns, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	return 0;
}

int ddss_member_set_serving(struct ddss_member *m)
{
	char key[DDSS_MEMBER_KEY_MAX];
	int r = ddss_member_acting(m);

	if (r)
		return r;
	/* On our own lease: it goes with us, and with the group when everyone has left. */
	member_key(m, "serving", m->slot, key, sizeof(key));
	return ddss_etcd_put(m->etcd, key, "1", 1, m->lease, NULL);
}

int ddss_member_group_serving(struct ddss_member *m, bool *serving_p)
{
	char prefix[DDSS_MEMBER_KEY_MAX];
	struct ddss_etcd_kvs kvs;
	int r;

	snprintf(prefix, sizeof(prefix), "%sserving/", m->prefix);
	r = ddss_etcd_get(m->etcd, prefix, true, &kvs);
	if (r)
		return r;
	*serving_p = false;
	for (size_t i = 0; i < kvs.count; i++)
		if (member_slot_of(m, kvs.kv[i].key, "serving/") != m->slot)
			*serving_p = true;
	ddss_etcd_kvs_free(&kvs);
	return 0;
}
