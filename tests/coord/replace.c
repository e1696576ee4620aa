/*
 * A rank killed and replaced while the group runs (4 ranks, under ddssrun --coordinator):
 *  1. rank 4 allocates a segment of its own ("old"), every rank reads it (and caches its
 *     descriptor); rank 4 then tells its watcher the keys and kills itself (SIGKILL);
 *  2. the survivors see it leave the view and carry on with locked increments;
 *  3. the watcher starts a new process for slot 4 (a new incarnation, another port); it
 *     joins the running group without the start barrier, and the survivors let it in;
 *  4. the replacement serves a new segment of its own: every survivor reads its value;
 *  5. the old segment stays gone for everyone (never the new process's memory);
 *  6. a lock the old process held when it died, untouched until the new process holds a
 *     lock of its own in the same waiter slot: a survivor takes it back within a bound,
 *     and the new process's lock is not disturbed (the old process's waiter id is not
 *     the new one's: src/lock/lock_int.h, LOCK_ID_WINDOW);
 *  7. all four increment the counter: it is exact (3 x INCREMENTS + 4 x INCREMENTS);
 *  8. the old process died inside a put of a write segment homed at rank 1, right after
 *     its mark landed (before its copy). Nobody puts to it until the new process is in:
 *     then rank 3's put repairs it, because the home settled the old process's mark as
 *     it let the new one in (coherence/coh_readmit.c). Before that (2026-12-07) the home
 *     answered "alive" for the mark's rank and every such put returned -EIO until the new
 *     process put to the key itself; this test failed at REPAIR_MS.
 * And the name directory (in etcd) survives the death: a name whose static directory rank
 * would be the victim is still found by every survivor and by the replacement; a name
 * bound to the victim's segment says -EHOSTDOWN, and can be created again (rank 2), after
 * which everyone finds the new segment under it.
 * Prints the time from the replacement's start to its first served operation.
 * No collective finalize: coord_grow_tcp checks that members let in later finalize with the rest.
 */
#include "alloc/names.h"
#include "alloc/pool.h"
#include "coherence/coherence.h"
#include "core/seg_cache.h"
#include "common/test_util.h"
#include "core/ctx.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_TIMEOUT_MS 3000 /* the lease TTL too */
#define NRANKS 4
#define VICTIM 4
#define INCREMENTS 200
#define WAIT_MS 60000
#define LOCK_WAIT_MS 15000
#define REPAIR_MS 20000 /* a lock recovery past the dead holder: a few seconds */
#define OLD_VALUE 0x01d5e9u
#define WSEG_LEN 64
#define W_BYTE_V1 0x5a     /* version 1 of the write segment, rank 1's */
#define W_BYTE_DEAD 0xd4   /* what the old process was writing when it died */
#define W_BYTE_REPAIR 0x3c /* rank 3's repair */
#define NEW_VALUE 0x4e3e57u

/* Words of the results segment (homed at rank 1). */
enum { W_OLD = 0, W_NEW = 1, W_BACK = 2, W_HELD = 3, W_LGOT = 4, W_MGOT = 5, W_DONE1 = 6,
       W_DONE2 = 6 + NRANKS, W_READ = 6 + 2 * NRANKS, W_RENAMED = 6 + 3 * NRANKS,
       W_REPAIRED = 7 + 3 * NRANKS, W_WORDS = 8 + 3 * NRANKS };
#define GONE_NAME "replgone" /* bound to a segment of the victim's */
static char dir_name[32];    /* a name whose static directory rank is the victim */
static ddss_key_t dir_seg;

/* A name that static mode would keep at the victim (alloc/names.c): lost with it there. */
static void pick_dir_name(void)
{
	for (unsigned i = 0;; i++) {
		snprintf(dir_name, sizeof(dir_name), "repldir%u", i);
		if (ddss_name_home(dir_name, NRANKS) == VICTIM)
			return;
	}
}


static ddss_ctx_t *ctx;
static uint32_t me;
static bool replacement;
static ddss_key_t results, counter, old_seg, new_seg;
static ddss_key_t lock_l; /* held by the old process when it dies */
static ddss_key_t lock_m; /* the new process's, in the same waiter slot */
static ddss_key_t wseg;   /* write model at rank 1: the old process dies in a put of it */
static int to_watcher = -1; /* the victim's pipe to its watcher */

