/*
 * The transport: one table of operations that every provider (tcp/, verbs/) fills.
 *
 * Model. A group has `size` ranks numbered 1..size. Each rank exposes exactly one
 * registered region, its pool, to its peers; remote memory is named by (peer rank, byte
 * offset in that peer's pool). Everything above this layer (alloc, lock, coherence) speaks
 * only this table, so it never knows which provider runs underneath.
 *
 * Semantics every provider keeps (the tcp provider emulates verbs RC):
 *  - read/write copy bytes between any local buffer and any range of the peer's pool;
 *    the local buffer belongs to the operation until it completes.
 *  - cas/fadd are 64-bit, on 8-byte-aligned offsets, atomic with respect to every other
 *    cas/fadd on the same pool (from any rank, this one included); the old value is
 *    returned in host byte order.
 *  - A write of exactly 8 bytes to an 8-byte-aligned offset lands as one store: a CPU
 *    reading the word sees the old or the new value, never a mix (lock records rely on it).
 *  - Operations from one rank to one peer start at the peer in the order posted (one
 *    ordered channel per peer, like an RC QP): a notify posted after a write is seen after
 *    the write's bytes have landed. As on InfiniBand RC, a READ or an atomic does not keep
 *    later operations back: the READ may sample memory, and the atomic may return its
 *    result, after later operations have executed. A later operation that must not pass
 *    an earlier READ or atomic still outstanding is posted with DDSS_TP_FENCE (post_ex).
 *    (The tcp provider's test mode DDSS_TCP_ORDER=weak executes exactly that late.)
 *  - A rank reaches its own pool through the same operations (verbs: loopback QP; tcp:
 *    inline CPU operations), never by CPU atomics on words that remote atomics touch.
 *  - A peer that dies or disconnects turns into -ECONNRESET / -EHOSTDOWN / -ETIMEDOUT on
 *    the operations that need it, never a hang.
 *
 * Requests. Posting an operation takes a caller-owned struct ddss_tp_req that must stay
 * valid, untouched, until the operation completes (test() returns 0, or wait() returns
 * anything but -ETIMEDOUT, or close()). Completion status: req->status (0 or -errno); for
 * atomics the old value in req->result.
 *
 * Threads. Every operation may be called from any thread concurrently unless its contract
 * says otherwise. on_msg and on_notify run on the provider's progress thread: they must not
 * block and must not wait for completions (they may post). on_peer runs on whichever thread
 * noticed the change, possibly with provider locks held: it may only record the change.
 */
#ifndef DDSS_NET_TRANSPORT_H
#define DDSS_NET_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "net/auth.h"

struct ddss_tp;
struct ddss_tp_mr;

/* Largest control message payload (a verbs receive buffer holds header + this). */
#define DDSS_TP_MSG_MAX 4000u
/* Most notifications one notify_many call takes. */
#define DDSS_TP_NOTIFY_BATCH 32u
/* Timeout value for wait(): use the transport's operation timeout. */
#define DDSS_TP_TIMEOUT_DEFAULT (-1)

enum ddss_tp_completion {
	DDSS_TP_COMPLETION_EVENT = 0, /* block in the kernel until a completion arrives */
	DDSS_TP_COMPLETION_POLL = 1,  /* spin on the completion source without sleeping */
	DDSS_TP_COMPLETION_ADAPTIVE = 2, /* spin up to a bound (net/spin.h), then as EVENT */
};

/* tcp: how frames are protected after an authenticated handshake (DDSS_TCP_PROTECT,
 * net/tcp/tcp_protect.h). Anything but OFF needs cfg->auth. */
enum ddss_tp_protect {
	DDSS_TP_PROTECT_OFF = 0,   /* frames travel bare */
	DDSS_TP_PROTECT_INTEGRITY, /* every frame authenticated, payload in clear */
	DDSS_TP_PROTECT_ENCRYPT,   /* every frame authenticated, payload encrypted */
};

enum ddss_tp_op {
	DDSS_TP_OP_READ = 1,
	DDSS_TP_OP_WRITE,
	DDSS_TP_OP_CAS,
	DDSS_TP_OP_FADD,
};

