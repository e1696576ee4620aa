/*
 * SRSL, the server-based baseline lock (see srsl.h).
 *
 * Wire: every message on DDSS_SRSL_TAG is 24 bytes, little-endian,
 *   [op : 32 | arg : 32 | lock_id : 64 | req : 64]
 * where req names a request together with the rank that made it (never 0):
 *   client -> home  REQ     arg = mode | SRSL_F_TRY   queue (or, with TRY, only test) req
 *                   REL     arg = mode                drop the hold granted to req
 *                                                     (req 0: any hold of the sender in mode)
 *                   CANCEL  arg = 0                   req timed out: withdraw it
 *                   PROBE   arg = 0                   req still waits: is a holder down?
 *                   SYNC    arg = 0, lock_id = 0      answer once every earlier message of
 *                                                     mine is handled (ddss_srsl_flush)
 *   home -> client  REPLY   arg = status (int32)      answer to req: 0 granted (SYNC: done),
 *                                                     -EBUSY (try), -EINVAL, -ENOMEM
 * Messages from one rank to another arrive in the order sent, so the home always sees a
 * request before its CANCEL or PROBE, a hold's REL after its grant, and a SYNC after the
 * RELs sent before it.
 *
 * Home (the progress thread, under home_mu): per lock id, the holders (one exclusive, or
 * shared ones) and a FIFO of waiters, each an entry (rank, req, mode). A request is granted
 * at once when nobody waits and it is compatible with the holders, else queued (a try gets
 * -EBUSY). After every change the queue is granted from its head while the head is
 * compatible, so shared requests at the head go together and an exclusive one waits for
 * every holder. A lock with neither holders nor waiters is freed.
 *
 * REL names the request whose hold it drops, and holders are kept by request, so a CANCEL
 * can tell exactly whether its request was granted (the grant crossed the withdrawal: the
 * cancel releases it) or is still queued (removed, no answer) or was answered already
 * (nothing to do). Counting holds per rank would not do: a release by another thread of the
 * same rank could not be told apart from the crossed grant.
 *
 * Failures the home sees: a waiter whose rank is down when it reaches the head is dropped,
 * as is a grant that cannot be sent (its hold is undone). The holds of a rank that is down
 * are reclaimed (reclaim_dead_holds: a hold is a lease that lasts while its rank is a
 * member) whenever the lock is looked at: a new request, a release, or the PROBE every
 * waiter sends every SRSL_PROBE_MS. So a waiter behind a dead holder gets the lock at most
 * SRSL_PROBE_MS after its home sees the holder down (docs/failure.md).
 *
 * Client (any thread, under mu): each acquire allocates a record, registers it as pending
 * by req, sends REQ and waits on the record's condition variable for the REPLY, checking
 * the home's state every SRSL_CHECK_MS like core/rpc.c. A granted record then stays as the
 * hold until a release takes it, so the release can name its request.
 */
#include "lock/srsl.h"
#include "core/log.h"
#include "core/wire.h"
#include "ddss/ddss.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SRSL_MSG_LEN 24u
#define SRSL_F_TRY 0x100u
#define SRSL_MODE_MASK 0xffu

/* How often a waiter looks at its home's state (a dead home sends no reply). */
#define SRSL_CHECK_MS 50
/* How often a waiter asks its home whether it waits behind a dead rank. */
#define SRSL_PROBE_MS 500

#define SRSL_BUCKETS 256u       /* client tables: bounded by the threads of one rank */
#define SRSL_LOCKS_MIN 64u      /* home table: grows with the locks in use */

enum srsl_op {
	SRSL_REQ = 1,
	SRSL_REL = 2,
	SRSL_CANCEL = 3,
	SRSL_PROBE = 4,
	SRSL_REPLY = 5,
	SRSL_SYNC = 6,
};

/* Home: a request, queued or holding. */
struct srsl_ent {
	struct srsl_ent *next;
	uint64_t req;
	uint32_t rank;
	int mode;
};

