/*
 * The client-daemon channel: two SPSC rings and a data area in one sealed memfd.
 *
 * Each end keeps its own positions (the tail of the ring it produces, the head of the one
 * it consumes) and only publishes them; what it reads of the other side's counters is
 * checked against them, so a corrupt counter is -EPROTO instead of a wild slot index.
 *
 * Sleeping without lost wake-ups. A consumer reads the ring's bell, sets the waiters flag,
 * looks at the ring once more and sleeps on the bell only if it still showed that value.
 * A producer stores its tail and then reads the waiters flag; every one of these accesses
 * is seq_cst, so either the consumer's second look sees the message or the producer sees
 * the flag and rings the bell (bumps it, FUTEX_WAKE). The futex word is the bell, not the
 * tail, because close must also change the word a sleeper compares: closing writes no
 * message, so a wake-up on an unchanged tail could be lost between the consumer's last look
 * and its FUTEX_WAIT.
 */
#include "daemon/chan.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(struct ddss_chan_ring) == 128, "ring counters: two cache lines");
_Static_assert(offsetof(struct ddss_chan_ring, tail) == 64, "head and tail on separate lines");
_Static_assert(offsetof(struct ddss_chan_hdr, req) == 64, "rings start on a cache line");
_Static_assert(sizeof(struct ddss_chan_hdr) <= DDSS_CHAN_SLOTS_OFF, "header fits its page");
_Static_assert(DDSS_CHAN_SLOTS_OFF + 2 * DDSS_CHAN_DEPTH * DDSS_CHAN_MSG <= DDSS_CHAN_DATA_OFF,
	       "slots fit before the data area");
_Static_assert(DDSS_CHAN_MSG % 64 == 0, "slots on cache lines");
_Static_assert((DDSS_CHAN_DEPTH & (DDSS_CHAN_DEPTH - 1)) == 0, "depth divides 2^32");

#define SLICE_NS 100000000ll   /* longest sleep between liveness checks */
#define SPIN_ANSWER_MAX_NS 1000000 /* the longest a client spins for an answer */
#define SPIN_YIELD 1           /* spins per sched_yield(): cores may be fewer than spinners */
#define SPIN_CLOCK 16          /* spins between clock reads */

/* This end's private view of one ring. */
struct chan_side {
	struct ddss_chan_ring *r;
	uint8_t *slots;
	uint32_t pos;   /* producer: messages posted; consumer: messages consumed */
	uint32_t avail; /* producer: 1 while a slot is handed out; consumer: messages validated */
	int64_t typical_ns; /* consumer of responses: how long answers take (moving average) */
};