/* Flags of post_ex. */
enum ddss_tp_post_flags {
	/* The doorbell may wait for this thread's next operation to the peer (see post_ex). */
	DDSS_TP_MORE = 1u << 0,
	/* Start only once every earlier READ and atomic of this rank to the peer has
	 * completed (IBV_SEND_FENCE): the READ sampled its bytes, the atomic executed. */
	DDSS_TP_FENCE = 1u << 1,
	/* The poster waits for this request right away (the blocking helpers below): a
	 * provider may hold it a moment so that other threads' requests to the peer go out in
	 * the same system call (tcp, docs/transport.md "Combined sends"). A hint: ignoring it
	 * is correct. */
	DDSS_TP_WAITED = 1u << 2,
	/* A write or atomic whose caller would rather it never landed than landed late: once
	 * the rank has given its connection to the peer up (the request failed to its poster)
	 * and connected again, the peer drops it instead of serving it after the new
	 * connection's requests (tcp: docs/transport.md "A rank's new connection supersedes
	 * its old one"; verbs drains the old QP before it connects again). A put's copy and
	 * version word use it (coherence.md, "Errors and failures"). Requests without it keep
	 * landing from the old connection's backlog, as lock hand-overs need. */
	DDSS_TP_BOUND = 1u << 3,
	/*
	 * A request nobody waits for yet, whose poster will likely send this peer another
	 * soon (a lock's posted release, before the next lock): a provider may hold it for
	 * the thread's next operation to the peer, so that both leave in one write, but sends
	 * it within a bound (tcp: TCP_LATER_NS, by its progress thread) if none comes. The
	 * caller needs nothing else (unlike DDSS_TP_MORE). A provider that holds such
	 * requests sets holds_later; a test or wait of one sends it at once. A hint: verbs
	 * posts at once (two doorbells cost a NIC nothing like two writes on loopback).
	 */
	DDSS_TP_LATER = 1u << 4,
};
/* Every flag a provider's post_ex accepts. */
#define DDSS_TP_POST_FLAGS \
	(DDSS_TP_MORE | DDSS_TP_FENCE | DDSS_TP_WAITED | DDSS_TP_BOUND | DDSS_TP_LATER)

enum ddss_tp_peer_state {
	DDSS_TP_PEER_UNKNOWN = 0, /* never connected */
	DDSS_TP_PEER_UP,          /* handshake done: pool info known, operations served */
	DDSS_TP_PEER_DOWN,        /* was up, then its connection closed or failed */
};

/* One node of the group: where its rank listens. */
struct ddss_tp_node {
	char host[64];
	uint16_t port;
};

/* What a rank learned about a peer in the handshake. */
struct ddss_tp_peer_info {
	enum ddss_tp_peer_state state;
	uint64_t pool_len;
	/* While @state is DOWN: the peer's own connection to this rank is still open (tcp: a
	 * served connection of its current process; verbs: its QP to us). Our side failed
	 * (say an operation to it timed out), but it has not closed on us: it may be alive
	 * and only slow. A process that dies closes both. False in the other states.
	 * Found out only while DOWN: under a leaf lock of the provider (its list of served
	 * connections, which nobody holds while calling out), plus on tcp a poll(2) of each
	 * of them for a pending hang-up; so any thread may ask, every caller pays it. */
	bool served;
};

/* Handlers (see "Threads" above). */
struct ddss_tp_handlers {
	/* A control message from @from; @buf is valid only during the call. */
	void (*on_msg)(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len);
	/* A notification from @from, delivered in the order the sender posted them. */
	void (*on_notify)(void *arg, uint32_t from, uint32_t value);
	/* @rank changed state (UP after a handshake, DOWN when a connection to it is lost).
	 * Any thread, provider locks possibly held: record only, never post or wait. */
	void (*on_peer)(void *arg, uint32_t rank, enum ddss_tp_peer_state state);
	void *arg;
};

struct ddss_tp_config {
	uint32_t rank;                     /* this rank, 1..size */
	uint32_t size;                     /* ranks in the group */
	uint64_t group;                    /* group id; peers with another id are refused */
	const struct ddss_tp_node *nodes;  /* nodes[r - 1] is rank r's listening address */
	int listen_fd;                     /* inherited listening socket (tcp), or -1 */
	enum ddss_tp_completion completion;
	int op_timeout_ms;                 /* an operation outstanding this long fails its peer */
	int connect_timeout_ms;            /* how long a first connect retries a peer not up yet */
	const char *device;                /* verbs: device name, NULL = automatic */
	const struct ddss_auth_key *auth;  /* group key (net/auth.h), NULL = no authentication */
	bool share_files;                  /* helper threads keep the shared fd table */
	enum ddss_tp_protect tcp_protect;  /* tcp: frame protection (needs auth) */
	/* Coordinator mode: each rank's incarnation, [rank] for 1..size (this rank's too);
	 * NULL in a static group. Handshakes carry a group id of the pair's incarnations
	 * (ddss_tp_pair_group), so a stale incarnation of a rank is refused as a stranger. */
	const uint64_t *incarnations;
	/* With incarnations: each rank's generation, [rank] for 1..size: 1 for a slot's first
	 * process, one more for each that took it over (names its lock waiter ids). */
	const uint32_t *generations;
	struct ddss_tp_handlers handlers;
};

