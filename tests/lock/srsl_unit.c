/*
 * ddss_srsl_flush (src/lock/srsl.c), against a fake net: this process is rank 1 of a group
 * of 3, and plays the homes (ranks 2 and 3) itself. srsl.c is compiled into this program
 * so the net under it can be replaced (only the logger and ddss_strerror come from the
 * library).
 *
 *  - a flush sends one SYNC to each home released to since the last flush, after the
 *    releases, and does not return before the home answers it (the test holds the answer
 *    back and checks that the flusher is still waiting);
 *  - a flush with nothing released sends nothing;
 *  - a home that is down: the flush says -EHOSTDOWN and still syncs the other home;
 *  - as a home, a SYNC is answered at once with 0 for the same request.
 */
#include "lock/srsl.c"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdatomic.h>
#include <stdio.h>

#define WAIT_MS 10000 /* an event that never comes: fail instead of hanging */
#define MAXSENT 64

static struct ddss_tp tp;
static ddss_net_msg_fn handler;
static void *handler_arg;
static _Atomic bool down[4];

/* What the srsl sent, in order, and a gate for SYNC answers. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct sent {
	uint32_t to, op;
	uint64_t lock_id, req;
} sent[MAXSENT];
static unsigned nsent;

int64_t ddss_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int ddss_net_on_msg(struct ddss_net *net, uint16_t tag, ddss_net_msg_fn fn, void *arg)
{
	(void)net;
	if (tag != DDSS_SRSL_TAG)
		return -EINVAL;
	handler = fn;
	handler_arg = arg;
	return 0;
}

struct ddss_tp *ddss_net_tp(struct ddss_net *net)
{
	(void)net;
	return &tp;
}

void ddss_net_declare_dead(struct ddss_net *net, uint32_t rank)
{
	(void)net;
	(void)rank;
}

static int fake_peer_info(struct ddss_tp *t, uint32_t rank, struct ddss_tp_peer_info *info)
{
	(void)t;
	memset(info, 0, sizeof(*info));
	info->state = down[rank] ? DDSS_TP_PEER_DOWN : DDSS_TP_PEER_UP;
	return 0;
}

static const struct ddss_tp_ops fake_ops = { .name = "fake", .peer_info = fake_peer_info };

/* Deliver a message from @from to the srsl, as the net's progress thread would. */
static void deliver(uint32_t from, uint32_t op, uint32_t arg, uint64_t lock_id, uint64_t req)
{
	uint8_t m[SRSL_MSG_LEN];

	wire_put32(m, op);
	wire_put32(m + 4, arg);
	wire_put64(m + 8, lock_id);
	wire_put64(m + 16, req);
	handler(handler_arg, from, m, sizeof(m));
}

/* Records every message; a request (REQ) to a home is granted at once. */
int ddss_net_send(struct ddss_net *net, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	struct sent m = { peer, wire_get32(p), wire_get64(p + 8), wire_get64(p + 16) };

	(void)net;
	if (tag != DDSS_SRSL_TAG || len != SRSL_MSG_LEN)
		return -EINVAL;
	if (down[peer])
		return -EHOSTDOWN;
	pthread_mutex_lock(&mu);
	if (nsent < MAXSENT)
		sent[nsent++] = m;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	if (m.op == SRSL_REQ && peer != 1)
		deliver(peer, SRSL_REPLY, 0, m.lock_id, m.req);
	return 0;
}

/* The index of the first message sent since @from with op @op to @to, waiting for it. */
static int wait_sent(unsigned from, uint32_t op, uint32_t to)
{
	struct timespec until;
	int found = -1, r = 0;

	clock_gettime(CLOCK_REALTIME, &until); /* the clock of cv */
	until.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&mu);
	for (;;) {
		for (unsigned i = from; i < nsent && found < 0; i++)
			if (sent[i].op == op && sent[i].to == to)
				found = (int)i;
		if (found >= 0 || r == ETIMEDOUT)
			break;
		r = pthread_cond_timedwait(&cv, &mu, &until);
	}
	pthread_mutex_unlock(&mu);
	if (found < 0)
		fprintf(stderr, "no message %u to rank %u was sent\n", op, to);
	return found;
}

