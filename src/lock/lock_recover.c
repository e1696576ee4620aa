/*
 * Taking back what a dead shared holder never gave: the drain it owes (N-CoSED).
 *
 * An exclusive request that closes a shared epoch waits until every shared arrival of that
 * epoch has released (docs/locks.md "Epochs"). A shared holder that died never releases,
 * and nobody knows which rank the closer waits for: the count is anonymous. So a closer
 * that has waited a while asks the lock's home to check (CHECK). The home surveys every
 * rank it still counts as a member (SURVEY): "is any shared request or hold of this
 * epoch still yours?" Ranks the home sees down are declared dead for good first, so they
 * can never act on its words again. If no live rank answers yes (REPORT), the home tells
 * the closer (ANSWER "clear"): whatever is missing belongs to the dead, and the closer
 * resets the drain word and enters (docs/failure.md).
 *
 * What "of this epoch" means, at a rank asked about the epoch the closer swapped out of
 * the tail half (its predecessor p, or 0 for the idle epoch):
 *   - any shared hold of the lock (no later epoch can have holders while the closer
 *     waits, and every earlier epoch was drained by its own closer);
 *   - any shared release of the lock still under way (its fetch&add may be out);
 *   - a shared request whose fetch&add may be out (its epoch is not known yet), and, for
 *     the idle epoch (p == 0), a shared try-lock whose CAS may be out;
 *   - a shared request that has been granted (behind any waiter: while the closer waits,
 *     no later epoch has a granted request, and every earlier one has released), or that
 *     was admitted at once. One that has not been granted is in a later epoch (behind a
 *     request that reused p's slot, or behind the closer) or will never be granted (its
 *     predecessor failed): p granted every request of its own epoch before it handed the
 *     lock to the closer, and a release that left the word idle (p == 0) granted every
 *     request it counted before its CAS (lock_queue.c, x_release). Those grants may still
 *     be on their way, so before answering, a rank waits for a FLUSH message from the rank
 *     that sent them, which it sends to every rank when it is surveyed and which travels
 *     behind them (one ordered channel per peer): from p's rank, or for the idle epoch,
 *     whose last releaser nobody knows, from every rank surveyed. The survey says how
 *     many FLUSHes to wait for: the home counts the ranks it surveys, so a member does
 *     not wait for a rank the home no longer counts (it would never flush).
 *
 * A drain note of a live releaser may still be on its way to the closer after the home
 * said clear (it was sent to the closer, the report to the home). The closer's slot is
 * therefore never reused (SLOT_RETIRED): the stale note can only bump a dead counter.
 *
 * Also here: a release whose successor swapped itself in and died before announcing
 * itself finds out by a census (lock_wait_successor), and the tag's message dispatcher.
 *
 * Everything here runs on the progress thread (handlers) except lock_drain_wait and
 * lock_wait_successor.
 */
#include "core/ctx.h"
#include "core/log.h"
#include "lock/lock_int.h"
#include "lock/lock_recover.h"

#include <errno.h>
#include <string.h>

/* A closer asks the home this long after it started to wait, then this often. */
#define CHECK_FIRST_NS (250 * 1000000ll)
#define CHECK_EVERY_NS (1000 * 1000000ll)

int lock_rc_send(struct ddss_lock *lk, uint32_t to, uint32_t type, uint32_t id, uint64_t hdr,
		 uint32_t pred, uint32_t arg)
{
	struct rc_msg m = { .type = type, .id = id, .hdr = hdr, .pred = pred, .arg = arg };

	return ddss_net_send(lk->ctx->net, to, DDSS_MSG_LOCK, &m, sizeof(m));
}

