/*
 * DDSS: distributed data-sharing substrate.
 *
 * The whole public API. Every call returns 0 or a negative errno value; output arguments
 * come last, are named *_p and are written only on success. Handles are opaque.
 */
#ifndef DDSS_DDSS_H
#define DDSS_DDSS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDSS_VERSION_MAJOR 0
#define DDSS_VERSION_MINOR 1
#define DDSS_VERSION_PATCH 0

#if defined(DDSS_BUILDING_LIBRARY)
#define DDSS_API __attribute__((visibility("default")))
#else
#define DDSS_API
#endif


/* ---- context ---- */

/** A process's membership of a DDSS group (one rank). Thread-safe; opaque. */
typedef struct ddss_ctx ddss_ctx_t;

/** A shared segment's key: a plain integer that may be handed to any rank of the group. */
typedef uint64_t ddss_key_t;

enum ddss_completion {
	DDSS_COMPLETION_DEFAULT = 0, /* DDSS_COMPLETION, else adaptive */
	DDSS_COMPLETION_EVENT,       /* block on completion events (idle CPU while waiting) */
	DDSS_COMPLETION_POLL,        /* spin (lowest latency, one busy core per waiter) */
	DDSS_COMPLETION_ADAPTIVE,    /* spin for about one wake-up's cost, then block as event */
};

/*
 * Lock schemes (docs/locks.md). Every rank of a group must use the same one.
 * NCOSED is the library's: shared and exclusive modes on one 64-bit word per segment,
 * remote atomics only. The other two are baselines for the benchmarks.
 */
enum ddss_lock_scheme {
	DDSS_LOCK_SCHEME_DEFAULT = 0, /* DDSS_LOCK_SCHEME ("ncosed", "dqnl", "srsl"), else ncosed */
	DDSS_LOCK_NCOSED,             /* distributed queue + shared count (N-CoSED) */
	DDSS_LOCK_DQNL,               /* distributed queue, exclusive only: shared = exclusive */
	DDSS_LOCK_SRSL,               /* the home rank's CPU queues requests (two-sided) */
};

/*
 * How a process joins (docs/daemon.md). Direct: the process is a rank and drives the NIC.
 * Daemon: the node's ddssd is the rank and the process attaches to it over shared memory;
 * every call then goes through the daemon, with the same results.
 */
enum ddss_mode {
	DDSS_MODE_DEFAULT = 0, /* DDSS_MODE ("direct", "daemon"), else direct */
	DDSS_MODE_DIRECT,
	DDSS_MODE_DAEMON,
};

/**
 * struct ddss_attr - configuration for ddss_init().
 *
 * Zero (or ddss_attr_init()) means "default" in every field. An environment variable, when
 * set, overrides the field (so a deployed program can be retuned without a rebuild):
 * DDSS_POOL_SIZE, DDSS_TRANSPORT, DDSS_COMPLETION, DDSS_OP_TIMEOUT_MS,
 * DDSS_CONNECT_TIMEOUT_MS, DDSS_PEER_TIMEOUT_MS, DDSS_LOCK_SCHEME, DDSS_LOCK_FAIR,
 * DDSS_CACHE_SIZE, DDSS_MODE, DDSS_DAEMON_SOCKET. In daemon mode only mode,
 * daemon_socket and connect_timeout_ms apply: the daemon was configured when it started.
 * The group itself (DDSS_RANK, DDSS_SIZE, DDSS_NODES...) always
 * comes from the environment, which ddssrun sets.
 */
struct ddss_attr {
	size_t pool_size;          /* bytes of shared memory this rank serves; 0: 64 MiB */
	const char *transport;     /* "tcp", "verbs" or "auto"; NULL: auto (verbs when a
				    * device has an active port, else tcp; ddssrun sets tcp) */
	enum ddss_completion completion;
	int op_timeout_ms;         /* one operation; 0: 30000 */
	int connect_timeout_ms;    /* first contact with a peer, barriers; 0: 30000 */
	enum ddss_lock_scheme lock_scheme; /* how segment locks work; 0: DDSS_LOCK_SCHEME */
	int lock_fair;             /* 1: starvation-free exclusive queueing (ticket); 0: env */
	size_t cache_size;         /* bytes of segment copies kept by the coherence cache;
				    * 0: DDSS_CACHE_SIZE, else 16 MiB (docs/coherence.md) */
	enum ddss_mode mode;
	const char *daemon_socket; /* daemon mode: the node's ddssd; NULL: the daemon's
				    * default, $XDG_RUNTIME_DIR/ddss/ddssd.sock, for root
				    * /run/ddss/ddssd.sock, else /tmp/ddss-UID/ddssd.sock */
	int peer_timeout_ms;       /* a connected rank silent this long is declared dead for
				    * good (docs/failure.md); 0: 10000; -1: never */
	const char *secret;        /* group secret: only ranks that know it may connect
				    * (docs/security.md); DDSS_SECRET_FILE / DDSS_SECRET
				    * win; NULL: none, connections are not authenticated */
};