/* Caller-owned completion handle; fields below the line are the provider's. */
struct ddss_tp_req {
	int status;      /* 0 or -errno, valid once complete */
	uint64_t result; /* cas/fadd: old value at the target */
	/* ---- provider private ---- */
	int done;                  /* set (release) when complete */
	enum ddss_tp_op op;
	uint32_t peer;
	uint64_t remote_off;
	void *local;
	size_t len;
	uint64_t operand[2];
	uint64_t seq;
	int64_t deadline_ns;
	struct ddss_tp_req *next;
	size_t sent;               /* bytes of header + payload already written */
	unsigned char hdr[48];     /* encoded wire header (provider-sized) */
};

/*
 * The operations table. Grouped by purpose; a provider fills what it supports and
 * ddss_tp_open() points every NULL at a stub that returns -EOPNOTSUPP.
 */
struct ddss_tp_ops {
	const char *name;

	/* -- lifecycle -- */
	/** Create this rank's transport from @cfg (copied); peers cannot reach it yet. */
	int (*open)(const struct ddss_tp_config *cfg, struct ddss_tp **tp_p);
	/** Start serving peers; call once, after the pool is registered. */
	int (*start)(struct ddss_tp *tp);
	/** Disconnect every peer, fail outstanding requests with -ECANCELED, free all. */
	void (*close)(struct ddss_tp *tp);

	/* -- memory -- */
	/**
	 * Register [addr, addr+len). With @expose set it becomes the pool peers operate on
	 * (exactly one, before start()); otherwise a local buffer for the provider's own use.
	 */
	int (*mem_register)(struct ddss_tp *tp, void *addr, size_t len, bool expose,
			    struct ddss_tp_mr **mr_p);
	/** Undo mem_register; the pool may only be deregistered after close has begun. */
	int (*mem_deregister)(struct ddss_tp *tp, struct ddss_tp_mr *mr);

	/* -- peers -- */
	/** Connect and handshake with @rank now (otherwise done lazily on first use). Blocks. */
	int (*peer_connect)(struct ddss_tp *tp, uint32_t rank);
	/** Close the channel to @rank; outstanding requests fail with -ECONNRESET. For a
	 * refused rank also close what it connected to us: 0 once nothing of it can land in
	 * our memory any more, else -errno (ddss_tp_peer_cut stays false). */
	int (*peer_disconnect)(struct ddss_tp *tp, uint32_t rank);
	/** What is known about @rank. Never blocks. */
	int (*peer_info)(struct ddss_tp *tp, uint32_t rank, struct ddss_tp_peer_info *info_p);
	/**
	 * Optional (ddss_tp_peer_readmit calls it; the stub says -EOPNOTSUPP): @rank, refused
	 * and disconnected, comes back as a new process at @node. Forget what was learned of
	 * the old one (it was up, its pool, its epoch), take @node as its address, and set its
	 * state to UNKNOWN, so the next use connects and waits for it as for a first start.
	 */
	int (*peer_readmit)(struct ddss_tp *tp, uint32_t rank, const struct ddss_tp_node *node);

	/* -- one-sided data -- */
	/** Post a read of @len bytes at @remote_off of @peer's pool into @local. */
	int (*post_read)(struct ddss_tp *tp, uint32_t peer, uint64_t remote_off, void *local,
			 size_t len, struct ddss_tp_req *req);
	/** Post a write of @len bytes from @local to @remote_off of @peer's pool. */
	int (*post_write)(struct ddss_tp *tp, uint32_t peer, uint64_t remote_off,
			  const void *local, size_t len, struct ddss_tp_req *req);
	/**
	 * Post any one-sided operation (@op) with @flags (enum ddss_tp_post_flags): a read or
	 * write of @len bytes at @local as above, a cas (@a = compare, @b = swap) or a fadd
	 * (@a = add; @local and @len unused). DDSS_TP_MORE: the doorbell may wait
	 * for this thread's next operation to @peer, so both go out in one system call
	 * (tcp) or one chain of work requests (verbs); the calling thread must follow it with
	 * another post to @peer or a wait or test on a request to @peer; anyone else's send to
	 * @peer takes it along too (verbs posts an atomic at once: a hint there).
	 * DDSS_TP_FENCE: see the flag. The stub (a provider without
	 * it) posts at once, unfenced: only for providers that run everything in order.
	 */
	int (*post_ex)(struct ddss_tp *tp, enum ddss_tp_op op, uint32_t peer, uint64_t remote_off,
		       void *local, size_t len, uint64_t a, uint64_t b, unsigned flags,
		       struct ddss_tp_req *req);

