/*
 * The lock module's private state, shared by its files:
 *   lock_slot.c   waiter slots, their records in the pool, notifications and waiting
 *   lock_queue.c  the N-CoSED / DQNL protocol on the lock word (docs/locks.md)
 *   lock_grant.c  granting the shared requests queued behind an exclusive waiter
 *   lock_holds.c  which locks this context holds
 *   lock_api.c    the public calls, scheme choice, timed-out requests finished in background
 *   lock_posted.c exclusive releases that return before their CAS completes; the finisher
 *                 thread (those releases, and failing requests queued behind lost slots)
 *   lock_fence.c  fencing numbers (the lock's generation word)
 *   lock_recover.c a closer's drain that only dead shared holders still owe
 *   srsl.c        the server-based baseline
 */
#ifndef DDSS_LOCK_LOCK_INT_H
#define DDSS_LOCK_LOCK_INT_H

#include "lock/lock.h"
#include "lock/recover_wire.h"
#include "net/transport.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Words in the segment header (offsets from the header's start), docs/locks.md "Words". */
#define LOCK_W 0u  /* [T : 32 | S : 32] */
#define LOCK_D 32u /* [closer : 32 | releases : 32] */
#define LOCK_K 40u /* fair mode: next ticket */
#define LOCK_N 48u /* fair mode: turn */
#define LOCK_G 64u /* generation: fencing numbers, every scheme (DDSS_SEG_HDR_FENCE) */

/*
 * Shared arrivals count up in S until an exclusive request swaps them out. A shared holder
 * that saw S at or past this (2^31 acquisitions with no exclusive one) runs one empty
 * exclusive acquire/release after its release, which resets S and D long before S could
 * carry into T.
 */
#define LOCK_S_RESET (1u << 31)

#define LOCK_TAIL(v) ((uint32_t)((v) >> 32))
#define LOCK_COUNT(v) ((uint32_t)(v))
#define LOCK_WORD(t, s) (((uint64_t)(t) << 32) | (uint32_t)(s))

/* A waiter record: REC_LEN bytes at pool offset slot * REC_LEN on the waiter's rank. */
#define REC_NEXT_S 0u   /* sealed: shared requests between me and my successor */
#define REC_NEXT 8u     /* sealed: my exclusive successor's id */
#define REC_GRANT 16u   /* nonzero: the lock is mine */
#define REC_OVF 24u     /* id of the last shared request k >= 64 that queued behind me */
#define REC_LINK 32u    /* mine, while I am on someone's overflow stack: the id below me */
#define REC_ENTRY 64u   /* entry[k], sealed: the id of shared request k < 64 */
#define REC_ENTRIES 64u
#define REC_LEN (REC_ENTRY + 8u * REC_ENTRIES)

/*
 * Sealed record words: a 32-bit value spread over the 8 bytes a nibble each, every byte
 * [~n : 4 | n : 4]. A peer fills them with an RDMA write that a CPU of ours may read at any
 * moment, and neither InfiniBand nor PCIe promises that the 8 bytes land together
 * (Soft-RoCE in a TCG guest places them one at a time: a release read a successor id of
 * 0x80ff, its rank bytes still missing). The owner clears the word to 0 before anyone can
 * write it, and no byte of a sealed word is 0, so each byte is either 0 (still to land) or
 * its final value, and the word unseals only once all 8 landed: then the write is over.
 *
 * That last part matters as much as the first. The first seal, [~v : 32 | v : 32], matched
 * as soon as every byte that differs from 0 had landed; a 0 byte could still be on its way.
 * The release went on, the slot was taken again and its record cleared, and the late 0
 * landed in the next successor's id, which then never unsealed (a release waited for its
 * successor for ever, lock_posted_tcp_weak). Words written by CPUs or NIC atomics only
 * (grant, ovf, link) are not sealed: grant is 0 or 1, and an atomic's write-back is one
 * store.
 */
#define LOCK_SEAL_LOW 0x0f0f0f0f0f0f0f0full

static inline uint64_t lock_seal(uint32_t v)
{
	uint64_t w = 0;

	for (unsigned i = 0; i < 8; i++) {
		uint64_t n = (v >> (4 * i)) & 0xfu;

		w |= ((n ^ 0xfu) << 4 | n) << (8 * i);
	}
	return w;
}