int lock_rc_ask(struct ddss_lock *lk, uint32_t rank, uint32_t type, uint32_t id, uint64_t hdr,
		uint32_t pred, uint32_t arg)
{
	if (!lock_peer_down(lk, rank) && !lock_rc_send(lk, rank, type, id, hdr, pred, arg))
		return 1;
	if (!lock_peer_down(lk, rank))
		return -1;
	/* Down only because our connection to it failed, and alive: it may hold what we
	 * ask about. Ask it once we are connected again (the reconnect thread, not this
	 * handler: a connect may block for seconds); until then it cannot be counted out.
	 * Bounded: down for longer than the peer timeout, it no longer counts as alive. */
	if (ddss_net_down_but_alive(lk->ctx->net, rank)) {
		ddss_net_reconnect_ask(lk->ctx->net, rank);
		return -1;
	}
	ddss_net_declare_dead(lk->ctx->net, rank);
	return 0;
}

/* ---- shared releases under way (mu held) ---- */

void lock_srel_begin_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr)
{
	if (lk->nsrel < LOCK_SREL_MAX)
		lk->srel[lk->nsrel++] = (struct lock_srel){ home, hdr };
	else
		lk->srel_overflow++; /* a survey then answers busy for every lock */
}

void lock_srel_end_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr)
{
	for (unsigned i = 0; i < lk->nsrel; i++) {
		if (lk->srel[i].home == home && lk->srel[i].hdr == hdr) {
			lk->srel[i] = lk->srel[--lk->nsrel];
			return;
		}
	}
	lk->srel_overflow--;
}

bool lock_srel_busy_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr)
{
	if (lk->srel_overflow)
		return true;
	for (unsigned i = 0; i < lk->nsrel; i++)
		if (lk->srel[i].home == home && lk->srel[i].hdr == hdr)
			return true;
	return false;
}

/* ---- a member's answer ---- */

/* Has this rank anything of the epoch (@home, @hdr, closed behind @pred)? See the top. */
static bool epoch_busy_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr, uint32_t pred)
{
	if (lock_srel_busy_locked(lk, home, hdr) || lock_holds_shared_of(lk, home, hdr))
		return true;
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++) {
		struct lock_slot *sl = &lk->slot[i];
		uint32_t qs = __atomic_load_n(&sl->q_state, __ATOMIC_ACQUIRE);

		if (!qs || !sl->q_shared || sl->q_home != home || sl->q_hdr != hdr)
			continue;
		if (qs == Q_TRYING) {
			if (!pred) /* a try can only have made it into an idle epoch */
				return true;
			continue;
		}
		if (qs == Q_COUNTING || !sl->q_pred)
			return true;
		/* Granted: of the closer's epoch, whatever it queued behind (see the top). Only
		 * p's own requests used to count, which missed those a release made idle. */
		if (lock_rec_load(lk, i, REC_GRANT))
			return true;
	}
	return false;
}

/* Fair mode: has this rank a request that holds ticket @turn (its low 32 bits), or one
 * whose ticket is not known yet, without having passed the turn on? */
static bool turn_busy_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr, uint32_t turn)
{
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++) {
		struct lock_slot *sl = &lk->slot[i];
		uint32_t ts = __atomic_load_n(&sl->q_ticket_state, __ATOMIC_ACQUIRE);

		if (ts == TICKET_NONE || ts == TICKET_PASSED || sl->q_home != home ||
		    sl->q_hdr != hdr)
			continue;
		if (ts == TICKET_TAKING || (uint32_t)sl->q_ticket == turn)
			return true;
	}
	return false;
}

static void report(struct ddss_lock *lk, uint32_t home, uint32_t sid, uint64_t hdr, uint32_t pred,
		   uint32_t kind)
{
	bool busy;
	int r;

	pthread_mutex_lock(&lk->mu);
	busy = kind == RC_KIND_TURN ? turn_busy_locked(lk, home, hdr, pred) :
				      epoch_busy_locked(lk, home, hdr, pred);
	pthread_mutex_unlock(&lk->mu);
	r = lock_rc_send(lk, home, RC_REPORT, sid, hdr, pred, busy);
	if (r)
		DDSS_WARN("lock: drain survey report to rank %u: %s", home, ddss_strerror(r));
}