	/* -- atomics (64-bit, 8-byte-aligned offsets; old value in req->result) -- */
	/** Post: if *word == @compare then *word = @swap. */
	int (*post_cas)(struct ddss_tp *tp, uint32_t peer, uint64_t remote_off, uint64_t compare,
			uint64_t swap, struct ddss_tp_req *req);
	/** Post: *word += @add (wrapping). */
	int (*post_fadd)(struct ddss_tp *tp, uint32_t peer, uint64_t remote_off, uint64_t add,
			 struct ddss_tp_req *req);

	/* -- one-way notification and two-sided control messages -- */
	/**
	 * Send each of @values[0..@n) (1 <= n <= DDSS_TP_NOTIFY_BATCH) to @peer's on_notify,
	 * in order, ordered after this rank's earlier operations to @peer, as one batch (tcp:
	 * one system call; verbs: one chain, one doorbell). Returns once queued; no delivery
	 * confirmation; on an error some of the values may have been sent. May connect
	 * (blocks then). ddss_tp_notify is this with one value.
	 */
	int (*notify_many)(struct ddss_tp *tp, uint32_t peer, const uint32_t *values, unsigned n);
	/**
	 * Send a control message (@len <= DDSS_TP_MSG_MAX) to @peer's on_msg, ordered like
	 * notify. Returns once queued (the buffer may be reused); no delivery confirmation.
	 */
	int (*msg_send)(struct ddss_tp *tp, uint32_t peer, uint16_t tag, const void *buf,
			size_t len);
	/**
	 * Optional: send a small message that needs no order with the others (the heartbeat)
	 * on a path that bulk transfers to @peer cannot hold up. -EAGAIN when there is none
	 * now (ddss_tp_msg_send_unordered then takes msg_send).
	 */
	int (*msg_send_unordered)(struct ddss_tp *tp, uint32_t peer, uint16_t tag,
				  const void *buf, size_t len);

	/* -- completion -- */
	/** Make progress without blocking: 0 if @req is complete, -EAGAIN if not yet. */
	int (*test)(struct ddss_tp *tp, struct ddss_tp_req *req);
	/**
	 * Wait until @req completes, using the configured completion mode (spin or block).
	 * Returns 0 when complete (see req->status), -ETIMEDOUT if @timeout_ms (or, with
	 * DDSS_TP_TIMEOUT_DEFAULT, the operation timeout) passes first; the request then stays
	 * pending unless the operation timeout expired, which fails the whole peer channel.
	 */
	int (*wait)(struct ddss_tp *tp, struct ddss_tp_req *req, int timeout_ms);

	/* -- helper threads (net/thread_files.h) -- */
	/**
	 * Write to @fds (room for @max) every fd that this transport's calls use when made
	 * from a helper thread, all opened already; returns their number. -EOPNOTSUPP (the
	 * stub): helper threads must share the process's file table. Any thread, after start.
	 */
	int (*thread_fds)(struct ddss_tp *tp, int *fds, size_t max);
};

