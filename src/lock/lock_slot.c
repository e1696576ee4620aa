/*
 * Waiter slots: each is a record in this rank's pool (peers write into it with RDMA) plus
 * a little local state. A waiter waits on its own record: in poll mode it spins on the
 * record, in event mode it sleeps on a futex that every notification for the slot bumps
 * (a notification is posted after each record write and arrives after the bytes).
 */
#include "core/ctx.h"
#include "core/log.h"
#include "core/tsan.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How often a waiter looks at the clock, the peers and shutdown. */
#define CHECK_NS (50 * 1000000ll)
#define POLL_SPINS 512

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

void lock_slots_init(struct ddss_lock *lk)
{
	for (int i = 0; i < DDSS_LOCK_SLOTS; i++)
		lk->slot[i].next_free = i + 1 < DDSS_LOCK_SLOTS ? i + 1 : -1;
	lk->free_head = 0;
}

int lock_slot_take_locked(struct ddss_lock *lk, unsigned *slot_p)
{
	int i = lk->free_head;

	if (i < 0) {
		lock_posted_reap_locked(lk); /* releases still out may have ended */
		i = lk->free_head;
	}
	if (i < 0)
		return -ENOLCK;
	lk->free_head = lk->slot[i].next_free;
	lk->slot[i].state = SLOT_BUSY;
	lk->slots_taken++;
	__atomic_store_n(&lk->slot[i].drained, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&lk->slot[i].failed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&lk->slot[i].agent, false, __ATOMIC_RELAXED);
	__atomic_store_n(&lk->slot[i].closer, false, __ATOMIC_RELAXED);
	__atomic_store_n(&lk->slot[i].await_pred, false, __ATOMIC_RELAXED);
	__atomic_store_n(&lk->slot[i].regs_seen, 0, __ATOMIC_RELAXED);
	*slot_p = (unsigned)i;
	return 0;
}

int lock_slot_take(struct ddss_lock *lk, unsigned *slot_p)
{
	int r;

	pthread_mutex_lock(&lk->mu);
	r = lock_slot_take_locked(lk, slot_p);
	pthread_mutex_unlock(&lk->mu);
	if (r == -ENOLCK && __atomic_load_n(&lk->quarantined, __ATOMIC_ACQUIRE)) {
		lock_slots_reclaim(lk); /* only when out of slots: off the common path */
		pthread_mutex_lock(&lk->mu);
		r = lock_slot_take_locked(lk, slot_p);
		pthread_mutex_unlock(&lk->mu);
	}
	return r;
}

void lock_slot_put_locked(struct ddss_lock *lk, unsigned slot, enum lock_slot_state why)
{
	struct lock_slot *sl = &lk->slot[slot];
	bool retire = __atomic_load_n(&sl->retire, __ATOMIC_ACQUIRE);
	bool await = __atomic_load_n(&sl->await_pred, __ATOMIC_ACQUIRE);

	if (why == SLOT_LOST || (why == SLOT_FREE && (retire || await)))
		lock_reclaim_hold_locked(lk, slot, why == SLOT_LOST); /* before q_state goes */
	__atomic_store_n(&sl->q_state, Q_NONE, __ATOMIC_RELEASE);
	__atomic_store_n(&sl->q_ticket_state, TICKET_NONE, __ATOMIC_RELEASE);
	if (why == SLOT_FREE && (retire || await)) {
		if (sl->reclaim == RECLAIM_NEVER)
			DDSS_WARN("lock waiter slot %u retired (late notifications may still "
				  "come)", slot);
		sl->state = SLOT_RETIRED;
		lk->slots_taken--; /* not waiting or holding: a scheme switch may go on */
		return;
	}
	lk->slot[slot].state = why;
	if (why == SLOT_FREE) {
		lk->slot[slot].next_free = lk->free_head;
		lk->free_head = (int)slot;
		lk->slots_taken--;
	} else if (why == SLOT_LOST) {
		if (sl->reclaim == RECLAIM_NEVER)
			DDSS_WARN("lock waiter slot %u retired (its request failed mid-queue)",
				  slot);
		lock_lost_locked(lk, slot);
	}
}

