/*
 * The shared-memory channel between one client thread and one worker thread of the node
 * daemon (ddssd).
 *
 * A channel is a sealed memfd that the client creates and the daemon attaches to (the fd
 * travels over a unix socket, elsewhere). It holds two single-producer single-consumer
 * rings of DDSS_CHAN_MSG-byte messages, requests (client -> daemon) and responses (daemon
 * -> client), and a data area for payloads that the client grows on demand.
 *
 * Trust: the daemon trusts nothing it reads from the channel. Counters that claim more than
 * DDSS_CHAN_DEPTH messages are -EPROTO, ranges beyond what the client has recorded are
 * -EINVAL, and the memfd is sealed against shrinking so that the daemon's mapping can never
 * fault. Messages and payloads stay in memory the client can write at any time: copy what
 * you validate before you use it.
 *
 * Threads: each end (the client's handle, the daemon's handle) is used by one thread at a
 * time; the two ends run concurrently in different processes without locks.
 * ddss_chan_close() alone may be called from any thread, at any time before destroy.
 *
 * Flow control: the client keeps at most DDSS_CHAN_DEPTH requests unanswered (a request
 * counts until its response is consumed), so the daemon never finds the response ring full;
 * if it does, the client broke that rule.
 */
#ifndef DDSS_DAEMON_CHAN_H
#define DDSS_DAEMON_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DDSS_CHAN_DEPTH 16   /* messages per ring */
#define DDSS_CHAN_MSG 192    /* bytes per message, opaque here */
#define DDSS_CHAN_SPIN_NS 20000 /* default spin before sleeping; env DDSS_CHAN_SPIN_NS */
#define DDSS_CHAN_DATA_MIN ((uint64_t)64 << 10) /* the data area a channel starts with */
#define DDSS_CHAN_DATA_MAX ((uint64_t)1 << 30)  /* the largest data area */

struct ddss_chan;

/** The channel spin time in ns: DDSS_CHAN_SPIN_NS from the environment, or its default. */
long ddss_chan_spin_ns(void);

/**
 * Liveness check called by a waiter after every 100 ms it slept without news: 0 if the
 * other side may still answer, else -errno, which the wait returns.
 */
typedef int (*ddss_chan_alive_fn)(void *arg);

/** Client: a new channel with a DDSS_CHAN_DATA_MIN data area. 0, -ENOMEM or -errno. */
int ddss_chan_create(struct ddss_chan **c_p);

/**
 * Daemon: attach to the channel in memfd @fd. The channel keeps its own duplicate of @fd:
 * the caller still owns @fd and may close it at once. -EPROTO if @fd is not a channel this
 * build understands (magic, version, sizes, seals), else 0 or -errno.
 */
int ddss_chan_attach(int fd, struct ddss_chan **c_p);

/** The channel's memfd (to pass to the daemon); owned by the channel. */
int ddss_chan_fd(const struct ddss_chan *c);

/** Unmap and close this end (it does not close the channel for the other end). */
void ddss_chan_destroy(struct ddss_chan *c);

/**
 * Close the channel for both ends and wake both rings' waiters: their waits return
 * -EPIPE once their ring is empty, slot requests -EPIPE at once. Any thread; idempotent.
 */
void ddss_chan_close(struct ddss_chan *c);

/** Whether either end has closed the channel. */
bool ddss_chan_closed(const struct ddss_chan *c);

/*
 * The daemon's heartbeat. A thread of the daemon of its own bumps every channel's beat
 * each DDSS_CHAN_BEAT_MS while the process runs, so a client can tell a daemon that is busy
 * for a long call (a lock wait, a barrier) from one that is frozen (SIGSTOP) or not
 * scheduled: only the second stops beating.
 */
#define DDSS_CHAN_BEAT_MS 100
/** Daemon: bump the beat. */
void ddss_chan_beat(struct ddss_chan *c);
/** Client: the beat's value now. */
uint64_t ddss_chan_beats(const struct ddss_chan *c);

/*
 * Messages. A producer asks for a free slot, fills it, and posts it; the consumer waits for
 * the oldest message, reads (copies) it, and marks it done, which frees the slot.
 * Requests are posted by the client (req_slot, req_post) and consumed by the daemon
 * (wait_req, req_done); responses the other way round. The wrong end gets -EINVAL, or
 * nothing happens for the void calls.
 */

