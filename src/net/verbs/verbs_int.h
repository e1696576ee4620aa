/*
 * The verbs provider: one-sided operations on RC queue pairs (rdma-core).
 *
 * Connections. Each rank has, per peer, one *outgoing* RC QP that carries all of its
 * operations to that peer, in order (reads, writes, atomics, notifications, messages), set
 * up with rdma_cm the first time the rank talks to the peer. The peer's end of that QP is a
 * *served* QP: it never posts sends, it only takes the SENDs (messages, notifications) on a
 * shared receive queue (SRQ). So a pair of ranks that talk both ways has two QPs, one per
 * direction; this keeps "operations from one rank to one peer run in the order posted"
 * trivially true and needs no tie-break when two ranks connect to each other at once.
 * A rank reaches its own pool through a loopback QP to itself, like any other peer, because
 * the NIC's atomics are not atomic with respect to CPU atomics (rxe: ATOMIC_HCA).
 *
 * Handshake (rdma_cm private data, verbs_wire.c): the connect request carries the
 * initiator's group, size, rank and pool (address, length, rkey); the accept carries the
 * acceptor's. Anything that does not match is rejected with a reason. With a group secret
 * the request carries a proof instead of the pool, bound to the target's epoch (random
 * per start; the first request learns it from a -ESTALE reject) and to the initiator's GID
 * and QP number, so a recorded request is good neither after a restart nor from another
 * QP (see struct verbs_auth_req).
 *
 * Served QPs and fencing. A rank has one served QP here that counts; a new one from it
 * retires the older ones at once (error state: our rkey is useless through them), and
 * verbs_serve_cut (a rank declared dead) cuts every QP the rank has here. Retired QPs are
 * destroyed when their initiator closes them, at the latest VERBS_RETIRE_MS later; at
 * most VERBS_SERVED_PER_RANK per rank (-EBUSY beyond).
 *
 * Completions. Every send work request is signaled, so send-queue accounting is exact and a
 * QP can be drained (every posted WR yields exactly one completion, flushed ones included).
 * One send CQ for all QPs, polled by the application threads that wait (one *owner* at a
 * time; the others sleep or spin), so a completion costs no thread hop. One receive CQ,
 * polled by the receive thread, which runs the handlers; rdma_cm events have a thread of
 * their own, so a handler may connect to a peer. Both block on their file descriptors (a
 * spinning helper thread per rank would eat a core).
 *
 * Local buffers need no registration by the caller: buffers inside a registered region are
 * used in place, small ones go through registered staging slots (or inline), large ones are
 * registered for the duration of the operation (verbs_mem.c).
 *
 * Files: verbs_provider.c (ops table, open/start/close, argument checks, posting),
 * verbs_conn.c (rdma_cm: listener, connect, accept, disconnect; the two threads),
 * verbs_cq.c (send completions, waits), verbs_recv.c (received messages and
 * notifications), verbs_grave.c (QPs out of service, freed once their receives are
 * handled), verbs_async.c (fabric events: port, device, last WQE), verbs_mem.c (staging
 * slots, registrations), verbs_wire.c (handshake and message header encoding), verbs_fast.h (the
 * per-operation fast path, inline).
 */
#ifndef DDSS_NET_VERBS_VERBS_INT_H
#define DDSS_NET_VERBS_VERBS_INT_H