static inline bool lock_unseal(uint64_t w, uint32_t *v_p)
{
	uint64_t lo = w & LOCK_SEAL_LOW, hi = (w >> 4) & LOCK_SEAL_LOW;
	uint32_t v = 0;

	if ((lo ^ hi) != LOCK_SEAL_LOW) /* a byte still 0, or not a sealed word */
		return false;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint32_t)(lo >> (8 * i) & 0xfu) << (4 * i);
	*v_p = v;
	return true;
}

/*
 * A waiter id: [rank : 16 | how : 1 | slot : 15]. "how" says how the waiter waits, so the
 * one who hands it the lock uses the single operation that wakes it: a notification (the
 * waiter's progress thread sets the grant word and wakes it from its futex) for a sleeping
 * waiter, an RDMA write of the grant word for a spinning one.
 */
#define LOCK_ID_SLEEPS 0x8000u
#define LOCK_ID(rank, slot) (((uint32_t)(rank) << 16) | (uint32_t)(slot))
#define LOCK_ID_RANK(id) ((id) >> 16)
#define LOCK_ID_SLOT(id) ((id) & (DDSS_LOCK_SLOTS - 1u))
/*
 * The slot field's bits above the slot: the generation window of the process that made
 * the id (coordinator mode: its slot generation mod LOCK_ID_WINDOWS; 0 in a static group).
 * A process that takes over a dead rank makes ids of its own window, so an id of the old
 * process still in a lock word or record is never taken for one of the new process's
 * requests: it is treated like a request of a dead rank (lock_id_current). Windows repeat
 * after LOCK_ID_WINDOWS takeovers of one slot.
 */
#define LOCK_ID_WINDOW_SHIFT 8u
#define LOCK_ID_WINDOWS 128u
#define LOCK_ID_WINDOW(id) (((id) >> LOCK_ID_WINDOW_SHIFT) & (LOCK_ID_WINDOWS - 1u))
_Static_assert(DDSS_LOCK_SLOTS == 1u << LOCK_ID_WINDOW_SHIFT,
	       "the window sits right above the slot in a waiter id");

/* Notification values: kind in the top 4 bits, slot below. */
#define LOCK_NOTE_WAKE 1u  /* a record of the slot was written */
#define LOCK_NOTE_DRAIN 2u /* one shared holder of the slot's epoch released */
#define LOCK_NOTE_GRANT 3u /* the lock is the slot's: set its grant word */
#define LOCK_NOTE_FAIL 4u  /* the slot's request can never be granted (it waits behind a
			    * request that failed): give up with -EHOSTDOWN */
#define LOCK_NOTE(kind, slot) (((uint32_t)(kind) << 28) | (uint32_t)(slot))

/* Most releases one context lets run on after returning (more wait, as before). */
#define LOCK_POSTED_MAX 32u

enum lock_slot_state {
	SLOT_FREE = 0,
	SLOT_BUSY,      /* a thread waits with it, or an exclusive holder owns it */
	SLOT_ABANDONED, /* its request timed out: the janitor finishes and releases it */
	SLOT_LOST,      /* its request failed mid-queue: writes may still land; reused only
			 * once lock_reclaim.c shows none can any more */
	SLOT_RETIRED,   /* a late note may still come: its drain was recovered (never reused),
			 * or an agent took the lock past its predecessor (lock_reclaim.c) */
};

/* Whether a lost or retired slot can come back (lock_reclaim.c), under ddss_lock.mu. */
enum lock_reclaim {
	RECLAIM_NONE = 0, /* free, busy or abandoned */
	RECLAIM_WAIT,     /* quarantined: freed once nothing more can land in it */
	RECLAIM_NEVER,    /* a note may come at any time (a recovered drain, an atomic whose
			   * outcome is unknown): retired for good */
};

/* Where a fair-mode request is with its ticket (lock_slot.q_ticket_state). */
enum lock_ticket_state {
	TICKET_NONE = 0,
	TICKET_TAKING, /* its fetch&add on K may be out: which ticket it has is not known */
	TICKET_HELD,   /* it has q_ticket and has not passed the turn on yet */
	TICKET_PASSED,
};