/**
 * A free request slot of DDSS_CHAN_MSG bytes in *@slot_p (client). Calling it again before
 * ddss_chan_req_post() returns the same slot. -EAGAIN when DDSS_CHAN_DEPTH requests are
 * outstanding, -EPIPE once closed, -EPROTO if the daemon's counter is corrupt.
 */
int ddss_chan_req_slot(struct ddss_chan *c, void **slot_p);

/** Publish the slot from ddss_chan_req_slot(), waking the daemon if it sleeps (client). */
void ddss_chan_req_post(struct ddss_chan *c);

/**
 * Wait for the oldest request and point *@msg_p at it (daemon). It stays in shared memory
 * the client can still write: copy it before validating it. Spins up to the channel's spin
 * time, then sleeps; after every 100 ms asleep calls @alive(@arg) if given and returns its
 * error. @timeout_ms < 0 waits for ever, 0 only looks. 0, -ETIMEDOUT, -EPIPE (closed and
 * empty), -EPROTO (corrupt counters) or @alive's error.
 */
int ddss_chan_wait_req(struct ddss_chan *c, int timeout_ms, ddss_chan_alive_fn alive, void *arg,
		       const void **msg_p);

/** Free the request returned by the last ddss_chan_wait_req() (daemon). */
void ddss_chan_req_done(struct ddss_chan *c);

/** As ddss_chan_req_slot(), for a response (daemon). */
int ddss_chan_resp_slot(struct ddss_chan *c, void **slot_p);
/** As ddss_chan_req_post(), for a response (daemon). */
void ddss_chan_resp_post(struct ddss_chan *c);
/** As ddss_chan_wait_req(), for a response (client; the daemon's memory, trusted). */
int ddss_chan_wait_resp(struct ddss_chan *c, int timeout_ms, ddss_chan_alive_fn alive,
			void *arg, const void **msg_p);
/** As ddss_chan_req_done(), for a response (client). */
void ddss_chan_resp_done(struct ddss_chan *c);

/**
 * Client: the data area, at least @len bytes of it, in *@p_p (offset 0 of the area; messages
 * name ranges in it by offset). Grows the memfd to the next power of two (at least
 * DDSS_CHAN_DATA_MIN) when needed, keeping its contents; growing may move the area, so a
 * pointer from an earlier call is stale after a call that grew it (the daemon's mapping
 * stays valid: the memfd only grows). -EINVAL if @len > DDSS_CHAN_DATA_MAX.
 */
int ddss_chan_data(struct ddss_chan *c, size_t len, void **p_p);

/**
 * Daemon: the bytes [@off, @off + @len) of the data area in *@p_p, remapping when the client
 * has grown the area since. Remapping may move the area: a pointer from an earlier call is
 * stale after a call that remapped. -EINVAL if the range goes beyond the length the client
 * recorded, -EPROTO if the recorded length is not backed by the memfd, else 0 or -errno.
 */
int ddss_chan_data_peer(struct ddss_chan *c, uint64_t off, uint64_t len, void **p_p);

/*
 * The shared layout, the protocol between the two processes (and what the tests corrupt).
 * Page 0: the header; then the request slots and the response slots; the data area starts on
 * the page after them. Counters are free-running 32-bit values (wrap-around arithmetic):
 * tail - head messages are in a ring.
 */
#define DDSS_CHAN_MAGIC 0x314e484353534444ull /* "DDSSCHN1" */
#define DDSS_CHAN_VERSION 2u /* 2: the heartbeat */
#define DDSS_CHAN_SLOTS_OFF 4096u
#define DDSS_CHAN_DATA_OFF 12288u

struct ddss_chan_ring {
	uint32_t head;          /* consumer: messages consumed */
	uint8_t pad0[60];
	uint32_t tail;          /* producer: messages posted */
	uint32_t waiters;       /* consumer sets it before sleeping, clears it after */
	uint32_t bell;          /* futex word: bumped by the producer when waiters is set, by close */
	uint8_t pad1[52];
};

struct ddss_chan_hdr {
	uint64_t magic;         /* DDSS_CHAN_MAGIC */
	uint32_t version;       /* DDSS_CHAN_VERSION */
	uint32_t closed;        /* set once by either end */
	uint64_t data_len;      /* the data area's length; the client grows the memfd first */
	uint64_t beat;          /* the daemon's heartbeat: bumped every DDSS_CHAN_BEAT_MS */
	uint8_t pad0[32];
	struct ddss_chan_ring req;
	struct ddss_chan_ring resp;
};

#endif /* DDSS_DAEMON_CHAN_H */