static uint64_t wait_word(unsigned w)
{
	return test_wait_word(ctx, results, w, WAIT_MS);
}

static void put_word(unsigned w, uint64_t v)
{
	CU_ASSERT_EQUAL(ddss_put(ctx, results, 8 * w, &v, sizeof(v)), 0);
}

static void increments(void)
{
	int r = 0;

	for (unsigned i = 0; i < INCREMENTS && !r; i++)
		r = test_locked_increment(ctx, counter);
	CU_ASSERT_EQUAL(r, 0);
}

static void setup(void)
{
	struct ddss_seg_attr a = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "replres" };
	struct ddss_seg_attr c = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "replcount" };
	struct ddss_seg_attr o = { .placement = DDSS_PLACE_RANK, .rank = VICTIM };
	struct ddss_seg_attr l = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = "repll" };
	struct ddss_seg_attr m = { .placement = DDSS_PLACE_RANK, .rank = 2, .name = "replm" };
	struct ddss_seg_attr d = { .placement = DDSS_PLACE_RANK, .rank = 1, .name = dir_name };
	struct ddss_seg_attr g = { .placement = DDSS_PLACE_RANK, .rank = VICTIM,
				   .name = GONE_NAME };
	ddss_key_t gone;
	uint64_t v = 0;

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8 * W_WORDS, &a, &results), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &c, &counter), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &l, &lock_l), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &m, &lock_m), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &d, &dir_seg), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 8, &g, &gone), 0);
	wseg = test_write_segment_v1(ctx, me, "replwrite", WSEG_LEN, W_BYTE_V1);
	CU_ASSERT_FATAL(wseg != 0);
	if (me == VICTIM) {
		v = OLD_VALUE;
		CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 64, &o, &old_seg), 0);
		CU_ASSERT_EQUAL_FATAL(ddss_put(ctx, old_seg, 0, &v, sizeof(v)), 0);
		put_word(W_OLD, old_seg);
	}
	test_ctx_barrier_or_exit(ctx);
	old_seg = wait_word(W_OLD);
	CU_ASSERT_FATAL(old_seg != 0);
	/* Every rank reads it now: its descriptor is cached here when the home dies. */
	CU_ASSERT_EQUAL(ddss_get(ctx, old_seg, 0, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, OLD_VALUE);
	test_ctx_barrier_or_exit(ctx);
}

/* The old process, inside its put of the write segment: its mark has landed. Die. */
static void die_in_put(ddss_ctx_t *c, ddss_key_t k)
{
	if (c == ctx && k == wseg) {
		fflush(stdout);
		raise(SIGKILL);
	}
}

static void test_kill(void)
{
	uint64_t keys[4] = { results, counter, lock_l, lock_m };
	int64_t view = 0, when = 0;
	double t0 = test_now_ms();
	int r = -ENOENT;

	if (me == VICTIM) {
		/* Its first lock request: waiter slot 0. Held when it dies. */
		CU_ASSERT_EQUAL(ddss_acquire_lock_ss(ctx, lock_l, DDSS_LOCK_EXCLUSIVE), 0);
		/* The replacement learns the keys from us: names may live at any rank. */
		if (write(to_watcher, keys, sizeof(keys)) != (ssize_t)sizeof(keys))
			_exit(3);
		unsigned char v[WSEG_LEN];

		memset(v, W_BYTE_DEAD, sizeof(v));
		ddss_coh_marked_hook = die_in_put;
		r = ddss_put(ctx, wseg, 0, v, sizeof(v));
		printf("rank %u: the put returned %d instead of dying in it\n", me, r);
		_exit(4); /* not SIGKILL: the watcher fails */
	}
	while (test_now_ms() - t0 < WAIT_MS &&
	       (r = ddss_net_coord_left(ctx->net, VICTIM, &view, &when)) == -ENOENT)
		usleep(10000);
	CU_ASSERT_EQUAL_FATAL(r, 0);
	printf("rank %u: rank %u left in view %" PRId64 "\n", me, VICTIM, view);
	increments(); /* the survivors carry on while the slot is empty */
	put_word(W_DONE1 + me - 1, 1);
}