/* What a survey (lock_recover.c) may ask of a slot's shared request: lock_slot.q_state. */
enum lock_q_state {
	Q_NONE = 0,
	Q_COUNTING, /* its fetch&add on W may be out: which epoch it is in is not known */
	Q_COUNTED,  /* counted in the epoch of q_pred (0: admitted at once) */
	Q_TRYING,   /* a try-lock's CAS may be out: it can only have succeeded on a word
		     * with no tail, so it matters only to whoever swapped in right after */
};

/* A posted release (lock_posted.c): who finishes the slot's release CAS. The slot's
 * `posted` word is [posting number : 30 | state : 2], so a claim meant for one posting can
 * never take a later posting of the same slot. */
enum lock_posted_state {
	POSTED_NONE = 0,
	POSTED_OUT,     /* CAS in flight, nobody has claimed it yet */
	POSTED_CLAIMED, /* a thread (releaser, reaper, finisher, drain) finishes it */
};
#define POSTED_STATE(v) ((v) & 3u)

struct lock_req;

/* lock_recover.c's bookkeeping (see there). */
#define LOCK_SREL_MAX 64u
#define LOCK_RC_SURVEYS 16u
struct lock_srel {
	uint32_t home;
	uint64_t hdr;
};
struct lock_rc_out {
	bool used, busy;
	uint32_t sid, asker, check, kind, waiting;
};
struct lock_rc_in {
	bool used, surveyed;
	uint32_t home, sid, pred, born;
	uint64_t hdr;
	uint32_t nflushed, flushers; /* FLUSHes come, and how many the survey said to wait for */
};

/* Progress of one queue request, so a timed-out one can be resumed by the janitor. */
enum lock_stage {
	STAGE_START = 0,
	STAGE_TICKET,    /* fair: ticket taken, waiting for its turn */
	STAGE_TURN,      /* fair: our ticket's turn came */
	STAGE_SWAPPED,   /* exclusive: swapped in as tail; shared: counted in W */
	STAGE_ANNOUNCED, /* told the predecessor (or no predecessor) */
	STAGE_GRANTED,   /* the lock was handed over (or taken at once) */
	STAGE_DRAINING,  /* exclusive: registered as the epoch's closer */
	STAGE_DONE,      /* held */
};

struct lock_req {
	unsigned slot;
	uint32_t home;
	uint64_t hdr;      /* the segment header's offset in the home's pool */
	int mode;          /* DDSS_LOCK_SHARED / DDSS_LOCK_EXCLUSIVE, as queued */
	enum lock_stage stage;
	uint64_t ticket;   /* fair */
	uint32_t pred;     /* exclusive: predecessor id; shared: the tail we queue behind */
	uint32_t count;    /* exclusive: shared requests to drain; shared: our index k */
	uint32_t drain;    /* exclusive: drain notifications still to come */
	struct ddss_lock_fence *fence; /* release: wait for it before granting anyone */
	uint64_t epoch;    /* descriptor cache epoch when the key was found valid */
	bool may_post;     /* release: may return before its CAS completes (lock_posted.c) */
	struct lock_agent_job *agent; /* a recovery agent's request (lock_agent.c), or NULL */
	uint64_t key;      /* the segment's key (0: not known, e.g. an agent's own request) */
	/* An atomic of the acquire failed (a timeout, a lost connection) and may still have
	 * landed: the stage it was in cannot be run again (lock_queue.c). */
	bool unknown;
	/* One of them was a CAS that puts our id in the lock word: the id may be out there,
	 * so the slot is not free even before the request learned its place. */
	bool id_maybe_out;
};

/*
 * Post flags for a request's atomics at the lock's home: a release behind a transfer that
 * may be in flight (rq->fence) must not pass its READ (net/transport.h, DDSS_TP_FENCE).
 */
static inline unsigned lock_fenced(const struct lock_req *rq)
{
	return rq->fence ? DDSS_TP_FENCE : 0;
}

