/*
 * tcp: a thread spinning for its answer gives its core away now and then, so that the
 * home it waits for runs when the two share a core (src/net/tcp/tcp_chan.c, rx_fill).
 *
 * The convoy this guards against (docs/transport.md, "A spinning waiter beside its
 * home"): the home's answer wakes the waiter onto the home's core (a socket's wake-up
 * tells the scheduler the waker will sleep soon), and the waiter takes the core while the
 * home, polling for the next request, stays runnable. The waiter sends its next request
 * and spins in recv. The home has the request but not the core, and nothing wakes it: it
 * is runnable already. It runs only when the waiter's spin bound ends and the waiter
 * sleeps; then its answer wakes the waiter, which takes the core again. Every request
 * costs the spin bound. ddss-daemon-bench ran every call at 32 us instead of 10 in that
 * state (a daemon's worker spins at least 20 us).
 *
 * Two in-process tcp transports on loopback, the whole process on one CPU: rank 1 (the
 * home, adaptive: it polls after serving) and rank 2 (the reader). The reader's first
 * read waits in the kernel (event mode), so that the home's answer wakes it: the entry
 * into the convoy. Then ROUNDS reads in adaptive mode with a spin bound of SPIN_NS
 * (shorter than the time after which the home's poll sees that it shares its core). Each
 * read must see the home's word, and the reader must sleep in fewer than a quarter of
 * them: its voluntary context switches, counted by the kernel. In the convoy it sleeps in
 * every one (1000 of 1000, 40 us a read against 10).
 */
#include "common/test_util.h"
#include "common/tp_pair.h"
#include "net/spin.h"
#include "net/transport.h"

#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>

#define ROUNDS 1000
#define SPIN_NS 30000 /* as a daemon's worker spins (20 us and more); under 50 us */
#define MAGIC 0x5eed0f5eed0f5eedull

static struct tp_proc home, reader;

/* The lowest CPU this process may run on, or -1. */
static int first_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			return c;
	return -1;
}

/* The calling thread's voluntary context switches: the times it slept. */
static long sleeps(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) ? -1 : ru.ru_nvcsw;
}

static void open_proc(struct tp_proc *p, uint32_t rank, const struct ddss_tp_node *nodes, int lfd,
		      enum ddss_tp_completion completion)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = 0x5919, .nodes = nodes, .listen_fd = lfd,
		.completion = completion, .op_timeout_ms = 30000, .connect_timeout_ms = 3000,
	};

	tp_proc_open(p, &cfg);
}

int main(void)
{
	struct ddss_tp_node nodes[2] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	int cpu = first_cpu();
	unsigned good = 0;
	cpu_set_t one;
	int64_t t0, took;
	long slept;
	int lfd[2];
	uint64_t w;
	int r;

	CPU_ZERO(&one);
	if (cpu >= 0)
		CPU_SET(cpu, &one);
	/* Before any thread starts: the transports' threads inherit the mask. */
	TEST_CHECK(2, cpu >= 0 && sched_setaffinity(0, sizeof(one), &one) == 0,
		   "cannot put the process on one CPU (cpu %d)", cpu);
	tp_pair_listen(nodes, lfd, 2);
	open_proc(&home, 1, nodes, lfd[0], DDSS_TP_COMPLETION_ADAPTIVE);
	open_proc(&reader, 2, nodes, lfd[1], DDSS_TP_COMPLETION_EVENT);
	ddss_spin_thread_floor(SPIN_NS);
	__atomic_store_n(&home.pool[1], MAGIC, __ATOMIC_SEQ_CST);
	r = ddss_tp_read(reader.tp, 1, 0, &w, sizeof(w)); /* connects */
	TEST_CHECK(2, r == 0, "the first read: %d (%s)", r, ddss_strerror(r));
	r = ddss_tp_read(reader.tp, 1, 0, &w, sizeof(w)); /* asleep when the answer comes */
	TEST_CHECK(2, r == 0, "the read in event mode: %d (%s)", r, ddss_strerror(r));
	/* Read by each wait (rx_fill); the home does not look at the reader's mode. */
	reader.tp->cfg.completion = DDSS_TP_COMPLETION_ADAPTIVE;

	slept = sleeps();
	t0 = ddss_now_ns();
	for (unsigned i = 0; i < ROUNDS; i++) {
		w = 0;
		r = ddss_tp_read(reader.tp, 1, 8, &w, sizeof(w));
		if (r) {
			TEST_CHECK(2, false, "read %u: %d (%s)", i, r, ddss_strerror(r));
			break;
		}
		good += w == MAGIC;
	}
	took = ddss_now_ns() - t0;
	slept = sleeps() - slept;
	printf("rank 2: %u reads beside the home on cpu %d, spinning up to %d us: %.1f us each; "
	       "the reader slept %ld times; %u reads saw the home's word\n", ROUNDS, cpu,
	       SPIN_NS / 1000, (double)took / 1e3 / ROUNDS, slept, good);
	TEST_CHECK(2, good == ROUNDS, "%u of %u reads saw %#llx", good, ROUNDS,
		   (unsigned long long)MAGIC);
	TEST_CHECK(2, slept >= 0 && slept < ROUNDS / 4,
		   "the reader slept %ld times in %u reads: it kept the core from the home until "
		   "its spin ran out (a convoy)", slept, ROUNDS);
	tp_proc_close(&reader);
	tp_proc_close(&home);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