#include "net/verbs/verbs.h"
#include "net/auth_replay.h"
#include "net/resolve.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Send work requests outstanding per QP (the send CQ is sized for all of them). */
#define VERBS_SQ_DEPTH 256u
/* Receive buffers in the shared receive queue, each a message header + payload. */
#define VERBS_RECV_COUNT 512u
#define VERBS_RECV_LEN 4096u
/* Staging slots for small unregistered local buffers. */
#define VERBS_STAGE_COUNT 512u
#define VERBS_STAGE_LEN 8192u
/* Inline data requested for small writes and messages (the device may grant less). */
#define VERBS_INLINE_WANT 256u
/* A waiter that sleeps re-checks its deadline this often. */
#define VERBS_WAIT_SLICE_MS 100
/* How long rdma_cm address and route resolution may take per attempt. */
#define VERBS_RESOLVE_MS 2000
/* Back-off between connect attempts to a peer that is not listening yet. */
#define VERBS_RETRY_MS 20
/* Without an SRQ: receive buffers posted to each served QP's own receive queue. */
#define VERBS_RQ_DEPTH 128u
/*
 * Retries (docs/transport.md, "Fabric errors"): the served QP's min RNR NAK timer (IB code
 * 28 = 163.84 ms) and the sender's RNR retry count (6; 7 would mean for ever) survive an
 * underrun of ~1 s; the local ACK timeout (IB code 16 = 4.096 us << 16 = 268 ms) and 7
 * transport retries bound an unanswered request to ~2.1 s before a retry-exceeded error.
 */
#define VERBS_MIN_RNR_TIMER 28
#define VERBS_RNR_RETRY 6
#define VERBS_ACK_TIMEOUT 16
/*
 * rxe's ACK timeout: IB code 14 = 67 ms. On rxe a read or atomic overlaps nothing
 * (verbs_guard.c), so every lost packet costs its operation a whole timeout, and 268 ms
 * per loss made the 2% loss runs several times slower. rxe's transport retry count of 7
 * never runs out (rxe_comp.c), so a shorter timer makes no error out of a flap.
 */
#define VERBS_ACK_TIMEOUT_RXE 14
#define VERBS_TRANSPORT_RETRY 7
/* Teardown of a served QP: how long to wait for its last WQE / its receives to flush. */
#define VERBS_TEARDOWN_MS 1000
/*
 * Served QPs of one rank (verbs_conn.c). A new one from a rank *retires* every older one at
 * once: to the error state (no access to our memory from then on), destroyed when its
 * initiator disconnects it or at the latest VERBS_RETIRE_MS later. At most
 * VERBS_SERVED_PER_RANK are kept per rank, retired ones included, and a request beyond
 * that is rejected with -EBUSY: a reconnect after a fabric error needs two (the old one
 * retired, the new one), a rank that opens connections and never closes them gets no
 * more QPs than that.
 */
#define VERBS_SERVED_PER_RANK 3u
#define VERBS_RETIRE_MS 5000

/* What an rdma_cm id's context points at (first member of each). */
enum verbs_ctx_kind { VERBS_CTX_LISTEN = 1, VERBS_CTX_OUT, VERBS_CTX_SERVED };

enum verbs_phase {
	VERBS_IDLE = 0,   /* no outgoing connection */
	VERBS_CONNECTING, /* rdma_cm steps under way (progress thread drives them) */
	VERBS_UP,         /* established: operations may be posted */
	VERBS_FAILED,     /* attempt failed or connection lost; conn_err says why */
};

struct verbs_tp;
struct verbs_grave;

/* This rank's outgoing connection to one peer. */
struct verbs_out {
	enum verbs_ctx_kind kind; /* VERBS_CTX_OUT; first: rdma_cm context */
	struct verbs_tp *tp;
	uint32_t peer;

	pthread_mutex_t mu; /* phase, id, qp, remote pool; conn_cv waits for phase changes */
	pthread_cond_t cv;
	enum verbs_phase phase;
	int conn_err;       /* why the last attempt failed (-errno) */
	bool retriable;     /* the peer was simply not there (yet) */
	bool ever_up;       /* atomic reads outside mu (verbs_out_connect's bound) */
	int64_t attempt_deadline; /* CONNECTING: when this attempt has had its whole budget */
	unsigned attempts;  /* attempts begun (verbs_out_connect) */
	struct ddss_lookup *lookup; /* under mu: a name lookup given up on (resolve.h) */
	bool readmitted;    /* a new incarnation of the peer, not up yet (tp_incarnation.c) */
	bool took_msgs;     /* this attempt was up, telling the peer it takes liveness messages */
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint64_t raddr;     /* peer's pool */
	uint32_t rkey;
	unsigned char auth_nonce[DDSS_AUTH_NONCE_LEN]; /* this attempt's authenticator */
	unsigned char auth_bind[DDSS_AUTH_NONCE_LEN];  /* and its binding (ddss_auth_bind) */
	uint64_t peer_epoch; /* the peer's epoch, as last heard of (0: not yet) */
	int stale;          /* reject -ESTALE answers to follow in this verbs_out_connect call */
	unsigned inline_max; /* inline bytes the QP accepts per send */