/* The generic part every provider's transport struct embeds first. */
struct ddss_tp {
	const struct ddss_tp_ops *ops;
	struct ddss_tp_config cfg;
	struct ddss_tp_node *nodes; /* owned copy of cfg.nodes */
	uint8_t *refused;           /* [rank] (atomic): declared dead, never served again
				     * (until readmitted as a new incarnation):
				     * DDSS_TP_REFUSED_* */
	uint64_t *incarnation;      /* [rank] (atomic), NULL in a static group (cfg.incarnations) */
	uint32_t *generation;       /* [rank] (atomic), with incarnation (cfg.generations) */
	struct ddss_auth_key auth;  /* owned copy of *cfg.auth (cfg.auth points here) */
	unsigned long handshakes_failed; /* atomic: incoming connections turned away */
	uint64_t timeouts;          /* atomic: requests a peer left unanswered past the
				     * operation timeout (ddss_tp_count_timeout; ddss_stats) */
	uint64_t home_polled;       /* atomic: rounds served from the home's poll (tcp) */
	uint64_t home_poll_yields;  /* atomic: polls given up to another thread (tcp) */
	uint64_t sends_combined;    /* atomic: requests sent in another request's system call
				     * after their poster held them (DDSS_TP_WAITED; tcp) */
	uint64_t replies_batched;   /* atomic: replies the home sent behind another one in the
				     * same system call (tcp) */
	uint64_t transfers_split;   /* atomic: reads and writes longer than the port's largest
				     * message, posted as several (verbs; tests check it) */
	bool formed;                /* atomic: every rank has been up (a group barrier passed) */
	/*
	 * Set by the provider at open: a fetch&add of 0 returns an 8-byte word sooner than a
	 * read of it does (tcp: its reply carries no payload; rxe: a read's completion takes
	 * a slower path, about 2x an atomic's). Callers may then fetch a word that only ever
	 * changes by cas/fadd with one (never a word anyone writes: a fetch&add is atomic
	 * only against other atomics, so its write-back could undo a write landing meanwhile).
	 */
	bool fetch_by_fadd;
	/* Set by the provider at open: it holds DDSS_TP_LATER requests (tcp). A caller that
	 * tests such a request right after posting it sends it (docs/transport.md). */
	bool holds_later;
	/*
	 * Set by the provider at open (ddss_tp_init_common: true): cas and fadd work. False on
	 * a device without usable NIC atomics (verbs: atomic_cap NONE, or DDSS_VERBS_DISABLE=
	 * atomics); post_cas/post_fadd then fail with -EOPNOTSUPP, and the layers above choose
	 * paths without them (docs/transport.md, "Capabilities and fallbacks").
	 */
	bool atomics;
	/* The device under the transport, for messages (verbs: its name; tcp: empty). */
	char device[64];
	/* Opened by the automatic choice (provider NULL, DDSS_TRANSPORT unset or auto): a
	 * start that fails may fall back to tcp (ddss_tp_start_pool). */
	bool chosen_auto;
};

/** Count a request the peer did not answer within the operation timeout. */
static inline void ddss_tp_count_timeout(struct ddss_tp *tp)
{
	__atomic_add_fetch(&tp->timeouts, 1, __ATOMIC_RELAXED);
}

/** How many incoming connections this transport turned away in their handshake (wrong
 * group or secret, declared dead, malformed, or hung up before the end). */
unsigned long ddss_tp_handshakes_failed(const struct ddss_tp *tp);
/** Providers: count one more. */
void ddss_tp_handshake_failed(struct ddss_tp *tp);

/** Provider by name ("tcp", "verbs"), or NULL if not built. */
const struct ddss_tp_ops *ddss_tp_find(const char *name);

/**
 * Open a transport with the named provider (NULL: DDSS_TRANSPORT, else verbs when a
 * device is usable, else tcp). Missing ops are answered with -EOPNOTSUPP.
 */
int ddss_tp_open(const char *provider, const struct ddss_tp_config *cfg, struct ddss_tp **tp_p);

/**
 * Register @pool (@len bytes) as *@tp_p's exposed pool and start it. If that fails and
 * the transport was chosen automatically (chosen_auto), close it and do the same with a
 * tcp transport opened from the same configuration, logging why at warning level; *@tp_p
 * and *@mr_p then name the new one. An explicit provider fails with the error. Call it
 * before anything else keeps a pointer to *@tp_p.
 */
int ddss_tp_start_pool(struct ddss_tp **tp_p, void *pool, size_t len, struct ddss_tp_mr **mr_p);

/** Validate and copy @cfg into @tp (used by providers' open). */
int ddss_tp_init_common(struct ddss_tp *tp, const struct ddss_tp_ops *ops,
			const struct ddss_tp_config *cfg);
/** Free what ddss_tp_init_common allocated. */
void ddss_tp_fini_common(struct ddss_tp *tp);

/** True if @rank names a member of @tp's group (1..size). */
static inline bool ddss_tp_valid_rank(const struct ddss_tp *tp, uint32_t rank)
{
	return rank >= 1 && rank <= tp->cfg.size;
}

/** The arguments every provider's notify_many checks first: true if it may go on. */
static inline bool ddss_tp_notify_args_ok(const struct ddss_tp *tp, uint32_t peer,
					  const uint32_t *values, unsigned n)
{
	return ddss_tp_valid_rank(tp, peer) && values && n >= 1 && n <= DDSS_TP_NOTIFY_BATCH;
}

/**
 * Providers: set a peer's state word (atomic enum ddss_tp_peer_state) and, if it changed,
 * tell the on_peer handler. Any thread.
 */
void ddss_tp_peer_changed(struct ddss_tp *tp, int *state_p, uint32_t rank,
			  enum ddss_tp_peer_state state);