/* Home: one lock in use. */
struct srsl_lock {
	struct srsl_lock *next; /* hash chain */
	uint64_t id;
	uint32_t nheld;
	bool excl;              /* the (one) holder is exclusive */
	struct srsl_ent *holders;
	struct srsl_ent *qhead, **qtail;
};

/* Client: one acquire while pending, then the hold it took until released. */
struct srsl_rec {
	struct srsl_rec *next; /* pending chain, then hold chain */
	uint64_t req;
	uint64_t lock_id;
	uint32_t home;
	int mode;
	bool done;             /* REPLY (or shutdown) arrived, status valid */
	int status;
	pthread_cond_t cv;
};

struct ddss_srsl {
	struct ddss_net *net;
	struct ddss_tp *tp;

	/* Home: only the progress thread changes it; home_mu keeps destroy (and a provider
	 * with several progress threads) safe. */
	pthread_mutex_t home_mu;
	struct srsl_lock **locks;
	size_t nbuckets, nlocks;
	uint64_t reclaimed;     /* holds taken back from down ranks (atomic) */

	/* Client. */
	pthread_mutex_t mu;
	struct srsl_rec *pending[SRSL_BUCKETS]; /* by req */
	struct srsl_rec *holds[SRSL_BUCKETS];   /* by (home, lock_id) */
	uint64_t next_req;
	uint64_t *released;                      /* bitmap by home: a REL sent since the
						  * last flush */
	unsigned active;                         /* calls that may still use the net */
	bool closed;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static bool mode_ok(int mode)
{
	return mode == DDSS_LOCK_SHARED || mode == DDSS_LOCK_EXCLUSIVE;
}

static const char *mode_name(int mode)
{
	return mode == DDSS_LOCK_EXCLUSIVE ? "exclusive" : "shared";
}

static int send_msg(struct ddss_srsl *s, uint32_t to, uint32_t op, uint32_t arg, uint64_t lock_id,
		    uint64_t req)
{
	uint8_t m[SRSL_MSG_LEN];

	wire_put32(m, op);
	wire_put32(m + 4, arg);
	wire_put64(m + 8, lock_id);
	wire_put64(m + 16, req);
	return ddss_net_send(s->net, to, DDSS_SRSL_TAG, m, sizeof(m));
}

static bool rank_down(struct ddss_srsl *s, uint32_t rank)
{
	struct ddss_tp_peer_info info;

	return ddss_tp_peer_info(s->tp, rank, &info) == 0 && info.state == DDSS_TP_PEER_DOWN;
}

/* ---- home: the lock table (home_mu held) ---- */

static struct srsl_lock **lock_bucket(struct ddss_srsl *s, uint64_t id)
{
	return &s->locks[mix64(id) & (s->nbuckets - 1)];
}

/* Double the buckets; on failure keep the old ones (longer chains, still correct). */
static void locks_grow(struct ddss_srsl *s)
{
	size_t n = s->nbuckets * 2;
	struct srsl_lock **nb = calloc(n, sizeof(*nb));

	if (!nb)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct srsl_lock *lk, *next;

		for (lk = s->locks[i]; lk; lk = next) {
			struct srsl_lock **b = &nb[mix64(lk->id) & (n - 1)];

			next = lk->next;
			lk->next = *b;
			*b = lk;
		}
	}
	free(s->locks);
	s->locks = nb;
	s->nbuckets = n;
}

static struct srsl_lock *lock_find(struct ddss_srsl *s, uint64_t id, bool create)
{
	struct srsl_lock **b = lock_bucket(s, id), *lk;

	for (lk = *b; lk; lk = lk->next)
		if (lk->id == id)
			return lk;
	if (!create)
		return NULL;
	lk = calloc(1, sizeof(*lk));
	if (!lk)
		return NULL;
	lk->id = id;
	lk->qtail = &lk->qhead;
	lk->next = *b;
	*b = lk;
	if (++s->nlocks > 2 * s->nbuckets)
		locks_grow(s);
	return lk;
}

