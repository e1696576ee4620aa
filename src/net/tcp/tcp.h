/*
 * The tcp provider: the software path for machines without RDMA.
 *
 * Each rank has, per peer, one ordered *channel* (an outgoing TCP connection) that carries
 * its requests to that peer and brings back the replies; the peer's *progress thread*
 * serves the requests on its pool (epoll over all incoming connections), so the initiator
 * sees verbs-like one-sided semantics. Replies are read by whichever application thread
 * is waiting (one at a time, the "rx owner"), which avoids a thread hop on the latency
 * path. An *acceptor thread* runs the handshake of incoming connections, so a handshake
 * never waits for the progress thread (two ranks may connect to each other from handlers).
 *
 * Files: tcp_provider.c (ops table, lifecycle, peers, local operations), tcp_chan.c
 * (initiator channels: connect, send, replies, waits), tcp_serve.c (acceptor and progress
 * threads: serving requests), tcp_handshake.c (opening a connection, both sides), tcp_wire.c
 * (frame encoding and validation), tcp_protect.c (sealing and opening frames when
 * DDSS_TCP_PROTECT is on).
 */
#ifndef DDSS_NET_TCP_TCP_H
#define DDSS_NET_TCP_TCP_H

#include "net/auth.h"
#include "net/resolve.h"
#include "net/transport.h"
#include "net/tcp/tcp_protect.h"
#include "net/tcp/tcp_wire.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/uio.h>

#define TCP_RXBUF_LEN 16384u
/* A home's replies to one read of requests go out together (tcp_serve.c, "Reply batches"):
 * at most this many bytes, with reply data up to TCP_BATCH_COPY_MAX copied in. */
#define TCP_BATCH_MAX 16384u
#define TCP_BATCH_COPY_MAX 1024u
/* A blocked reply reader wakes this often to check deadlines. */
#define TCP_RX_SLICE_MS 100
/* How long a connecting peer has, from accept, to finish its handshake. */
#define TCP_HANDSHAKE_TIMEOUT_MS 1000
/* Connections the acceptor keeps waiting for their hello at once, and from one address; past
 * either, the oldest such connection is dropped for the new one (tcp_serve.c). */
#define TCP_PENDING_MAX 256
#define TCP_PENDING_PER_SOURCE 32

enum tcp_ev_type { TCP_EV_STOP = 1, TCP_EV_CHAN, TCP_EV_SERVED, TCP_EV_LATER };

/*
 * The longest a frame posted DDSS_TP_LATER waits for its thread's next frame to the peer
 * before the progress thread sends it (tcp_later.c). A lock asked for again within it rides
 * with the release. A waiter that queues behind the lock meanwhile notifies the releaser,
 * whose finisher then sends the release at once; a try-lock may find the lock held this
 * much longer. Each bound costs a lock loop one wake-up of the progress thread: 20 us made
 * the daemon's lock + unlock 28.4 us on the 2-vCPU VM, 200 us 17.9 (2026-12-07).
 */
#define TCP_LATER_NS 200000L

/* How this rank serves its pool (DDSS_TCP_ORDER, read at open). */
enum tcp_order {
	TCP_ORDER_STRONG = 0, /* each connection in order, a READ sampled in its turn */
	TCP_ORDER_WEAK,       /* test mode: as late as InfiniBand RC allows (tcp_serve.c) */
};
/* Weak order: how long a READ that a later request overtook stays unsampled. */
#define TCP_WEAK_HOLD_NS 1000000LL
/* Weak order: how long an 8-byte write stays part landed, once (store_word). */
#define TCP_WEAK_TEAR_NS 100000L
/* How long a cut waits for the progress thread to end a write or atomic of the rank it
 * refused that had passed its check (tcp_serve_cut): a copy or an atomic takes
 * microseconds; longer means the thread was descheduled, and the cut is tried again. */
#define TCP_CUT_ACT_WAIT_NS 1000000000LL
/* Weak order: a served connection is not read while it holds this many replies. */
#define TCP_WEAK_MAX_HELD 256u

struct tcp_tp;

/* Bytes waiting to go out on a channel because the socket was full. */
/* A frame is at most two vectors (header, payload); a send may carry held ones before it. */
#define TCP_HELD_IOV 32 /* at least 16 frames held for one send (tcp_chan.c) */
#define TCP_OUT_IOV (TCP_HELD_IOV + 2)

