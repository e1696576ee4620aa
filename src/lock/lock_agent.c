/*
 * Taking a lock back when its queue runs through a dead or failed request (N-CoSED, DQNL).
 *
 * The lock word and the waiters' records hold the queue; when a holder or a queued waiter
 * dies, the requests behind it fail (lock_posted.c sends them FAIL) and the tail names a
 * request that will never hand over. A request that failed that way asks the lock's home
 * to take the lock back (RECOVER) and then queues again (lock_api.c, requeue).
 *
 * The home runs a recovery **agent**: an ordinary exclusive request of the home's own, in
 * a thread, that swaps itself in as tail like any other. Once it has swapped in, the askers
 * are answered and queue again, behind it, in FIFO order as usual. The agent differs from
 * other requests in one thing only: it is granted either by its predecessor, or by finding
 * that no live request is ahead of it. It then drains its epoch (lock_recover.c takes care
 * of dead shared holders), holds the lock, and releases it as usual.
 *
 * "No live request ahead of it": a census (lock_census.c) of every rank the home does not
 * see down lists their requests on the lock, and the agent reads the queue *behind* itself
 * from the records: its record's successor and registered shared requests, their
 * successor's, and so on. Every listed request must be in that part; any other is ahead (a
 * holder, or a waiter that may still be granted) and the agent waits, taking a new census
 * every SURVEY_EVERY_NS. Reading the records is exact where comparing ids would not be: a
 * record names what announced itself in it during its owner's present use (records are
 * cleared before their id is published, and a predecessor never finishes before its
 * successor's announcement has landed), while a waiter ahead of the agent may wait for a
 * grant on its way from a predecessor whose slot has since been reused behind the agent.
 * A request that swapped in but has not announced itself yet looks ahead until it has.
 *
 * What can be ahead of the agent and not in the census: requests of dead ranks (declared
 * dead first: they can no longer touch the words or grant anyone) and failed (lost)
 * requests, which never hand over. So when the census finds nothing live ahead, nobody
 * holds the lock and nobody can grant the agent: it takes the lock.
 *
 * In fair mode the agent takes a ticket like any request; a turn that a dead rank's ticket
 * holds is passed on by the waiters behind it (lock_recover.c, lock_turn_check).
 */
#include "alloc/segtab.h"
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock_int.h"
#include "lock/lock_recover.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AGENTS 8u         /* agents one home runs at once */
#define ASKERS 16u        /* ranks one agent answers once it is in */
#define ASKS 64u          /* this rank's questions to homes under way */
#define SURVEY_EVERY_NS (250 * 1000000ll)
#define CHAIN_MAX 65536u  /* records read behind the agent at most */

struct lock_agent_job {
	struct ddss_lock *lk;
	bool used, swapped;
	bool took; /* granted by a census, not by its predecessor (the agent's thread) */
	uint64_t hdr;
	uint32_t nask;
	struct {
		uint32_t rank, id;
	} ask[ASKERS];
};

struct lock_agents {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* an answer came */
	struct lock_agent_job job[AGENTS];
	struct {
		bool used, done;
		uint32_t id;
		int status;
	} asks[ASKS];
	uint32_t ask_id;
};

int lock_agent_init(struct ddss_lock *lk)
{
	struct lock_agents *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	lk->agents = a;
	return 0;
}

void lock_agent_fini(struct ddss_lock *lk)
{
	struct lock_agents *a = lk->agents;

	if (!a)
		return;
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
	lk->agents = NULL;
}

static uint32_t plain_id(uint32_t id)
{
	return id & ~(uint32_t)LOCK_ID_SLEEPS;
}

/* ---- the asking rank ---- */

int lock_agent_ask(struct ddss_lock *lk, uint32_t home, uint64_t key, int64_t deadline_ns)
{
	return lock_home_ask(lk, home, RC_RECOVER, key, 0, deadline_ns);
}