static void lock_put_if_idle(struct ddss_srsl *s, struct srsl_lock *lk)
{
	struct srsl_lock **pp;

	if (lk->nheld || lk->qhead)
		return;
	for (pp = lock_bucket(s, lk->id); *pp != lk; pp = &(*pp)->next)
		;
	*pp = lk->next;
	s->nlocks--;
	free(lk);
}

static void ent_list_free(struct srsl_ent *e)
{
	while (e) {
		struct srsl_ent *next = e->next;

		free(e);
		e = next;
	}
}

/* ---- home: holders and queue of one lock ---- */

static bool compatible(const struct srsl_lock *lk, int mode)
{
	return mode == DDSS_LOCK_SHARED ? !lk->excl : lk->nheld == 0;
}

static void hold_add(struct srsl_lock *lk, struct srsl_ent *e)
{
	e->next = lk->holders;
	lk->holders = e;
	lk->nheld++;
	lk->excl = e->mode == DDSS_LOCK_EXCLUSIVE;
}

/* Unlink the holder *pp and return it. */
static struct srsl_ent *hold_take(struct srsl_lock *lk, struct srsl_ent **pp)
{
	struct srsl_ent *e = *pp;

	*pp = e->next;
	if (--lk->nheld == 0)
		lk->excl = false;
	return e;
}

/* The holder slot of @rank's request @req (0: any hold of @rank in @mode), or NULL. */
static struct srsl_ent **hold_find(struct srsl_lock *lk, uint32_t rank, uint64_t req, int mode)
{
	struct srsl_ent **pp;

	for (pp = &lk->holders; *pp; pp = &(*pp)->next) {
		struct srsl_ent *e = *pp;

		if (e->rank == rank && (req ? e->req == req : e->mode == mode))
			return pp;
	}
	return NULL;
}

static void queue_add(struct srsl_lock *lk, struct srsl_ent *e)
{
	e->next = NULL;
	*lk->qtail = e;
	lk->qtail = &e->next;
}

/* Unlink @rank's queued request @req and return it, or NULL if it is not queued. */
static struct srsl_ent *queue_take(struct srsl_lock *lk, uint32_t rank, uint64_t req)
{
	struct srsl_ent **pp, *e;

	for (pp = &lk->qhead; (e = *pp); pp = &e->next) {
		if (e->rank == rank && e->req == req) {
			*pp = e->next;
			if (lk->qtail == &e->next)
				lk->qtail = pp;
			return e;
		}
	}
	return NULL;
}

static struct srsl_ent *queue_pop(struct srsl_lock *lk)
{
	struct srsl_ent *e = lk->qhead;

	lk->qhead = e->next;
	if (!lk->qhead)
		lk->qtail = &lk->qhead;
	return e;
}

/*
 * Make @e (linked nowhere) a holder and tell its rank. A grant that cannot be sent is
 * undone at once: its rank is unreachable, and a hold nobody knows of would never end.
 */
static void grant(struct ddss_srsl *s, struct srsl_lock *lk, struct srsl_ent *e)
{
	int r;

	hold_add(lk, e);
	r = send_msg(s, e->rank, SRSL_REPLY, 0, lk->id, e->req);
	if (r) {
		DDSS_WARN("srsl: cannot grant lock %#llx to rank %u: %s; request dropped",
			  (unsigned long long)lk->id, e->rank, strerror(-r));
		free(hold_take(lk, &lk->holders));
	}
}

/*
 * A holder's lease lasts as long as its rank is a member: the holds of a rank that is down
 * (it died, left, or went silent past the peer timeout) are dropped, and the rank is
 * declared dead for good, so that one that was only cut off can never come back believing
 * it still holds the lock. Returns whether any was dropped.
 */