struct lock_slot {
	uint32_t wake;    /* futex word: bumped on every notification for the slot */
	uint32_t drained; /* drain notifications since the slot was taken (atomic) */
	uint32_t wake_mark; /* wake as last seen by lock_grant_ready (its owner's thread) */
	int state;        /* enum lock_slot_state, under ddss_lock.mu */
	int next_free;
	uint32_t posted;  /* [number : 30 | enum lock_posted_state : 2] (atomic) */
	uint32_t failed;  /* a FAIL notification came for the request (atomic) */
	uint32_t lost;    /* the slot is SLOT_LOST: fail who queues behind it (atomic) */
	uint32_t fail_queued; /* a fail job for the slot is queued (atomic) */
	uint32_t failed_next; /* the successor already failed (finisher thread; atomic) */
	/* A shared request's lock and epoch, for surveys (lock_recover.c). q_state (atomic)
	 * is written last, after the fields it covers. */
	uint32_t q_state;
	uint32_t q_home;
	uint64_t q_hdr;
	uint32_t q_pred;
	bool q_shared;
	/* Fair mode: the request's ticket, for turn checks (lock_recover.c). q_ticket_state
	 * (atomic) is a enum lock_ticket_state, written after q_ticket. */
	uint32_t q_ticket_state;
	uint64_t q_ticket;
	bool agent;       /* a recovery agent's (lock_agent.c): FAIL notifications do not
			   * stop its waits (atomic) */
	/* The closer's drain check (lock_recover.c): its id, the home asked, the id the home
	 * answered "clear" for; retire: never reuse the slot (atomic). */
	uint32_t rc_check, rc_home, rc_clear;
	uint64_t rc_turn; /* the turn a turn check asks about (its waiter's thread) */
	bool retire;
	/* Reclaiming (lock_reclaim.c). closer: the request may have registered in the drain
	 * word (atomic); await_pred: an agent took the lock past its predecessor, whose FAIL
	 * note may still come (atomic); fail_running: its fail job runs (atomic);
	 * regs_seen: shared registrations collected from its record in this use (atomic).
	 * Under mu: reclaim, and the request's predecessor and kind when it was put. */
	bool closer, await_pred;
	uint32_t fail_running;
	uint32_t regs_seen;
	uint8_t reclaim;
	bool rc_lost_excl;
	uint32_t rc_pred;
	uint64_t posted_cmp;          /* what the posted CAS compares with: [me | 0] */
	struct lock_req posted_rq;    /* the release, for whoever finishes it */
	struct ddss_tp_req posted_req;
};

struct lock_hold;

struct ddss_lock {
	struct ddss_ctx *ctx;
	struct ddss_tp *tp;
	uint32_t rank;
	enum ddss_lock_scheme scheme;
	bool fair;
	bool poll;              /* spin instead of sleeping */
	uint8_t *recs;          /* this rank's records: the pool's first bytes */
	struct ddss_srsl *srsl;

	pthread_mutex_t mu;     /* slots' states and free list, holds, janitors */
	pthread_cond_t cv;      /* a janitor ended */
	struct lock_slot slot[DDSS_LOCK_SLOTS];
	int free_head;
	struct lock_hold **holds; /* hash buckets */
	struct lock_hold *hold_free; /* recycled entries */
	unsigned nholds;          /* holds (for the scheme switch check) */
	unsigned slots_taken;     /* waiter slots not free (waiting, holding, abandoned) */
	unsigned quarantined;     /* slots in RECLAIM_WAIT (lock_reclaim.c; read atomically) */
	unsigned janitors;        /* background threads running */
	uint32_t xseq;            /* numbers exclusive holds (lock_hold.xseq) */
	bool stopping;            /* atomic */

	/* Posted releases (lock_posted.c), under mu. */
	unsigned posted[LOCK_POSTED_MAX]; /* slots whose release CAS is out, unclaimed */
	unsigned nposted;
	/* Jobs of the finisher thread: claimed posted releases to complete, and (FIN_FAIL |
	 * slot) lost slots whose queued successors must be failed; each at most once per slot. */
	unsigned fin_queue[2 * DDSS_LOCK_SLOTS];
	unsigned fin_head, fin_len;
	bool fin_started, fin_busy, fin_exit;
	pthread_t fin_thread;
	pthread_cond_t fin_cv;    /* work for the finisher */
	struct ddss_lock_posted_stats stats; /* atomic counters */