/*
 * A survey and the flush from p's rank arrive in any order: the one that completes the
 * pair answers. Entries of surveys that never complete (p's rank died between the two)
 * are overwritten, oldest first; the home asks again with a new survey anyway.
 */
static struct lock_rc_in *in_entry_locked(struct ddss_lock *lk, uint32_t home, uint32_t sid)
{
	struct lock_rc_in *e = NULL;

	for (unsigned i = 0; i < LOCK_RC_SURVEYS; i++) {
		struct lock_rc_in *c = &lk->rc_in[i];

		if (c->used && c->home == home && c->sid == sid)
			return c;
		if (!e || !c->used || (e->used && c->born < e->born))
			e = c;
	}
	*e = (struct lock_rc_in){ .used = true, .home = home, .sid = sid,
				  .born = ++lk->rc_born };
	return e;
}

/* Surveyed, and every FLUSH it waits for has come (rc_mu held). */
static bool in_ready_locked(const struct lock_rc_in *e)
{
	return e->surveyed && e->nflushed >= e->flushers;
}

static void on_survey(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	uint32_t kind = m->arg & RC_KIND_MASK, prank = LOCK_ID_RANK(m->pred);
	bool drain = kind == RC_KIND_DRAIN, ready;
	struct lock_rc_in *e;

	if (drain && (!m->pred || prank == lk->rank)) {
		/* Behind our grants to every member: they have them before they answer. */
		for (uint32_t r = 1; r <= lk->tp->cfg.size; r++)
			if (!lock_peer_down(lk, r))
				(void)lock_rc_send(lk, r, RC_FLUSH, m->id, 0, 0, from);
	}
	pthread_mutex_lock(&lk->rc_mu);
	e = in_entry_locked(lk, from, m->id);
	e->surveyed = true;
	e->hdr = m->hdr;
	e->pred = m->pred;
	e->flushers = drain ? m->arg >> RC_FLUSHERS_SHIFT : 0;
	/* p's rank, alive for us, may have grants on the way to us even if the home no
	 * longer counts it: then wait until it flushes or we see it down too. */
	if (drain && m->pred && !e->flushers && !lock_peer_down(lk, prank))
		e->flushers = 1;
	ready = in_ready_locked(e);
	if (ready)
		e->used = false;
	pthread_mutex_unlock(&lk->rc_mu);
	if (ready)
		report(lk, from, m->id, m->hdr, m->pred, kind);
}

static void on_flush(struct ddss_lock *lk, const struct rc_msg *m)
{
	struct lock_rc_in *e;
	bool ready;
	uint64_t hdr;
	uint32_t pred;

	if (!ddss_tp_valid_rank(lk->tp, m->arg))
		return;
	pthread_mutex_lock(&lk->rc_mu);
	e = in_entry_locked(lk, m->arg, m->id);
	e->nflushed++; /* each rank surveyed sends one per survey */
	ready = in_ready_locked(e);
	hdr = e->hdr;
	pred = e->pred;
	if (ready)
		e->used = false;
	pthread_mutex_unlock(&lk->rc_mu);
	if (ready) /* only drain checks are flushed */
		report(lk, m->arg, m->id, hdr, pred, RC_KIND_DRAIN);
}

/* ---- the home's survey ---- */

static void survey_end_locked(struct ddss_lock *lk, struct lock_rc_out *s, uint32_t *to,
			      uint32_t *check, bool *clear, uint32_t *kind)
{
	(void)lk;
	*to = s->asker;
	*check = s->check;
	*clear = !s->busy;
	*kind = s->kind;
	s->used = false;
}