struct tcp_out {
	struct tcp_out *next;
	struct iovec iov[TCP_OUT_IOV];
	int iovcnt;
	unsigned char *owned; /* private copy (messages), freed with the item */
};

/* This rank's ordered channel to one peer (initiator side). */
struct tcp_chan {
	enum tcp_ev_type ev_type; /* first: epoll data points here */
	struct tcp_tp *tp;
	uint32_t peer;
	bool ever_up;             /* written under connect_mu; read atomically without it */
	bool readmitted;          /* under connect_mu: a new incarnation, not up yet */
	uint64_t peer_pool_len;   /* learned in the handshake */
	/* The peer's generation (ddss_tp_peer_generation) the current connection was made
	 * with; it speaks for the peer's state only while that is still the rank's. Set with
	 * fd. */
	uint32_t gen;

	pthread_mutex_t connect_mu; /* serialises connect / teardown */
	unsigned connect_gen;       /* connect attempts made (atomic; written under connect_mu) */
	int connect_rc;             /* the last attempt's result (under connect_mu) */
	struct ddss_lookup *lookup; /* under connect_mu: a name lookup given up on (resolve.h) */
	/*
	 * fd may be used by a sender holding send_mu or by the rx owner; it is replaced only
	 * by a thread holding connect_mu, send_mu and rx ownership at once.
	 */
	int fd;
	int error; /* atomic; sticky failure of the current connection (0 = healthy) */
	uint64_t conn_id; /* under send_mu: connections installed; set with fd (tcp_chan.c, chain) */

	pthread_mutex_t send_mu; /* next_seq, the out queue, EPOLLOUT arming, prot.tx, ptx */
	uint64_t next_seq;
	/* Frame protection of the current connection (set with fd): prot.tx and ptx (where
	 * frames are sealed) under send_mu, prot.rx and prx by the rx owner. */
	bool protect;
	struct tcp_protect prot;
	unsigned char *ptx;
	size_t ptx_cap;
	struct tcp_pframe prx;
	struct tcp_out *out_head, *out_tail;
	bool out_armed;
	/* Under send_mu: the epoll events registered for fd (0: none). EPOLLRDHUP while
	 * watch_close and until the far end is seen closed (tcp_chan_event); EPOLLOUT while
	 * out_armed. */
	uint32_t ev_mask;
	/* Under send_mu; set under serve_state_mu too (tcp_chan_watch_close), cleared at
	 * teardown until the next connect decides. The peer has no connection to us, so
	 * this channel's close is the only news of its death. Only then is the socket
	 * watched: a watched socket costs every reply the epoll callback. */
	bool watch_close;
	/* Atomic, written under send_mu: the current connection's far end closed (seen by the
	 * progress thread). With its connection to us gone too, the peer is down. */
	bool far_closed;
	/* Request frames not sent yet, oldest first: one posted with "more" (ddss_tp_post_*_more)
	 * or several combined (tcp_chan.c, "Combined sends"). They go out with the channel's
	 * next send, whoever makes it, or when a poster waits. nheld and held_waiting are
	 * written under send_mu, atomically so that a waiter may peek at them without. */
	struct iovec held[TCP_HELD_IOV];
	int nheld;
	unsigned nheld_frames;    /* under send_mu: the frames those vectors make */
	bool held_waiting;        /* a frame of them is held for combining: its poster yields */

	pthread_mutex_t q_mu; /* FIFO of requests awaiting a reply, in seq order */
	struct ddss_tp_req *q_head, *q_tail;
	const void *last_poster;  /* under q_mu: the thread that posted last (tcp_chan_post) */

	pthread_mutex_t cv_mu; /* rx ownership hand-off */
	pthread_cond_t cv;     /* rx_acquire's waiters (teardown, expiry) */
	bool rx_busy;
	int rx_waiters;        /* sleeping on cv */
	/* Threads waiting for a request while another thread owns rx, each on a futex word
	 * of its own (net/sleepers.h), so a reply wakes only its requester. */
	struct ddss_sleeper *sleepers;

	/* Reply parsing state: touched only by the rx owner. */
	unsigned char rxbuf[TCP_RXBUF_LEN];
	size_t rx_start, rx_end;
	struct ddss_tp_req *rx_cur; /* read reply whose payload is arriving */
	size_t rx_cur_got;
};