	/* Drain recovery (lock_recover.c). srel: shared releases under way (mu). */
	struct lock_srel srel[LOCK_SREL_MAX];
	unsigned nsrel, srel_overflow;
	pthread_mutex_t rc_mu;     /* rc_out, rc_in and their counters */
	struct lock_rc_out rc_out[LOCK_RC_SURVEYS]; /* as a home: surveys under way */
	struct lock_rc_in rc_in[LOCK_RC_SURVEYS];   /* as a member: waiting for survey + flush */
	uint32_t rc_sid, rc_born;
	uint32_t rc_checks;        /* drain check ids handed out (atomic) */
	struct lock_agents *agents; /* lock_agent.c */
	struct lock_censuses *censuses; /* lock_census.c */
	struct ddss_lock_recovery_stats rstats; /* atomic counters */
	uint64_t contended;        /* atomic: user acquisitions that queued behind a holder */
};

/* lock_slot.c */
void lock_slots_init(struct ddss_lock *lk);
int lock_slot_take(struct ddss_lock *lk, unsigned *slot_p);
int lock_slot_take_locked(struct ddss_lock *lk, unsigned *slot_p); /* mu held */
/* lock_reclaim.c: quarantine a slot that turned lost or retired (mu held, its q_state not
 * reset yet), and free the quarantined ones nothing can land in any more (mu not held). */
void lock_reclaim_hold_locked(struct ddss_lock *lk, unsigned slot, bool lost);
void lock_slots_reclaim(struct ddss_lock *lk);
void lock_slot_put(struct ddss_lock *lk, unsigned slot, enum lock_slot_state why);
void lock_slot_put_locked(struct ddss_lock *lk, unsigned slot, enum lock_slot_state why);
void lock_on_notify(void *arg, uint32_t from, uint32_t value);
uint64_t lock_rec_load(struct ddss_lock *lk, unsigned slot, unsigned field);
/* A sealed word of our record: true with its value once it has landed whole. */
bool lock_rec_sealed(struct ddss_lock *lk, unsigned slot, unsigned field, uint32_t *v_p);
void lock_rec_store(struct ddss_lock *lk, unsigned slot, unsigned field, uint64_t v);
/* Wait until record word @field of @slot is nonzero (returned in *v_p). */
int lock_wait_rec(struct ddss_lock *lk, unsigned slot, unsigned field, uint32_t watch,
		  int64_t deadline_ns, uint64_t *v_p);
/* Wait for a change on @slot (its wake word showed @seen); see lock_slot.c. */
int lock_wait_step(struct ddss_lock *lk, unsigned slot, uint32_t seen, uint32_t watch,
		   int64_t deadline_ns, unsigned *spins);
uint32_t lock_wake_seen(struct ddss_lock *lk, unsigned slot);
/* Write 8 bytes into @id's record (field), then notify its rank. */
int lock_rec_send(struct ddss_lock *lk, uint32_t id, unsigned field, const uint64_t *val);
/* Hand the lock to waiter @id the way it waits (see LOCK_ID_SLEEPS). */
int lock_grant(struct ddss_lock *lk, uint32_t id);

/* lock_grant.c: grant the shared requests registered behind @slot so far (how many, or
 * -errno); grant @n more, waiting for them to register: how many it granted (more than @n
 * if more registered meanwhile, fewer if a census found the rest dead), or -errno. */
int lock_grant_ready(struct ddss_lock *lk, unsigned slot);
/* Whether lock_grant_ready may find requests to grant (a notification came). */
bool lock_grant_pending(struct ddss_lock *lk, unsigned slot);
int lock_grant_more(struct ddss_lock *lk, unsigned slot, uint32_t n);

/* lock_queue.c: 0, -EBUSY (try), -ETIMEDOUT (@req can be resumed), or an error. */
int lock_queue_acquire(struct ddss_lock *lk, struct lock_req *req, bool try_only,
		       int64_t deadline_ns);
int lock_queue_release(struct ddss_lock *lk, const struct lock_req *req);
/* Returned by lock_queue_release when the release went on without the caller (only with
 * req->may_post): the slot is no longer the caller's. */
#define LOCK_RELEASE_POSTED 1
/* Finish an exclusive release whose first CAS (for [me | 0]) returned @old. */
int lock_queue_release_after(struct ddss_lock *lk, const struct lock_req *req, uint64_t old);