int lock_home_ask(struct ddss_lock *lk, uint32_t home, uint32_t type, uint64_t hdr, uint32_t pred,
		  int64_t deadline_ns)
{
	struct lock_agents *a = lk->agents;
	/* Without an operation timeout (0) the answer is waited for as long as the caller's. */
	int64_t until = lk->tp->cfg.op_timeout_ms > 0 ?
				ddss_now_ns() + (int64_t)lk->tp->cfg.op_timeout_ms * 1000000ll :
				INT64_MAX;
	unsigned slot = ASKS;
	uint32_t id = 0;
	int r;

	if (deadline_ns < until)
		until = deadline_ns;
	pthread_mutex_lock(&a->mu);
	for (unsigned i = 0; i < ASKS && slot == ASKS; i++)
		if (!a->asks[i].used)
			slot = i;
	if (slot < ASKS) {
		id = ++a->ask_id ? a->ask_id : ++a->ask_id; /* 0 is a nudge's */
		a->asks[slot].used = true;
		a->asks[slot].done = false;
		a->asks[slot].id = id;
	}
	pthread_mutex_unlock(&a->mu);
	if (slot == ASKS)
		return -EAGAIN;
	r = lock_rc_send(lk, home, type, id, hdr, pred, 0);
	pthread_mutex_lock(&a->mu);
	while (!r && !a->asks[slot].done) {
		if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
			r = -ESHUTDOWN;
		else if (lock_peer_gone(lk, home)) /* its answer comes on its connection */
			r = -EHOSTDOWN;
		else if (ddss_now_ns() >= until)
			r = -ETIMEDOUT;
		else
			lock_cond_wait_until(&a->cv, &a->mu,
					     ddss_now_ns() + 50 * 1000000ll < until ?
						     ddss_now_ns() + 50 * 1000000ll : until);
	}
	if (!r)
		r = a->asks[slot].status;
	a->asks[slot].used = false;
	pthread_mutex_unlock(&a->mu);
	return r;
}

void lock_agent_nudge(struct ddss_lock *lk, const struct lock_req *rq, uint32_t tail)
{
	uint32_t rank = LOCK_ID_RANK(tail);

	/* Ask id 0 is nobody's: the answer is dropped. */
	if (rq->key && rank != rq->home && lock_peer_down(lk, rank))
		(void)lock_rc_send(lk, rq->home, RC_RECOVER, 0, rq->key, 0, 0);
}

static void on_recovered(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	struct lock_agents *a = lk->agents;

	(void)from;
	pthread_mutex_lock(&a->mu);
	for (unsigned i = 0; i < ASKS; i++) {
		if (a->asks[i].used && !a->asks[i].done && a->asks[i].id == m->id) {
			a->asks[i].done = true;
			a->asks[i].status = m->arg <= 4095 ? -(int)m->arg : -EPROTO;
			pthread_cond_broadcast(&a->cv);
		}
	}
	pthread_mutex_unlock(&a->mu);
}

/* ---- the home: agents ---- */

void lock_home_answer(struct ddss_lock *lk, uint32_t rank, uint32_t id, int status)
{
	int r = id ? lock_rc_send(lk, rank, RC_RECOVERED, id, 0, 0, (uint32_t)-status) : 0;

	if (r)
		DDSS_WARN("lock recovery: cannot answer rank %u: %s", rank, ddss_strerror(r));
}

/* Answer everyone who asked @job so far (a->mu not held; @job's askers taken out). */
static void answer_all(struct ddss_lock *lk, struct lock_agent_job *job, int status)
{
	struct lock_agents *a = lk->agents;
	uint32_t n, rank[ASKERS], id[ASKERS];

	pthread_mutex_lock(&a->mu);
	n = job->nask;
	for (uint32_t i = 0; i < n; i++) {
		rank[i] = job->ask[i].rank;
		id[i] = job->ask[i].id;
	}
	job->nask = 0;
	job->swapped = true;
	pthread_mutex_unlock(&a->mu);
	for (uint32_t i = 0; i < n; i++)
		lock_home_answer(lk, rank[i], id[i], status);
}

void lock_agent_swapped(struct ddss_lock *lk, const struct lock_req *rq)
{
	answer_all(lk, rq->agent, 0);
}