	/*
	 * WRs in the send queue = sq_posted - sq_done (every WR is signaled, so it is exact).
	 * Posters reserve in sq_posted (atomic) and take no lock (see verbs_post); sq_done is
	 * written only by the thread that owns the send CQ, so completing costs no atomic
	 * read-modify-write. sq_mu only keeps the control paths (fail -> QP to error state,
	 * teardown, creation) apart.
	 */
	pthread_mutex_t sq_mu;
	unsigned sq_posted;
	unsigned sq_done;
	/* The read/atomic guard (verbs_guard.c, rxe only): posts take turns (guard_next is
	 * the next ticket, guard_turn the one whose turn it is; guard_mu/guard_cv); guard_tail
	 * is sq_posted after the last READ/atomic, which later posts wait to complete. */
	pthread_mutex_t guard_mu;
	pthread_cond_t guard_cv;
	unsigned guard_next;
	unsigned guard_turn;
	unsigned guard_tail;
	unsigned guard_left[16];    /* tickets whose bounded waiters gave up (guard_mu) */
	unsigned guard_nleft;
	int fail;           /* atomic: sticky error of the current connection (0 = healthy) */
	int up;             /* atomic: established and not failed since (reports DOWN once) */
	uint32_t qp_num;    /* atomic: the QP's number while it exists, else 0 (verbs_out_rank) */
};

/*
 * A connection a peer opened to this rank. Made and freed by the cm thread; the list (next)
 * and qp are read under served_mu by any thread (verbs_serve_cut).
 */
struct verbs_served {
	enum verbs_ctx_kind kind; /* VERBS_CTX_SERVED; first */
	struct verbs_served *next;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint32_t peer;
	uint32_t qp_num;
	bool established;
	bool liveness;            /* sends liveness messages to its initiator (verbs_liveness.c) */
	bool retired;             /* in the error state, replaced by a newer one (cm thread) */
	int64_t retire_ns;        /* destroyed at the latest then (ddss_now_ns) */
};

struct verbs_peer {
	int state;         /* atomic enum ddss_tp_peer_state */
	uint64_t pool_len; /* atomic; learned in either direction's handshake */
	struct verbs_out out;
};

/* A registered local region (the pool or mem_register(expose = false)). */
struct ddss_tp_mr {
	struct ddss_tp_mr *next;
	struct ibv_mr *mr;
	bool exposed;
};

struct verbs_tp {
	struct ddss_tp base; /* first: container_of */
	enum verbs_ctx_kind listen_kind;
	struct sockaddr_storage self_addr; /* our node's address, port 0: connects bind to it */

	/* Device, found by binding the listener to this rank's address. */
	struct ibv_context **devices; /* rdma_get_devices: all of them opened before helpers start */
	int ndevices;
	struct rdma_event_channel *cm_ch;
	struct rdma_cm_id *listen_id;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t rd_atom;         /* outstanding reads/atomics per QP */
	uint32_t max_msg;        /* largest single transfer */

	/* Send side: one CQ, polled by waiting application threads. */
	struct ibv_comp_channel *scq_ch; /* event mode only */
	struct ibv_cq *scq;
	unsigned sq_depth;
	int owner;                 /* atomic: a thread is polling scq */
	int sleepers;              /* atomic: threads sleeping on own_cv */
	pthread_mutex_t own_mu;
	pthread_cond_t own_cv;

