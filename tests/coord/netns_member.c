/*
 * One process of tests/coord/netns_fault.sh: a group of 4 formed through etcd, each rank
 * in its own network namespace; rank 4 is killed, frozen or cut off, and a replacement
 * takes slot 4 from a fifth namespace. TEST_ROLE says which part this process plays:
 *
 *   survivor     ranks 1-3: locked increments throughout; when the replacement is in,
 *                record the fence word (F1); then more increments, with the replacement;
 *                rank 1 checks the counter against everyone's count, and, once the driver
 *                says the old process has ended, that the fence word is still F1
 *   victim       rank 4's first process: puts an increasing number into the fence word
 *                (homed at rank 2) until a call fails; prints the last one acknowledged
 *   replacement  rank 4's next process: joins the running group, serves a segment of its
 *                own, and increments with the others
 *
 * Files in TEST_DIR carry what the driver and the processes tell each other: ready-R,
 * keys, back (the replacement is in), fault-ns (when the fault was made), victim-done.
 * Every wait is bounded; every process prints RESULT lines and exits 0 only if its checks
 * held.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "net/net.h"

#include <ddss/ddss.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 3000
#define NRANKS 4
#define VICTIM 4
#define AFTER 100 /* increments each after the replacement is in */
#define WAIT_MS 60000
#define NEW_VALUE 0x4e3e57u

enum { W_BACK = 0, W_NEWSEG = 1, W_F1 = 2, W_COUNT = 3, W_DONE = 3 + NRANKS,
       W_VIEW = 3 + 2 * NRANKS, W_READ = 3 + 3 * NRANKS, W_WORDS = 3 + 4 * NRANKS };

static ddss_ctx_t *ctx;
static uint32_t me;
static const char *dir;
static ddss_key_t results, counter, fence;
#define CHECK(cond, ...) TEST_CHECK(me, cond, __VA_ARGS__)

static void path_of(const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", dir, name);
}