static void test_replaced(void)
{
	uint64_t v = 0, back;
	int r;

	back = wait_word(W_BACK);
	CU_ASSERT_FATAL(back != 0);
	new_seg = wait_word(W_NEW);
	CU_ASSERT_FATAL(new_seg != 0);
	CU_ASSERT_EQUAL(ddss_get(ctx, new_seg, 0, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(v, NEW_VALUE);
	/* The old process's segment is gone; its key never reaches the new memory. */
	v = 0;
	r = ddss_get(ctx, old_seg, 0, &v, sizeof(v));
	printf("rank %u: get of the old incarnation's segment: %s\n", me, ddss_strerror(r));
	CU_ASSERT(r == -EHOSTDOWN || r == -ESTALE);
	CU_ASSERT_EQUAL(v, 0);
}

/* Rank 3: the first put on the write segment since the old process died in one, with the
 * new process in. It must repair the old mark, not fail with -EIO. */
static void repair_put(void)
{
	unsigned char v[WSEG_LEN], back[WSEG_LEN];
	struct test_put_tally t;
	int r;

	memset(v, W_BYTE_REPAIR, sizeof(v));
	r = test_put_retrying(ctx, wseg, v, sizeof(v), REPAIR_MS, &t);
	printf("rank 3: the put on the old process's mark returned %s after %.0f ms (%u -EIO, "
	       "%u other errors%s%s)\n", ddss_strerror(r), t.ms, t.eio, t.other,
	       t.other ? ", the last " : "", t.other ? ddss_strerror(t.last_other) : "");
	CU_ASSERT_EQUAL(r, 0);
	memset(back, 0, sizeof(back));
	CU_ASSERT_EQUAL(ddss_get(ctx, wseg, 0, back, sizeof(back)), 0);
	CU_ASSERT_EQUAL(memcmp(back, v, sizeof(v)), 0);
	put_word(W_REPAIRED, 1);
}

/* Rank 1, the home: it settled the old process's mark when it let the new one in, and the
 * repair completed version 2 with rank 3's bytes. */
static void check_repaired_home(void)
{
	const struct ddss_seg_desc *d;
	const char *base = ddss_pool_base(ctx->pool);
	uint64_t word;
	bool whole = true;

	printf("rank 1: marks of an old process settled at its readmission: %llu\n",
	       (unsigned long long)ddss_coh_readmit_settled(ctx));
	CU_ASSERT_EQUAL(ddss_coh_readmit_settled(ctx), 1);
	CU_ASSERT_FATAL(wait_word(W_REPAIRED) == 1);
	CU_ASSERT_EQUAL_FATAL(ddss_ctx_desc(ctx, wseg, &d), 0);
	word = __atomic_load_n((const uint64_t *)(base + d->data_off - DDSS_SEG_HDR_LEN +
						  DDSS_SEG_HDR_VERSION), __ATOMIC_SEQ_CST);
	for (unsigned i = 0; i < WSEG_LEN; i++)
		whole &= (unsigned char)base[d->data_off + i] == W_BYTE_REPAIR;
	ddss_seg_cache_put(d);
	printf("rank 1: the write segment's version word %#llx\n", (unsigned long long)word);
	CU_ASSERT_EQUAL(word, 4); /* version 2, the dead put's, completed by the repair */
	CU_ASSERT(whole);
}

static void test_dead_put(void)
{
	if (me == 3)
		repair_put();
	if (me == 1)
		check_repaired_home();
}

/* The name directory after the death: in etcd, not at the victim. */
static void test_names(void)
{
	struct ddss_seg_attr g = { .placement = DDSS_PLACE_RANK, .rank = 2, .name = GONE_NAME };
	ddss_key_t k = 0, renamed;
	int r = ddss_lookup_ss(ctx, dir_name, &k);

	printf("rank %u: lookup of '%s' (static directory: rank %u, dead): %s\n", me, dir_name,
	       VICTIM, ddss_strerror(r));
	CU_ASSERT_EQUAL(r, 0);
	CU_ASSERT(replacement ? k != 0 : k == dir_seg); /* the replacement never had it */
	if (me == 2) {
		r = ddss_lookup_ss(ctx, GONE_NAME, &k);
		printf("rank 2: lookup of '%s' (its segment died with rank %u): %s\n", GONE_NAME,
		       VICTIM, ddss_strerror(r));
		CU_ASSERT_EQUAL(r, -EHOSTDOWN);
		r = ddss_allocate_ss(ctx, 8, &g, &renamed);
		CU_ASSERT_EQUAL_FATAL(r, 0);
		put_word(W_RENAMED, renamed);
	}
	renamed = wait_word(W_RENAMED);
	CU_ASSERT_FATAL(renamed != 0);
	CU_ASSERT_EQUAL(ddss_lookup_ss(ctx, GONE_NAME, &k), 0);
	CU_ASSERT_EQUAL(k, renamed);
}

/* Rank 2 takes back the lock the old process died holding, while the new one holds its
 * own lock in the same waiter slot; then rank 3 takes that one after its release. */
static void test_stale_lock(void)
{
	double t0;
	int r;

	if (me == 2) {
		CU_ASSERT_FATAL(wait_word(W_HELD) == 1);
		t0 = test_now_ms();
		r = ddss_acquire_lock_timed_ss(ctx, lock_l, DDSS_LOCK_EXCLUSIVE, LOCK_WAIT_MS);
		printf("rank 2: the dead process's lock taken back: %s after %.0f ms\n",
		       ddss_strerror(r), test_now_ms() - t0);
		CU_ASSERT_EQUAL(r, 0);
		if (!r)
			CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, lock_l), 0);
		put_word(W_LGOT, 1); /* whatever happened: the replacement may release */
	}
	if (me == 3) {
		CU_ASSERT_FATAL(wait_word(W_MGOT) == 1);
		r = ddss_acquire_lock_timed_ss(ctx, lock_m, DDSS_LOCK_EXCLUSIVE, LOCK_WAIT_MS);
		printf("rank 3: the new process's lock after its release: %s\n", ddss_strerror(r));
		CU_ASSERT_EQUAL(r, 0);
		if (!r)
			CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, lock_m), 0);
	}
}