/* One answer fewer to wait for (@busy: it said yes); answers the closer after the last. */
static void survey_count(struct ddss_lock *lk, uint32_t sid, bool busy)
{
	struct lock_rc_out *s = NULL;
	uint32_t to = 0, check = 0, kind = 0;
	bool clear = false, done = false;

	pthread_mutex_lock(&lk->rc_mu);
	for (unsigned i = 0; i < LOCK_RC_SURVEYS; i++)
		if (lk->rc_out[i].used && lk->rc_out[i].sid == sid)
			s = &lk->rc_out[i];
	if (s) {
		s->busy |= busy;
		if (--s->waiting == 0) {
			survey_end_locked(lk, s, &to, &check, &clear, &kind);
			done = true;
		}
	}
	pthread_mutex_unlock(&lk->rc_mu);
	if (!done)
		return;
	if (clear && kind == RC_KIND_DRAIN)
		DDSS_WARN("lock: rank %u's drain waits only for dead ranks: it may enter", to);
	else if (clear)
		DDSS_WARN("lock: the turn rank %u waits for is a dead rank's ticket", to);
	if (lock_rc_send(lk, to, RC_ANSWER, check, 0, 0, clear))
		DDSS_WARN("lock: cannot answer rank %u's drain check", to);
}

static void on_check(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	uint32_t size = lk->tp->cfg.size, sid, flushers = 0;
	struct lock_rc_out *s = NULL;

	pthread_mutex_lock(&lk->rc_mu);
	for (unsigned i = 0; i < LOCK_RC_SURVEYS; i++) {
		struct lock_rc_out *c = &lk->rc_out[i];

		if (!s || !c->used || (s->used && c->sid < s->sid))
			s = c; /* a free entry, else the oldest survey (its closer asks again) */
	}
	sid = ++lk->rc_sid;
	/* One count per member plus one for this loop, so no answer can end it early. */
	*s = (struct lock_rc_out){ .used = true, .sid = sid, .asker = from, .check = m->id,
				   .kind = m->arg, .waiting = size + 1 };
	pthread_mutex_unlock(&lk->rc_mu);
	/* Who will FLUSH (see the top): p's rank, or for the idle epoch every rank surveyed.
	 * Each member waits for exactly that many, so what it sees of the others does not
	 * matter: only the ranks this home still counts are asked, and only they flush. */
	for (uint32_t r = 1; m->arg == RC_KIND_DRAIN && r <= size; r++)
		if (!lock_peer_down(lk, r) && (!m->pred || r == LOCK_ID_RANK(m->pred)))
			flushers++;
	for (uint32_t r = 1; r <= size; r++) {
		int asked = lock_rc_ask(lk, r, RC_SURVEY, sid, m->hdr, m->pred,
					m->arg | flushers << RC_FLUSHERS_SHIFT);

		if (asked <= 0) /* its report will not come: gone, or cannot tell (busy) */
			survey_count(lk, sid, asked < 0);
	}
	survey_count(lk, sid, false);
}

static void on_answer(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m)
{
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++) {
		struct lock_slot *sl = &lk->slot[i];

		if (__atomic_load_n(&sl->rc_check, __ATOMIC_ACQUIRE) != m->id ||
		    __atomic_load_n(&sl->rc_home, __ATOMIC_RELAXED) != from)
			continue;
		if (m->arg)
			__atomic_store_n(&sl->rc_clear, m->id, __ATOMIC_RELEASE);
		lock_slot_wake(lk, i);
		return;
	}
}

/* Progress thread. A malformed message is logged and dropped. */
static void on_msg(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_lock *lk = arg;
	struct rc_msg m;

	if (lock_rc_decode(buf, len, lk->tp->cfg.size, &m)) {
		DDSS_WARN("rank %u sent a malformed lock recovery message (%zu bytes): ignored",
			  from, len);
		return;
	}
	switch (m.type) {
	case RC_CHECK:
		on_check(lk, from, &m);
		break;
	case RC_SURVEY:
		on_survey(lk, from, &m);
		break;
	case RC_FLUSH:
		on_flush(lk, &m);
		break;
	case RC_REPORT:
		survey_count(lk, m.id, m.arg != 0);
		break;
	case RC_ANSWER:
		on_answer(lk, from, &m);
		break;
	default:
		lock_agent_on_msg(lk, from, buf, len);
	}
}