/**
 * Declare @rank dead for good: its channels are closed (outstanding requests fail), it is
 * never connected to or served again, and its state stays DOWN. For a peer that went
 * silent (net/heartbeat.c): a rank that was only frozen or cut off must not come back and
 * act on locks and memory the survivors have since recovered.
 */
void ddss_tp_peer_refuse(struct ddss_tp *tp, uint32_t rank);

/**
 * The first half of ddss_tp_peer_refuse, which never blocks: from now on nothing @rank
 * sends is served (each request checks the flag) and no handshake of it is accepted. The
 * channels are closed by ddss_tp_peer_refuse later.
 */
void ddss_tp_peer_mark_refused(struct ddss_tp *tp, uint32_t rank);

/**
 * The group id a handshake between this rank and @peer carries: cfg.group in a static
 * group; in coordinator mode a hash of it with both ranks' incarnations, so a process of
 * an incarnation the view has replaced (frozen, then thawed) is refused like a member of
 * another group, in both directions. Any thread.
 */
uint64_t ddss_tp_pair_group(const struct ddss_tp *tp, uint32_t peer);

/**
 * Coordinator mode: @rank, declared dead (ddss_tp_peer_refuse), is taken over by a new
 * process, incarnation @incarnation, listening at @node. From the return on, handshakes
 * of that incarnation (only) are accepted and operations to @rank reach it; every channel
 * of the old one was closed by the refusal. -EINVAL for a bad argument or a rank not
 * refused, -EBUSY if the old one cannot be cut off (ddss_tp_peer_cut), -EOPNOTSUPP for a
 * static group or a provider without it.
 */
int ddss_tp_peer_readmit(struct ddss_tp *tp, uint32_t rank, const struct ddss_tp_node *node,
			 uint64_t incarnation, uint32_t generation);

/*
 * The door's state loads below are sequentially consistent, not just acquire: the tcp
 * server's check before a write or atomic pairs with a cut's wait (tcp_serve.c,
 * act_announce). A plain load on x86 and an ldar on Arm either way.
 */

/** @rank's generation (cfg.generations, as readmissions change it); 0 in a static group. */
static inline uint32_t ddss_tp_peer_generation(const struct ddss_tp *tp, uint32_t rank)
{
	return tp->generation && rank >= 1 && rank <= tp->cfg.size ?
		       __atomic_load_n(&tp->generation[rank], __ATOMIC_SEQ_CST) : 0;
}

/* tp->refused[rank]: 0, or declared dead and ... */
#define DDSS_TP_REFUSED_MARKED 1  /* marked: its channels are to be closed (or could not be) */
#define DDSS_TP_REFUSED_CUT 2     /* its channels closed: nothing of it lands any more */
#define DDSS_TP_REFUSED_CUTTING 3 /* its channels being closed now (ddss_tp_peer_refuse) */

/** @rank's refusal state: 0 or a DDSS_TP_REFUSED_* (0 for a rank out of range). */
static inline uint8_t ddss_tp_peer_refusal(const struct ddss_tp *tp, uint32_t rank)
{
	return rank >= 1 && rank <= tp->cfg.size ?
		       __atomic_load_n(&tp->refused[rank], __ATOMIC_SEQ_CST) : 0;
}

/** True if @rank was declared dead (providers refuse its handshakes and connects). */
static inline bool ddss_tp_peer_refused(const struct ddss_tp *tp, uint32_t rank)
{
	return ddss_tp_peer_refusal(tp, rank) != 0;
}

/**
 * True if @rank was declared dead but its cut did not hold: closing its channels failed,
 * or (tcp) a request of it still acted on our pool a second after. The heartbeat thread
 * tries the cut again each round (net/heartbeat.c). Any thread.
 */
static inline bool ddss_tp_peer_cut_failed(const struct ddss_tp *tp, uint32_t rank)
{
	return ddss_tp_peer_refusal(tp, rank) == DDSS_TP_REFUSED_MARKED;
}

/**
 * True once @rank was declared dead and ddss_tp_peer_refuse has closed its channels here:
 * nothing it sent can land in our memory any more. Marked refused is not enough on verbs,
 * where the NIC serves a one-sided operation until its QP is in the error state. For a
 * home that vouches for a dead writer (lock/lock_gone.c, RC_GONE). Any thread.
 */
static inline bool ddss_tp_peer_cut(const struct ddss_tp *tp, uint32_t rank)
{
	return ddss_tp_peer_refusal(tp, rank) == DDSS_TP_REFUSED_CUT;
}