static bool reclaim_dead_holds(struct ddss_srsl *s, struct srsl_lock *lk)
{
	struct srsl_ent **pp = &lk->holders;
	bool any = false;

	while (*pp) {
		struct srsl_ent *e = *pp;

		if (!rank_down(s, e->rank)) {
			pp = &e->next;
			continue;
		}
		DDSS_WARN("srsl: rank %u is down: its %s hold of lock %#llx is reclaimed", e->rank,
			  mode_name(e->mode), (unsigned long long)lk->id);
		ddss_net_declare_dead(s->net, e->rank);
		free(hold_take(lk, pp));
		__atomic_add_fetch(&s->reclaimed, 1, __ATOMIC_RELAXED);
		any = true;
	}
	return any;
}

/* Grant from the head of the queue for as long as the head is compatible. */
static void grant_waiters(struct ddss_srsl *s, struct srsl_lock *lk)
{
	reclaim_dead_holds(s, lk);
	while (lk->qhead) {
		struct srsl_ent *e = lk->qhead;

		if (rank_down(s, e->rank)) {
			DDSS_WARN("srsl: rank %u is down; its request for lock %#llx dropped",
				  e->rank, (unsigned long long)lk->id);
			ddss_net_declare_dead(s->net, e->rank);
			free(queue_pop(lk));
			continue;
		}
		if (!compatible(lk, e->mode))
			break;
		grant(s, lk, queue_pop(lk));
	}
}

/* ---- home: the requests ---- */

static void home_request(struct ddss_srsl *s, uint32_t from, uint32_t arg, uint64_t lock_id,
			 uint64_t req)
{
	int mode = (int)(arg & SRSL_MODE_MASK);
	bool try_only = arg & SRSL_F_TRY;
	struct srsl_lock *lk;
	struct srsl_ent *e;
	int status;

	if (!mode_ok(mode) || (arg & ~(SRSL_MODE_MASK | SRSL_F_TRY))) {
		DDSS_WARN("srsl: rank %u asks for lock %#llx with bad mode word %#x",
			  from, (unsigned long long)lock_id, arg);
		status = -EINVAL;
		goto answer;
	}
	lk = lock_find(s, lock_id, true);
	if (!lk) {
		status = -ENOMEM;
		goto answer;
	}
	if (reclaim_dead_holds(s, lk))
		grant_waiters(s, lk);
	if (try_only && (lk->qhead || !compatible(lk, mode))) {
		status = -EBUSY;
		goto put_lock;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		status = -ENOMEM;
		goto put_lock;
	}
	*e = (struct srsl_ent){ .req = req, .rank = from, .mode = mode };
	if (!lk->qhead && compatible(lk, mode))
		grant(s, lk, e);
	else
		queue_add(lk, e);
	lock_put_if_idle(s, lk);
	return;

put_lock:
	lock_put_if_idle(s, lk);
answer:
	send_msg(s, from, SRSL_REPLY, (uint32_t)status, lock_id, req);
}

static void home_release(struct ddss_srsl *s, uint32_t from, uint32_t arg, uint64_t lock_id,
			 uint64_t req)
{
	int mode = (int)arg;
	struct srsl_lock *lk;
	struct srsl_ent **pp;

	if (!mode_ok(mode)) {
		DDSS_WARN("srsl: rank %u releases lock %#llx with bad mode %#x", from,
			  (unsigned long long)lock_id, arg);
		return;
	}
	lk = lock_find(s, lock_id, false);
	pp = lk ? hold_find(lk, from, req, mode) : NULL;
	if (!pp || (*pp)->mode != mode) {
		DDSS_WARN("srsl: rank %u releases lock %#llx (%s, request %llu) it does not hold",
			  from, (unsigned long long)lock_id, mode_name(mode),
			  (unsigned long long)req);
		return;
	}
	free(hold_take(lk, pp));
	grant_waiters(s, lk);
	lock_put_if_idle(s, lk);
}