static void *agent_main(void *arg)
{
	struct lock_agent_job *job = arg;
	struct ddss_lock *lk = job->lk;
	struct lock_agents *a = lk->agents;
	struct lock_req rq = { .home = lk->rank, .hdr = job->hdr, .mode = DDSS_LOCK_EXCLUSIVE,
			       .agent = job };
	int r = lock_slot_take(lk, &rq.slot);

	LOCK_RSTAT(lk, agents);
	if (!r) {
		struct lock_slot *sl = &lk->slot[rq.slot];

		__atomic_store_n(&sl->agent, true, __ATOMIC_RELEASE);
		r = lock_queue_acquire(lk, &rq, false, INT64_MAX);
		if (!r) {
			DDSS_WARN("lock recovery: the lock at offset %#llx is this rank's again; "
				  "releasing it", (unsigned long long)job->hdr);
			r = lock_queue_release(lk, &rq);
		}
		/* Took it past a failed predecessor: that one's FAIL note may still come, so
		 * the slot waits for it (lock_reclaim.c). (Granted by a live one, it is an
		 * ordinary slot.) */
		if (job->took)
			__atomic_store_n(&sl->await_pred, true, __ATOMIC_RELEASE);
		lock_slot_put(lk, rq.slot, r ? SLOT_LOST : SLOT_FREE);
	}
	if (r)
		DDSS_WARN("lock recovery at offset %#llx: %s", (unsigned long long)job->hdr,
			  ddss_strerror(r));
	answer_all(lk, job, r); /* if it failed before it swapped in */
	pthread_mutex_lock(&a->mu);
	job->used = false;
	pthread_mutex_unlock(&a->mu);
	lock_janitor_done(lk);
	return NULL;
}

static bool start_agent(struct ddss_lock *lk, struct lock_agent_job *job)
{
	return lock_janitor_spawn(lk, agent_main, job) == 0;
}

/* Progress thread: @from asks us to take back the lock of segment @m->hdr (a key). */
static void on_recover(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	struct lock_agents *a = lk->agents;
	struct lock_agent_job *job = NULL, *free_job = NULL;
	struct ddss_seg_loc loc;
	int r = ddss_segtab_lookup(lk->ctx->segtab, m->hdr, from, &loc);
	uint64_t hdr;

	if (r) {
		lock_home_answer(lk, from, m->id, r);
		return;
	}
	hdr = loc.data_off - DDSS_SEG_HDR_LEN;
	if (__atomic_load_n(&lk->scheme, __ATOMIC_RELAXED) == DDSS_LOCK_SRSL) {
		lock_home_answer(lk, from, m->id, -EOPNOTSUPP);
		return;
	}
	pthread_mutex_lock(&a->mu);
	for (unsigned i = 0; i < AGENTS; i++) {
		if (a->job[i].used && a->job[i].hdr == hdr)
			job = &a->job[i];
		else if (!a->job[i].used && !free_job)
			free_job = &a->job[i];
	}
	if (job && job->swapped) {
		r = 1; /* it is in: queue again behind it */
	} else if (job) {
		if (m->id && job->nask < ASKERS) { /* (id 0: a try-lock's nudge, no answer) */
			job->ask[job->nask].rank = from;
			job->ask[job->nask++].id = m->id;
		} else if (m->id) {
			r = -EAGAIN;
		}
	} else if (free_job) {
		job = free_job;
		job->used = true;
		job->swapped = false;
		job->took = false;
		job->lk = lk;
		job->hdr = hdr;
		job->nask = m->id ? 1 : 0;
		job->ask[0].rank = from;
		job->ask[0].id = m->id;
		r = 2; /* start it */
	} else {
		r = -EAGAIN;
	}
	pthread_mutex_unlock(&a->mu);
	if (r == 1) {
		lock_home_answer(lk, from, m->id, 0);
	} else if (r < 0) {
		lock_home_answer(lk, from, m->id, r);
	} else if (r == 2 && !start_agent(lk, job)) {
		answer_all(lk, job, -EAGAIN);
		pthread_mutex_lock(&a->mu);
		job->used = false;
		pthread_mutex_unlock(&a->mu);
	}
}

/* ---- the agent: is anything live ahead of it? ---- */

