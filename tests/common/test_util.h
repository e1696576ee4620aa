/* Helpers shared by the test programs. */
#ifndef DDSS_TEST_UTIL_H
#define DDSS_TEST_UTIL_H

#include "ddss/ddss.h" /* ddss_strerror, for EXPECT_RC */

#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

/* Exit status that ctest reports as SKIP (SKIP_RETURN_CODE). */
#define TEST_SKIP_EXIT 77

/** Verbs tests: the first address of DDSS_RDMA_HOST into @host (@len bytes), or print SKIP
 * and exit with TEST_SKIP_EXIT when it is unset (not under scripts/rdma-exec). */
void test_rdma_host_or_skip(char *host, size_t len);

/** Fill @buf with bytes derived from @seed and each byte's position. */
void test_fill(void *buf, size_t len, uint64_t seed);
/** Index of the first byte that differs from test_fill(seed), or SIZE_MAX if none. */
size_t test_check(const void *buf, size_t len, uint64_t seed);

/**
 * Run every registered CUnit suite (verbose), print the summary, and return the number of
 * failed assertions plus failed suite set-ups; 0 means all passed.
 */
unsigned test_run_all(void);

/*
 * Assertions of the multi-rank suites (main thread only): a call's return value, or a
 * count, printed with the rank (the suite's `me`), line and both values when it differs.
 */
#define EXPECT_RC(call, want)                                                              \
	do {                                                                               \
		int rc_ = (call), want_ = (want);                                          \
		if (rc_ != want_)                                                          \
			fprintf(stderr, "rank %u: line %d: %s = %d (%s), expected %d (%s)\n", \
				me, __LINE__, #call, rc_, ddss_strerror(rc_), want_,       \
				ddss_strerror(want_));                                     \
		CU_ASSERT_EQUAL(rc_, want_);                                               \
	} while (0)

#define EXPECT_EQ(got, want, what)                                                         \
	do {                                                                               \
		unsigned long long g_ = (unsigned long long)(got);                         \
		unsigned long long w_ = (unsigned long long)(want);                        \
		if (g_ != w_)                                                              \
			fprintf(stderr, "rank %u: line %d: %s = %llu, expected %llu\n", me, \
				__LINE__, what, g_, w_);                                   \
		CU_ASSERT_EQUAL(g_, w_);                                                   \
	} while (0)

/**
 * A worker thread's failed check (worker threads never call CUnit: it is not thread-safe).
 * Counts it in *@failures and prints the first 5 as "rank R thread T: message"; the main
 * thread asserts the sum.
 */