struct tcp_held;

/* An incoming connection this rank serves (owned by the progress thread). */
struct tcp_served {
	enum tcp_ev_type ev_type; /* first: epoll data points here */
	struct tcp_served *next;
	int fd;
	uint32_t peer;
	uint32_t gen; /* the peer's generation its handshake was checked against */
	/* Atomic: the rank has connected again (tcp_serve_add). Nothing more of this connection
	 * is served: its requests not served by then were failed at the rank, and must not land
	 * after the new connection's (tcp_serve.c, "Superseded connections"). */
	bool superseded;
	unsigned char rxbuf[TCP_RXBUF_LEN];
	size_t rx_start, rx_end;
	bool have_hdr;          /* cur holds a request whose payload may still be arriving */
	struct tcp_wire_hdr cur;
	int cur_err;            /* answer cur with this error instead of serving it */
	size_t payload_got;
	unsigned char msgbuf[DDSS_TP_MSG_MAX];
	/* A reply that did not fit in the socket; reading pauses until it is sent. */
	unsigned char out_hdr[TCP_WIRE_HDR_LEN];
	struct iovec out_iov[2];
	int out_iovcnt;
	bool out_blocked;
	/* Replies to one read of requests, encoded back to back (tcp_serve.c, "Reply batches");
	 * while out_blocked, out_iov may point into it. */
	unsigned char *batch;
	size_t batch_len;
	unsigned batch_n;       /* replies in it, not yet counted (replies_batched) */
	uint32_t watching;      /* the epoll events registered for fd */
	/* Weak order: replies held back, oldest first (tcp_serve.c). */
	struct tcp_held *held_head, *held_tail;
	unsigned nheld;
	bool head_sending;      /* out_iov is held_head's reply */
	bool weak_listed;       /* on tcp_tp.weak_list */
	struct tcp_served *weak_next;
	/* Frame protection (tcp_protect.h): the frame being received, and where replies are
	 * sealed (out_iov points into it). */
	bool protect;
	struct tcp_protect prot;
	struct tcp_pframe prx;
	unsigned char *ptx;
	size_t ptx_cap;
};

struct tcp_peer {
	int state;         /* atomic enum ddss_tp_peer_state */
	uint64_t pool_len; /* atomic; learned in either direction's handshake */
	struct tcp_chan chan;
};

struct tcp_tp {
	struct ddss_tp base; /* first: container_of */
	unsigned char *pool;
	uint64_t pool_len;
	bool pool_registered;
	bool started;
	int listen_fd;
	int epfd;
	int stop_fd; /* eventfd that stops the progress thread */
	enum tcp_ev_type stop_ev;
	/* DDSS_TP_LATER frames (tcp_later.c): a timerfd the progress thread watches, armed
	 * (atomic flag) by the first such frame held since it last fired. */
	int later_fd;
	int later_armed;
	bool later_stopped; /* atomic: the progress thread ended (tcp_later_stop) */
	enum tcp_ev_type later_ev;
	pthread_t progress_thread, acceptor_thread;
	pthread_mutex_t served_mu;
	/* Held around linking or unlinking a served connection and the peer state that follows
	 * from it (tcp_serve.c), so a close that found no other connection of its rank cannot
	 * set it down after a new one set it up; around a channel's "up" after its connect and
	 * the "down" its close leads to (tcp_chan.c), for the same reason; and around a
	 * readmission's reset of the state (tcp_provider.c). Taken after a channel's
	 * connect_mu, before its send_mu, served_mu and the on_peer callback's locks, and by
	 * nothing else. */
	pthread_mutex_t serve_state_mu;
	struct tcp_served *served; /* list, for teardown */
	struct tcp_peer *peers;    /* [1..size] */
	enum tcp_order order;
	int64_t home_spin_ns;      /* DDSS_HOME_SPIN_US: the progress thread polls this long after serving */
	int64_t home_spin_resume;  /* progress thread only: it polls again from this time on */
	unsigned home_spin_backoff; /* progress thread only: the back-off's doubling (tcp_serve.c) */
	enum ddss_tp_protect protect; /* cfg.tcp_protect */
	/* Weak order, progress thread only: rounds of the progress loop done, and the served
	 * connections that hold replies. */
	uint64_t round;
	struct tcp_served *weak_list;
	unsigned weak_tears; /* 8-byte writes placed byte by byte so far (store_word) */
	/* rank + 1 while the progress thread places a write's bytes or runs an atomic of that
	 * rank's, from before its check that the rank may still act; else 0 (atomic). A cut
	 * waits it out (tcp_serve.c, act_announce). */
	uint32_t acting;
};