int lock_recover_init(struct ddss_lock *lk)
{
	pthread_mutex_init(&lk->rc_mu, NULL);
	return ddss_net_on_msg(lk->ctx->net, DDSS_MSG_LOCK, on_msg, lk);
}

/* ---- the closer ---- */

/*
 * Wait for the drain of @rq's epoch: rq->drain notifications, or the home's word that the
 * missing ones belong to dead ranks (then the slot is retired, see the top).
 */
int lock_drain_wait(struct ddss_lock *lk, const struct lock_req *rq, int64_t deadline_ns)
{
	struct lock_slot *sl = &lk->slot[rq->slot];
	int64_t next_check = ddss_now_ns() + CHECK_FIRST_NS;
	unsigned spins = 0;

	/* A late answer to an earlier check of this slot must not count for this one. */
	__atomic_store_n(&sl->rc_check, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&sl->rc_home, rq->home, __ATOMIC_RELAXED);
	for (;;) {
		uint32_t seen = __atomic_load_n(&sl->wake, __ATOMIC_ACQUIRE);
		uint32_t check = __atomic_load_n(&sl->rc_check, __ATOMIC_RELAXED);
		int64_t now;
		int r;

		if (__atomic_load_n(&sl->drained, __ATOMIC_ACQUIRE) >= rq->drain)
			return 0;
		if (check && __atomic_load_n(&sl->rc_clear, __ATOMIC_ACQUIRE) == check) {
			__atomic_store_n(&sl->retire, true, __ATOMIC_RELEASE);
			LOCK_RSTAT(lk, drains);
			DDSS_WARN("lock: %u shared release(s) of rank %u's lock never came (dead "
				  "holders): entering without them", rq->drain -
				  __atomic_load_n(&sl->drained, __ATOMIC_ACQUIRE), rq->home);
			return 0;
		}
		now = ddss_now_ns();
		if (now >= next_check) {
			check = __atomic_add_fetch(&lk->rc_checks, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&sl->rc_check, check, __ATOMIC_RELEASE);
			r = lock_rc_send(lk, rq->home, RC_CHECK, check, rq->hdr, rq->pred,
					 RC_KIND_DRAIN);
			if (r)
				DDSS_WARN("lock: drain check at rank %u: %s", rq->home,
					  ddss_strerror(r));
			next_check = now + CHECK_EVERY_NS;
		}
		r = lock_wait_step_until(lk, rq->slot, seen, next_check, deadline_ns, &spins);
		if (r)
			return r;
	}
}

/* ---- a release whose successor never announced itself ---- */

/* Is a live request waiting behind @me (exclusive, not granted)? -1: cannot tell yet. */
static int successor_alive(struct ddss_lock *lk, const struct lock_req *rq, uint32_t me)
{
	int r = lock_census_waiting_behind(lk, rq->home, rq->hdr, me & ~(uint32_t)LOCK_ID_SLEEPS,
					   false, NULL, NULL);

	return r < 0 ? -1 : r;
}

/*
 * Our CAS found another tail: a successor swapped itself in after us and announces itself
 * with one write. If it died before that write, nobody ever will: after a while, a census
 * asks every live member whether a request of theirs waits behind us. None does (and none
 * is unplaced): it is dead, and the release ends with -EHOSTDOWN (the caller's slot is
 * lost, so what queued behind it fails and is recovered, lock_agent.c).
 */
