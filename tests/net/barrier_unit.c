/*
 * The group barrier (src/net/barrier.c) when one of its messages is lost: three ranks in
 * one process, each a struct ddss_net of its own on its own thread, joined by a stub
 * ddss_net_send that hands each message to the receiver's handler and can drop one.
 *
 * Why: a transport returns from a send once the message is queued, so a message can be
 * lost with its connection, or, once in CI on rxe, with no error anywhere; every rank then
 * waited out the barrier's timeout. The barrier now repeats an ARRIVE while it waits, and
 * rank 1 answers an ARRIVE at an epoch it released already with that RELEASE again.
 * Before that change the two loss cases here timed out. Likewise a replacement's QUERY
 * (which barrier the group is at) and its answer: asked once, a lost one left the
 * replacement counting from the start barrier, and every later barrier failed.
 */
#include "net/barrier.c"

#include <CUnit/Basic.h>
#include <stdatomic.h>
#include <stdlib.h>

/* CUnit's asserts are for the main thread: the stub, on the ranks' threads, aborts. */
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); abort(); } } while (0)

#define RANKS 3
#define BARRIERS 3
/* Each rank's barrier timeout: well beyond one repeat (BARRIER_RESEND_MS). */
#define WAIT_MS 8000

static struct ddss_net nets[RANKS + 1];
static struct ddss_tp tps[RANKS + 1];
static uint32_t arrived[RANKS + 1];
static enum ddss_tp_peer_state states[RANKS + 1];

/* Which message to lose (kind 0: none), once; and what was sent, by kind. */
static pthread_mutex_t drop_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t drop_kind, drop_from, drop_to, drop_epoch;
static bool dropped;
static atomic_uint sent[BARRIER_STATE + 1];

int ddss_net_send(struct ddss_net *n, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	uint32_t from = n->env.rank;
	struct barrier_msg m;
	bool drop;

	CHECK(tag == DDSS_MSG_BARRIER && len == sizeof(m));
	CHECK(peer >= 1 && peer <= RANKS && peer != from);
	memcpy(&m, buf, sizeof(m));
	CHECK(le32toh(m.kind) <= BARRIER_STATE);
	atomic_fetch_add(&sent[le32toh(m.kind)], 1);
	pthread_mutex_lock(&drop_mu);
	drop = !dropped && le32toh(m.kind) == drop_kind && from == drop_from && peer == drop_to &&
	       le32toh(m.epoch) == drop_epoch;
	dropped |= drop;
	pthread_mutex_unlock(&drop_mu);
	if (!drop) /* delivered at once, on the sender's thread, as a receive thread would */
		ddss_net_barrier_on_msg(&nets[peer], from, buf, len);
	return 0;
}

int ddss_net_cond_wait(struct ddss_net *n, int64_t deadline_ns)
{
	struct timespec ts = { deadline_ns / 1000000000, deadline_ns % 1000000000 };

	return pthread_cond_timedwait(&n->cv, &n->mu, &ts) == 0;
}

int64_t ddss_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Coordinator mode (net/coordinator.h): not used here. */
int ddss_coord_set_serving(struct ddss_coord *c)
{
	(void)c;
	abort();
}

bool ddss_coord_in_view(struct ddss_coord *c, uint32_t rank)
{
	(void)c;
	(void)rank;
	abort();
}

static void group_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	memset(arrived, 0, sizeof(arrived));
	for (uint32_t r = 1; r <= RANKS; r++) {
		states[r] = DDSS_TP_PEER_UP;
		memset(&nets[r], 0, sizeof(nets[r]));
		nets[r].tp = &tps[r];
		nets[r].env.rank = r;
		nets[r].env.size = RANKS;
		nets[r].env.connect_timeout_ms = WAIT_MS;
		nets[r].peer_state = states;
		nets[r].barrier_arrived = r == 1 ? arrived : NULL;
		pthread_mutex_init(&nets[r].mu, NULL);
		pthread_cond_init(&nets[r].cv, &ca);
	}
	pthread_condattr_destroy(&ca);
	for (unsigned k = 0; k <= BARRIER_STATE; k++)
		atomic_store(&sent[k], 0);
	dropped = false;
}