unsigned ddss_lock_slots_retired(ddss_ctx_t *ctx)
{
	struct ddss_lock *lk = ctx->lock;
	unsigned n = 0;

	lock_slots_reclaim(lk); /* count only what cannot be freed now */
	pthread_mutex_lock(&lk->mu);
	for (unsigned i = 0; i < DDSS_LOCK_SLOTS; i++)
		n += lk->slot[i].state == SLOT_LOST || lk->slot[i].state == SLOT_RETIRED;
	pthread_mutex_unlock(&lk->mu);
	return n;
}

void lock_slot_put(struct ddss_lock *lk, unsigned slot, enum lock_slot_state why)
{
	pthread_mutex_lock(&lk->mu);
	lock_slot_put_locked(lk, slot, why);
	pthread_mutex_unlock(&lk->mu);
}

static uint64_t *rec_word(struct ddss_lock *lk, unsigned slot, unsigned field)
{
	return (uint64_t *)(lk->recs + (size_t)slot * REC_LEN + field);
}

/* Record words are pool memory that peers' RDMA writes change: see core/tsan.h. */
uint64_t lock_rec_load(struct ddss_lock *lk, unsigned slot, unsigned field)
{
	uint64_t v;

	DDSS_POOL_ACCESS_BEGIN();
	v = __atomic_load_n(rec_word(lk, slot, field), __ATOMIC_ACQUIRE);
	DDSS_POOL_ACCESS_END();
	return v;
}

bool lock_rec_sealed(struct ddss_lock *lk, unsigned slot, unsigned field, uint32_t *v_p)
{
	return lock_unseal(lock_rec_load(lk, slot, field), v_p);
}

/* Only for words no peer can be writing now (our own record before we publish it). */
void lock_rec_store(struct ddss_lock *lk, unsigned slot, unsigned field, uint64_t v)
{
	DDSS_POOL_ACCESS_BEGIN();
	__atomic_store_n(rec_word(lk, slot, field), v, __ATOMIC_RELEASE);
	DDSS_POOL_ACCESS_END();
}

static void wake_slot(struct lock_slot *sl);

void lock_slot_wake(struct ddss_lock *lk, unsigned slot)
{
	wake_slot(&lk->slot[slot]);
}