static void home_cancel(struct ddss_srsl *s, uint32_t from, uint64_t lock_id, uint64_t req)
{
	struct srsl_lock *lk = lock_find(s, lock_id, false);
	struct srsl_ent *e, **pp;

	/* Not found anywhere: it was answered (busy, refused) before the cancel came. */
	if (!lk)
		return;
	e = queue_take(lk, from, req);
	if (!e && (pp = hold_find(lk, from, req, 0))) {
		/* The grant crossed the withdrawal: release it for the rank. */
		DDSS_DBG("srsl: rank %u withdrew request %llu for lock %#llx after its grant",
			 from, (unsigned long long)req, (unsigned long long)lock_id);
		e = hold_take(lk, pp);
	}
	if (!e)
		return;
	free(e);
	/* Removing a waiter from the head can make the next ones grantable. */
	grant_waiters(s, lk);
	lock_put_if_idle(s, lk);
}

/* A waiter asks again: holds and requests of ranks gone down since are reclaimed. */
static void home_probe(struct ddss_srsl *s, uint32_t from, uint64_t lock_id, uint64_t req)
{
	struct srsl_lock *lk = lock_find(s, lock_id, false);
	struct srsl_ent *e;

	(void)from;
	(void)req;
	if (!lk)
		return;
	for (e = lk->qhead; e && !(e->rank == from && e->req == req); e = e->next)
		;
	if (!e)
		return; /* granted or answered: the reply is on its way */
	grant_waiters(s, lk);
	lock_put_if_idle(s, lk);
}

/* ---- client: records ---- */

static struct srsl_rec **pending_bucket(struct ddss_srsl *s, uint64_t req)
{
	return &s->pending[req % SRSL_BUCKETS];
}

static struct srsl_rec **hold_bucket(struct ddss_srsl *s, uint32_t home, uint64_t lock_id)
{
	return &s->holds[mix64(lock_id ^ ((uint64_t)home << 48)) % SRSL_BUCKETS];
}

/* mu held. */
static void rec_unlink(struct srsl_rec **pp, struct srsl_rec *rec)
{
	while (*pp != rec)
		pp = &(*pp)->next;
	*pp = rec->next;
}

/* The REPLY to one of our requests, from the progress thread. */
static void client_reply(struct ddss_srsl *s, uint32_t from, uint32_t arg, uint64_t lock_id,
			 uint64_t req)
{
	int status = (int32_t)arg;
	struct srsl_rec *rec;

	if (status > 0 || status < -4095) {
		DDSS_WARN("srsl: rank %u answers request %llu with status %d", from,
			  (unsigned long long)req, status);
		status = -EPROTO;
	}
	pthread_mutex_lock(&s->mu);
	for (rec = *pending_bucket(s, req); rec && rec->req != req; rec = rec->next)
		;
	if (!rec) {
		/* Late: the request timed out, and its CANCEL undoes a grant at the home. */
		DDSS_DBG("srsl: late answer %d from rank %u for request %llu", status, from,
			 (unsigned long long)req);
	} else if (rec->home != from || rec->lock_id != lock_id) {
		DDSS_WARN("srsl: rank %u answers request %llu for lock %#llx, sent to rank %u for %#llx",
			  from, (unsigned long long)req, (unsigned long long)lock_id, rec->home,
			  (unsigned long long)rec->lock_id);
	} else if (!rec->done) {
		rec->status = status;
		rec->done = true;
		pthread_cond_signal(&rec->cv);
	}
	pthread_mutex_unlock(&s->mu);
}