/** ddss_attr_init() - set every field of @attr to its default. */
DDSS_API void ddss_attr_init(struct ddss_attr *attr);

/**
 * ddss_init() - join the group as the rank the environment names. Collective: returns once
 * every rank has called it (or with -ETIMEDOUT after the connect timeout).
 * @attr: configuration, or NULL for the defaults.
 * @ctx_p: the new context.
 *
 * Returns 0, -EINVAL (bad attr or environment), -ENOMEM, -ENODEV (transport unavailable),
 * -ENOENT (a transport this build lacks, an unreadable DDSS_NODES_FILE), -ETIMEDOUT, or
 * the system's error (-EADDRINUSE...); in daemon mode -ENOENT / -ECONNREFUSED (no daemon at
 * the socket), -EPROTO (a daemon of another version), and every later call -ENOTCONN once
 * the daemon is gone (a call that found it frozen for DDSS_DAEMON_STALL_MS returns
 * -ETIMEDOUT, and the client detaches). In daemon mode the call only attaches to the daemon (it
 * is not collective: the daemons' own start was).
 */
DDSS_API int ddss_init(const struct ddss_attr *attr, ddss_ctx_t **ctx_p);

/**
 * ddss_finalize() - leave the group. Collective (waits, up to the connect timeout, until
 * every rank has called it, so nobody leaves while others still read its segments); then
 * frees @ctx whatever happened. Requests not yet waited for must not be used afterwards.
 * In daemon mode it detaches at once (the segments stay with the daemon) and the daemon
 * releases the locks this process still holds.
 */
DDSS_API int ddss_finalize(ddss_ctx_t *ctx);

/** ddss_rank() - this context's rank, 1..ddss_size(). */
DDSS_API uint32_t ddss_rank(const ddss_ctx_t *ctx);
/** ddss_size() - the number of ranks in the group. */
DDSS_API uint32_t ddss_size(const ddss_ctx_t *ctx);
/**
 * ddss_barrier() - wait until every rank has entered. -ETIMEDOUT, -EHOSTDOWN. In daemon
 * mode: until every client of every daemon has (a daemon counts the clients it was told
 * to expect, by ddssd --clients, else those attached). Locks this rank released before
 * the barrier are free for every rank after it: a release may return before it has landed
 * at the lock's home (docs/locks.md), and the barrier waits for those first.
 */
DDSS_API int ddss_barrier(ddss_ctx_t *ctx);

/* ---- segments ---- */

enum ddss_placement {
	DDSS_PLACE_ANY = 0, /* the next rank in turn (round robin): spreads NIC load */
	DDSS_PLACE_LOCAL,   /* this rank */
	DDSS_PLACE_RANK,    /* struct ddss_seg_attr.rank */
};

#define DDSS_NAME_MAX 64 /* bytes of a segment name, the terminating NUL included */

/*
 * Coherence models (docs/coherence.md): what ddss_get / ddss_put promise when ranks share a
 * segment. Fixed at allocation. The locks a model needs are taken and released by get/put
 * themselves, unless the caller already holds the segment's lock (then they run inside the
 * caller's critical section).
 */
enum ddss_coherence {
	DDSS_COHERENCE_NULL = 0,  /* get = one RDMA read, put = one RDMA write; no guarantee */
	DDSS_COHERENCE_STRICT,    /* get and put hold the exclusive lock: fully serialised */
	DDSS_COHERENCE_READ,      /* gets hold the exclusive lock (readers serialised);
				   * puts take none */
	DDSS_COHERENCE_WRITE,     /* puts hold the exclusive lock; gets take none and return the
				   * newest complete version, never a torn one */
	DDSS_COHERENCE_VERSION,   /* put bumps a version; get moves the data only when the
				   * version differs from the copy this context has cached */
	DDSS_COHERENCE_DELTA,     /* x+1 versions kept; get never waits for a writer and returns
				   * data at most x versions old, or exactly k back on request */
	DDSS_COHERENCE_TEMPORAL,  /* get serves this context's copy while it is younger than t */
};