static unsigned sent_now(void)
{
	unsigned n;

	pthread_mutex_lock(&mu);
	n = nsent;
	pthread_mutex_unlock(&mu);
	return n;
}

static struct ddss_srsl *srsl;

struct flusher {
	pthread_t t;
	_Atomic bool done;
	int rc;
};

static void *flush_thread(void *arg)
{
	struct flusher *f = arg;

	f->rc = ddss_srsl_flush(srsl);
	atomic_store(&f->done, true);
	return NULL;
}

static void hold_and_release(uint32_t home, uint64_t lock_id)
{
	CU_ASSERT_EQUAL(ddss_srsl_acquire(srsl, home, lock_id, DDSS_LOCK_EXCLUSIVE, false, -1), 0);
	CU_ASSERT_EQUAL(ddss_srsl_release(srsl, home, lock_id, DDSS_LOCK_EXCLUSIVE), 0);
}

static void test_flush_waits(void)
{
	struct flusher f = { .done = false };
	unsigned start = sent_now();
	int rel, sync;

	hold_and_release(2, 7);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&f.t, NULL, flush_thread, &f), 0);
	rel = wait_sent(start, SRSL_REL, 2);
	sync = wait_sent(start, SRSL_SYNC, 2);
	CU_ASSERT(rel >= 0 && sync > rel);
	/* The home has not answered: the flush must still be waiting. */
	CU_ASSERT_FALSE(atomic_load(&f.done));
	if (sync >= 0)
		deliver(2, SRSL_REPLY, 0, sent[sync].lock_id, sent[sync].req);
	pthread_join(f.t, NULL);
	CU_ASSERT_TRUE(atomic_load(&f.done));
	CU_ASSERT_EQUAL(f.rc, 0);

	/* Nothing released since: nothing to wait for, nothing sent. */
	start = sent_now();
	CU_ASSERT_EQUAL(ddss_srsl_flush(srsl), 0);
	CU_ASSERT_EQUAL(sent_now(), start);
}

static void test_flush_home_down(void)
{
	struct flusher f = { .done = false };
	unsigned start = sent_now();
	int sync;

	hold_and_release(2, 8);
	hold_and_release(3, 9);
	down[3] = true;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&f.t, NULL, flush_thread, &f), 0);
	sync = wait_sent(start, SRSL_SYNC, 2);
	CU_ASSERT_FATAL(sync >= 0);
	deliver(2, SRSL_REPLY, 0, sent[sync].lock_id, sent[sync].req);
	pthread_join(f.t, NULL);
	CU_ASSERT_EQUAL(f.rc, -EHOSTDOWN);
	down[3] = false;
	/* The failed home is not asked again: its releases were gone with it. */
	start = sent_now();
	CU_ASSERT_EQUAL(ddss_srsl_flush(srsl), 0);
	CU_ASSERT_EQUAL(sent_now(), start);
}

static void test_home_answers_sync(void)
{
	unsigned start = sent_now();
	int reply;

	deliver(3, SRSL_SYNC, 0, 0, 42); /* rank 3 asks us, its home */
	reply = wait_sent(start, SRSL_REPLY, 3);
	CU_ASSERT_FATAL(reply >= 0);
	CU_ASSERT_EQUAL(sent[reply].req, 42);
	CU_ASSERT_EQUAL(sent[reply].lock_id, 0);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	tp.ops = &fake_ops;
	tp.cfg.size = 3;
	tp.cfg.op_timeout_ms = WAIT_MS;
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("srsl flush (fake net, rank 1 of 3)", NULL, NULL);
	CU_add_test(s, "a flush syncs each home released to, and waits for its answer",
		    test_flush_waits);
	CU_add_test(s, "a home down: -EHOSTDOWN, the other home still synced",
		    test_flush_home_down);
	CU_add_test(s, "as a home: a SYNC is answered 0", test_home_answers_sync);
	if (ddss_srsl_create(NULL, &srsl)) {
		fprintf(stderr, "ddss_srsl_create failed\n");
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_failures();
	CU_cleanup_registry();
	ddss_srsl_destroy(srsl);
	return failed ? 1 : 0;
}
