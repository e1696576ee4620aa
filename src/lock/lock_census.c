/*
 * A census of one lock: every member this rank counts as alive reports the requests it has
 * on the lock (XSURVEY -> XREPORT). Recovery agents (lock_agent.c) use it to see whether
 * anything live is ahead of them; a release whose successor never announced itself
 * (lock_recover.c) uses it to see whether that successor is still alive.
 *
 * A member reports each of its requests on the lock that has passed its first atomic on
 * the word (its slot's q_state is Q_COUNTED), except exclusive releases that went on
 * without their caller (lock_posted.c): its waiter id, the id it queued behind, and
 * whether it is still waiting (not granted); a try-lock whose CAS may be out is reported as
 * trying (it can only have succeeded on a word with no tail: it matters only to the
 * request that swapped itself in right after it, whose predecessor it then is). It also says whether it holds the lock shared
 * or is releasing a shared hold (CENSUS_SHARED: shared holds take no slot), and whether a
 * request of its has an atomic out (CENSUS_UNPLACED: where that one is, nobody can tell
 * yet). Members this rank sees down are declared dead for good first, so that nothing of
 * theirs can act on the lock again; a member that does not answer in time leaves the
 * census incomplete (CENSUS_MISSING) and the caller asks again later.
 */
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock_int.h"
#include "lock/lock_recover.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CENSUS_WAIT_NS (1000 * 1000000ll)
#define CENSUSES 16u /* taken at once by this rank */


struct census_run {
	bool used;
	uint32_t sid, waiting;
	struct lock_census *out;
};

struct lock_censuses {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct census_run run[CENSUSES];
	uint32_t sid;
};

int lock_census_init(struct ddss_lock *lk)
{
	struct lock_censuses *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	lk->censuses = c;
	return 0;
}

void lock_census_fini(struct ddss_lock *lk)
{
	struct lock_censuses *c = lk->censuses;

	if (!c)
		return;
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	lk->censuses = NULL;
}

void lock_census_free(struct lock_census *cs)
{
	free(cs->req);
	*cs = (struct lock_census){ 0 };
}

/* ---- a member ---- */

/* Progress thread: report our requests on the lock at (@m->pred = home, @m->hdr). */
void lock_census_on_survey(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	struct {
		struct rc_msg m;
		uint32_t w[RC_REQ_WORDS * DDSS_LOCK_SLOTS];
	} rep = { .m = { .type = RC_XREPORT, .id = m->id } };
	uint32_t n = 0, flags = 0, home = m->pred;
	int r;

	pthread_mutex_lock(&lk->mu);
	if (lock_srel_busy_locked(lk, home, m->hdr) || lock_holds_shared_of(lk, home, m->hdr))
		flags |= CENSUS_SHARED;
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++) {
		struct lock_slot *sl = &lk->slot[i];
		uint32_t qs, *w = rep.w + RC_REQ_WORDS * n;

		/* A posted release (lock_posted.c) holds nothing any more: all it may still do
		 * is hand over to a successor, which reports itself. */
		if ((sl->state != SLOT_BUSY && sl->state != SLOT_ABANDONED) ||
		    POSTED_STATE(__atomic_load_n(&sl->posted, __ATOMIC_ACQUIRE)) != POSTED_NONE)
			continue;
		qs = __atomic_load_n(&sl->q_state, __ATOMIC_ACQUIRE);
		if (!qs || sl->q_home != home || sl->q_hdr != m->hdr)
			continue;
		if (qs == Q_COUNTING) {
			flags |= CENSUS_UNPLACED;
			continue;
		}
		w[0] = lock_own_id(lk, i);
		w[1] = qs == Q_TRYING ? 0 : sl->q_pred;
		w[2] = (sl->q_shared ? RC_REQ_SHARED : 0) | (qs == Q_TRYING ? RC_REQ_TRYING : 0) |
		       (qs == Q_COUNTED && sl->q_pred && !lock_rec_load(lk, i, REC_GRANT) ?
				RC_REQ_WAITING : 0);
		n++;
	}
	pthread_mutex_unlock(&lk->mu);
	rep.m.arg = flags;
	rep.m.pred = n;
	r = ddss_net_send(lk->ctx->net, from, DDSS_MSG_LOCK, &rep,
			  sizeof(rep.m) + n * RC_REQ_WORDS * sizeof(uint32_t));
	if (r)
		DDSS_WARN("lock census: report to rank %u: %s", from, ddss_strerror(r));
}