	/* Receive side: SRQ (or, without one, each served QP's RQ) + CQ, polled by the
	 * receive thread (verbs_recv.c). */
	struct ibv_comp_channel *rcq_ch;
	struct ibv_cq *rcq;
	struct ibv_srq *srq;         /* NULL: a receive queue per served QP */
	unsigned char *recv_buf;
	struct ibv_mr *recv_mr;
	unsigned recv_count;         /* buffers in all */
	unsigned rq_depth;           /* without an SRQ: buffers posted to each served QP */
	uint32_t *recv_owner;        /* [buffer] (atomic): where it is posted, 0 = free */
	unsigned recv_posted;        /* atomic: buffers posted and not yet completed */
	pthread_mutex_t recv_mu;     /* recv_free; the drain epoch below */
	uint32_t *recv_free;         /* without an SRQ: buffers posted nowhere (a stack) */
	unsigned recv_nfree;
	uint64_t recv_epoch;         /* receive CQ polled empty this many times on request */
	int recv_kick_fd;            /* eventfd: asks the receive thread to poll (teardown) */

	/* Fabric events (verbs_async.c; read by the cm thread). */
	uint8_t port;                /* ours */
	int port_err;                /* atomic: 0, -ENETDOWN (port down), -ENODEV (device fatal) */
	pthread_mutex_t ev_mu;       /* last_wqe */
	uint32_t last_wqe[16];       /* qp_num of recent QP_LAST_WQE_REACHED events (a ring) */
	unsigned last_wqe_n;
	bool no_last_wqe;            /* the device did not report one in time: do not wait again */
	bool no_rq_flush;            /* the device did not flush an RQ in time: do not wait again */
	unsigned long teardown_stalls; /* atomic: teardowns that gave up waiting for the receive
	                                  thread's pass or an RQ's flush (tests) */
	int tos;                     /* DDSS_TRAFFIC_CLASS, or -1 */

	/* Registered regions; the list only grows before start and shrinks at close. */
	pthread_mutex_t mr_mu;
	struct ddss_tp_mr *mrs;
	struct ddss_tp_mr *pool;   /* the exposed one */

	/* Staging slots (verbs_mem.c). */
	unsigned char *stage_buf;
	struct ibv_mr *stage_mr;
	uint64_t stage_top;        /* atomic: free-slot stack head (verbs_mem.c) */
	uint32_t *stage_next;      /* [slot]: next free slot + 1 below it */

	/* Progress threads (rdma_cm events; receive CQ) and served connections. */
	bool started;
	bool cm_thread_running;
	pthread_t cm_thread, recv_thread;
	int stop_fd;                 /* eventfd: stops both threads */
	bool closing;                /* atomic: verbs_close began (teardowns wait for nothing) */
	pthread_mutex_t grave_mu;    /* graves */
	struct verbs_grave *graves;  /* QPs out of service, not yet freed (verbs_grave.c) */
	int grave_fd;                /* eventfd: a grave was added (wakes the cm thread) */
	int slow_teardown_ms;        /* test switch DDSS_VERBS_SLOW_TEARDOWN_MS (verbs_caps.c) */
	struct verbs_served *served; /* changed by the cm thread (and close) under served_mu */
	pthread_mutex_t served_mu;   /* the served list and the qp_num -> rank lookups below */
	uint32_t *served_qpn;        /* [rank]: qp_num of the served QP, 0 = none */
	struct ibv_qp **served_qp;   /* [rank]: that QP (to cut a refused peer off) */
	bool *served_liveness;       /* [rank]: served_qp[rank] sends liveness messages */
	int *liveness_inflight;      /* [rank] (atomic): its liveness sends not completed */
	unsigned long liveness_sent; /* atomic: liveness messages sent that way (tests) */
	/* With a group secret: authenticators accepted, one cache per initiator rank (made
	 * when its first proof holds; cm thread), and this rank's epoch (random, per start). */
	struct ddss_auth_replay **replay;  /* [rank] */
	uint64_t epoch;