static void on_msg(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_srsl *s = arg;
	const uint8_t *p = buf;
	uint32_t op, a;
	uint64_t lock_id, req;

	if (len != SRSL_MSG_LEN) {
		DDSS_WARN("srsl: %zu-byte message from rank %u dropped", len, from);
		return;
	}
	op = wire_get32(p);
	a = wire_get32(p + 4);
	lock_id = wire_get64(p + 8);
	req = wire_get64(p + 16);
	if (req == 0 && op != SRSL_REL) {
		DDSS_WARN("srsl: message %u from rank %u without a request id dropped", op, from);
		return;
	}
	if (op == SRSL_REPLY) {
		client_reply(s, from, a, lock_id, req);
		return;
	}
	pthread_mutex_lock(&s->home_mu);
	switch (op) {
	case SRSL_REQ:
		home_request(s, from, a, lock_id, req);
		break;
	case SRSL_REL:
		home_release(s, from, a, lock_id, req);
		break;
	case SRSL_CANCEL:
		home_cancel(s, from, lock_id, req);
		break;
	case SRSL_PROBE:
		home_probe(s, from, lock_id, req);
		break;
	case SRSL_SYNC:
		/* Every earlier message of @from is handled: that is the whole answer. */
		send_msg(s, from, SRSL_REPLY, 0, lock_id, req);
		break;
	default:
		DDSS_WARN("srsl: unknown message %u from rank %u dropped", op, from);
		break;
	}
	pthread_mutex_unlock(&s->home_mu);
}

/* ---- life cycle ---- */

int ddss_srsl_create(struct ddss_net *net, struct ddss_srsl **srsl_p)
{
	struct ddss_srsl *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->net = net;
	s->tp = ddss_net_tp(net);
	s->nbuckets = SRSL_LOCKS_MIN;
	s->locks = calloc(s->nbuckets, sizeof(*s->locks));
	s->released = calloc(s->tp->cfg.size / 64 + 1, sizeof(*s->released));
	if (!s->locks || !s->released) {
		r = -ENOMEM;
		goto err_srsl;
	}
	pthread_mutex_init(&s->home_mu, NULL);
	pthread_mutex_init(&s->mu, NULL);
	r = ddss_net_on_msg(net, DDSS_SRSL_TAG, on_msg, s);
	if (r)
		goto err_mutex;
	*srsl_p = s;
	return 0;

err_mutex:
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->home_mu);
err_srsl:
	free(s->released);
	free(s->locks);
	free(s);
	return r;
}

void ddss_srsl_stop(struct ddss_srsl *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->closed = true;
	for (unsigned i = 0; i < SRSL_BUCKETS; i++) {
		for (struct srsl_rec *rec = s->pending[i]; rec; rec = rec->next) {
			if (!rec->done) {
				rec->status = -ESHUTDOWN;
				rec->done = true;
				pthread_cond_signal(&rec->cv);
			}
		}
	}
	/* Wait for the callers to leave: a timed-out one may still be sending its CANCEL. */
	while (s->active) {
		pthread_mutex_unlock(&s->mu);
		sched_yield();
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
}

void ddss_srsl_destroy(struct ddss_srsl *s)
{
	if (!s)
		return;
	ddss_srsl_stop(s);
	for (unsigned i = 0; i < SRSL_BUCKETS; i++) {
		struct srsl_rec *rec, *next;

		for (rec = s->holds[i]; rec; rec = next) {
			next = rec->next;
			free(rec);
		}
	}
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct srsl_lock *lk, *next;

		for (lk = s->locks[i]; lk; lk = next) {
			next = lk->next;
			ent_list_free(lk->holders);
			ent_list_free(lk->qhead);
			free(lk);
		}
	}
	free(s->locks);
	free(s->released);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->home_mu);
	free(s);
}

/* ---- client: acquire and release ---- */

/* mu held: sleep on @rec until it is answered or @until_ns (monotonic) passes. */
static void rec_wait(struct ddss_srsl *s, struct srsl_rec *rec, int64_t until_ns)
{
	struct timespec ts;
	int64_t left = until_ns - ddss_now_ns();

	if (left <= 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += left / 1000000000;
	ts.tv_nsec += left % 1000000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&rec->cv, &s->mu, &ts);
}

/* mu held: a call that may use the net enters (false once stopped). */
static bool enter(struct ddss_srsl *s)
{
	if (s->closed)
		return false;
	s->active++;
	return true;
}

static void leave(struct ddss_srsl *s)
{
	pthread_mutex_lock(&s->mu);
	s->active--;
	pthread_mutex_unlock(&s->mu);
}