static void touch(const char *name, const char *text)
{
	char path[512];
	FILE *f;

	path_of(name, path, sizeof(path));
	f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* Wait (bounded) for file @name; its first line in @buf. */
static bool wait_file(const char *name, char *buf, size_t len)
{
	char path[512];
	double t0 = test_now_ms();

	path_of(name, path, sizeof(path));
	while (test_now_ms() - t0 < WAIT_MS) {
		FILE *f = fopen(path, "r");

		if (f) {
			bool ok = fgets(buf, (int)len, f) != NULL;

			fclose(f);
			if (ok)
				return true;
		}
		usleep(20000); /* a bounded poll of a file another process writes */
	}
	return false;
}

static uint64_t word(unsigned w)
{
	uint64_t v = 0;

	return ddss_get(ctx, results, 8 * w, &v, sizeof(v)) ? 0 : v;
}

static bool wait_word(unsigned w)
{
	double t0 = test_now_ms();

	while (test_now_ms() - t0 < WAIT_MS) {
		if (word(w))
			return true;
		usleep(5000); /* a bounded poll of a word another rank writes */
	}
	return false;
}

static void put_word(unsigned w, uint64_t v)
{
	CHECK(ddss_put(ctx, results, 8 * w, &v, sizeof(v)) == 0, "put word %u", w);
}

/* One locked increment: 1 if it counted, 0 for -EAGAIN (a dead holder not taken back
 * yet: ask again), -1 for any other error (checked here; the caller stops: a rank fenced
 * by mistake once logged 45 million failures of an unbounded loop, 3.8 GB). */
static int increment(void)
{
	int r = test_locked_increment(ctx, counter);

	CHECK(r == 0 || r == -EAGAIN, "locked increment: %s", ddss_strerror(r));
	return r == 0 ? 1 : r == -EAGAIN ? 0 : -1;
}

/* Up to @n locked increments within WAIT_MS; how many counted. */
static unsigned increments(unsigned n)
{
	double t0 = test_now_ms();
	unsigned done = 0;

	while (done < n && test_now_ms() - t0 < WAIT_MS) {
		int k = increment();

		if (k < 0)
			break;
		done += (unsigned)k;
	}
	CHECK(done == n, "%u of %u locked increments", done, n);
	return done;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rank 1 reads last (the fence word is homed at rank 2), and homes the results: the
 * others leave once it is done, and it leaves once they have seen that. */
static void leave(void)
{
	if (me != 1)
		CHECK(wait_word(W_READ), "rank 1 did not finish");
	test_put_farewell(ctx, me, results, W_READ + me - 1, 1);
	for (uint32_t s = 2; me == 1 && s <= NRANKS; s++)
		CHECK(wait_word(W_READ + s - 1), "rank %u did not leave", s);
}

static void survivor(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "nsres" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "nscount" };
	struct ddss_seg_attr f = { .placement = DDSS_PLACE_RANK, .rank = 2, .name = "nsfence" };
	char text[128];
	uint64_t count = 0, total = 0, sum = 0, f1, f2 = 0, v = 0;
	int64_t view = 0, when = 0, fault_ns = 0;
	double t0;

	CHECK(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results) == 0, "results");
	CHECK(ddss_allocate_ss(ctx, 8, &c, &counter) == 0, "counter");
	CHECK(ddss_allocate_ss(ctx, 8, &f, &fence) == 0, "fence");
	test_ctx_barrier_or_exit(ctx);
	if (me == 1) {
		snprintf(text, sizeof(text), "%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", results,
			 counter, fence);
		touch("keys", text);
	}
	snprintf(text, sizeof(text), "ready-%u", me);
	touch(text, "1\n");
	/* Increments until the replacement is in (it writes W_BACK once it serves). */
	t0 = test_now_ms();
	while (!word(W_BACK) && test_now_ms() - t0 < WAIT_MS) {
		int k = increment();

		if (k < 0)
			break;
		count += (uint64_t)k;
	}
	CHECK(wait_word(W_BACK), "the replacement did not come"); /* also after an error */
	CHECK(ddss_net_coord_left(ctx->net, VICTIM, &view, &when) == 0, "rank 4 never left");
	if (wait_file("fault-ns", text, sizeof(text)))
		fault_ns = strtoll(text, NULL, 10);
	/* when is on the monotonic clock; the fault time on the real-time clock */
	printf("RESULT rank %u: rank %u left in view %" PRId64 ", %.0f ms after the fault\n", me,
	       VICTIM, view, (realtime_ns() - (ddss_now_ns() - when) - fault_ns) / 1e6);
	put_word(W_VIEW + me - 1, (uint64_t)view);
	/* The new process's segment, read here. */
	CHECK(ddss_get(ctx, (ddss_key_t)word(W_NEWSEG), 0, &v, sizeof(v)) == 0 && v == NEW_VALUE,
	      "the replacement's segment: %#" PRIx64, v);
	/* The fence word now: the old process has stopped acting at every survivor. */
	CHECK(ddss_get(ctx, fence, 0, &f1, sizeof(f1)) == 0, "fence");
	if (me == 1) {
		put_word(W_F1, f1 + 1); /* +1: zero means "not yet" */
		touch("back", "1\n");
	}
	count += increments(AFTER);
	put_word(W_COUNT + me - 1, count);
	put_word(W_DONE + me - 1, 1);
	for (uint32_t s = 1; s <= NRANKS; s++)
		CHECK(wait_word(W_DONE + s - 1), "rank %u did not finish", s);
	for (uint32_t s = 1; s <= NRANKS; s++)
		if (s != VICTIM)
			CHECK(word(W_VIEW + s - 1) == (uint64_t)view, "rank %u saw view %" PRIu64, s,
			      word(W_VIEW + s - 1));
	if (me == 1) {
		for (uint32_t s = 1; s <= NRANKS; s++)
			sum += word(W_COUNT + s - 1);
		CHECK(ddss_get(ctx, counter, 0, &total, sizeof(total)) == 0, "counter");
		printf("RESULT counter %" PRIu64 ", increments counted %" PRIu64 "\n", total, sum);
		CHECK(total == sum, "the counter is not exact");
		/* Nothing the old process sent after the replacement came in has landed. */
		CHECK(wait_file("victim-done", text, sizeof(text)), "the driver never said");
		CHECK(ddss_get(ctx, fence, 0, &f2, sizeof(f2)) == 0, "fence");
		f1 = word(W_F1) - 1;
		printf("RESULT fence word %" PRIu64 " when the replacement came in, %" PRIu64
		       " after the old process ended\n", f1, f2);
		CHECK(f2 == f1, "a write of the old process landed after it was replaced");
	}
	/* Rank 1 reads last (the fence word is homed at rank 2); rank 1 homes the results,
	 * so it leaves after the others have seen that it is done. */
	leave();
}