static void group_fini(void)
{
	for (uint32_t r = 1; r <= RANKS; r++) {
		pthread_cond_destroy(&nets[r].cv);
		pthread_mutex_destroy(&nets[r].mu);
	}
}

struct rank_run {
	pthread_t th;
	uint32_t rank;
	int rc[BARRIERS];
};

static void *rank_main(void *arg)
{
	struct rank_run *run = arg;

	for (unsigned i = 0; i < BARRIERS; i++)
		run->rc[i] = ddss_net_barrier(&nets[run->rank], WAIT_MS);
	return NULL;
}

/* Every rank takes BARRIERS barriers with message @kind from @from to @to at @epoch lost
 * (kind 0: none); every barrier of every rank must pass. */
static void run_group(uint32_t kind, uint32_t from, uint32_t to, uint32_t epoch)
{
	struct rank_run runs[RANKS + 1];

	group_init();
	drop_kind = kind, drop_from = from, drop_to = to, drop_epoch = epoch;
	for (uint32_t r = 1; r <= RANKS; r++) {
		runs[r].rank = r;
		CU_ASSERT_FATAL(pthread_create(&runs[r].th, NULL, rank_main, &runs[r]) == 0);
	}
	for (uint32_t r = 1; r <= RANKS; r++) {
		pthread_join(runs[r].th, NULL);
		for (unsigned i = 0; i < BARRIERS; i++) {
			if (runs[r].rc[i])
				fprintf(stderr, "rank %u, barrier %u: %s\n", r, i + 1,
					strerror(-runs[r].rc[i]));
			CU_ASSERT_EQUAL(runs[r].rc[i], 0);
		}
		CU_ASSERT_EQUAL(nets[r].barrier_released, BARRIERS);
	}
	CU_ASSERT_EQUAL(dropped, kind != 0);
	group_fini();
}

static void test_no_loss(void)
{
	run_group(0, 0, 0, 0);
	/* Each barrier: one ARRIVE from each other rank, one RELEASE to each; no repeats
	 * unless a barrier took a second here (a stalled machine). */
	CU_ASSERT(atomic_load(&sent[BARRIER_ARRIVE]) >= BARRIERS * (RANKS - 1));
	CU_ASSERT(atomic_load(&sent[BARRIER_RELEASE]) >= BARRIERS * (RANKS - 1));
}

/* Rank 1 released epoch 2, and rank 2's RELEASE never came (the CI case). */
static void test_release_lost(void)
{
	run_group(BARRIER_RELEASE, 1, 2, 2);
	/* Rank 2 asked again, and rank 1 released it again. */
	CU_ASSERT(atomic_load(&sent[BARRIER_ARRIVE]) > BARRIERS * (RANKS - 1));
	CU_ASSERT(atomic_load(&sent[BARRIER_RELEASE]) > BARRIERS * (RANKS - 1));
}

/* Rank 3's ARRIVE at epoch 1 never reached rank 1. */
static void test_arrive_lost(void)
{
	run_group(BARRIER_ARRIVE, 3, 1, 1);
	CU_ASSERT(atomic_load(&sent[BARRIER_ARRIVE]) > BARRIERS * (RANKS - 1));
}

/* An ARRIVE at a released epoch is answered to its sender alone; one at the open epoch
 * only counts. */