void test_thread_fail(unsigned *failures, uint32_t rank, unsigned tid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/** Milliseconds on the monotonic clock. */
double test_now_ms(void);

/* The whole file at @path, NUL-terminated (malloc'd; "" if it cannot be read). */
char *test_read_file(const char *path);
/** A listening tcp socket on a free port of 127.0.0.1 (for a daemon's DDSS_LISTEN_FD), its
 * port in *port_p; -1 on failure. */
int test_listen_loopback(unsigned *port_p);

/** Allocate @len bytes aligned to 4096, zeroed; aborts on failure (tests only). */
void *test_alloc_pool(size_t len);

/**
 * For tests of the peer timeout: take "--timeout-ms N" from the arguments into *timeout_ms
 * (the environment's DDSS_PEER_TIMEOUT_MS wins; else it is set from it), and check that
 * ddssrun started @nranks ranks. 0, or an exit status (2) after saying why.
 */
int test_peer_timeout_args(int argc, char **argv, unsigned nranks, int *timeout_ms);

struct ddss_net;
/** Join the group described by the environment (ddssrun), or exit(1) saying why. */
struct ddss_net *test_net_open_or_exit(void);
/**
 * Group barrier, or exit(1) at once: a rank that cannot synchronise must not leave the
 * others waiting (ddssrun stops them when this rank fails).
 */
void test_barrier_or_exit(struct ddss_net *net, int timeout_ms);

/*
 * Control counters: ranks tell each other "event c happened" with a small message on
 * @tag (DDSS_MSG_USER_FIRST or above); each rank counts what it received per event.
 */
#define TEST_CTRL_EVENTS 8
/** Handle @tag on @net (before ddss_net_start): 0 or -errno. */
int test_ctrl_register(struct ddss_net *net, uint16_t tag);
/** Tell rank @to that event @c (< TEST_CTRL_EVENTS) happened. */
int test_ctrl_send(uint32_t to, uint32_t c);
/** Wait until event @c was received @want times, at most @timeout_ms: whether it was. */
bool test_ctrl_wait(uint32_t c, unsigned want, int timeout_ms);

/*
 * The board: a named segment through which the ranks of a ddss context pass numbers (keys,
 * counts) to each other. Rank r owns TEST_BOARD_SLOTS 8-byte slots; everyone reads them.
 */
#define TEST_BOARD_SLOTS 64
struct ddss_ctx;
/** Create (or find) the board for every rank of @ctx; 0 or -errno. Collective in effect. */
int test_board_open(struct ddss_ctx *ctx);
/** Write this rank's slot @i (asserted, fatal on failure). */
void test_board_put(unsigned i, uint64_t v);
/** Read rank @from's slot @i (asserted; 0 on failure). */
uint64_t test_board_get(uint32_t from, unsigned i);
/** Whether @ctx is attached to a daemon (daemon mode): the rank's internals are not here. */
bool test_ctx_is_client(struct ddss_ctx *ctx);
/** The transport's name, or "daemon" in daemon mode (for suite names). */
const char *test_ctx_transport(struct ddss_ctx *ctx);
/** Released segments whose home (this rank, direct mode) has not yet freed their memory. */
uint64_t test_segments_draining(struct ddss_ctx *ctx);
/** One increment of the 8-byte counter @key under its exclusive lock: 0 or the first error. */
int test_locked_increment(struct ddss_ctx *ctx, uint64_t key);
/* Word @w (the 8 bytes at 8 * @w) of segment @key, once another rank has made it nonzero:
 * polled every 10 ms for @timeout_ms at most; 0 if it stayed zero or a get failed. */
uint64_t test_wait_word(struct ddss_ctx *ctx, uint64_t key, unsigned w, int timeout_ms);
/*
 * For processes that check without CUnit (several processes of one test, each judging
 * itself): a failed @cond prints where and why, prefixed by @me (the rank), and counts in
 * test_failures. Exit with test_failures ? 1 : 0.
 */
extern int test_failures;
#define TEST_CHECK(me, cond, ...)                                                          \
	do {                                                                               \
		if (!(cond)) {                                                             \
			printf("rank %u: FAIL %s:%d: ", (unsigned)(me), __FILE__, __LINE__);  \
			printf(__VA_ARGS__);                                               \
			printf("\n");                                                      \
			test_failures++;                                                   \
		}                                                                          \
	} while (0)

/**
 * For a test whose rank @victim is to be killed (SIGKILL) mid-run: called first in each
 * rank process (DDSS_RANK, before ddss_init). In the victim's process it forks: the child
 * returns and becomes the rank, the parent waits for it and exits 0 only if it died of
 * SIGKILL (ddssrun, which fails a run when a rank dies, sees that rank end well). Other
 * ranks return at once.
 */
void test_fork_victim(uint32_t victim);
/** ddss_init with the defaults, in a group of @size ranks, or exit(1) saying why. */
struct ddss_ctx *test_init_ranks_or_exit(uint32_t size);
/** ddss_init with the attr's defaults and @peer_timeout_ms; NULL (the error printed) on
 * failure. */
struct ddss_ctx *test_init_peer_timeout(int peer_timeout_ms);

/** Coordinator mode: set DDSS_LISTEN to the same host as now, port 0 (any free one), for a
 * process that replaces this one, as it would listen on another machine. */
void test_listen_elsewhere(void);
/** ddss_barrier on @ctx, or exit(1) saying why (see test_barrier_or_exit). */
void test_ctx_barrier_or_exit(struct ddss_ctx *ctx);
/** Whether process @pid is stopped (SIGSTOP) within @timeout_ms: its state in /proc,
 * polled. False at once if it does not exist. */
bool test_wait_stopped(int pid, int timeout_ms);
/** Freeze (SIGSTOP) process @pid, another rank's, and wait until it is stopped; checked
 * as rank @me. Exits on a pid of 1 or less (kill(0) or kill(-1) would stop us all). */
void test_stop_process(uint32_t me, int pid);
/** For a 2-rank test of a frozen rank 2: a segment @name at rank 2 that holds @magic in
 * word 0 and rank 2's pid in word 1 (all ranks, a barrier after). Rank 1 then freezes
 * rank 2 (test_stop_process) and gets its pid in *pid_p; other ranks get 0. */
ddss_key_t test_freeze_rank2(struct ddss_ctx *ctx, uint32_t me, const char *name, uint64_t magic,
			     int *pid_p);
/** Wake rank 2 (SIGCONT to @pid, from test_freeze_rank2) and read word 0 of @key up to
 * @tries times, until one succeeds (the first may meet the end of an attempt made while it
 * was frozen); checks, as rank 1, that one did and read @magic. */
void test_wake_rank2(struct ddss_ctx *ctx, int pid, ddss_key_t key, uint64_t magic, int tries);
/** Fail this rank's connection to the rank of process @pid by an operation timeout (run
 * with a short DDSS_OP_TIMEOUT_MS): freeze it (SIGSTOP), get 8 bytes of @at_it, a segment
 * homed there, wake it (SIGCONT). Prints how long the get took; checks, as rank @me, that
 * it said -ETIMEDOUT. */
void test_cut_by_timeout(struct ddss_ctx *ctx, uint32_t me, int pid, ddss_key_t at_it);
/** A named segment of @len bytes homed at rank @home (every rank that asks gets the same),
 * or exit(1) saying why, as rank @me. */
ddss_key_t test_segment_at(struct ddss_ctx *ctx, uint32_t me, const char *name, uint32_t home,
			   size_t len);
/** A write-model segment @name of @len bytes homed at rank 1 (every rank that asks gets
 * the same), whose version 1 rank 1 puts, every byte @byte (checked); exit(1) saying why if
 * it cannot be made, as rank @me. No barrier. */
ddss_key_t test_write_segment_v1(struct ddss_ctx *ctx, uint32_t me, const char *name, size_t len,
				 unsigned char byte);
/* What test_put_retrying saw before it returned. */
struct test_put_tally {
	unsigned eio, other; /* failures: -EIO, and any other error */
	int last_other;      /* the last of the others (0: none) */
	double ms;           /* how long it took */
};
/** Put @len bytes of @v at offset 0 of @key until a put succeeds or @timeout_ms passed
 * (a repair after a writer died); the last put's result. */
int test_put_retrying(struct ddss_ctx *ctx, ddss_key_t key, const void *v, size_t len,
		      int timeout_ms, struct test_put_tally *tally);
/** Try-lock @key exclusively until a try succeeds or @timeout_ms passed, pausing 10 ms
 * after each -EBUSY (a caller's retry loop): the last try's result. The tries in *tries_p,
 * those that said -EBUSY in *busy_p, the time taken in *ms_p. A lock taken is kept. */
int test_try_lock_until(struct ddss_ctx *ctx, ddss_key_t key, int timeout_ms, unsigned *tries_p,
			unsigned *busy_p, double *ms_p);
/** Put @v into the 8-byte word @w of @key (a signal between ranks); checked as rank @me. */
void test_put_word(struct ddss_ctx *ctx, uint32_t me, ddss_key_t key, unsigned w, uint64_t v);
/** The last signal to @key's home, which leaves (exits) once it sees it: put @v into the word
 * @w, not checked. The home can read the bytes and exit before its reply to the put goes
 * out, so the put may fail after it landed; the home checks that it saw the word. */
void test_put_farewell(struct ddss_ctx *ctx, uint32_t me, ddss_key_t key, unsigned w, uint64_t v);

#endif