/* One member fewer to hear from (c->mu held); @w: the @n requests it reported. */
static void count_locked(struct lock_censuses *c, struct census_run *run, uint32_t flags,
			 const uint32_t *w, uint32_t n)
{
	struct lock_census *out = run->out;

	if (n) {
		struct lock_census_req *p = realloc(out->req, (out->n + n) * sizeof(*p));

		if (p) {
			out->req = p;
			for (uint32_t i = 0; i < n; i++, w += RC_REQ_WORDS)
				out->req[out->n++] = (struct lock_census_req){
					.id = w[0] & ~(uint32_t)LOCK_ID_SLEEPS,
					.pred = w[1] & ~(uint32_t)LOCK_ID_SLEEPS,
					.waiting = w[2] & RC_REQ_WAITING,
					.shared = w[2] & RC_REQ_SHARED,
					.trying = w[2] & RC_REQ_TRYING,
				};
		} else {
			flags |= CENSUS_MISSING; /* cannot keep them: the census is not whole */
		}
	}
	out->flags |= flags;
	if (--run->waiting == 0)
		pthread_cond_broadcast(&c->cv);
}

void lock_census_on_report(struct ddss_lock *lk, const void *buf, size_t len)
{
	struct lock_censuses *c = lk->censuses;
	struct rc_msg m;

	memcpy(&m, buf, sizeof(m)); /* checked by lock_rc_decode (recover_wire.c) */
	(void)len;
	pthread_mutex_lock(&c->mu);
	for (unsigned i = 0; i < CENSUSES; i++) {
		struct census_run *run = &c->run[i];

		if (run->used && run->sid == m.id && run->waiting) {
			uint32_t w[RC_REQ_WORDS * DDSS_LOCK_SLOTS];

			memcpy(w, (const uint8_t *)buf + sizeof(m),
			       m.pred * RC_REQ_WORDS * sizeof(uint32_t));
			count_locked(c, run, m.arg & (CENSUS_SHARED | CENSUS_UNPLACED), w, m.pred);
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/* ---- the one who asks ---- */

void lock_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ns)
{
	int64_t rel = until_ns - ddss_now_ns(), ns;
	struct timespec ts;

	if (rel <= 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	ns = (int64_t)ts.tv_nsec + rel;
	ts.tv_sec += (time_t)(ns / 1000000000ll);
	ts.tv_nsec = (long)(ns % 1000000000ll);
	pthread_cond_timedwait(cv, mu, &ts);
}

int lock_census_take(struct ddss_lock *lk, uint32_t home, uint64_t hdr, struct lock_census *out)
{
	struct lock_censuses *c = lk->censuses;
	uint32_t size = lk->tp->cfg.size, sid;
	int64_t until = ddss_now_ns() + CENSUS_WAIT_NS;
	struct census_run *run = NULL;

	*out = (struct lock_census){ 0 };
	pthread_mutex_lock(&c->mu);
	for (unsigned i = 0; i < CENSUSES && !run; i++)
		if (!c->run[i].used)
			run = &c->run[i];
	if (run) {
		sid = ++c->sid;
		/* One count per member and one for the loop below, so no report ends it early. */
		*run = (struct census_run){ .used = true, .sid = sid, .waiting = size + 1,
					    .out = out };
	}
	pthread_mutex_unlock(&c->mu);
	if (!run)
		return -EAGAIN;
	for (uint32_t m = 1; m <= size; m++) {
		int asked = lock_rc_ask(lk, m, RC_XSURVEY, sid, hdr, home, 0);

		if (asked > 0)
			continue; /* its report counts it */
		pthread_mutex_lock(&c->mu);
		count_locked(c, run, asked < 0 ? CENSUS_MISSING : 0, NULL, 0);
		pthread_mutex_unlock(&c->mu);
	}
	pthread_mutex_lock(&c->mu);
	count_locked(c, run, 0, NULL, 0);
	while (run->waiting && ddss_now_ns() < until &&
	       !__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
		lock_cond_wait_until(&c->cv, &c->mu, until);
	if (run->waiting)
		out->flags |= CENSUS_MISSING;
	run->used = false; /* late reports find no census: dropped */
	pthread_mutex_unlock(&c->mu);
	if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE)) {
		lock_census_free(out);
		return -ESHUTDOWN;
	}
	return 0;
}

int lock_census_waiting_behind(struct ddss_lock *lk, uint32_t home, uint64_t hdr, uint32_t me,
			       bool shared, bool (*known)(const void *arg, uint32_t id),
			       const void *arg)
{
	struct lock_census cs;
	int found = 0, r = lock_census_take(lk, home, hdr, &cs);

	if (r)
		return r == -ESHUTDOWN ? r : -1;
	for (uint32_t i = 0; i < cs.n && !found; i++) {
		const struct lock_census_req *q = &cs.req[i];

		found = q->shared == shared && q->waiting && q->pred == me &&
			!(known && known(arg, q->id));
	}
	if (!found && cs.flags & (CENSUS_UNPLACED | CENSUS_MISSING))
		found = -1; /* a request not placed yet, or of a member that did not answer */
	lock_census_free(&cs);
	return found;
}