#define DDSS_DELTA_MAX 64 /* the largest x of a delta segment */

/** struct ddss_seg_attr - how to allocate a segment; zero means the defaults. */
struct ddss_seg_attr {
	enum ddss_placement placement;
	uint32_t rank;    /* DDSS_PLACE_RANK: the home rank */
	const char *name; /* NULL, or a name: created once, every other caller gets its key */
	enum ddss_coherence coherence; /* 0: null */
	uint32_t delta;        /* DDSS_COHERENCE_DELTA: x, 1..DDSS_DELTA_MAX (else 0) */
	uint32_t temporal_ms;  /* DDSS_COHERENCE_TEMPORAL: t in ms, >= 1 (else 0) */
};

/**
 * ddss_allocate_ss() - allocate a shared segment of @nbytes (zero-filled).
 * @attr: placement, name and coherence model, or NULL (round robin, unnamed, null model).
 *   A delta segment takes (x+1) times @nbytes of its home's pool.
 *
 * With a name, exactly one caller in the group creates the segment (placed as that caller
 * asked); every caller, concurrent ones included, gets the same key. Returns 0, -EINVAL,
 * -ENAMETOOLONG, -ENOMEM (the home's pool is full), -ENOSPC (too many segments at the
 * home), -EDQUOT (this rank holds its quota of segments, bytes or names at the home or
 * the name's directory: DDSS_QUOTA_*), -EOPNOTSUPP (write, version or delta model on a
 * transport without NIC atomics),
 * -EHOSTDOWN / -ETIMEDOUT (the home or the name's directory rank is unreachable).
 */
DDSS_API int ddss_allocate_ss(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
			      ddss_key_t *key_p);

/**
 * ddss_lookup_ss() - the key of the segment named @name, without creating it.
 * Returns 0, -ENOENT (no such segment), -EINVAL, -ENAMETOOLONG, -EHOSTDOWN, -ETIMEDOUT.
 */
DDSS_API int ddss_lookup_ss(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p);

/**
 * ddss_release_ss() - free a segment. An unnamed segment may be released only by the rank
 * that allocated it and by its home; a named one by any rank (the name shares it with the
 * group). Afterwards every use of @key anywhere in the group fails with -ESTALE
 * (operations already in flight finish first).
 * Returns 0, -EPERM (unnamed, and neither this rank's nor homed here: nothing changed),
 * -ESTALE (already released), -EINVAL (not a key), -EHOSTDOWN, -ETIMEDOUT.
 */
DDSS_API int ddss_release_ss(ddss_ctx_t *ctx, ddss_key_t key);

/** struct ddss_seg_info - what ddss_stat_ss() reports. */
struct ddss_seg_info {
	uint32_t home; /* the rank whose pool holds the segment */
	size_t size;   /* bytes, as allocated */
	enum ddss_coherence coherence;
	uint32_t param; /* delta: x; temporal: t in ms; otherwise 0 */
};

/** ddss_stat_ss() - home and size of a segment. -EINVAL, -ESTALE, -EHOSTDOWN. */
DDSS_API int ddss_stat_ss(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p);

/* ---- data ---- */

/**
 * ddss_get() - read @len bytes at @offset of the segment into @buf.
 * ddss_put() - write them.
 *
 * Under the null model each is one RDMA read or write; the other models add what
 * enum ddss_coherence says (implicit locks, version words, the cache).
 *
 * Returns 0, -EINVAL (bad key, NULL buffer, @len 0), -ESTALE (released key), -ERANGE
 * (@offset + @len past the segment's end), -EHOSTDOWN / -ECONNRESET / -ETIMEDOUT (the home
 * is unreachable), -EDEADLK (a put that needs the exclusive lock while this context holds
 * the segment's lock shared), -ENOLCK (no waiter slot for an implicit lock), -EIO (a write
 * or delta segment was left mid-put by a writer that failed; if that writer could still
 * reach the home, the next put repairs it, of a write segment only a put of the whole
 * segment). On an error found before the transfer nothing was written.
 */