	bool has_atomics;            /* the device does remote atomics at all */
	bool atomic_be;              /* the device returns atomic results big-endian */
	bool fence_by_wait;          /* DDSS_TP_FENCE waits in the poster, not IBV_SEND_FENCE */
	bool read_guard;             /* READs/atomics alone on their QP (verbs_guard.c) */
	uint8_t ack_timeout;         /* local ACK timeout, IB code (VERBS_ACK_TIMEOUT*) */
	struct verbs_peer *peers;    /* [1..size] */
};

static inline struct verbs_tp *verbs_tp_of(struct ddss_tp *tp)
{
	return (struct verbs_tp *)tp;
}

/*
 * What the provider keeps in a request's private area (struct ddss_tp_req.hdr):
 * how the local side of the transfer was provided, so completion can finish it.
 */
enum verbs_local { VL_NONE = 0, VL_DIRECT, VL_STAGE, VL_DYN_MR };
struct verbs_req_priv {
	uint8_t local_kind;  /* enum verbs_local */
	uint8_t internal;    /* provider-owned request (message): freed on completion */
	uint32_t stage;      /* slot index (VL_STAGE) */
	struct ibv_mr *dyn;  /* VL_DYN_MR */
};
_Static_assert(sizeof(struct verbs_req_priv) <= sizeof(((struct ddss_tp_req *)0)->hdr),
	       "verbs request state must fit the request's private area");

static inline struct verbs_req_priv *verbs_priv(struct ddss_tp_req *req)
{
	return (struct verbs_req_priv *)(void *)req->hdr;
}

/*
 * wr_id of a work request with no caller request behind it (notifications, extra chunks of
 * a large transfer): low bit set, peer above. Requests are pointers, so their low bit is 0.
 */
static inline uint64_t verbs_wrid_credit(uint32_t peer)
{
	return ((uint64_t)peer << 32) | 1u;
}

/* wr_id of a liveness SEND on a served QP (verbs_liveness.c): low two bits set. */
static inline uint64_t verbs_wrid_liveness(uint32_t peer)
{
	return ((uint64_t)peer << 32) | 3u;
}

static inline bool verbs_wrid_is_liveness(uint64_t wr_id)
{
	return (wr_id & 3u) == 3u;
}

/* ---- verbs_wire.c: handshake private data and message header ---- */
#define VERBS_HELLO_LEN 48u
#define VERBS_REJECT_LEN 16u
#define VERBS_MSG_HDR_LEN 8u
struct verbs_hello {
	uint64_t group;
	uint32_t rank, size;
	uint64_t pool_addr, pool_len;
	uint32_t rkey;
	uint32_t flags; /* VERBS_HELLO_*; unknown bits are refused */
};
/* The initiator takes SENDs on its outgoing QP (it has an SRQ): verbs_liveness.c. */
#define VERBS_HELLO_TAKES_MSGS 1u
void verbs_hello_encode(const struct verbs_hello *h, unsigned char out[VERBS_HELLO_LEN]);
/** 0, or -EPROTO if @buf is not a hello of this protocol version. */
int verbs_hello_decode(const void *buf, size_t len, struct verbs_hello *h);
/*
 * With a group secret (net/auth.h) the connect request carries no pool information but an
 * authenticator and a proof (truncated to fit the 56 bytes of IB CM private data), for
 * the target's epoch (random, new each time a rank starts; 0 when the initiator does not
 * know it yet). The proof's transcript has, as its target nonce, ddss_auth_bind(epoch,
 * the initiator's GID, its QP number): only the QP that asked can be served, and only
 * by the boot of the target it asked. A request for another epoch is rejected with
 * -ESTALE and the target's epoch (nothing else) in the reject; the initiator asks once
 * more with it. The group size is not sent: the proof covers the target's own. The
 * accept carries the usual hello followed by the target's full proof, over the same
 * transcript.
 */