/* The new process of slot 4: its first operations, and what it serves. */
static void test_replacement(void)
{
	struct ddss_seg_attr n = { .placement = DDSS_PLACE_RANK, .rank = VICTIM };
	uint64_t v = NEW_VALUE;

	CU_ASSERT_EQUAL_FATAL(ddss_allocate_ss(ctx, 64, &n, &new_seg), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_put(ctx, new_seg, 0, &v, sizeof(v)), 0);
	put_word(W_NEW, new_seg);
	put_word(W_BACK, 1);
	test_names();
	/* It cannot read what its previous incarnation homed either. */
	v = 0;
	CU_ASSERT(ddss_get(ctx, old_seg, 0, &v, sizeof(v)) != 0);
	CU_ASSERT_EQUAL(v, 0);
	/* Its first lock request, in waiter slot 0 like the old process's on lock L. */
	CU_ASSERT_EQUAL_FATAL(ddss_acquire_lock_ss(ctx, lock_m, DDSS_LOCK_EXCLUSIVE), 0);
	put_word(W_HELD, 1);
	CU_ASSERT(wait_word(W_LGOT) == 1);
	CU_ASSERT_EQUAL(ddss_release_lock_ss(ctx, lock_m), 0);
	put_word(W_MGOT, 1);
}

static void test_counter(void)
{
	uint64_t total = 0, expect = (NRANKS - 1) * INCREMENTS + NRANKS * INCREMENTS;

	for (uint32_t s = 1; s <= NRANKS; s++) /* the first round is over everywhere */
		if (s != VICTIM)
			CU_ASSERT_EQUAL(wait_word(W_DONE1 + s - 1), 1);
	increments();
	put_word(W_DONE2 + me - 1, 1);
	for (uint32_t s = 1; s <= NRANKS; s++)
		CU_ASSERT_EQUAL(wait_word(W_DONE2 + s - 1), 1);
	CU_ASSERT_EQUAL(ddss_get(ctx, counter, 0, &total, sizeof(total)), 0);
	if (me == 1)
		printf("counter %" PRIu64 ", expected %" PRIu64 "\n", total, expect);
	CU_ASSERT_EQUAL(total, expect);
	/* Rank 1 homes the results: it leaves after everyone has read. */
	test_put_farewell(ctx, me, results, W_READ + me - 1, 1);
	for (uint32_t s = 1; me == 1 && s <= NRANKS; s++)
		CU_ASSERT_EQUAL(wait_word(W_READ + s - 1), 1);
}