DDSS_API int ddss_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len);
DDSS_API int ddss_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf,
		      size_t len);

/**
 * ddss_get_versioned() - ddss_get() that also says which version it returned.
 * @back: 0 for the newest; on a delta segment, k (<= x) asks for the version k before the
 *   newest complete one. Other models accept only 0.
 * @version_p: the version of the data returned (the number of puts completed on the
 *   segment, for write, version and delta segments; 0 for the other models). May be NULL.
 *
 * Returns what ddss_get() returns, and -EINVAL for a @back the model does not keep,
 * -ENOENT if fewer than @back puts were ever made.
 */
DDSS_API int ddss_get_versioned(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf,
				size_t len, unsigned back, uint64_t *version_p);

/** An operation in flight; finish it with ddss_wait_ss() or ddss_test_ss(). */
typedef struct ddss_req ddss_req_t;

/**
 * ddss_async_get() / ddss_async_put() - start a get or put; @buf must stay valid (and, for
 * a get, untouched) until the request is finished. Any number may be in flight, to any
 * ranks. Errors found before anything was started are returned here (and no request is
 * made); errors of the transfer itself come from ddss_wait_ss() / ddss_test_ss().
 * Only null-model transfers overlap: under the other models the call carries out the whole
 * get or put (its lock and version steps must run in order) and the request is already
 * finished when it returns. Transfers in flight are not ordered with each other, nor with
 * a lock release that follows (a NIC may sample a get's bytes after later operations ran):
 * wait for a get before putting to its range, or before releasing a lock that guards it.
 */
DDSS_API int ddss_async_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf,
			    size_t len, ddss_req_t **req_p);
DDSS_API int ddss_async_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf,
			    size_t len, ddss_req_t **req_p);

/**
 * ddss_wait_ss() - wait for @req to finish and free it. Returns its result (0 or -errno);
 * a home that does not answer within the operation timeout gives -ETIMEDOUT.
 */
DDSS_API int ddss_wait_ss(ddss_ctx_t *ctx, ddss_req_t *req);

/**
 * ddss_test_ss() - never blocks: -EAGAIN while @req is in flight (it stays valid);
 * otherwise frees it and returns its result.
 */
DDSS_API int ddss_test_ss(ddss_ctx_t *ctx, ddss_req_t *req);

/* ---- locks ---- */

/*
 * Every segment has one lock, at its home rank. Shared holders may overlap each other,
 * never an exclusive holder; exclusive requests are granted in the order they reached the
 * lock (FIFO), and shared requests queued behind an exclusive one are all granted together
 * when it releases. A lock belongs to the context that took it: any thread of that context
 * may release it. Locks are advisory for null, version and temporal segments; strict, read,
 * write and delta segments take them inside get/put (enum ddss_coherence).
 */
/* Locks one context may hold or wait for at once (each takes a waiter slot). */
#define DDSS_LOCK_SLOTS 256

enum ddss_lock_mode {
	DDSS_LOCK_SHARED = 1,
	DDSS_LOCK_EXCLUSIVE = 2,
};

/**
 * ddss_acquire_lock_ss() - wait until @key's lock is held in @mode.
 *
 * A request that finds a dead or cut-off rank ahead of it (holding the lock or queued)
 * asks the home to take the lock back and queues again (docs/failure.md): it gets the
 * lock once the home has seen that rank down and no live request is ahead of it. It waits
 * without limit only while everything ahead of it is alive.
 *
 * Returns 0 or, with what the caller should do:
 *  - -EINVAL: bad key or mode (a bug in the caller);
 *  - -ESTALE: the segment was released; the key will never work again;
 *  - -EHOSTDOWN: the lock's home is down (crashed, cut off from this rank, or declared
 *    dead by it): the segment is gone with it and every later call on @key fails the same
 *    way, at once. Give up the key (allocate anew on a live rank). A rank cut off from the
 *    group gets this for every home but its own within the peer timeout plus a quarter.
 *    A home that reads down only because our connection to it failed (an operation to
 *    it timed out), while its own connection to this rank is still open and it was heard
 *    from within the peer timeout, is connected to again first (at most 5 s connect and
 *    5 s handshake on tcp): -EHOSTDOWN only if that fails;
 *  - -EAGAIN: a dead or cut-off rank was ahead, and the lock could not be taken back in a
 *    few rounds (recovery is still under way): call again;
 *  - -ENOLCK: this context already holds or waits for DDSS_LOCK_SLOTS locks, or failures
 *    have used up its waiter slots (each request that failed mid-queue retires one);
 *    release locks, or if none are held, create a new context;
 *  - -ESHUTDOWN: the context is being finalized.
 * Never -EPROTO unless a peer or the memory is corrupt: that is a bug to report.
 */