/** True while ddss_tp_peer_refuse is closing @rank's channels. Any thread. */
static inline bool ddss_tp_peer_cutting(const struct ddss_tp *tp, uint32_t rank)
{
	return ddss_tp_peer_refusal(tp, rank) == DDSS_TP_REFUSED_CUTTING;
}

/*
 * Every rank of the group has been up: a group barrier passed (net/barrier.c). From then
 * on a peer this rank never connected to that cannot be reached is gone, not late: the
 * providers try it once instead of until the connect timeout.
 */
static inline void ddss_tp_set_formed(struct ddss_tp *tp)
{
	__atomic_store_n(&tp->formed, true, __ATOMIC_RELEASE);
}
static inline bool ddss_tp_formed(const struct ddss_tp *tp)
{
	return __atomic_load_n(&tp->formed, __ATOMIC_ACQUIRE);
}

/** Monotonic clock in nanoseconds. */
int64_t ddss_now_ns(void);
/** @clock's time @ns from now, for the timed waits of pthreads (cond, mutex). */
struct timespec ddss_time_after(clockid_t clock, int64_t ns);

/* Thin wrappers, so callers read naturally and never see the table. */
static inline int ddss_tp_start(struct ddss_tp *tp) { return tp->ops->start(tp); }
static inline void ddss_tp_close(struct ddss_tp *tp) { tp->ops->close(tp); }
static inline int ddss_tp_mem_register(struct ddss_tp *tp, void *addr, size_t len, bool expose,
				       struct ddss_tp_mr **mr_p)
{
	return tp->ops->mem_register(tp, addr, len, expose, mr_p);
}
static inline int ddss_tp_mem_deregister(struct ddss_tp *tp, struct ddss_tp_mr *mr)
{
	return tp->ops->mem_deregister(tp, mr);
}
static inline int ddss_tp_peer_connect(struct ddss_tp *tp, uint32_t rank)
{
	return tp->ops->peer_connect(tp, rank);
}
static inline int ddss_tp_peer_disconnect(struct ddss_tp *tp, uint32_t rank)
{
	return tp->ops->peer_disconnect(tp, rank);
}
static inline int ddss_tp_peer_info(struct ddss_tp *tp, uint32_t rank,
				    struct ddss_tp_peer_info *info_p)
{
	return tp->ops->peer_info(tp, rank, info_p);
}
static inline int ddss_tp_post_read(struct ddss_tp *tp, uint32_t peer, uint64_t off, void *local,
				    size_t len, struct ddss_tp_req *req)
{
	return tp->ops->post_read(tp, peer, off, local, len, req);
}
static inline int ddss_tp_post_write(struct ddss_tp *tp, uint32_t peer, uint64_t off,
				     const void *local, size_t len, struct ddss_tp_req *req)
{
	return tp->ops->post_write(tp, peer, off, local, len, req);
}
/* Reads and writes whose doorbell waits for the thread's next operation to @peer. */
static inline int ddss_tp_post_read_more(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					 void *local, size_t len, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_READ, peer, off, local, len, 0, 0, DDSS_TP_MORE,
				req);
}
static inline int ddss_tp_post_write_more(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					  const void *local, size_t len, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_WRITE, peer, off, (void *)local, len, 0, 0,
				DDSS_TP_MORE, req);
}
/* A fetch&add held the same way on tcp; on verbs it goes at once (post_ex). */
static inline int ddss_tp_post_fadd_more(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					 uint64_t add, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_FADD, peer, off, NULL, 0, add, 0, DDSS_TP_MORE,
				req);
}
/* Operations that must not pass an earlier READ or atomic to @peer (DDSS_TP_FENCE). */
static inline int ddss_tp_post_read_fenced(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					   void *local, size_t len, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_READ, peer, off, local, len, 0, 0, DDSS_TP_FENCE,
				req);
}
static inline int ddss_tp_post_cas_fenced(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					  uint64_t compare, uint64_t swap, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_CAS, peer, off, NULL, 0, compare, swap,
				DDSS_TP_FENCE, req);
}
static inline int ddss_tp_post_fadd_fenced(struct ddss_tp *tp, uint32_t peer, uint64_t off,
					   uint64_t add, struct ddss_tp_req *req)
{
	return tp->ops->post_ex(tp, DDSS_TP_OP_FADD, peer, off, NULL, 0, add, 0, DDSS_TP_FENCE,
				req);
}
static inline int ddss_tp_post_cas(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare,
				   uint64_t swap, struct ddss_tp_req *req)
{
	return tp->ops->post_cas(tp, peer, off, compare, swap, req);
}
static inline int ddss_tp_post_fadd(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add,
				    struct ddss_tp_req *req)
{
	return tp->ops->post_fadd(tp, peer, off, add, req);
}
static inline int ddss_tp_notify(struct ddss_tp *tp, uint32_t peer, uint32_t value)
{
	return tp->ops->notify_many(tp, peer, &value, 1);
}
/* Notify @peer of @n values (any number; 0 sends nothing) in order, in batches. */
static inline int ddss_tp_notify_many(struct ddss_tp *tp, uint32_t peer, const uint32_t *values,
				      unsigned n)
{
	for (unsigned at = 0, k; at < n; at += k) {
		int r;

		k = n - at < DDSS_TP_NOTIFY_BATCH ? n - at : DDSS_TP_NOTIFY_BATCH;
		r = tp->ops->notify_many(tp, peer, values + at, k);
		if (r)
			return r;
	}
	return 0;
}
/**
 * This thread's posts wait at most @ms for other posts to the same peer (0: no bound, the
 * default); past it a post gives up with -EAGAIN. For a thread that must keep running
 * whatever one peer does, like the heartbeat thread (a provider that makes posts take
 * turns, verbs on rxe, could otherwise hold it behind a request to a peer that died).
 */