struct idset {
	uint32_t *v;
	uint32_t n, cap;
};

static int idset_add(struct idset *s, uint32_t id)
{
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 64, *p = realloc(s->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = plain_id(id);
	return 0;
}

static bool idset_has(const struct idset *s, uint32_t id)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->v[i] == id)
			return true;
	return false;
}

static bool id_ok(struct ddss_lock *lk, uint32_t id)
{
	return ddss_tp_valid_rank(lk->tp, LOCK_ID_RANK(id));
}

static uint64_t word_at(const uint8_t *rec, unsigned off)
{
	uint64_t v;

	memcpy(&v, rec + off, 8);
	return v;
}

/* A sealed word of a record we read: 0 if empty or still landing (lock_int.h). */
static uint32_t sealed_at(const uint8_t *rec, unsigned off)
{
	uint32_t v;

	return lock_unseal(word_at(rec, off), &v) ? v : 0;
}

/* Everything queued behind the agent @me, read from the records (see the top). */
static int read_behind(struct ddss_lock *lk, uint32_t me, struct idset *behind)
{
	uint8_t rec[REC_LEN];
	uint32_t cur = me;
	int r = idset_add(behind, me);

	for (unsigned steps = 0; !r && steps < CHAIN_MAX; steps++) {
		uint32_t next;
		uint64_t link;

		r = lock_id_current(lk, cur) ?
			    ddss_tp_read(lk->tp, LOCK_ID_RANK(cur),
					 (uint64_t)LOCK_ID_SLOT(cur) * REC_LEN, rec, REC_LEN) :
			    -EHOSTDOWN;
		/* A record on a dead rank ends the chain: what queued behind it is reported by
		 * the census as not behind us (so ahead) until it fails, which it does, behind
		 * a dead predecessor. Failing the whole read instead left the agent unable to
		 * tell for ever (the spin model found it: tests/model/recover.pml). */
		if (r && lock_id_down(lk, cur))
			return 0;
		for (unsigned k = 0; !r && k < REC_ENTRIES; k++) {
			uint32_t id = sealed_at(rec, REC_ENTRY + 8 * k);

			if (id && !id_ok(lk, id))
				return -EPROTO;
			if (id)
				r = idset_add(behind, id);
		}
		/* Shared requests k >= 64 on the overflow stack, linked through their records. */
		for (uint32_t id = r ? 0 : (uint32_t)word_at(rec, REC_OVF), n = 0; id && !r;
		     n++) {
			if (!id_ok(lk, id) || n >= CHAIN_MAX)
				return -EPROTO;
			r = idset_add(behind, id);
			if (!r)
				r = lock_id_current(lk, id) ?
					    ddss_tp_read(lk->tp, LOCK_ID_RANK(id),
							 (uint64_t)LOCK_ID_SLOT(id) * REC_LEN +
								 REC_LINK, &link, 8) :
					    -EHOSTDOWN;
			if (r && lock_id_down(lk, id)) {
				r = 0; /* the stack below a dead request: as above */
				break;
			}
			id = (uint32_t)link;
		}
		if (r)
			return r;
		next = sealed_at(rec, REC_NEXT);
		if (!next)
			return 0;
		if (!id_ok(lk, next))
			return -EPROTO;
		cur = next;
		r = idset_add(behind, cur);
	}
	return r ? r : -ELOOP;
}

/* 1: no live request is ahead of the agent; 0: some may be (or we cannot tell); -errno. */
static int nothing_ahead(struct ddss_lock *lk, const struct lock_req *rq)
{
	struct idset behind = { 0 };
	struct lock_census cs;
	bool ok;
	int r = lock_census_take(lk, lk->rank, rq->hdr, &cs);

	if (r)
		return r == -ESHUTDOWN ? r : 0;
	ok = !cs.flags;
	if (ok) {
		r = read_behind(lk, lock_own_id(lk, rq->slot), &behind);
		if (r)
			DDSS_WARN("lock recovery: reading the queue behind the agent: %s",
				  ddss_strerror(r));
		ok = !r;
	}
	for (uint32_t i = 0; i < cs.n && ok; i++) {
		if (cs.req[i].trying) /* ahead only if its CAS made it our predecessor */
			ok = cs.req[i].id != (rq->pred & ~(uint32_t)LOCK_ID_SLEEPS);
		else
			ok = idset_has(&behind, cs.req[i].id);
		if (!ok)
			DDSS_INFO("lock recovery: request %#x (behind %#x%s) is ahead of the agent",
				  cs.req[i].id, cs.req[i].pred, cs.req[i].waiting ? ", waiting" : "");
	}
	if (cs.flags)
		DDSS_INFO("lock recovery: census flags %#x", cs.flags);
	free(behind.v);
	lock_census_free(&cs);
	return ok;
}