static void victim(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "nsres" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "nscount" };
	struct ddss_seg_attr f = { .placement = DDSS_PLACE_RANK, .rank = 2, .name = "nsfence" };
	uint64_t seq, acked = 0;
	int r = 0;

	CHECK(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results) == 0, "results");
	CHECK(ddss_allocate_ss(ctx, 8, &c, &counter) == 0, "counter");
	CHECK(ddss_allocate_ss(ctx, 8, &f, &fence) == 0, "fence");
	test_ctx_barrier_or_exit(ctx);
	touch("ready-4", "1\n");
	fflush(stdout);
	for (seq = 1; !r; seq++) {
		r = ddss_put(ctx, fence, 0, &seq, sizeof(seq));
		if (!r)
			acked = seq;
	}
	printf("RESULT victim stopped: last write acknowledged %" PRIu64 ", then %s\n", acked,
	       ddss_strerror(r));
	/* Stopped acting (-ENOLINK, -EHOSTDOWN), or a call in flight across the fault lost its
	 * connection: the fence word says whether anything landed late. */
	CHECK(r == -ENOLINK || r == -EHOSTDOWN || r == -ECONNRESET || r == -ETIMEDOUT,
	      "the old process failed otherwise");
}

static void replacement(void)
{
	struct ddss_seg_attr n = { .placement = DDSS_PLACE_RANK, .rank = VICTIM };
	uint64_t v = NEW_VALUE;
	ddss_key_t seg;

	CHECK(ddss_allocate_ss(ctx, 64, &n, &seg) == 0, "allocate");
	CHECK(ddss_put(ctx, seg, 0, &v, sizeof(v)) == 0, "put");
	put_word(W_NEWSEG, seg);
	put_word(W_BACK, 1);
	put_word(W_COUNT + me - 1, increments(AFTER));
	put_word(W_DONE + me - 1, 1);
	leave();
}

int main(void)
{
	const char *role = getenv("TEST_ROLE");
	double t0 = test_now_ms();
	char keys[128];

	dir = getenv("TEST_DIR");
	if (!role || !dir || !getenv("DDSS_COORDINATOR")) {
		printf("SKIP: run by tests/coord/netns_fault.sh\n");
		return TEST_SKIP_EXIT;
	}
	if (!strcmp(role, "replacement")) {
		if (!wait_file("keys", keys, sizeof(keys)) ||
		    sscanf(keys, "%" SCNu64 " %" SCNu64 " %" SCNu64, &results, &counter,
			   &fence) != 3)
			return 2;
	}
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	me = ddss_rank(ctx);
	setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if the driver kills us */
	if (!strcmp(role, "replacement")) {
		printf("RESULT replacement: in %.0f ms after its start\n", test_now_ms() - t0);
		replacement();
	} else if (!strcmp(role, "victim")) {
		victim();
	} else {
		survivor();
	}
	printf("rank %u (%s): %s\n", me, role, test_failures ? "FAILED" : "passed");
	fflush(stdout);
	_exit(test_failures ? 1 : 0); /* no collective finalize: a member was replaced */
}