struct ddss_chan {
	int fd;
	bool daemon;
	long spin_ns;
	struct ddss_chan_hdr *hdr;  /* header and slots: DDSS_CHAN_DATA_OFF bytes */
	uint8_t *data;
	uint64_t data_len;          /* bytes of the data area this end has mapped */
	struct chan_side req, resp;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Shared futexes: the two ends are different processes. */
static void ring_bell(struct ddss_chan_ring *r)
{
	__atomic_add_fetch(&r->bell, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &r->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static bool chan_is_closed(const struct ddss_chan *c)
{
	return __atomic_load_n(&c->hdr->closed, __ATOMIC_SEQ_CST);
}

static int ring_slot(struct ddss_chan *c, struct chan_side *s, void **slot_p)
{
	uint32_t used;

	if (chan_is_closed(c))
		return -EPIPE;
	/* Acquire: the consumer has finished reading the slots it gave back. */
	used = s->pos - __atomic_load_n(&s->r->head, __ATOMIC_ACQUIRE);
	if (used > DDSS_CHAN_DEPTH) {
		DDSS_DBG("channel head claims %u messages outstanding", used);
		return -EPROTO;
	}
	if (used == DDSS_CHAN_DEPTH)
		return -EAGAIN;
	s->avail = 1;
	*slot_p = s->slots + (s->pos % DDSS_CHAN_DEPTH) * DDSS_CHAN_MSG;
	return 0;
}

static void ring_post(struct chan_side *s)
{
	if (!s->avail)
		return;
	s->avail = 0;
	s->pos++;
	/* seq_cst store, then seq_cst load: see the top of the file. */
	__atomic_store_n(&s->r->tail, s->pos, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->r->waiters, __ATOMIC_SEQ_CST))
		ring_bell(s->r);
}

/* 1 if a message is there, 0 if not, -EPIPE if closed and empty, -EPROTO. */
static int ring_ready(struct ddss_chan *c, struct chan_side *s)
{
	uint32_t closed, n;

	if (s->avail)
		return 1;
	/* Closed first: messages posted before the close are then visible below. */
	closed = __atomic_load_n(&c->hdr->closed, __ATOMIC_SEQ_CST);
	n = __atomic_load_n(&s->r->tail, __ATOMIC_SEQ_CST) - s->pos;
	if (n > DDSS_CHAN_DEPTH) {
		DDSS_DBG("channel tail claims %u messages", n);
		return -EPROTO;
	}
	if (n) {
		s->avail = n;
		return 1;
	}
	return closed ? -EPIPE : 0;
}

/*
 * How long to spin before sleeping. The daemon's worker spins the configured time: a client
 * that calls back to back is served without a wake-up, an idle one costs nothing after it.
 * A client waiting for its answer spins up to twice the typical answer time (at most
 * SPIN_ANSWER_MAX_NS): its thread has nothing else to do, each spin gives the core away
 * (sched_yield), and on a slow machine (the emulated guest) calls that take longer than
 * the configured spin would otherwise all pay for a futex wake-up.
 */
static int64_t spin_budget(const struct ddss_chan *c, const struct chan_side *s)
{
	int64_t ns = c->spin_ns;

	if (ns > 0 && !c->daemon && 2 * s->typical_ns > ns)
		ns = 2 * s->typical_ns < SPIN_ANSWER_MAX_NS ? 2 * s->typical_ns : SPIN_ANSWER_MAX_NS;
	return ns;
}

/* Look until the spin time (or the deadline) is over: the other side is likely busy. */
static int ring_spin(struct ddss_chan *c, struct chan_side *s, int64_t deadline)
{
	int64_t end, budget = spin_budget(c, s);
	int rc;

	if (budget <= 0)
		return 0;
	end = now_ns() + budget;
	if (end > deadline)
		end = deadline;
	for (unsigned i = 1;; i++) {
		cpu_relax();
		rc = ring_ready(c, s);
		if (rc)
			return rc;
		if (i % SPIN_YIELD == 0)
			sched_yield();
		if (i % SPIN_CLOCK == 0 && now_ns() >= end)
			return 0;
	}
}

/* Sleep on the bell in slices, asking @alive after each quiet one. Never returns 0. */
static int ring_sleep(struct ddss_chan *c, struct chan_side *s, int64_t deadline,
		      ddss_chan_alive_fn alive, void *arg)
{
	struct ddss_chan_ring *r = s->r;
	struct timespec ts;
	int64_t left, looked = now_ns();
	uint32_t seen;
	int rc;

	for (;;) {
		seen = __atomic_load_n(&r->bell, __ATOMIC_SEQ_CST);
		__atomic_store_n(&r->waiters, 1, __ATOMIC_SEQ_CST);
		rc = ring_ready(c, s);
		if (rc)
			break;
		left = deadline - now_ns();
		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (left > SLICE_NS)
			left = SLICE_NS;
		ts.tv_sec = left / 1000000000ll;
		ts.tv_nsec = left % 1000000000ll;
		/* Rung, or the bell had moved on, or a signal: look again, but ask @alive at
		 * least every slice all the same (a process whose signals come faster than a
		 * slice never had a quiet one, and never heard of a frozen daemon). */
		if ((syscall(SYS_futex, &r->bell, FUTEX_WAIT, seen, &ts, NULL, 0) == 0 ||
		     errno == EAGAIN || errno == EINTR) && now_ns() - looked < SLICE_NS)
			continue;
		/* A quiet slice (or a futex error, treated alike so it cannot spin hot). */
		rc = ring_ready(c, s);
		if (rc)
			break;
		looked = now_ns();
		if (alive && (rc = alive(arg)) != 0) {
			if (rc > 0)
				rc = -EIO; /* a callback that broke its contract still ends the wait */
			break;
		}
	}
	__atomic_store_n(&r->waiters, 0, __ATOMIC_SEQ_CST);
	return rc;
}

static int ring_wait(struct ddss_chan *c, struct chan_side *s, int timeout_ms,
		     ddss_chan_alive_fn alive, void *arg, const void **msg_p)
{
	int64_t deadline = INT64_MAX, t0 = now_ns();
	int rc;

	if (timeout_ms > 0)
		deadline = t0 + (int64_t)timeout_ms * 1000000;
	rc = ring_ready(c, s);
	if (!rc && timeout_ms)
		rc = ring_spin(c, s, deadline);
	if (!rc && timeout_ms)
		rc = ring_sleep(c, s, deadline, alive, arg);
	if (rc < 0)
		return rc;
	if (rc > 0 && !c->daemon)
		s->typical_ns += (now_ns() - t0 - s->typical_ns) / 8;
	if (!rc)
		return -ETIMEDOUT;
	*msg_p = s->slots + (s->pos % DDSS_CHAN_DEPTH) * DDSS_CHAN_MSG;
	return 0;
}

static void ring_done(struct chan_side *s)
{
	if (!s->avail)
		return;
	s->avail--;
	s->pos++;
	/* Release: our reads of the slot are over before the producer may reuse it. */
	__atomic_store_n(&s->r->head, s->pos, __ATOMIC_RELEASE);
}

long ddss_chan_spin_ns(void)
{
	long v;

	if (ddss_env_long("DDSS_CHAN_SPIN_NS", 0, 1000000000l, DDSS_CHAN_SPIN_NS, &v))
		v = DDSS_CHAN_SPIN_NS;
	return v;
}

/* Map the header and the slots. */
static int hdr_map(struct ddss_chan *c)
{
	void *p = mmap(NULL, DDSS_CHAN_DATA_OFF, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	c->hdr = p;
	c->req.r = &c->hdr->req;
	c->req.slots = (uint8_t *)p + DDSS_CHAN_SLOTS_OFF;
	c->resp.r = &c->hdr->resp;
	c->resp.slots = c->req.slots + DDSS_CHAN_DEPTH * DDSS_CHAN_MSG;
	return 0;
}

/* Map @len bytes of data area in place of the current mapping, which stays if this fails. */
static int data_map(struct ddss_chan *c, uint64_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, DDSS_CHAN_DATA_OFF);

	if (p == MAP_FAILED)
		return -errno;
	if (c->data)
		munmap(c->data, c->data_len);
	c->data = p;
	c->data_len = len;
	return 0;
}

int ddss_chan_create(struct ddss_chan **c_p)
{
	struct ddss_chan *c;
	int rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->spin_ns = ddss_chan_spin_ns();
	c->fd = memfd_create("ddss-chan", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->fd < 0) {
		rc = -errno;
		DDSS_ERR("memfd_create: %d", rc);
		goto free_chan;
	}
	/* The daemon refuses a memfd that could shrink under its mapping (SIGBUS). */
	if (ftruncate(c->fd, DDSS_CHAN_DATA_OFF + DDSS_CHAN_DATA_MIN) ||
	    fcntl(c->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL)) {
		rc = -errno;
		DDSS_ERR("sizing or sealing the channel memfd: %d", rc);
		goto close_fd;
	}
	rc = hdr_map(c);
	if (rc)
		goto map_failed;
	rc = data_map(c, DDSS_CHAN_DATA_MIN);
	if (rc)
		goto unmap_hdr;
	c->hdr->version = DDSS_CHAN_VERSION;
	c->hdr->data_len = DDSS_CHAN_DATA_MIN;
	__atomic_store_n(&c->hdr->magic, DDSS_CHAN_MAGIC, __ATOMIC_RELEASE);
	*c_p = c;
	return 0;

unmap_hdr:
	munmap(c->hdr, DDSS_CHAN_DATA_OFF);
map_failed:
	DDSS_ERR("mapping the channel: %d", rc);
close_fd:
	close(c->fd);
free_chan:
	free(c);
	return rc;
}

int ddss_chan_attach(int fd, struct ddss_chan **c_p)
{
	struct ddss_chan *c;
	struct stat st;
	uint64_t len;
	int rc, seals;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->daemon = true;
	c->spin_ns = ddss_chan_spin_ns();
	/* Why a channel is refused goes to the debug log only: the daemon logs a client's
	 * first refusal, or one that sends junk in a loop would flood its log. */
	c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = -errno;
		DDSS_DBG("dup of channel fd %d: %d", fd, rc);
		goto free_chan;
	}
	seals = fcntl(c->fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		DDSS_DBG("channel fd %d is not a memfd sealed against shrinking", fd);
		rc = -EPROTO;
		goto close_fd;
	}
	if (fstat(c->fd, &st)) {
		rc = -errno;
		goto close_fd;
	}
	if (st.st_size < DDSS_CHAN_DATA_OFF) {
		DDSS_DBG("channel memfd of %lld bytes: too short", (long long)st.st_size);
		rc = -EPROTO;
		goto close_fd;
	}
	rc = hdr_map(c);
	if (rc) {
		DDSS_DBG("mapping channel fd %d: %d", fd, rc);
		goto close_fd;
	}
	/* Read each word once: the client may change them under us. */
	if (__atomic_load_n(&c->hdr->magic, __ATOMIC_ACQUIRE) != DDSS_CHAN_MAGIC ||
	    __atomic_load_n(&c->hdr->version, __ATOMIC_RELAXED) != DDSS_CHAN_VERSION) {
		DDSS_DBG("channel memfd: bad magic or version");
		rc = -EPROTO;
		goto unmap_hdr;
	}
	len = __atomic_load_n(&c->hdr->data_len, __ATOMIC_ACQUIRE);
	if (len < DDSS_CHAN_DATA_MIN || len > DDSS_CHAN_DATA_MAX ||
	    len > (uint64_t)st.st_size - DDSS_CHAN_DATA_OFF) {
		DDSS_DBG("channel data area of %llu bytes in a memfd of %lld",
			  (unsigned long long)len, (long long)st.st_size);
		rc = -EPROTO;
		goto unmap_hdr;
	}
	rc = data_map(c, len);
	if (rc) {
		DDSS_DBG("mapping channel fd %d: %d", fd, rc);
		goto unmap_hdr;
	}
	/* Start where the client's counters are; from now on ours are the truth. */
	c->req.pos = __atomic_load_n(&c->hdr->req.head, __ATOMIC_RELAXED);
	c->resp.pos = __atomic_load_n(&c->hdr->resp.tail, __ATOMIC_RELAXED);
	*c_p = c;
	return 0;

unmap_hdr:
	munmap(c->hdr, DDSS_CHAN_DATA_OFF);
close_fd:
	close(c->fd);
free_chan:
	free(c);
	return rc;
}

int ddss_chan_fd(const struct ddss_chan *c)
{
	return c->fd;
}

void ddss_chan_destroy(struct ddss_chan *c)
{
	if (!c)
		return;
	munmap(c->data, c->data_len);
	munmap(c->hdr, DDSS_CHAN_DATA_OFF);
	close(c->fd);
	free(c);
}

void ddss_chan_close(struct ddss_chan *c)
{
	__atomic_store_n(&c->hdr->closed, 1, __ATOMIC_SEQ_CST);
	ring_bell(&c->hdr->req);
	ring_bell(&c->hdr->resp);
}

bool ddss_chan_closed(const struct ddss_chan *c)
{
	return chan_is_closed(c);
}

void ddss_chan_beat(struct ddss_chan *c)
{
	if (c->daemon)
		__atomic_add_fetch(&c->hdr->beat, 1, __ATOMIC_RELAXED);
}

uint64_t ddss_chan_beats(const struct ddss_chan *c)
{
	return __atomic_load_n(&c->hdr->beat, __ATOMIC_RELAXED);
}

int ddss_chan_req_slot(struct ddss_chan *c, void **slot_p)
{
	return c->daemon ? -EINVAL : ring_slot(c, &c->req, slot_p);
}

void ddss_chan_req_post(struct ddss_chan *c)
{
	if (!c->daemon)
		ring_post(&c->req);
}

int ddss_chan_wait_req(struct ddss_chan *c, int timeout_ms, ddss_chan_alive_fn alive, void *arg,
		       const void **msg_p)
{
	return c->daemon ? ring_wait(c, &c->req, timeout_ms, alive, arg, msg_p) : -EINVAL;
}

void ddss_chan_req_done(struct ddss_chan *c)
{
	if (c->daemon)
		ring_done(&c->req);
}

int ddss_chan_resp_slot(struct ddss_chan *c, void **slot_p)
{
	return c->daemon ? ring_slot(c, &c->resp, slot_p) : -EINVAL;
}

void ddss_chan_resp_post(struct ddss_chan *c)
{
	if (c->daemon)
		ring_post(&c->resp);
}

int ddss_chan_wait_resp(struct ddss_chan *c, int timeout_ms, ddss_chan_alive_fn alive,
			void *arg, const void **msg_p)
{
	return c->daemon ? -EINVAL : ring_wait(c, &c->resp, timeout_ms, alive, arg, msg_p);
}

void ddss_chan_resp_done(struct ddss_chan *c)
{
	if (!c->daemon)
		ring_done(&c->resp);
}

int ddss_chan_data(struct ddss_chan *c, size_t len, void **p_p)
{
	uint64_t want;
	int rc;

	if (c->daemon || len > DDSS_CHAN_DATA_MAX)
		return -EINVAL;
	if (len > c->data_len) {
		for (want = c->data_len; want < len; want <<= 1)
			;
		/* Grow the memfd before recording the length: the daemon maps what it reads. */
		if (ftruncate(c->fd, DDSS_CHAN_DATA_OFF + want)) {
			rc = -errno;
			DDSS_WARN("growing the channel data area to %llu bytes: %d",
				  (unsigned long long)want, rc);
			return rc;
		}
		rc = data_map(c, want);
		if (rc) {
			DDSS_WARN("mapping %llu bytes of channel data area: %d",
				  (unsigned long long)want, rc);
			return rc;
		}
		__atomic_store_n(&c->hdr->data_len, want, __ATOMIC_RELEASE);
	}
	*p_p = c->data;
	return 0;
}

int ddss_chan_data_peer(struct ddss_chan *c, uint64_t off, uint64_t len, void **p_p)
{
	struct stat st;
	uint64_t rec;
	int rc;

	if (!c->daemon || off > DDSS_CHAN_DATA_MAX || len > DDSS_CHAN_DATA_MAX - off)
		return -EINVAL;
	if (off + len > c->data_len) {
		rec = __atomic_load_n(&c->hdr->data_len, __ATOMIC_ACQUIRE);
		if (off + len > rec)
			return -EINVAL;
		/* The client grows the memfd before it records the length; a liar is caught here. */
		if (rec > DDSS_CHAN_DATA_MAX)
			return -EPROTO;
		if (fstat(c->fd, &st))
			return -errno;
		if ((uint64_t)st.st_size < DDSS_CHAN_DATA_OFF + rec)
			return -EPROTO;
		rc = data_map(c, rec);
		if (rc) {
			DDSS_WARN("mapping %llu bytes of channel data area: %d",
				  (unsigned long long)rec, rc);
			return rc;
		}
	}
	*p_p = c->data + off;
	return 0;
}