/* The finisher thread (lock_posted.c) also fails whoever queued behind a lost slot. */
#define FIN_FAIL 0x80000000u
/* @slot turned SLOT_LOST (mu held): queue its fail job (lock_posted.c). */
void lock_lost_locked(struct ddss_lock *lk, unsigned slot);
/* A WAKE for @slot arrived (progress thread): if the slot is lost, queue its fail job. */
void lock_lost_noted(struct ddss_lock *lk, unsigned slot);
/* lock_grant.c: send FAIL to the shared requests registered behind @slot (collected). */
int lock_fail_registered(struct ddss_lock *lk, unsigned slot);
/* lock_slot.c: tell waiter @id its request can never be granted. */
int lock_fail(struct ddss_lock *lk, uint32_t id);

/* lock_recover.c */
int lock_recover_init(struct ddss_lock *lk); /* before the net starts */
/* Fair mode: the turn word has shown @turn (not @rq's ticket) for a while. Asks the home
 * whether a live request holds that ticket; if none does (its holder died before passing
 * the turn on), passes it on. 0, or -errno of the turn word's CAS. */
int lock_turn_check(struct ddss_lock *lk, const struct lock_req *rq, uint64_t turn,
		    int64_t *next_check_ns);
/* Wait until @rq's epoch is drained, or only dead ranks still owe (then retire the slot). */
int lock_drain_wait(struct ddss_lock *lk, const struct lock_req *rq, int64_t deadline_ns);
/* A shared release of the lock at (@home, @hdr) began / ended (mu held). */
void lock_srel_begin_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr);
void lock_srel_end_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr);
/* Whether a shared release of that lock may be under way here (mu held). */
bool lock_srel_busy_locked(struct ddss_lock *lk, uint32_t home, uint64_t hdr);
/* Wait for the successor of @rq (waiter @me), which swapped itself in, to announce itself
 * (its id in *next_p): -EHOSTDOWN once a census shows it is nowhere alive. */
int lock_wait_successor(struct ddss_lock *lk, const struct lock_req *rq, uint32_t me,
			int64_t deadline_ns, uint32_t *next_p);
/* Count one event in lk->rstats. */
#define LOCK_RSTAT(lk, field) __atomic_add_fetch(&(lk)->rstats.field, 1, __ATOMIC_RELAXED)
/* lock_slot.c: whether this rank sees @rank down (its connection closed, or declared
 * dead); never this rank itself or rank 0. */
bool lock_peer_down(struct ddss_lock *lk, uint32_t rank);
/* lock_api.c: run @fn(@arg) on a detached thread counted in lk->janitors (a janitor, a
 * recovery agent, a stray-id ask), which ddss_lock_stop waits for; not once the module
 * stops. 0, -ESHUTDOWN, or pthread_create's -errno. Any thread but one holding mu. */
int lock_janitor_spawn(struct ddss_lock *lk, void *(*fn)(void *), void *arg);
/* lock_api.c: such a thread ends (its last call). */
void lock_janitor_done(struct ddss_lock *lk);
/* lock_stray.c: a request of ours on @key's lock at @home was lost with its id perhaps
 * in the lock's tail (an exclusive acquire's or release's atomic failed with its outcome
 * unknown): ask the home, from a thread of its own, to take the lock past it. Any
 * thread, never blocks; nothing for @key 0 or once the lock module stops. */
void lock_stray_ask(struct ddss_lock *lk, uint32_t home, uint64_t key);
/* lock_slot.c: whether @rank reads down and is not down but alive (ddss_net_down_but_alive:
 * only our connection to it failed, its own to us is open, it was heard lately, and not
 * for longer than the peer timeout). Asks for a reconnect of one that is. What waits
 * on a rank asks this, not lock_peer_down: such a rank still acts. */
bool lock_peer_gone(struct ddss_lock *lk, uint32_t rank);
/* lock_slot.c: for @rank, which read down: if it is down here only because our
 * connection to it failed (say an operation to it timed out) while its own connection to
 * us is still open and it was heard from within the peer timeout, connect to it again.
 * True once it is up (or another thread brought it up meanwhile); false if it is gone as
 * far as we can tell, or the connect failed (bounded by the transport's connect and
 * handshake: on tcp together the operation timeout, 1-5 s; 3 s plus a drain on verbs). */
bool lock_peer_reconnect(struct ddss_lock *lk, uint32_t rank);
/* This rank's id for its request in @slot (without the sleep bit). */
uint32_t lock_own_id(const struct ddss_lock *lk, unsigned slot);
/* @id was made by the process its rank runs now (or runs no more, but no later one has
 * taken the rank over): its record is that process's to read and write. */