/*
 * The agent takes the lock by census: the drain word D may hold anything that dead or
 * failed requests left there. A closer that died while draining left its id in C (and
 * releases of its epoch in R); one that died between its grant and its registration left
 * releases of its epoch in R, which are not ours to count. No live rank holds the lock
 * shared, releases a shared hold or has a request ahead of us (the census said so), and
 * the dead are refused: no release of our epoch or of any earlier one can come any more.
 * So there is nothing to drain: D starts again at 0, and we close no epoch.
 */
static int took_drain(struct ddss_lock *lk, struct lock_req *rq)
{
	static const uint64_t zero;
	uint64_t d;
	int r = ddss_tp_read(lk->tp, lk->rank, rq->hdr + LOCK_D, &d, 8);

	if (!r && d)
		DDSS_WARN("lock recovery: the drain word at offset %#llx was %#llx (left by dead "
			  "or failed requests): reset", (unsigned long long)rq->hdr,
			  (unsigned long long)d);
	if (!r)
		r = ddss_tp_write(lk->tp, lk->rank, rq->hdr + LOCK_D, &zero, 8);
	if (!r)
		rq->count = 0;
	return r;
}

int lock_agent_wait_grant(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns)
{
	struct lock_slot *sl = &lk->slot[rq->slot];
	int64_t next = ddss_now_ns(); /* the askers failed: look at once */
	unsigned spins = 0;

	for (;;) {
		uint32_t seen = __atomic_load_n(&sl->wake, __ATOMIC_ACQUIRE);
		int r;

		if (lock_rec_load(lk, rq->slot, REC_GRANT))
			return 0;
		if (ddss_now_ns() >= next) {
			r = nothing_ahead(lk, rq);
			if (r < 0)
				return r;
			if (r) {
				DDSS_WARN("lock recovery: nothing live is ahead of the agent at "
					  "offset %#llx: it takes the lock",
					  (unsigned long long)rq->hdr);
				LOCK_RSTAT(lk, agents_took);
				rq->agent->took = true;
				return took_drain(lk, rq);
			}
			next = ddss_now_ns() + SURVEY_EVERY_NS;
		}
		r = lock_wait_step_until(lk, rq->slot, seen, next, deadline_ns, &spins);
		if (r)
			return r;
	}
}

void lock_agent_on_msg(struct ddss_lock *lk, uint32_t from, const void *buf, size_t len)
{
	struct rc_msg m;

	memcpy(&m, buf, sizeof(m)); /* checked by lock_rc_decode (recover_wire.c) */
	switch (m.type) {
	case RC_RECOVER:
		on_recover(lk, from, &m);
		break;
	case RC_RECOVERED:
		on_recovered(lk, from, &m);
		break;
	case RC_GONE:
		lock_gone_on_ask(lk, from, &m);
		break;
	case RC_XSURVEY:
		lock_census_on_survey(lk, from, &m);
		break;
	case RC_XREPORT:
		lock_census_on_report(lk, buf, len);
		break;
	default:
		DDSS_WARN("rank %u sent a lock recovery message of type %u: ignored", from, m.type);
	}
}

int ddss_lock_test_recover(ddss_ctx_t *ctx, ddss_key_t key)
{
	uint32_t home;
	uint64_t hdr;
	int r = lock_word_of(ctx, key, &home, &hdr, NULL);

	return r ? r : lock_agent_ask(ctx->lock, home, key, INT64_MAX);
}
