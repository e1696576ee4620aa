/*
 * tcp: a request posted DDSS_TP_LATER (a lock's posted release) is held for its thread's
 * next request to the peer and leaves in the same write, and is sent alone within the
 * bound when none comes (src/net/tcp/tcp_later.c).
 *
 * Two in-process tcp transports on loopback: rank 1 (the home), rank 2 (the poster). Each
 * case posts a compare&swap 0 -> 1 on a word of the home's pool with DDSS_TP_LATER:
 *  2. (first) bound 20 ms, and nothing more to the peer: the word turns 1 at the home
 *     within 5 s (the progress thread sent it), alone (sends_combined unchanged);
 *  1. bound 10 s, then a read of the same word: both leave in one write (the transport's
 *     sends_combined counter moves by one), the read sees 1, the cas returns 0;
 *  3. bound 10 s, then a wait on the cas itself: the wait sends it (returns well within
 *     the bound);
 *  4. four threads post held ones at once (bound 50 us) and wait for them to land without
 *     touching the channel (below);
 *  4. the provider says it holds such requests (holds_later), which the lock layer reads.
 * Without the hold case 1 fails (nothing combined); without the deadline case 2 does.
 */
#include "common/test_util.h"
#include "common/tp_pair.h"
#include "net/tcp/tcp.h"
#include "net/transport.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WAIT_MS 5000

static struct tp_proc home, poster;

static uint64_t combined(void)
{
	return __atomic_load_n(&poster.tp->sends_combined, __ATOMIC_RELAXED);
}

static int post_later(unsigned word, struct ddss_tp_req *req)
{
	return poster.tp->ops->post_ex(poster.tp, DDSS_TP_OP_CAS, 1, 8 * word, NULL, 0, 0, 1,
				       DDSS_TP_LATER, req);
}

/* Wait for @req, then check it swapped 0 for 1 at word @word of the home's pool. */
static void check_cas(const char *what, unsigned word, struct ddss_tp_req *req)
{
	int r = ddss_tp_wait(poster.tp, req, WAIT_MS);

	TEST_CHECK(2, r == 0 && req->status == 0, "%s: the cas: %d, status %d", what, r,
		   req->status);
	TEST_CHECK(2, req->result == 0, "%s: the cas returned %llu, expected 0", what,
		   (unsigned long long)req->result);
	TEST_CHECK(1, __atomic_load_n(&home.pool[word], __ATOMIC_SEQ_CST) == 1,
		   "%s: word %u is %llu at the home, expected 1", what, word,
		   (unsigned long long)home.pool[word]);
}

static void case_rides_with_next(void)
{
	struct ddss_tp_req req;
	uint64_t before, seen = 0;
	int r;

	tcp_later_ns = 10L * 1000000000L;
	before = combined();
	r = post_later(1, &req);
	TEST_CHECK(2, r == 0, "case 1: posting the cas: %d (%s)", r, ddss_strerror(r));
	r = ddss_tp_read(poster.tp, 1, 8, &seen, sizeof(seen));
	TEST_CHECK(2, r == 0, "case 1: the read behind it: %d (%s)", r, ddss_strerror(r));
	printf("rank 2, case 1: the read behind the held cas saw %llu; requests sent in another's "
	       "write: %llu\n", (unsigned long long)seen, (unsigned long long)(combined() - before));
	TEST_CHECK(2, seen == 1, "case 1: the read saw %llu: the cas did not go before it",
		   (unsigned long long)seen);
	TEST_CHECK(2, combined() - before == 1,
		   "case 1: %llu requests went in another's write, expected 1 (the cas held "
		   "for the read)", (unsigned long long)(combined() - before));
	check_cas("case 1", 1, &req);
}

static void case_deadline(void)
{
	struct ddss_tp_req req;
	uint64_t before;
	int64_t t0, give_up;
	int r;

	tcp_later_ns = 20L * 1000000L;
	before = combined();
	t0 = ddss_now_ns();
	r = post_later(2, &req);
	TEST_CHECK(2, r == 0, "case 2: posting the cas: %d (%s)", r, ddss_strerror(r));
	give_up = t0 + (int64_t)WAIT_MS * 1000000;
	while (__atomic_load_n(&home.pool[2], __ATOMIC_SEQ_CST) == 0 && ddss_now_ns() < give_up)
		usleep(1000);
	printf("rank 1, case 2: the cas nobody followed landed after %.1f ms (bound %ld ms)\n",
	       (double)(ddss_now_ns() - t0) / 1e6, tcp_later_ns / 1000000);
	TEST_CHECK(1, home.pool[2] == 1, "case 2: the held cas never reached the home in %d ms",
		   WAIT_MS);
	TEST_CHECK(2, combined() == before, "case 2: the cas went in another's write");
	check_cas("case 2", 2, &req);
}