static void test_repeat_answered_alone(void)
{
	struct barrier_msg m = { htole32(BARRIER_ARRIVE), htole32(1) };

	group_init();
	drop_kind = 0;
	arrived[1] = arrived[2] = arrived[3] = 1;
	nets[1].barrier_epoch = nets[1].barrier_released = 1;
	ddss_net_barrier_on_msg(&nets[1], 3, &m, sizeof(m));
	CU_ASSERT_EQUAL(atomic_load(&sent[BARRIER_RELEASE]), 1);
	CU_ASSERT_EQUAL(nets[3].barrier_released, 1);
	CU_ASSERT_EQUAL(nets[2].barrier_released, 0); /* nothing to rank 2 */
	m.epoch = htole32(2);
	ddss_net_barrier_on_msg(&nets[1], 3, &m, sizeof(m));
	CU_ASSERT_EQUAL(atomic_load(&sent[BARRIER_RELEASE]), 1);
	CU_ASSERT_EQUAL(arrived[3], 2);
	CU_ASSERT_EQUAL(nets[1].barrier_released, 1);
	group_fini();
}

/*
 * An ARRIVE at a released epoch from a rank that had not arrived there (it counts from
 * another epoch: a replacement whose QUERY went unanswered) gets no RELEASE: letting it
 * through would let it pass barriers the group took without it.
 */
static void test_stale_epoch_not_released(void)
{
	struct barrier_msg m = { htole32(BARRIER_ARRIVE), htole32(2) };

	group_init();
	drop_kind = 0;
	arrived[1] = arrived[2] = 3;
	arrived[3] = 0;
	nets[1].barrier_epoch = nets[1].barrier_released = 3;
	ddss_net_barrier_on_msg(&nets[1], 3, &m, sizeof(m));
	CU_ASSERT_EQUAL(atomic_load(&sent[BARRIER_RELEASE]), 0);
	CU_ASSERT_EQUAL(nets[3].barrier_released, 0);
	group_fini();
}

/*
 * Rank 3 is a replacement (a process let in after the start; no members to connect to
 * here) while the group is past barrier 5; message @kind of its question (QUERY, 3 -> 1)
 * or of the answer (STATE, 1 -> 3, carrying 5) is lost. It must still count on from 5.
 */
static void replacement_asks(uint32_t kind)
{
	int64_t t0;
	int rc;

	group_init();
	drop_kind = kind;
	drop_from = kind == BARRIER_QUERY ? 3 : 1;
	drop_to = kind == BARRIER_QUERY ? 1 : 3;
	drop_epoch = kind == BARRIER_QUERY ? 0 : 5;
	arrived[1] = arrived[2] = 5;
	nets[1].barrier_epoch = nets[1].barrier_released = 5;
	nets[3].env.running = true;
	t0 = ddss_now_ns();
	rc = enter_running(&nets[3]);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(dropped);
	CU_ASSERT_EQUAL(nets[3].barrier_released, 5);
	CU_ASSERT_EQUAL(nets[3].barrier_epoch, 5);
	CU_ASSERT_FALSE(nets[3].barrier_asked);
	CU_ASSERT(atomic_load(&sent[BARRIER_QUERY]) >= 2);
	/* Answered by the repeat, not at the deadline. */
	CU_ASSERT(ddss_now_ns() - t0 < (int64_t)WAIT_MS * 1000000 / 2);
	group_fini();
}

static void test_query_lost(void)
{
	replacement_asks(BARRIER_QUERY);
}

static void test_state_lost(void)
{
	replacement_asks(BARRIER_STATE);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("barrier with a lost message", NULL, NULL);
	CU_add_test(s, "no loss", test_no_loss);
	CU_add_test(s, "a RELEASE lost", test_release_lost);
	CU_add_test(s, "an ARRIVE lost", test_arrive_lost);
	CU_add_test(s, "a repeated ARRIVE is answered to its sender alone",
		    test_repeat_answered_alone);
	CU_add_test(s, "an ARRIVE from another epoch is not let through",
		    test_stale_epoch_not_released);
	CU_add_test(s, "a replacement's QUERY lost", test_query_lost);
	CU_add_test(s, "the answer to a replacement's QUERY lost", test_state_lost);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