/* Rank 4's watcher: the victim ends by SIGKILL; then it runs the replacement, by
 * `ddssrun --coordinator --slot 4` when given --ddssrun PATH (as a user would), else
 * directly. */
static int watch_and_replace(pid_t victim, int from_victim, char **argv, const char *ddssrun)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	uint64_t keys[4];
	char text[96];
	int status;
	pid_t pid;

	if (read(from_victim, keys, sizeof(keys)) != (ssize_t)sizeof(keys))
		return 1;
	if (waitpid(victim, &status, 0) != victim || !WIFSIGNALED(status) ||
	    WTERMSIG(status) != SIGKILL) {
		printf("rank %u: the victim ended otherwise (status %#x)\n", VICTIM, status);
		return 1;
	}
	snprintf(text, sizeof(text), "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, keys[0],
		 keys[1], keys[2], keys[3]);
	setenv("TEST_REPLACE_KEYS", text, 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	/* Another address: the slot moves, as it would to another machine. */
	if (getenv("DDSS_LISTEN_FD")) {
		close(atoi(getenv("DDSS_LISTEN_FD")));
		unsetenv("DDSS_LISTEN_FD");
	}
	test_listen_elsewhere();
	fflush(stdout);
	pid = fork();
	if (pid == 0 && ddssrun) {
		char *const run[] = { (char *)ddssrun, "--coordinator", "-n", "4", "--slot", "4",
				      "--timeout", "60", "--", self, NULL };

		execv(ddssrun, run);
		_exit(127);
	}
	if (pid == 0) {
		execv(self, argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
	const char *keys = getenv("TEST_REPLACE_KEYS"), *ddssrun = NULL;
	CU_pSuite suite;
	unsigned failed;
	double t_start = test_now_ms();
	int fds[2], r;

	if (argc == 3 && !strcmp(argv[1], "--ddssrun"))
		ddssrun = argv[2];
	if (!getenv("DDSS_COORDINATOR") || !getenv("DDSS_RANK")) {
		printf("SKIP: run under ddssrun --coordinator\n");
		return TEST_SKIP_EXIT;
	}
	replacement = keys != NULL;
	if (replacement &&
	    sscanf(keys, "%" SCNu64 ",%" SCNu64 ",%" SCNu64 ",%" SCNu64, &results, &counter,
		   &lock_l, &lock_m) != 4)
		return 2;
	/* ddssrun --coordinator asks each rank for the slot of its index (DDSS_RANK). */
	if (!replacement && atoi(getenv("DDSS_RANK")) == VICTIM) {
		pid_t pid;

		if (pipe(fds))
			return 1;
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid > 0) {
			close(fds[1]);
			return watch_and_replace(pid, fds[0], argv, ddssrun);
		}
		close(fds[0]);
		to_watcher = fds[1];
	}
	ctx = test_init_peer_timeout(PEER_TIMEOUT_MS);
	if (!ctx)
		return 1;
	me = ddss_rank(ctx);
	if (ddss_size(ctx) != NRANKS) {
		fprintf(stderr, "run with %u ranks\n", NRANKS);
		return 2;
	}
	pick_dir_name();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("a rank killed and replaced in coordinator mode", NULL, NULL);
	if (replacement) {
		uint64_t v = 0;

		/* Its first served operation: a read of the results, homed at rank 1. */
		r = ddss_get(ctx, results, 8 * W_OLD, &v, sizeof(v));
		printf("rank %u (replacement): first operation %s %.0f ms after the process "
		       "started\n", me, r ? ddss_strerror(r) : "served", test_now_ms() - t_start);
		old_seg = v;
		CU_add_test(suite, "the replacement serves a new segment", test_replacement);
	} else {
		CU_add_test(suite, "setup", setup);
		CU_add_test(suite, "killed: the survivors carry on", test_kill);
		CU_add_test(suite, "replaced: its new segment is served, its old one is gone",
			    test_replaced);
		CU_add_test(suite, "names survive the death; a dead segment's name is made anew",
			    test_names);
		CU_add_test(suite, "a lock the dead process held, while the new one holds its own",
			    test_stale_lock);
		CU_add_test(suite, "a put the dead process left half done is repaired",
			    test_dead_put);
	}
	CU_add_test(suite, "the locked counter stays exact", test_counter);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