int lock_wait_successor(struct ddss_lock *lk, const struct lock_req *rq, uint32_t me,
			int64_t deadline_ns, uint32_t *next_p)
{
	struct lock_slot *sl = &lk->slot[rq->slot];
	int64_t next_census = ddss_now_ns() + CHECK_FIRST_NS;
	unsigned spins = 0;

	for (;;) {
		uint32_t seen = __atomic_load_n(&sl->wake, __ATOMIC_ACQUIRE);
		int r;

		if (lock_rec_sealed(lk, rq->slot, REC_NEXT, next_p))
			return 0;
		if (ddss_now_ns() >= next_census) {
			int alive = successor_alive(lk, rq, me);

			if (lock_rec_sealed(lk, rq->slot, REC_NEXT, next_p))
				return 0;
			if (!alive) {
				DDSS_WARN("lock: our successor at rank %u's lock died before it "
					  "announced itself", rq->home);
				LOCK_RSTAT(lk, successors_lost);
				return -EHOSTDOWN;
			}
			next_census = ddss_now_ns() + CHECK_EVERY_NS;
		}
		r = lock_wait_step_until(lk, rq->slot, seen, next_census, deadline_ns, &spins);
		if (r)
			return r;
	}
}

void ddss_lock_recovery_stats(ddss_ctx_t *ctx, struct ddss_lock_recovery_stats *st)
{
	const struct ddss_lock_recovery_stats *c = &ctx->lock->rstats;

	st->agents = __atomic_load_n(&c->agents, __ATOMIC_RELAXED);
	st->agents_took = __atomic_load_n(&c->agents_took, __ATOMIC_RELAXED);
	st->drains = __atomic_load_n(&c->drains, __ATOMIC_RELAXED);
	st->successors_lost = __atomic_load_n(&c->successors_lost, __ATOMIC_RELAXED);
	st->requeued = __atomic_load_n(&c->requeued, __ATOMIC_RELAXED);
	st->turns_passed = __atomic_load_n(&c->turns_passed, __ATOMIC_RELAXED);
	st->writers_asked = __atomic_load_n(&c->writers_asked, __ATOMIC_RELAXED);
	st->writers_vouched = __atomic_load_n(&c->writers_vouched, __ATOMIC_RELAXED);
}

/* ---- fair mode: a turn that a dead rank's ticket holds ---- */

int lock_turn_check(struct ddss_lock *lk, const struct lock_req *rq, uint64_t turn,
		    int64_t *next_check_ns)
{
	struct lock_slot *sl = &lk->slot[rq->slot];
	uint32_t check = __atomic_load_n(&sl->rc_check, __ATOMIC_RELAXED);
	int64_t now = ddss_now_ns();
	uint64_t old;
	int r = 0;

	if (!*next_check_ns) { /* the turn just moved: look again later */
		__atomic_store_n(&sl->rc_check, 0, __ATOMIC_RELEASE);
		*next_check_ns = now + CHECK_FIRST_NS;
		return 0;
	}
	if (check && __atomic_load_n(&sl->rc_clear, __ATOMIC_ACQUIRE) == check &&
	    sl->rc_turn == turn) {
		/* Nobody live holds that ticket: its holder died before passing the turn on. A
		 * CAS, so that of several waiters who heard the same only one passes it. */
		r = ddss_tp_cas(lk->tp, rq->home, rq->hdr + LOCK_N, turn, turn + 1, &old);
		if (!r && old == turn) {
			DDSS_WARN("lock: ticket %llu of rank %u's lock was a dead rank's: turn "
				  "passed on", (unsigned long long)turn, rq->home);
			LOCK_RSTAT(lk, turns_passed);
		}
		__atomic_store_n(&sl->rc_check, 0, __ATOMIC_RELEASE);
		*next_check_ns = now + CHECK_FIRST_NS;
		return r;
	}
	if (now < *next_check_ns)
		return 0;
	check = __atomic_add_fetch(&lk->rc_checks, 1, __ATOMIC_RELAXED);
	sl->rc_turn = turn;
	__atomic_store_n(&sl->rc_home, rq->home, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->rc_check, check, __ATOMIC_RELEASE);
	r = lock_rc_send(lk, rq->home, RC_CHECK, check, rq->hdr, (uint32_t)turn, RC_KIND_TURN);
	if (r)
		DDSS_WARN("lock: turn check at rank %u: %s", rq->home, ddss_strerror(r));
	*next_check_ns = now + CHECK_EVERY_NS;
	return 0;
}