static inline struct tcp_tp *tcp_tp_of(struct ddss_tp *tp)
{
	return (struct tcp_tp *)tp;
}

/* tcp_provider.c */
/* A connection made with @rank's process of generation @gen reports @state; ignored once
 * the rank has been readmitted as another process (a newer generation): the old process's
 * connection closing late must not set the new one down. */
void tcp_peer_set_state(struct tcp_tp *t, uint32_t rank, uint32_t gen,
			enum ddss_tp_peer_state state);
void tcp_peer_set_pool_len(struct tcp_tp *t, uint32_t rank, uint64_t pool_len);
/** TCP_NODELAY and keep-alive on a connected socket. */
void tcp_set_sock_opts(int fd);
/** Bound blocking receives on @fd to @ms milliseconds (at least 1 ms). */
void tcp_set_rcvtimeo(int fd, int64_t ms);
/**
 * Receive exactly @len bytes before @deadline_ns (ddss_now_ns clock), whatever the pace
 * the peer sends them at: -ETIMEDOUT when the deadline passes, -ECONNRESET on EOF. With
 * @refused_of non-NULL, also -EHOSTDOWN within TCP_REFUSAL_SLICE_MS of the refusal of
 * @peer (ddss_tp_peer_refuse), whose thread waits for the caller's connect_mu.
 */
int tcp_recv_full(int fd, void *buf, size_t len, int64_t deadline_ns,
		  const struct ddss_tp *refused_of, uint32_t peer);
/** How often a connect or handshake that waits looks at the peer's refusal. */
#define TCP_REFUSAL_SLICE_MS 100

/* tcp_chan.c */
void tcp_chan_init(struct tcp_chan *ch, struct tcp_tp *t, uint32_t peer);
void tcp_chan_destroy(struct tcp_chan *ch);
/** Connect and handshake if needed (reconnects after a failure). Blocks. */
int tcp_chan_ensure(struct tcp_chan *ch);
/**
 * Post a request that expects a reply; fills req's wire header. @flags: with DDSS_TP_MORE
 * the frame waits for the channel's next send (one system call for both), or for a wait or
 * test on the channel, whichever comes first; with DDSS_TP_WAITED it may wait the same way
 * for other threads' frames while its poster waits ("Combined sends" in tcp_chan.c).
 */
int tcp_chan_post(struct tcp_chan *ch, struct ddss_tp_req *req, const struct tcp_wire_hdr *h,
		  const void *payload, size_t payload_len, unsigned flags);
/** Send encoded one-way frames back to back, as one write (copied if it cannot go now). */
int tcp_chan_send_frames(struct tcp_chan *ch, const void *frames, size_t len);
/** Send a one-way frame (notify, msg); the payload is copied if it cannot go out now. */
int tcp_chan_send_oneway(struct tcp_chan *ch, const struct tcp_wire_hdr *h, const void *payload,
			 size_t payload_len);
int tcp_chan_test(struct tcp_chan *ch, struct ddss_tp_req *req);
void tcp_chan_push(struct tcp_chan *ch);
int tcp_chan_wait(struct tcp_chan *ch, struct ddss_tp_req *req, int timeout_ms);
/** Progress thread: the socket has room again, send what is queued. */
void tcp_chan_flush(struct tcp_chan *ch);
/** Progress thread: an epoll event of the channel's socket (room again, or its far end
 * closed: then the peer is down if its connection to us is gone too). */
void tcp_chan_event(struct tcp_chan *ch, uint32_t events);
/**
 * Whether the channel's current connection, made with the peer's generation @gen, is
 * working as far as this rank can tell: connected, not failed, its far end not closed.
 * Any thread but one holding send_mu.
 */
bool tcp_chan_up(struct tcp_chan *ch, uint32_t gen);
/**
 * serve_state_mu held: watch the channel's socket for its far end closing (@on), or stop.
 * On while the peer has no connection to us (its close would have told us), off while it
 * has one; any thread but one holding send_mu.
 */