#define VERBS_AUTH_REQ_LEN 56u
#define VERBS_AUTH_REQ_PROOF_LEN 16u
#define VERBS_AUTH_REP_LEN (VERBS_HELLO_LEN + DDSS_AUTH_PROOF_LEN)
struct verbs_auth_req {
	uint64_t group;
	uint32_t rank;
	uint64_t epoch;                           /* the target's, as the initiator knows it */
	unsigned char nonce[DDSS_AUTH_NONCE_LEN]; /* authenticator: time | random */
	unsigned char proof[VERBS_AUTH_REQ_PROOF_LEN];
	uint32_t flags; /* VERBS_HELLO_TAKES_MSGS or 0: which of the two magics */
};
void verbs_auth_req_encode(const struct verbs_auth_req *a, unsigned char out[VERBS_AUTH_REQ_LEN]);
/** 0, or -EPROTO if @buf is not an authenticated connect request of this version. */
int verbs_auth_req_decode(const void *buf, size_t len, struct verbs_auth_req *a);
/** A reject with reason @err and (for -ESTALE; else 0) the rejecting rank's @epoch. */
void verbs_reject_encode(int err, uint64_t epoch, unsigned char out[VERBS_REJECT_LEN]);
/**
 * The -errno a peer rejected us with, or 0 if @buf is not our reject (not listening);
 * *epoch_p (may be NULL) the epoch it carries, 0 if none.
 */
int verbs_reject_decode(const void *buf, size_t len, uint64_t *epoch_p);
void verbs_msg_hdr_encode(uint16_t tag, uint32_t len, unsigned char out[VERBS_MSG_HDR_LEN]);
/** 0, or -EPROTO if the header is invalid for a message of @total bytes. */
int verbs_msg_hdr_decode(const void *buf, size_t total, uint16_t *tag_p, uint32_t *len_p);

/* The vendor id the rxe driver reports (Linux drivers/infiniband/sw/rxe/rxe_param.h). */
#define RXE_VENDOR_ID 0xffffffu

/* ---- verbs_caps.c ---- */
/** Test switch: DDSS_VERBS_DISABLE lists @cap ("atomics", "srq"): act as if it were missing. */
bool verbs_simulate_lack(const char *cap);
/** Test switch DDSS_VERBS_SLOW_TEARDOWN_MS=N (0..60000, read at open into
 * vt->slow_teardown_ms): -EINVAL, said, for anything else. */
int verbs_slow_teardown_decide(struct verbs_tp *vt);
/** Pause a broken outgoing QP's teardown vt->slow_teardown_ms more, as a device that never
 * reports its last receive, and a held receive thread, can make it. */
void verbs_simulate_slow_teardown(const struct verbs_tp *vt);
/** NAME=auto|@a|@b: 1 for @a, 2 for @b, 0 for auto (anything else is warned about). */
int verbs_env_choice(const char *name, const char *a, const char *b);
/** How DDSS_TP_FENCE is kept on this device (sets vt->fence_by_wait); a log phrase. */
const char *verbs_fence_decide(struct verbs_tp *vt, uint32_t vendor_id);
/** The local ACK timeout (sets vt->ack_timeout); -EINVAL for a bad DDSS_VERBS_ACK_TIMEOUT. */
int verbs_ack_timeout_decide(struct verbs_tp *vt, uint32_t vendor_id);
/** DDSS_VERBS_MAX_MSG (tests): lower vt->max_msg, the largest single transfer; -EINVAL for
 * a value that is not 64 up to it. */
int verbs_max_msg_lower(struct verbs_tp *vt);

/* ---- verbs_guard.c ---- */
/** Whether posts wait behind outstanding READs/atomics (sets vt->read_guard); a log phrase. */
const char *verbs_guard_decide(struct verbs_tp *vt, uint32_t vendor_id);
/** verbs_post with the guard on: READs/atomics alone on the QP (waits, bounded). */
int verbs_post_guarded(struct verbs_out *o, struct ibv_send_wr *wr);