DDSS_API int ddss_acquire_lock_ss(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode);

/**
 * ddss_acquire_lock_timed_ss() - ddss_acquire_lock_ss() waiting at most @timeout_ms
 * (>= 0). -ETIMEDOUT if the lock was not granted by then: the request is withdrawn (if it
 * is granted later, the library releases it at once, in the background); call again when
 * it suits you. -EINVAL for a negative @timeout_ms. Otherwise the errors of
 * ddss_acquire_lock_ss().
 */
DDSS_API int ddss_acquire_lock_timed_ss(ddss_ctx_t *ctx, ddss_key_t key,
					enum ddss_lock_mode mode, int timeout_ms);

/**
 * ddss_try_lock_ss() - take @key's lock in @mode only if that needs no waiting.
 * -EBUSY if it is held in a conflicting mode or has waiters (nothing is queued; if the
 * tail of the queue is a rank this one sees down, the home is asked to take the lock back,
 * so a later try can succeed); otherwise as ddss_acquire_lock_ss().
 */
DDSS_API int ddss_try_lock_ss(ddss_ctx_t *ctx, ddss_key_t key, enum ddss_lock_mode mode);

/**
 * ddss_release_lock_ss() - release @key's lock held by this context (the exclusive hold if
 * there is one, else one shared hold). -EPERM if this context does not hold it (nothing
 * changes), -EINVAL for a bad key; -ESTALE if the segment was released meanwhile (the hold
 * is dropped and waiters already queued are still handed the lock).
 *
 * An exclusive release with nobody queued behind it (N-CoSED, DQNL) returns as soon as its
 * atomic is posted, without waiting for the round trip: the lock is free for others once
 * that atomic lands at the home, this context's own later operations on the lock come
 * after it, and if a request queued meanwhile the library hands the lock over in the
 * background. Another rank told of the release by other means may still find the lock
 * held for that moment (its try says -EBUSY); after a ddss_barrier() it finds it free.
 * Under SRSL the same holds for the release message.
 *
 * After a failure: the hold is given up whatever happens, and a lock left behind by the
 * dead is taken back (docs/failure.md). A peer dying under the hand-over (the successor)
 * is logged, not returned (0). -EHOSTDOWN: the home is down, so the lock and the segment
 * are gone; writes made under the hold may not have landed. -EINVAL, -EPERM and -ESTALE as
 * above. An error of a posted atomic (the home died after the call returned) is logged.
 */
DDSS_API int ddss_release_lock_ss(ddss_ctx_t *ctx, ddss_key_t key);

/**
 * ddss_lock_fence_ss() - a fencing number for this context's hold of @key's lock
 * (docs/locks.md "Fencing").
 *
 * Exclusive hold: one remote fetch&add on the lock's generation word at its home; *@fence
 * is the new value, larger than any number returned to any earlier holder of this lock.
 * Asking again during the same hold costs nothing and returns the same number. Shared
 * hold: the generation word as it is now (>= the last exclusive holder's number).
 * Nothing is spent unless this is called. A resource that remembers the largest number
 * it has seen and refuses writes carrying a smaller one refuses a holder whose hold was
 * taken back (a rank declared dead can no longer reach the home to get a new number).
 *
 * Returns 0, -EINVAL (NULL @ctx or @fence, bad key), -ESTALE (released segment), -ENOLCK
 * (this context does not hold the lock; a get/put's own hold does not count),
 * -EHOSTDOWN / -ECONNRESET (the home is gone). *@fence is written only on success.
 */
DDSS_API int ddss_lock_fence_ss(ddss_ctx_t *ctx, ddss_key_t key, uint64_t *fence);

/* ---- statistics ---- */