void ddss_tp_set_thread_post_bound(int ms);
/** The calling thread's bound set above, in ms (0: none). */
int ddss_tp_thread_post_bound(void);
/**
 * This thread's reconnects to a peer that was up (our connection to it was open before) get
 * at most @ms for the connect and the handshake together (0: the provider's own bound, the
 * default), and a failure past it is this thread's alone: threads that waited for the
 * attempt try anew; and its wait for another thread's reconnect to such a peer gets @ms
 * too (then -ETIMEDOUT). For the reconnect thread (net/reconnect.c): while it holds a peer's
 * connection lock, a refusal of that peer on the heartbeat thread waits for it; and for
 * the daemon's lane (daemon/lane.c), and the lock layer's stray-ask thread (lock_stray.c).
 * On verbs (since 2026-12-07) it bounds how long the thread waits for the connection's lock
 * and then for a reconnect to a peer that was up, its own attempt or another thread's,
 * which then goes on without it; a broken QP's teardown, under that lock, is not cut.
 */
void ddss_tp_set_thread_connect_bound(int ms);
/** The calling thread's bound set above, in ms (0: none). */
int ddss_tp_thread_connect_bound(void);

static inline int ddss_tp_msg_send(struct ddss_tp *tp, uint32_t peer, uint16_t tag, const void *buf,
				   size_t len)
{
	return tp->ops->msg_send(tp, peer, tag, buf, len);
}

/* A message that needs no order with the others: the provider's fast lane, else msg_send. */
static inline int ddss_tp_msg_send_unordered(struct ddss_tp *tp, uint32_t peer, uint16_t tag,
					     const void *buf, size_t len)
{
	if (tp->ops->msg_send_unordered &&
	    tp->ops->msg_send_unordered(tp, peer, tag, buf, len) == 0)
		return 0;
	return ddss_tp_msg_send(tp, peer, tag, buf, len);
}
static inline int ddss_tp_test(struct ddss_tp *tp, struct ddss_tp_req *req)
{
	return tp->ops->test(tp, req);
}
/* Whether @req is known complete: only reads its flag, never makes progress (so it costs
 * no system call); a request nobody has reaped yet says false until someone waits. */
static inline bool ddss_tp_req_done(const struct ddss_tp_req *req)
{
	return __atomic_load_n(&req->done, __ATOMIC_ACQUIRE);
}
static inline int ddss_tp_wait(struct ddss_tp *tp, struct ddss_tp_req *req, int timeout_ms)
{
	return tp->ops->wait(tp, req, timeout_ms);
}

/* Blocking helpers: post, wait, and return the request's status. */
int ddss_tp_read(struct ddss_tp *tp, uint32_t peer, uint64_t off, void *local, size_t len);
int ddss_tp_write(struct ddss_tp *tp, uint32_t peer, uint64_t off, const void *local, size_t len);
int ddss_tp_cas(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare, uint64_t swap,
		uint64_t *old_p);
int ddss_tp_fadd(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add, uint64_t *old_p);
/* The same two with post_ex @flags (DDSS_TP_FENCE). */
int ddss_tp_cas_ex(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare,
		   uint64_t swap, unsigned flags, uint64_t *old_p);
int ddss_tp_fadd_ex(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add,
		    unsigned flags, uint64_t *old_p);

#endif /* DDSS_NET_TRANSPORT_H */