/* ---- verbs_conn.c ---- */
int verbs_conn_open(struct verbs_tp *vt);     /* event channel, bind, device */
int verbs_conn_start(struct verbs_tp *vt);    /* listen + progress thread */
void verbs_conn_stop(struct verbs_tp *vt);    /* stop the progress thread */
void verbs_conn_close(struct verbs_tp *vt);   /* disconnect and free every connection */
int verbs_thread_fds(struct ddss_tp *tp, int *fds, size_t max); /* ops->thread_fds */
/** verbs_out_ensure's slow path: connect, wait for a connect under way, or say why not. */
int verbs_out_connect(struct verbs_out *o);
/** Fail the outgoing connection with @err: its QP errors out, pending WRs flush. */
void verbs_out_fail(struct verbs_out *o, int err);
void verbs_peer_set_state(struct verbs_tp *vt, uint32_t rank, enum ddss_tp_peer_state s);
/** Put @rank's served QPs in the error state: its operations on our pool stop. 0, or -errno
 * if one could not be (it may still serve). Any thread. */
int verbs_serve_cut(struct verbs_tp *vt, uint32_t rank);
/** Rank of the peer whose served QP is @qp_num, or 0. */
uint32_t verbs_served_rank(struct verbs_tp *vt, uint32_t qp_num);

/* ---- verbs_liveness.c: messages that bulk data to a peer cannot hold up ---- */
/* Send WRs and inline bytes of a served QP that sends liveness messages. */
#define VERBS_LIVENESS_SEND_WR 4u
#define VERBS_LIVENESS_INLINE 32u
/** 0 if sent on the QP @peer connected to us; -EAGAIN if there is none now. */
int verbs_liveness_send(struct verbs_tp *vt, uint32_t peer, uint16_t tag, const void *buf,
			size_t len);
/** A completion of such a send (any status): its peer may have another in flight. */
void verbs_liveness_done(struct verbs_tp *vt, const struct ibv_wc *wc);
/** served_mu held: liveness messages to @rank go on served_qp[rank] (@on) or not. */
void verbs_liveness_set(struct verbs_tp *vt, uint32_t rank, bool on);
/** The rank whose outgoing QP (ours to it) has number @qp_num, or 0. */
uint32_t verbs_out_rank(struct verbs_tp *vt, uint32_t qp_num);

/* ---- verbs_cq.c ---- */
int verbs_cq_open(struct verbs_tp *vt);
void verbs_cq_close(struct verbs_tp *vt);
/** verbs_post's slow path: chains, a full send queue (waits, bounded), errors. */
int verbs_post_slow(struct verbs_out *o, struct ibv_send_wr *wr);
/** Poll the send CQ once if no other thread does; returns completions handled. */
int verbs_progress(struct verbs_tp *vt);
int verbs_test(struct verbs_tp *vt, struct ddss_tp_req *req);
/** verbs_wait's slow path: spin or sleep until done, the deadline, or the peer failed. */
int verbs_wait_slow(struct verbs_tp *vt, struct ddss_tp_req *req, int timeout_ms);
/** Owner, event mode: let go of the send CQ and wake the threads sleeping on it. */
void verbs_release_own_event(struct verbs_tp *vt);
/** Owner only: handle any send completion (errors, provider-owned WRs included). */
void verbs_send_wc_slow(struct verbs_tp *vt, const struct ibv_wc *wc);
/** Wait until @o has no WR outstanding (after its QP moved to error), bounded. */
void verbs_drain(struct verbs_out *o, int timeout_ms);
/** One bounded step of waiting for any send completion (up to a slice of @deadline). */
void verbs_progress_wait(struct verbs_tp *vt, int64_t deadline);
/** Wait until @o's WRs posted before now have completed (a fence kept by waiting). */
int verbs_wait_earlier(struct verbs_out *o);

/**
 * A completion error on @o: retry-exceeded and flushed QPs fail the connection without
 * reporting the peer down (the next operation reconnects; only the peer timeout declares
 * death); other errors are verbs_out_fail.
 */
