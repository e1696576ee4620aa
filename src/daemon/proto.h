/*
 * Daemon mode (docs/daemon.md): what a client and its node's ddssd say to each other.
 *
 * Attaching goes over a unix socket (SOCK_SEQPACKET: one message per send, and the fds of
 * the channels travel with SCM_RIGHTS). The socket stays open while the client is
 * attached: its hang-up is how each side learns that the other is gone.
 *
 * Calls go over channels (daemon/chan.h): one request message, one response message, the
 * payload in the channel's data area. Both ends come from the same build (the hello
 * checks DPROTO_VERSION), so messages are plain structs; the daemon copies each request
 * out of shared memory before checking it, as a client may scribble on it.
 */
#ifndef DDSS_DAEMON_PROTO_H
#define DDSS_DAEMON_PROTO_H

#include "ddss/ddss.h"

#include <stdint.h>

#define DPROTO_MAGIC 0x64647373u /* "ddss" */
#define DPROTO_VERSION 2u /* 2: the channel heartbeat (chan.h) */

/* ---- over the socket ---- */

enum dproto_sock_op {
	DSOCK_HELLO = 1, /* client -> daemon: struct dsock_hello */
	DSOCK_WELCOME,   /* daemon -> client: struct dsock_welcome, the pool's memfd attached
			  * when it is shared (local reads, daemon/local.h) */
	DSOCK_CHAN,      /* client -> daemon: struct dsock_chan, the channel's fd attached */
	DSOCK_CHAN_OK,   /* daemon -> client: struct dsock_chan (rc set) */
};

struct dsock_hello {
	uint32_t op, magic, version;
	int32_t pid;
};

struct dsock_welcome {
	uint32_t op;
	int32_t rc;         /* 0, or -errno: the daemon refuses (then closes) */
	uint32_t rank, size;
	uint32_t client;    /* this client's id at the daemon (never 0) */
	int32_t daemon_pid;
	uint64_t pool_len;  /* the attached pool memfd's length (0: none attached) */
	uint64_t epoch_off; /* where in it the release epoch word is */
};

struct dsock_chan {
	uint32_t op;
	int32_t rc;
	uint32_t index; /* the client's number for the channel */
};

/* ---- over a channel ---- */

enum dproto_op {
	DOP_ALLOC = 1,
	DOP_LOOKUP,
	DOP_RELEASE,
	DOP_STAT,
	DOP_GET,       /* payload: daemon -> client */
	DOP_PUT,       /* payload: client -> daemon */
	DOP_LOCK,
	DOP_LOCK_TIMED, /* timeout_ms */
	DOP_TRY_LOCK,
	DOP_UNLOCK,
	DOP_BARRIER,
	DOP_BENCH,     /* the daemon times @iters calls of @mode itself (ddss-daemon-bench) */
	DOP_COH_STATS, /* the daemon's coherence counters (struct ddss_coh_stats order) */
	DOP_LOCK_FENCE, /* ddss_lock_fence_ss: the number in @fence */
	DOP_STATS,     /* the daemon's struct ddss_stats (its clients' totals) as the payload */
	DOP_MAX
};

struct dmsg_req {
	uint32_t op;
	uint32_t mode;       /* lock mode; ALLOC: placement; BENCH: which call */
	uint64_t key;
	uint64_t offset;     /* in the segment */
	uint64_t len;        /* payload bytes; ALLOC: segment size */
	uint64_t data_off;   /* where the payload is in the channel's data area */
	int32_t timeout_ms;
	uint32_t back;       /* GET: versions back (ddss_get_versioned) */
	uint32_t versioned;  /* GET: report the version */
	uint32_t rank;       /* ALLOC: home rank (DDSS_PLACE_RANK) */
	uint32_t coherence, delta, temporal_ms;
	uint32_t iters;      /* BENCH */
	uint32_t named;      /* ALLOC: @name is given (it may be "", which is refused) */
	uint32_t want_desc;  /* GET: say where a null segment homed here lies (local reads) */
	char name[DDSS_NAME_MAX]; /* ALLOC, LOOKUP */
};

struct dmsg_resp {
	int32_t rc;
	uint32_t home;       /* STAT */
	uint64_t key;        /* ALLOC, LOOKUP */
	uint64_t version;    /* GET (versioned) */
	uint64_t size;       /* STAT */
	uint32_t coherence, param; /* STAT */
	uint64_t ns_median, ns_p99; /* BENCH */
	uint64_t stats[5];   /* COH_STATS: fetches, hits, retries, locked, cached */
	uint64_t data_off;   /* GET with want_desc, has_desc: the segment's pool offset ... */
	uint32_t has_desc;   /* ... and size (in @size): a null segment homed at this daemon */
	uint64_t fence;      /* LOCK_FENCE (appended: an older client never reads it) */
};

#endif /* DDSS_DAEMON_PROTO_H */