bool lock_id_current(const struct ddss_lock *lk, uint32_t id);
/* The request @id can never act again: its rank is down, or @id is an earlier process's. */
bool lock_id_down(struct ddss_lock *lk, uint32_t id);
/* lock_slot.c: lock_wait_step until @check_ns: 0 also when it is time to check again
 * (-ETIMEDOUT only at @deadline_ns). */
int lock_wait_step_until(struct ddss_lock *lk, unsigned slot, uint32_t seen, int64_t check_ns,
			 int64_t deadline_ns, unsigned *spins);
/* lock_slot.c: bump @slot's wake word and wake its waiter. */
void lock_slot_wake(struct ddss_lock *lk, unsigned slot);

/* lock_agent.c: taking a lock back from dead holders and waiters */
struct lock_agent_job;
int lock_agent_init(struct ddss_lock *lk);
void lock_agent_fini(struct ddss_lock *lk);
/* A recovery message (lock_recover.c's handler passes the types it does not own). */
void lock_agent_on_msg(struct ddss_lock *lk, uint32_t from, const void *buf, size_t len);
/* The agent's request swapped itself in: the ranks that asked may queue again. */
void lock_agent_swapped(struct ddss_lock *lk, const struct lock_req *rq);
/* The agent waits for its grant, or for no live request ahead of it (then it resets the
 * drain word and closes no epoch: rq->count becomes 0). */
int lock_agent_wait_grant(struct ddss_lock *lk, struct lock_req *rq, int64_t deadline_ns);
/* A try-lock found the tail held by a rank that is down: ask @rq's home to take the lock
 * back, without waiting (the try still says -EBUSY). */
void lock_agent_nudge(struct ddss_lock *lk, const struct lock_req *rq, uint32_t tail);
/* Ask @home to take back its lock of @key (a request failed behind a dead or failed one):
 * 0 once a recovery agent is queued there (ask again behind it), or -errno. */
int lock_agent_ask(struct ddss_lock *lk, uint32_t home, uint64_t key, int64_t deadline_ns);
/* Send @home a question of @type (hdr, pred as recover_wire.h says) and wait for its
 * RC_RECOVERED answer: its status, or -EHOSTDOWN, -ETIMEDOUT (at @deadline_ns or the
 * operation timeout), -ESHUTDOWN, -EAGAIN (too many questions out). */
int lock_home_ask(struct ddss_lock *lk, uint32_t home, uint32_t type, uint64_t hdr, uint32_t pred,
		  int64_t deadline_ns);
/* The home: answer question @id of @rank with @status (RC_RECOVERED; id 0: nobody waits). */
void lock_home_answer(struct ddss_lock *lk, uint32_t rank, uint32_t id, int status);
/* lock_gone.c, the home: @from asks whether rank @m->pred is cut off here (RC_GONE). */
void lock_gone_on_ask(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m);

/* lock_census.c: what every live member has on one lock */
#define CENSUS_SHARED RC_CENSUS_SHARED     /* a member holds it shared, or releases */
#define CENSUS_UNPLACED RC_CENSUS_UNPLACED /* a member's request has its first atomic out */
#define CENSUS_MISSING 4u                  /* a member did not answer (in time) */
struct lock_census_req {
	uint32_t id, pred; /* waiter ids without the "sleeps" bit */
	bool waiting;      /* not granted yet */
	bool shared;
	bool trying;       /* a try-lock whose CAS may be out (Q_TRYING) */
};
struct lock_census {
	uint32_t flags;
	uint32_t n;
	struct lock_census_req *req;
};
int lock_census_init(struct ddss_lock *lk);
void lock_census_fini(struct ddss_lock *lk);
/* Ask every member about the lock at (@home, @hdr); waits up to a second. 0 or -errno. */
int lock_census_take(struct ddss_lock *lk, uint32_t home, uint64_t hdr,
		     struct lock_census *out);
void lock_census_free(struct lock_census *cs);
/*
 * Does a census find a live request of mode @shared waiting behind waiter @me (without
 * the "sleeps" bit) that @known (NULL: none) does not account for? 1 yes, 0 no, -1 cannot
 * tell (a member did not answer, or a request has its first atomic out), -ESHUTDOWN.
 */