void verbs_out_wc_fail(struct verbs_out *o, enum ibv_wc_status st, int err);
/** Fail every outgoing QP with @err, reporting no peer down (port or device error). */
void verbs_out_fail_all(struct verbs_tp *vt, int err);

/* ---- verbs_async.c ---- */
int verbs_async_open(struct verbs_tp *vt);    /* before the cm thread starts */
/** cm thread: handle every device event pending (port, device, QP, last WQE). */
void verbs_async_handle(struct verbs_tp *vt);
/** True (once) if QP_LAST_WQE_REACHED came for @qp_num; it is forgotten then. */
bool verbs_async_take_last_wqe(struct verbs_tp *vt, uint32_t qp_num);

/* ---- verbs_recv.c ---- */
int verbs_recv_open(struct verbs_tp *vt);   /* receive CQ, SRQ or buffer pool, buffers posted */
void verbs_recv_close(struct verbs_tp *vt);
/** Receive thread: handle the receive CQ (messages and notifications). */
void verbs_recv_poll(struct verbs_tp *vt);
/** Without an SRQ: post up to rq_depth free buffers to a new served QP's RQ. */
int verbs_recv_fill_qp(struct verbs_tp *vt, struct ibv_qp *qp);
/** Buffers still posted to @qp_num (without an SRQ; 0 with one). */
unsigned verbs_recv_held_by(struct verbs_tp *vt, uint32_t qp_num);
/** After @qp_num is destroyed: its buffers that never completed are free again. */
void verbs_recv_reclaim(struct verbs_tp *vt, uint32_t qp_num);
/**
 * Ask the receive thread for a pass over its CQ (it polls it empty); returns the count of
 * passes to give verbs_recv_passed, true once a pass asked for after this call is done.
 */
uint64_t verbs_recv_ask_pass(struct verbs_tp *vt);
bool verbs_recv_passed(struct verbs_tp *vt, uint64_t asked_at);

/* ---- verbs_grave.c: QPs out of service, freed by the cm thread once idle ---- */
int verbs_grave_open(struct verbs_tp *vt);
/**
 * Any thread: @id's QP (which takes receives) leaves service, in the error state; the cm
 * thread frees QP and id once its receives are all handled. Its messages meanwhile count
 * as @peer's. The caller drops every other reference to @id first.
 */
void verbs_grave_add(struct verbs_tp *vt, struct rdma_cm_id *id, uint32_t peer);
/** The rank of a QP waiting to be freed, by number; 0 if none. */
uint32_t verbs_grave_rank(struct verbs_tp *vt, uint32_t qp_num);
/** cm thread: free what is ready; ms until it should look again, or -1 (none left). */
int verbs_grave_reap(struct verbs_tp *vt);
/** After the helper threads stopped: free every one without waiting. */
void verbs_grave_close(struct verbs_tp *vt);

/* ---- verbs_mem.c ---- */
int verbs_mem_open(struct verbs_tp *vt);
void verbs_mem_close(struct verbs_tp *vt);
/** Mark the pages of a long-lived registration MADV_DONTFORK (warns if it cannot). */
int verbs_dontfork(void *addr, size_t len);
/**
 * verbs_mem_prepare's slow path: a buffer too large for a staging slot (used in place when
 * a registered region covers it) or no slot free; else registered for the operation.
 */
int verbs_mem_prepare_slow(struct verbs_tp *vt, struct ddss_tp_req *req, void *buf, size_t len,
			   bool to_local, struct ibv_sge *sge);
/** Drop the registration verbs_mem_prepare_slow made for @req. */
void verbs_mem_unregister(struct ddss_tp_req *req);

/* The fast paths: staging slots, verbs_mem_prepare/finish, verbs_out_ensure, verbs_post,
 * verbs_wait. */
#include "net/verbs/verbs_fast.h"

#endif /* DDSS_NET_VERBS_VERBS_INT_H */