void tcp_chan_watch_close(struct tcp_chan *ch, bool on);
/** Fail the connection with @err and complete everything outstanding. */
void tcp_chan_shutdown(struct tcp_chan *ch, int err);

/* tcp_handshake.c (with a group secret, both sides prove they know it: net/auth.h) */
/** Initiator: open the connection on @fd; the target's pool length in *pool_len_p. */
/* Both sides: with DDSS_TCP_PROTECT, *prot_p receives the connection's frame keys (else its
 * mode is OFF). */
int tcp_handshake_connect(struct tcp_tp *t, uint32_t peer, int fd, int64_t deadline,
			  uint64_t *pool_len_p, struct tcp_protect *prot_p);
/* tcp_accept.c: the acceptor thread's body. */
void *tcp_acceptor_main(void *arg);
struct tcp_accept_hs;
/* tcp_serve.c: serve @fd, a connection that passed the handshake @hs (@prot: its frame
 * keys, copied); on failure (-errno) the caller still owns @fd. -ESTALE: the rank was
 * readmitted as another process since its hello was checked. */
int tcp_serve_add(struct tcp_tp *t, int fd, const struct tcp_accept_hs *hs,
		  const struct tcp_protect *prot);

/** The bytes of a HELLO frame, the first thing a connecting peer sends. */
#define TCP_HELLO_FRAME_LEN (TCP_WIRE_HDR_LEN + TCP_WIRE_HELLO_LEN)
/* What the target keeps of a handshake from the peer's HELLO to its AUTH (tcp_accept.c
 * waits for the AUTH frame in its poll loop, so a peer that stalls holds up nobody). */
struct tcp_accept_hs {
	uint32_t peer;                   /* the rank it claims (proven once done) */
	uint32_t gen;                    /* that rank's generation when its hello was checked */
	uint64_t pool_len;               /* its pool length, once known */
	bool need_auth;                  /* with a secret: an AUTH frame is still to come */
	struct ddss_auth_transcript tr;  /* what the proofs cover */
};
/**
 * Target, first step: answer the HELLO frame (@frame, TCP_HELLO_FRAME_LEN bytes) the
 * acceptor has read from @fd. 0: accepted so far; if @hs->need_auth, the AUTH frame
 * (same length) goes to tcp_handshake_accept_auth, else the handshake is done (@hs says
 * the rank and pool length, @prot_p is off). -errno: refused (answered if possible).
 */
int tcp_handshake_accept_hello(struct tcp_tp *t, int fd, const unsigned char *frame,
			       struct tcp_accept_hs *hs);
/**
 * Target, second step (with a secret): check the AUTH frame and answer it. 0 (the rank is
 * proven; @hs has its pool length, @prot_p the connection's frame keys) or -errno.
 */
int tcp_handshake_accept_auth(struct tcp_tp *t, int fd, const unsigned char *frame,
			      struct tcp_accept_hs *hs, struct tcp_protect *prot_p);


/* tcp_serve.c */
/* DDSS_TP_LATER frames' deadline (tcp_later.c). start: before the progress thread; the
 * progress thread calls fire on TCP_EV_LATER; stop: after it ended. */
int tcp_later_start(struct tcp_tp *t);
void tcp_later_arm(struct tcp_tp *t);
void tcp_later_fire(struct tcp_tp *t);
void tcp_later_stop(struct tcp_tp *t);
/* Tests: the bound in ns (TCP_LATER_NS unless changed before the frames are posted). */
extern long tcp_later_ns;

int tcp_serve_start(struct tcp_tp *t);
void tcp_serve_stop(struct tcp_tp *t);
/** Whether @rank's current process has a connection to us open (its close not seen yet). */
bool tcp_serve_has(struct tcp_tp *t, uint32_t rank);
/**
 * Close every connection @rank made to us (it was refused), and wait out a write or atomic
 * of the rank that passed its check before the refusal (about 1 s at most). 0 once nothing
 * of the rank can land any more; -EBUSY if the progress thread still acts for it. Any
 * thread but the progress thread's act (which calls out to nothing).
 */
int tcp_serve_cut(struct tcp_tp *t, uint32_t rank);
/* Tests only: called on the progress thread once a rank's atomic or write passed its
 * check, right before it runs or its bytes are placed (NULL: nothing). */
extern void (*tcp_serve_act_hook)(struct tcp_tp *t, uint32_t rank);

#endif /* DDSS_NET_TCP_TCP_H */