/* A request of ours to @home, not sent yet (@mode 0 for a SYNC). */
static struct srsl_rec *rec_new(uint32_t home, uint64_t lock_id, int mode)
{
	struct srsl_rec *rec = calloc(1, sizeof(*rec));
	pthread_condattr_t ca;

	if (!rec)
		return NULL;
	rec->home = home;
	rec->lock_id = lock_id;
	rec->mode = mode;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rec->cv, &ca);
	pthread_condattr_destroy(&ca);
	return rec;
}

/* mu not held: a call that may use the net enters (false once stopped). */
static bool enter_call(struct ddss_srsl *s)
{
	bool in;

	pthread_mutex_lock(&s->mu);
	in = enter(s);
	pthread_mutex_unlock(&s->mu);
	return in;
}

/*
 * Send @op for @rec (the caller has entered) and wait until the home answers or
 * @deadline_ns passes; a request that may queue (@probe) asks every SRSL_PROBE_MS whether
 * it waits behind a down rank. Returns the answer, -ETIMEDOUT, -EHOSTDOWN (@rec's home
 * went down), -ESHUTDOWN or the transport's error. @rec is no longer pending after (a late
 * answer is dropped) and its cv is destroyed: it can become a hold or be freed.
 */
static int ask(struct ddss_srsl *s, struct srsl_rec *rec, uint32_t op, uint32_t arg, bool probe,
	       int64_t deadline_ns)
{
	int64_t probe_at = ddss_now_ns() + SRSL_PROBE_MS * 1000000ll;
	int r = 0;

	pthread_mutex_lock(&s->mu);
	if (s->closed) { /* stop has already failed every pending request */
		pthread_mutex_unlock(&s->mu);
		pthread_cond_destroy(&rec->cv);
		return -ESHUTDOWN;
	}
	rec->req = ++s->next_req;
	rec->next = *pending_bucket(s, rec->req);
	*pending_bucket(s, rec->req) = rec;
	pthread_mutex_unlock(&s->mu);

	r = send_msg(s, rec->home, op, arg, rec->lock_id, rec->req);

	pthread_mutex_lock(&s->mu);
	while (!r && !rec->done) {
		int64_t now = ddss_now_ns(), until = now + SRSL_CHECK_MS * 1000000ll;

		if (now >= deadline_ns) {
			r = -ETIMEDOUT;
			break;
		}
		if (rank_down(s, rec->home)) {
			r = -EHOSTDOWN;
			break;
		}
		if (probe && now >= probe_at) {
			/* Outside mu: sending may connect. A lost probe is retried next time. */
			pthread_mutex_unlock(&s->mu);
			send_msg(s, rec->home, SRSL_PROBE, 0, rec->lock_id, rec->req);
			pthread_mutex_lock(&s->mu);
			probe_at = now + SRSL_PROBE_MS * 1000000ll;
			continue;
		}
		rec_wait(s, rec, until < deadline_ns ? until : deadline_ns);
	}
	if (!r)
		r = rec->status;
	rec_unlink(pending_bucket(s, rec->req), rec);
	pthread_mutex_unlock(&s->mu);
	/* Unlinked: nobody signals it any more. */
	pthread_cond_destroy(&rec->cv);
	return r;
}