static void case_wait_sends(void)
{
	struct ddss_tp_req req;
	int64_t t0;
	int r;

	tcp_later_ns = 10L * 1000000000L;
	r = post_later(3, &req);
	TEST_CHECK(2, r == 0, "case 3: posting the cas: %d (%s)", r, ddss_strerror(r));
	t0 = ddss_now_ns();
	check_cas("case 3", 3, &req);
	printf("rank 2, case 3: waiting for the held cas took %.1f ms\n",
	       (double)(ddss_now_ns() - t0) / 1e6);
	TEST_CHECK(2, ddss_now_ns() - t0 < (int64_t)WAIT_MS * 1000000,
		   "case 3: the wait did not send the held cas");
}

/*
 * Case 4: THREADS threads, each on a word of its own, post ROUNDS compare&swaps i -> i + 1
 * with DDSS_TP_LATER and then wait for the home's word to move without touching the
 * channel: the timer (bound 50 us) or another thread's send takes each out. Posters then
 * race the progress thread's sends and the timer's re-arming (the TSan run's point). Every
 * cas must return i and the words end at ROUNDS.
 */
#define THREADS 4
#define ROUNDS 200

static void *case_threads_main(void *arg)
{
	unsigned word = 8 + (unsigned)(uintptr_t)arg;

	for (uint64_t i = 0; i < ROUNDS; i++) {
		int64_t give_up = ddss_now_ns() + 1000000000LL; /* 1 s: 20,000 bounds */
		struct ddss_tp_req req;
		int r = poster.tp->ops->post_ex(poster.tp, DDSS_TP_OP_CAS, 1, 8 * word, NULL, 0, i,
						i + 1, DDSS_TP_LATER, &req);

		if (r) {
			TEST_CHECK(2, false, "case 4: word %u, round %llu: posting: %d (%s)", word,
				   (unsigned long long)i, r, ddss_strerror(r));
			return NULL;
		}
		while (__atomic_load_n(&home.pool[word], __ATOMIC_SEQ_CST) == i &&
		       ddss_now_ns() < give_up)
			sched_yield();
		if (__atomic_load_n(&home.pool[word], __ATOMIC_SEQ_CST) == i) {
			TEST_CHECK(2, false, "case 4: word %u, round %llu: the held cas was not sent "
				   "in 1 s (bound 50 us)", word, (unsigned long long)i);
			ddss_tp_wait(poster.tp, &req, WAIT_MS); /* its frame points into req */
			return NULL;
		}
		r = ddss_tp_wait(poster.tp, &req, WAIT_MS);
		if (r || req.status || req.result != i) {
			TEST_CHECK(2, false, "case 4: word %u, round %llu: %d, status %d, old %llu",
				   word, (unsigned long long)i, r, req.status,
				   (unsigned long long)req.result);
			return NULL;
		}
	}
	return NULL;
}

static void case_threads(void)
{
	pthread_t th[THREADS];
	int64_t t0 = ddss_now_ns();
	unsigned started = 0;

	tcp_later_ns = 50L * 1000; /* before the threads: they read it when they arm */
	for (unsigned i = 0; i < THREADS; i++)
		started += pthread_create(&th[i], NULL, case_threads_main, (void *)(uintptr_t)i) == 0;
	TEST_CHECK(2, started == THREADS, "case 4: %u of %u threads started", started, THREADS);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	printf("rank 2, case 4: %u threads x %u held cas each, sent by the timer or another's "
	       "send: %.1f ms\n", THREADS, ROUNDS, (double)(ddss_now_ns() - t0) / 1e6);
	for (unsigned i = 0; i < started; i++)
		TEST_CHECK(1, __atomic_load_n(&home.pool[8 + i], __ATOMIC_SEQ_CST) == ROUNDS,
			   "case 4: word %u ends at %llu, expected %u", 8 + i,
			   (unsigned long long)home.pool[8 + i], ROUNDS);
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0x1a7e, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 30000,
		.connect_timeout_ms = 3000,
	};

	tp_proc_open(p, &cfg);
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	int lfd[2];
	uint64_t w;
	int r;

	tp_pair_listen(nodes, lfd, 2);
	open_proc(&home, 1, nodes, lfd[0]);
	open_proc(&poster, 2, nodes, lfd[1]);
	TEST_CHECK(2, poster.tp->holds_later, "the tcp provider does not say it holds later "
		   "requests (the lock layer would send its release alone)");
	/* Connected first, so that no case's frame waits behind the handshake. */
	r = ddss_tp_read(poster.tp, 1, 0, &w, sizeof(w));
	TEST_CHECK(2, r == 0, "the first read: %d (%s)", r, ddss_strerror(r));
	/* The short bounds first: a timer armed with a long one stays armed until it fires,
	 * and a frame held meanwhile waits for it (the bound is a constant outside tests).
	 * Case 2 ends once its timer fired. */
	case_deadline();
	case_threads();
	case_rides_with_next();
	case_wait_sends();
	tp_proc_close(&poster);
	tp_proc_close(&home);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