static void wake_slot(struct lock_slot *sl)
{
	/* seq_cst: ordered before the look at the slot's posted release (lock_posted.c). */
	__atomic_add_fetch(&sl->wake, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &sl->wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Progress thread: must not block. A bad value from a peer is logged and dropped. */
void lock_on_notify(void *arg, uint32_t from, uint32_t value)
{
	struct ddss_lock *lk = arg;
	uint32_t kind = value >> 28, slot = value & 0x0fffffffu;

	if (slot >= DDSS_LOCK_SLOTS || kind < LOCK_NOTE_WAKE || kind > LOCK_NOTE_FAIL) {
		DDSS_WARN("rank %u sent a bad lock notification %#x: ignored", from, value);
		return;
	}
	if (kind == LOCK_NOTE_DRAIN)
		__atomic_add_fetch(&lk->slot[slot].drained, 1, __ATOMIC_RELEASE);
	else if (kind == LOCK_NOTE_GRANT)
		lock_rec_store(lk, slot, REC_GRANT, 1); /* only the granter writes it now */
	else if (kind == LOCK_NOTE_FAIL)
		__atomic_store_n(&lk->slot[slot].failed, 1, __ATOMIC_RELEASE);
	wake_slot(&lk->slot[slot]);
	lock_posted_noted(lk, slot);
	if (kind == LOCK_NOTE_WAKE)
		lock_lost_noted(lk, slot);
	if (ddss_lock_test_hook)
		ddss_lock_test_hook(lk->ctx, DDSS_LOCK_TP_NOTED);
}

bool lock_peer_down(struct ddss_lock *lk, uint32_t rank)
{
	struct ddss_tp_peer_info info;

	if (!rank || rank == lk->rank)
		return false;
	return ddss_tp_peer_refused(lk->tp, rank) ||
	       (ddss_tp_peer_info(lk->tp, rank, &info) == 0 && info.state == DDSS_TP_PEER_DOWN);
}

bool lock_peer_gone(struct ddss_lock *lk, uint32_t rank)
{
	if (!lock_peer_down(lk, rank))
		return false;
	if (!ddss_net_down_but_alive(lk->ctx->net, rank))
		return true;
	/* The heartbeat asks each round; a waiter that noticed first need not wait for it. */
	ddss_net_reconnect_ask(lk->ctx->net, rank);
	return false;
}

bool lock_peer_reconnect(struct ddss_lock *lk, uint32_t rank)
{
	if (!lock_peer_down(lk, rank))
		return true; /* another thread connected it meanwhile */
	/* Alive as far as we can tell (without this, each call would pay a connect to a
	 * home that is gone until the connection's keepalive, hours). */
	if (!ddss_net_down_but_alive(lk->ctx->net, rank))
		return false;
	return ddss_tp_peer_connect(lk->tp, rank) == 0 && !lock_peer_down(lk, rank);
}

static uint32_t window_of(const struct ddss_lock *lk, uint32_t rank)
{
	return ddss_tp_peer_generation(lk->tp, rank) % LOCK_ID_WINDOWS;
}

uint32_t lock_own_id(const struct ddss_lock *lk, unsigned slot)
{
	return LOCK_ID(lk->rank, window_of(lk, lk->rank) << LOCK_ID_WINDOW_SHIFT | slot);
}

bool lock_id_current(const struct ddss_lock *lk, uint32_t id)
{
	return LOCK_ID_WINDOW(id) == window_of(lk, LOCK_ID_RANK(id));
}

bool lock_id_down(struct ddss_lock *lk, uint32_t id)
{
	return !lock_id_current(lk, id) || lock_peer_down(lk, LOCK_ID_RANK(id));
}

/* Whether the home of @slot's request (set while its q_state is not Q_NONE) is gone: then
 * its lock is gone with the segment, and every wait of the slot fails. */
static bool lock_home_gone(struct ddss_lock *lk, unsigned slot)
{
	const struct lock_slot *sl = &lk->slot[slot];

	return __atomic_load_n(&sl->q_state, __ATOMIC_ACQUIRE) != Q_NONE &&
	       lock_peer_gone(lk, sl->q_home);
}

/*
 * One step of waiting for something on @sl, which last showed @seen in its wake word.
 * Returns 0 to look again, or -ETIMEDOUT, -EHOSTDOWN (@watch or the request's home went
 * down, or a request ahead failed), -ESHUTDOWN.
 */
int lock_wait_step(struct ddss_lock *lk, unsigned slot, uint32_t seen, uint32_t watch,
		   int64_t deadline_ns, unsigned *spins)
{
	struct lock_slot *sl = &lk->slot[slot];
	int64_t now;

	if (lk->poll && ++*spins % POLL_SPINS) {
		cpu_relax();
		return 0;
	}
	if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
		return -ESHUTDOWN;
	/* failed: a request ahead of ours failed for good (a recovery agent waits on). A
	 * lock whose home is gone is gone with its segment: nothing of it can ever come. A
	 * rank that reads down but alive (our connection to it failed, its own to us works)
	 * still sends what we wait for, on its connection: waiting on keeps our place in
	 * the queue, where failing would requeue us behind an agent of the home. */
	if (lock_peer_gone(lk, watch) || lock_home_gone(lk, slot) ||
	    (__atomic_load_n(&sl->failed, __ATOMIC_ACQUIRE) &&
	     !__atomic_load_n(&sl->agent, __ATOMIC_ACQUIRE)))
		return -EHOSTDOWN;
	now = ddss_now_ns();
	if (now >= deadline_ns)
		return -ETIMEDOUT;
	if (lk->poll) {
		sched_yield(); /* other waiters may share this core */
		return 0;
	}
	int64_t until = deadline_ns - now < CHECK_NS ? deadline_ns - now : CHECK_NS;
	struct timespec ts = { until / 1000000000ll, until % 1000000000ll };

	syscall(SYS_futex, &sl->wake, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
	return 0;
}

int lock_wait_step_until(struct ddss_lock *lk, unsigned slot, uint32_t seen, int64_t check_ns,
			 int64_t deadline_ns, unsigned *spins)
{
	int64_t until = check_ns < deadline_ns ? check_ns : deadline_ns;
	int r = lock_wait_step(lk, slot, seen, 0, until, spins);

	return r == -ETIMEDOUT && until < deadline_ns ? 0 : r;
}

uint32_t lock_wake_seen(struct ddss_lock *lk, unsigned slot)
{
	return __atomic_load_n(&lk->slot[slot].wake, __ATOMIC_ACQUIRE);
}

int lock_wait_rec(struct ddss_lock *lk, unsigned slot, unsigned field, uint32_t watch,
		  int64_t deadline_ns, uint64_t *v_p)
{
	struct lock_slot *sl = &lk->slot[slot];
	unsigned spins = 0;

	for (;;) {
		uint32_t seen = __atomic_load_n(&sl->wake, __ATOMIC_ACQUIRE);
		uint64_t v = lock_rec_load(lk, slot, field);
		int r;

		if (v) {
			*v_p = v;
			return 0;
		}
		r = lock_wait_step(lk, slot, seen, watch, deadline_ns, &spins);
		if (r)
			return r;
	}
}

int lock_rec_send(struct ddss_lock *lk, uint32_t id, unsigned field, const uint64_t *val)
{
	uint32_t rank = LOCK_ID_RANK(id), slot = LOCK_ID_SLOT(id);
	int r;

	if (!ddss_tp_valid_rank(lk->tp, rank))
		return -EPROTO; /* a corrupt lock word: never write somewhere random */
	if (!lock_id_current(lk, id))
		return -EHOSTDOWN; /* an earlier process of the rank: gone with it */
	r = ddss_tp_write(lk->tp, rank, (uint64_t)slot * REC_LEN + field, val, 8);
	if (!r)
		r = ddss_tp_notify(lk->tp, rank, LOCK_NOTE(LOCK_NOTE_WAKE, slot));
	return r;
}

int lock_fail(struct ddss_lock *lk, uint32_t id)
{
	uint32_t rank = LOCK_ID_RANK(id), slot = LOCK_ID_SLOT(id);

	if (!ddss_tp_valid_rank(lk->tp, rank))
		return -EPROTO;
	if (!lock_id_current(lk, id))
		return -EHOSTDOWN;
	return ddss_tp_notify(lk->tp, rank, LOCK_NOTE(LOCK_NOTE_FAIL, slot));
}

int lock_grant(struct ddss_lock *lk, uint32_t id)
{
	static const uint64_t one = 1;
	uint32_t rank = LOCK_ID_RANK(id), slot = LOCK_ID_SLOT(id);

	if (!ddss_tp_valid_rank(lk->tp, rank))
		return -EPROTO;
	if (!lock_id_current(lk, id))
		return -EHOSTDOWN;
	if (id & LOCK_ID_SLEEPS)
		return ddss_tp_notify(lk->tp, rank, LOCK_NOTE(LOCK_NOTE_GRANT, slot));
	return ddss_tp_write(lk->tp, rank, (uint64_t)slot * REC_LEN + REC_GRANT, &one, 8);
}