/** The kinds of call ddss_stats_get() counts (index of ddss_stats.ops and .bytes). */
enum ddss_stat_op {
	DDSS_STAT_GET = 0,   /* ddss_get, ddss_get_versioned */
	DDSS_STAT_PUT,       /* ddss_put */
	DDSS_STAT_ASYNC_GET, /* ddss_async_get (counted when posted) */
	DDSS_STAT_ASYNC_PUT, /* ddss_async_put (counted when posted) */
	DDSS_STAT_ALLOCATE,  /* ddss_allocate_ss */
	DDSS_STAT_LOOKUP,    /* ddss_lookup_ss */
	DDSS_STAT_RELEASE,   /* ddss_release_ss */
	DDSS_STAT_LOCK,      /* ddss_acquire_lock_ss, ddss_acquire_lock_timed_ss */
	DDSS_STAT_TRY_LOCK,  /* ddss_try_lock_ss */
	DDSS_STAT_UNLOCK,    /* ddss_release_lock_ss */
	DDSS_STAT_FENCE,     /* ddss_lock_fence_ss */
	DDSS_STAT_BARRIER,   /* ddss_barrier */
	DDSS_STAT_NOPS
};

/** Errors are counted by errno value below this bound; larger ones in errors[0]. */
#define DDSS_STAT_NERRNO 134

/**
 * struct ddss_stats - what a context has done since ddss_init (ddss_stats_get(3)).
 *
 * Every counter only grows. A call is counted once: in ops[] and bytes[] when it returns
 * 0, in errors[] by its errno when it fails (so a try-lock that finds the lock taken counts
 * one errors[EBUSY]).
 */
struct ddss_stats {
	uint64_t ops[DDSS_STAT_NOPS];   /* calls that succeeded, by kind */
	uint64_t bytes[DDSS_STAT_NOPS]; /* payload bytes they moved (gets and puts) */
	uint64_t lock_contended;  /* the caller's acquisitions that queued behind a holder
				   * (N-CoSED, DQNL; SRSL's waits are its home's) */
	uint64_t lock_recovered;  /* requests that failed behind a dead rank and queued
				   * again once the home recovered the lock */
	uint64_t retries;         /* lock-free reads retried because a writer overlapped */
	uint64_t timeouts;        /* requests a peer did not answer within the op timeout */
	uint64_t cache_hits;      /* gets served from the coherence cache */
	uint64_t cache_misses;    /* caching gets that had to fetch from the home */
	uint64_t errors[DDSS_STAT_NERRNO]; /* failed calls by errno; [0]: errno >= bound */
	uint64_t home_polled;     /* tcp: rounds of requests this rank's home found while it
				   * polled after serving (each saved it a wake-up) */
	uint64_t home_poll_yields; /* tcp: polls it gave up because another thread wanted
				    * its CPU (it then sleeps between requests for a while) */
	uint64_t sends_combined;  /* tcp: requests that went out in the same system call as an
				   * earlier one (threads sharing a peer's connection) */
	uint64_t replies_batched; /* tcp: replies this rank's home sent in the same system call
				   * as an earlier one */
	uint64_t lane_calls;      /* daemon mode: gets and puts the daemon served in its fast
				   * lane, posted together with other clients' (0 in direct mode) */
	uint64_t reserved[3];     /* zero; room for counters added later */
};

/**
 * ddss_stats_get() - copy @ctx's counters into *@stats_p.
 *
 * Cheap (relaxed loads) and safe to call from any thread while others run operations; the
 * copy is not a snapshot of one instant. In daemon mode, ops, bytes and errors are this
 * process's own calls; the lock, retry, timeout, cache, home poll and send counters are the
 * daemon's, summed over all its clients (ddss-info --daemon shows them too).
 *
 * Returns 0, -EINVAL (NULL argument).
 */
DDSS_API int ddss_stats_get(ddss_ctx_t *ctx, struct ddss_stats *stats_p);

/** ddss_stat_op_name() - "get", "put", ... for an enum ddss_stat_op; "?" if out of range. */
DDSS_API const char *ddss_stat_op_name(int op);

/* ---- errors and version ---- */

/**
 * ddss_strerror() - describe a DDSS return value.
 * @err: a value returned by a DDSS call (0 or -errno; a positive errno is accepted too).
 *
 * Returns a static, thread-safe string; never NULL.
 */
DDSS_API const char *ddss_strerror(int err);

/** ddss_version_string() - the library's version as "major.minor.patch". */
DDSS_API const char *ddss_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* DDSS_DDSS_H */