int lock_census_waiting_behind(struct ddss_lock *lk, uint32_t home, uint64_t hdr, uint32_t me,
			       bool shared, bool (*known)(const void *arg, uint32_t id),
			       const void *arg);
/* pthread_cond_timedwait until ddss_now_ns() reaches @until_ns (@mu held). */
void lock_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ns);
struct rc_msg;
void lock_census_on_survey(struct ddss_lock *lk, uint32_t from, const struct rc_msg *m);
void lock_census_on_report(struct ddss_lock *lk, const void *buf, size_t len);

/* lock_posted.c */
/*
 * The release's first CAS on W (@cmp -> @swp) for @rq, posted without waiting when it may
 * be: returns LOCK_RELEASE_POSTED (the slot now belongs to the posted-release machinery)
 * or 0 with the CAS's old value in *old_p (done synchronously), or -errno.
 */
int lock_posted_cas(struct ddss_lock *lk, const struct lock_req *rq, uint64_t cmp,
		    uint64_t swp, uint64_t *old_p);
/* Free the slots of posted releases that completed as hoped (mu held). */
void lock_posted_reap_locked(struct ddss_lock *lk);
/* A notification for @slot arrived (progress thread, after the wake word was bumped). */
void lock_posted_noted(struct ddss_lock *lk, unsigned slot);
/* Finish every posted release and wait for the finisher to be idle (no mu held). */
void lock_posted_drain(struct ddss_lock *lk);
/* Stop the finisher thread (after lock_posted_drain, with lk->stopping set). */
void lock_posted_stop(struct ddss_lock *lk);

/* lock_holds.c (callers hold lk->mu) */
struct lock_hold {
	struct lock_hold *next;
	uint64_t key;
	uint32_t owner;   /* whose hold: 0, or in the daemon the client (ddss_lock_act_for) */
	uint32_t home;
	uint64_t hdr;
	bool excl;        /* held exclusively */
	int xslot;        /* ... with this waiter slot */
	bool srsl;        /* taken with the SRSL scheme */
	bool implicit;    /* the exclusive hold is a get/put's own (src/coherence) */
	bool inside_busy; /* a get/put of this owner runs inside this user hold: the next one,
			   * and the user's release, wait on lk->cv (ddss_lock_inside_done) */
	uint32_t shared;  /* shared holds */
	bool reset;       /* a shared hold saw S >= LOCK_S_RESET: reset the word on release */
	uint32_t xseq;    /* which exclusive hold this is (a fence got for an earlier one
			   * must not be cached in a later one) */
	uint64_t epoch;   /* descriptor cache epoch when the key was found valid for it */
	uint64_t fence;   /* the exclusive hold's fencing number, 0 until asked for */
};
int lock_holds_init(struct ddss_lock *lk);
void lock_holds_fini(struct ddss_lock *lk);
/* The calling thread's owner's hold of @key, or NULL. */
struct lock_hold *lock_holds_find(struct ddss_lock *lk, uint64_t key);
/* Any user hold (not implicit) of @owner, or NULL. */
struct lock_hold *lock_holds_any_of(struct ddss_lock *lk, uint32_t owner);
uint32_t lock_owner(void);
struct lock_hold *lock_holds_add(struct ddss_lock *lk, uint64_t key, uint32_t home,
				  uint64_t hdr, uint64_t epoch, int mode, int xslot);
void lock_holds_drop(struct ddss_lock *lk, struct lock_hold *h, int mode);
/* Whether any owner holds the lock at (@home, @hdr) shared. */
bool lock_holds_shared_of(struct ddss_lock *lk, uint32_t home, uint64_t hdr);
/* How the user (not a get/put's own hold) holds the lock of @h: a DDSS_LOCK_* or 0. */
int lock_user_mode(const struct lock_hold *h);

/*
 * lock_api.c: @key's home and segment header offset; -EINVAL, -ESTALE, ... With @epoch_p,
 * the descriptor cache's epoch read before the key was found valid (see lock_key_valid).
 */
int lock_word_of(struct ddss_ctx *ctx, ddss_key_t key, uint32_t *home_p, uint64_t *hdr_p,
		 uint64_t *epoch_p);

#endif /* DDSS_LOCK_LOCK_INT_H */