int ddss_srsl_acquire(struct ddss_srsl *s, uint32_t home, uint64_t lock_id, int mode,
		      bool try_only, int timeout_ms)
{
	/* A try, or a wait of 0 ms, must not queue; but its answer still takes a round trip,
	 * which only the operation timeout bounds. */
	bool no_queue = try_only || timeout_ms == 0;
	int wait_ms = no_queue && timeout_ms <= 0 ? s->tp->cfg.op_timeout_ms : timeout_ms;
	struct srsl_rec *rec;
	int r;

	if (!mode_ok(mode) || !ddss_tp_valid_rank(s->tp, home))
		return -EINVAL;
	rec = rec_new(home, lock_id, mode);
	if (!rec)
		return -ENOMEM;
	if (!enter_call(s)) {
		pthread_cond_destroy(&rec->cv);
		free(rec);
		return -ESHUTDOWN;
	}
	r = ask(s, rec, SRSL_REQ, (uint32_t)mode | (no_queue ? SRSL_F_TRY : 0), !no_queue,
		wait_ms <= 0 ? INT64_MAX : ddss_now_ns() + (int64_t)wait_ms * 1000000);
	if (r == -EBUSY && !try_only)
		r = -ETIMEDOUT; /* 0 ms: not grantable at once */
	if (!r) {
		/* A hold now: any thread's release may free it, so it is not touched after. */
		struct srsl_rec **b;

		pthread_mutex_lock(&s->mu);
		b = hold_bucket(s, home, lock_id);
		rec->next = *b;
		*b = rec;
		pthread_mutex_unlock(&s->mu);
	}

	/* Withdraw: if the grant is on its way, the home releases it on our behalf. */
	if (r == -ETIMEDOUT) {
		int err = send_msg(s, home, SRSL_CANCEL, 0, lock_id, rec->req);

		if (err)
			DDSS_INFO("srsl: cannot withdraw request %llu for lock %#llx at rank %u: %s",
				  (unsigned long long)rec->req, (unsigned long long)lock_id, home,
				  strerror(-err));
	}
	leave(s);
	if (r)
		free(rec);
	return r;
}

int ddss_srsl_release(struct ddss_srsl *s, uint32_t home, uint64_t lock_id, int mode)
{
	struct srsl_rec **pp, *rec;
	uint64_t req = 0;
	int r;

	if (!mode_ok(mode) || !ddss_tp_valid_rank(s->tp, home))
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	if (!enter(s)) {
		pthread_mutex_unlock(&s->mu);
		return -ESHUTDOWN;
	}
	for (pp = hold_bucket(s, home, lock_id); (rec = *pp); pp = &rec->next) {
		if (rec->home == home && rec->lock_id == lock_id && rec->mode == mode) {
			*pp = rec->next;
			req = rec->req;
			free(rec);
			break;
		}
	}
	s->released[home / 64] |= 1ull << (home % 64); /* for the next flush */
	pthread_mutex_unlock(&s->mu);
	if (!req)
		DDSS_WARN("srsl: releasing lock %#llx (%s) at rank %u that no acquire here took; "
			  "the home drops any such hold of this rank",
			  (unsigned long long)lock_id, mode_name(mode), home);
	r = send_msg(s, home, SRSL_REL, (uint32_t)mode, lock_id, req);
	leave(s);
	return r;
}

/* Ask @home for a SYNC answer (the caller has entered): 0 once it came, else -errno. */
static int sync_home(struct ddss_srsl *s, uint32_t home, int64_t deadline_ns)
{
	struct srsl_rec *rec = rec_new(home, 0, 0);
	int r = rec ? ask(s, rec, SRSL_SYNC, 0, false, deadline_ns) : -ENOMEM;

	free(rec);
	if (r)
		DDSS_INFO("srsl: releases sent to rank %u not confirmed: %s", home,
			  ddss_strerror(r));
	return r;
}

int ddss_srsl_flush(struct ddss_srsl *s)
{
	int64_t deadline = ddss_now_ns() + (int64_t)s->tp->cfg.op_timeout_ms * 1000000;
	int r = 0;

	if (!enter_call(s))
		return -ESHUTDOWN;
	/* One word of the bitmap at a time: taken and cleared under mu, synced without it. */
	for (uint32_t w = 0; w <= s->tp->cfg.size / 64; w++) {
		uint64_t homes;

		pthread_mutex_lock(&s->mu);
		homes = s->released[w];
		s->released[w] = 0;
		pthread_mutex_unlock(&s->mu);
		for (; homes; homes &= homes - 1) {
			int err = sync_home(s, w * 64 + (uint32_t)__builtin_ctzll(homes), deadline);

			r = r ? r : err;
		}
	}
	leave(s);
	return r;
}
