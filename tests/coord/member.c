/*
 * Membership through etcd (src/coord/member.h) against a real etcd (with_etcd.sh):
 *  - joiners racing for the slots of a group each get their own, the rest -ENOSPC;
 *  - every member goes through the same views (same numbers, same members);
 *  - a slot left is taken by the next joiner, with a larger incarnation;
 *  - a reported member stops acting and leaves the view;
 *  - a frozen process (SIGSTOP) leaves the view when its lease expires, and once thawed
 *    it does nothing: its deadline passed before its slot was given away;
 *  - with --cluster: one etcd member of three killed disturbs nothing; one frozen, the
 *    views still follow.
 * The frozen member is this program again (--frozen-child PREFIX FD), a process of its own.
 */
#include "common/test_util.h"
#include "coord/etcd.h"
#include "coord/etcd_int.h"
#include "coord/member.h"
#include "delay_proxy.h"
#include "etcd_ctl.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 15000
#define RACERS 8
#define GROUP_MAX 6

static const char *endpoints;
static const char *self_path;
static bool cluster_mode;
/* The lease TTL: with three etcd members, longer than a leader election takes. */
static int TTL_MS = 2000;

/* What each member's view callback saw last. */
struct watcher {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t number;
	size_t count;
	uint32_t slots[GROUP_MAX + 2];
	int64_t incs[GROUP_MAX + 2];
	unsigned calls;
};

static void on_view(void *arg, const struct ddss_view *v)
{
	struct watcher *w = arg;

	pthread_mutex_lock(&w->mu);
	CU_ASSERT(v->number >= w->number); /* views only go forward */
	w->number = v->number;
	w->count = v->count;
	for (size_t i = 0; i < v->count && i < GROUP_MAX + 2; i++) {
		w->slots[i] = v->members[i].slot;
		w->incs[i] = v->members[i].incarnation;
	}
	w->calls++;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void watcher_init(struct watcher *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
}

/* Wait until @w's view has @count members and a number of at least @number. */
static bool view_reaches(struct watcher *w, size_t count, int64_t number)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&w->mu);
	while (!(w->count == count && w->number >= number) &&
	       pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
		;
	ok = w->count == count && w->number >= number;
	pthread_mutex_unlock(&w->mu);
	return ok;
}

static void cfg_for(struct ddss_member_cfg *cfg, const char *prefix, const char *addr,
		    struct watcher *w)
{
	*cfg = (struct ddss_member_cfg){ .endpoints = endpoints, .prefix = prefix,
					 .max = GROUP_MAX, .ttl_ms = TTL_MS, .addr = addr,
					 .on_view = w ? on_view : NULL, .arg = w };
}

static void unique_prefix(char *buf, size_t len, const char *what)
{
	static unsigned n;

	snprintf(buf, len, "/ddss-test/%d/%s%u/", (int)getpid(), what, ++n);
}

static void test_bad_cfg(void)
{
	struct ddss_member_cfg cfg;
	struct ddss_member *m;

	cfg_for(&cfg, "/g/", "a", NULL);
	cfg.prefix = "no-slash";
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), -EINVAL);
	cfg.prefix = "/g";
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), -EINVAL);
	cfg.prefix = "/g/";
	cfg.max = 0;
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), -EINVAL);
	cfg.max = 2;
	cfg.ttl_ms = 0;
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), -EINVAL);
	cfg.ttl_ms = TTL_MS;
	cfg.endpoints = "127.0.0.1:1";
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), -ECONNREFUSED);
}

struct racer {
	pthread_t t;
	struct ddss_member_cfg cfg;
	struct ddss_member *m;
	struct watcher w;
	char addr[32];
	int r;
};

static void *race(void *arg)
{
	struct racer *x = arg;

	x->r = ddss_member_join(&x->cfg, &x->m);
	return NULL;
}

static struct racer racers[RACERS];
static char group[96];

static void test_join_race(void)
{
	unsigned joined = 0, full = 0;
	uint8_t seen[GROUP_MAX + 1] = { 0 };
	int64_t number = 0;

	unique_prefix(group, sizeof(group), "race");
	for (unsigned i = 0; i < RACERS; i++) {
		snprintf(racers[i].addr, sizeof(racers[i].addr), "10.0.0.%u:%u", i + 1, 7000 + i);
		watcher_init(&racers[i].w);
		cfg_for(&racers[i].cfg, group, racers[i].addr, &racers[i].w);
		CU_ASSERT_EQUAL_FATAL(pthread_create(&racers[i].t, NULL, race, &racers[i]), 0);
	}
	for (unsigned i = 0; i < RACERS; i++)
		pthread_join(racers[i].t, NULL);
	for (unsigned i = 0; i < RACERS; i++) {
		if (racers[i].r == -ENOSPC) {
			full++;
			continue;
		}
		CU_ASSERT_EQUAL_FATAL(racers[i].r, 0);
		uint32_t s = ddss_member_slot(racers[i].m);

		CU_ASSERT_FATAL(s >= 1 && s <= GROUP_MAX);
		CU_ASSERT_EQUAL(seen[s], 0); /* two joiners never share a slot */
		seen[s] = 1;
		CU_ASSERT_EQUAL(ddss_member_acting(racers[i].m), 0);
		if (ddss_member_incarnation(racers[i].m) > number)
			number = ddss_member_incarnation(racers[i].m);
		joined++;
	}
	CU_ASSERT_EQUAL(joined, GROUP_MAX);
	CU_ASSERT_EQUAL(full, RACERS - GROUP_MAX);
	/* Everyone reaches the view with all of them, at the same number. */
	for (unsigned i = 0; i < RACERS; i++) {
		if (!racers[i].m)
			continue;
		CU_ASSERT(view_reaches(&racers[i].w, GROUP_MAX, number));
	}
	for (unsigned i = 1; i < RACERS; i++)
		if (racers[i].m && racers[0].m)
			CU_ASSERT_EQUAL(racers[i].w.number, racers[0].w.number);
	printf("\n    %u joined, %u refused (-ENOSPC), view %" PRId64 "\n", joined, full,
	       racers[0].m ? racers[0].w.number : 0);
}

static struct racer *member_in_slot(uint32_t slot)
{
	for (unsigned i = 0; i < RACERS; i++)
		if (racers[i].m && ddss_member_slot(racers[i].m) == slot)
			return &racers[i];
	return NULL;
}

static void test_leave_and_replace(void)
{
	struct racer *gone = member_in_slot(3), *x;
	struct ddss_member *m;
	int64_t old_inc, number;

	CU_ASSERT_PTR_NOT_NULL_FATAL(gone);
	old_inc = ddss_member_incarnation(gone->m);
	number = gone->w.number;
	ddss_member_leave(gone->m);
	gone->m = NULL;
	for (unsigned i = 0; i < RACERS; i++)
		if (racers[i].m)
			CU_ASSERT(view_reaches(&racers[i].w, GROUP_MAX - 1, number + 1));
	/* The next joiner takes the free slot, as a new incarnation (in the racer's place). */
	watcher_init(&gone->w);
	cfg_for(&gone->cfg, group, "10.0.0.99:7099", &gone->w);
	CU_ASSERT_EQUAL_FATAL(ddss_member_join(&gone->cfg, &m), 0);
	gone->m = m;
	CU_ASSERT_EQUAL(ddss_member_slot(m), 3);
	CU_ASSERT(ddss_member_incarnation(m) > old_inc);
	for (unsigned i = 0; i < RACERS; i++)
		if (racers[i].m)
			CU_ASSERT(view_reaches(&racers[i].w, GROUP_MAX, ddss_member_incarnation(m)));
	x = member_in_slot(1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(x);
	CU_ASSERT_EQUAL(gone->w.number, x->w.number);
	/* Reporting the old incarnation of slot 3 finds it gone. */
	CU_ASSERT_EQUAL(ddss_member_report(x->m, 3, old_inc), -ESTALE);
}

static void test_report(void)
{
	struct racer *reporter = member_in_slot(1), *victim = member_in_slot(2);
	int64_t number;
	double t0;
	int r = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(reporter);
	CU_ASSERT_PTR_NOT_NULL_FATAL(victim);
	number = reporter->w.number;
	t0 = test_now_ms();
	CU_ASSERT_EQUAL(ddss_member_report(reporter->m, 2, ddss_member_incarnation(victim->m)), 0);
	/* The victim sees the report, stops acting, and gives the slot up itself. */
	while (test_now_ms() - t0 < WAIT_MS && !(r = ddss_member_acting(victim->m)))
		usleep(10000);
	CU_ASSERT_EQUAL(r, -EHOSTDOWN);
	CU_ASSERT(view_reaches(&reporter->w, GROUP_MAX - 1, number + 1));
	printf("\n    reported member stopped and left the view in %.0f ms (TTL %d ms)\n",
	       test_now_ms() - t0, TTL_MS);
	CU_ASSERT(test_now_ms() - t0 < TTL_MS); /* by itself, not by its lease expiring */
	ddss_member_leave(victim->m);
	victim->m = NULL;
}

/* The frozen member: join, say who we are, stop; once continued, report acting(). */
static int frozen_child(const char *prefix, int fd)
{
	struct ddss_member_cfg cfg;
	struct ddss_member *m;
	char line[64];
	int r;

	cfg_for(&cfg, prefix, "10.0.0.200:7200", NULL);
	r = ddss_member_join(&cfg, &m);
	if (r) {
		fprintf(stderr, "frozen child: join: %s\n", strerror(-r));
		return 2;
	}
	snprintf(line, sizeof(line), "%" PRIu32 " %" PRId64 "\n", ddss_member_slot(m),
		 ddss_member_incarnation(m));
	if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		return 2;
	close(fd);
	raise(SIGSTOP);
	/* Thawed after its slot was given away: it must not act. */
	r = ddss_member_acting(m);
	printf("frozen child: acting() after the thaw: %d (%s)\n", r, r ? strerror(-r) : "acting");
	ddss_member_leave(m);
	return r == -ENOLINK || r == -EHOSTDOWN ? 0 : 1;
}

static void test_frozen_process(void)
{
	struct racer *x = member_in_slot(1);
	int fds[2], status;
	char fdtext[16], line[64] = { 0 };
	uint32_t slot = 0;
	int64_t inc = 0, number;
	double t0;
	pid_t pid;

	CU_ASSERT_PTR_NOT_NULL_FATAL(x);
	number = x->w.number;
	CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		snprintf(fdtext, sizeof(fdtext), "%d", fds[1]);
		execl(self_path, self_path, "--frozen-child", group, fdtext, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	CU_ASSERT_FATAL(read(fds[0], line, sizeof(line) - 1) > 0);
	close(fds[0]);
	CU_ASSERT_EQUAL_FATAL(sscanf(line, "%" SCNu32 " %" SCNd64, &slot, &inc), 2);
	/* It joined (a free slot); wait until it is frozen, then for its lease to go. */
	CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, WUNTRACED), pid);
	CU_ASSERT_FATAL(WIFSTOPPED(status));
	t0 = test_now_ms();
	CU_ASSERT(view_reaches(&x->w, GROUP_MAX, inc));      /* it was in the view */
	CU_ASSERT(view_reaches(&x->w, GROUP_MAX - 1, inc + 1)); /* and left it */
	printf("\n    frozen member (slot %" PRIu32 ") left the view %.0f ms after it froze "
	       "(TTL %d ms)\n", slot, test_now_ms() - t0, TTL_MS);
	(void)number;
	kill(pid, SIGCONT);
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Three etcd members: stopping one leaves renewals, reports and joins working. */
static void test_etcd_member_down(void)
{
	struct ddss_member_cfg cfg;
	struct ddss_member *m;
	struct watcher w;
	double t0;
	bool acting = true;

	if (!cluster_mode)
		return;
	CU_ASSERT_FATAL(etcd_ctl("stop", 1));
	/* Three TTLs with one etcd member gone: every member keeps its lease. */
	t0 = test_now_ms();
	while (test_now_ms() - t0 < 3 * TTL_MS) {
		for (unsigned i = 0; i < RACERS; i++)
			if (racers[i].m && ddss_member_acting(racers[i].m))
				acting = false;
		usleep(50000);
	}
	CU_ASSERT(acting);
	/* Joining works through the others. */
	watcher_init(&w);
	cfg_for(&cfg, group, "10.0.0.77:7077", &w);
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m), 0);
	if (m)
		ddss_member_leave(m);
	CU_ASSERT(etcd_ctl("start", 1));
}

/*
 * One etcd member of three frozen (SIGSTOP): the first endpoint, where every watch starts.
 * A member's view still follows, and a process can still join. (The watch's stream from
 * the frozen member stayed open and silent for good: the view stopped moving.)
 */
static void test_etcd_member_frozen(void)
{
	struct ddss_member_cfg cfg;
	struct ddss_member *m1 = NULL, *m2 = NULL;
	struct watcher w;
	char prefix[96];
	double t0;

	if (!cluster_mode)
		return;
	unique_prefix(prefix, sizeof(prefix), "frozen");
	watcher_init(&w);
	cfg_for(&cfg, prefix, "10.0.0.81:7081", &w);
	CU_ASSERT_EQUAL_FATAL(ddss_member_join(&cfg, &m1), 0);
	CU_ASSERT(view_reaches(&w, 1, 0));
	CU_ASSERT_FATAL(etcd_ctl("freeze", 1));
	t0 = test_now_ms();
	cfg_for(&cfg, prefix, "10.0.0.82:7082", NULL);
	CU_ASSERT_EQUAL(ddss_member_join(&cfg, &m2), 0);
	CU_ASSERT(view_reaches(&w, 2, 0));
	printf("with etcd member 1 frozen: joined and seen in %.0f ms ", test_now_ms() - t0);
	if (m2)
		ddss_member_leave(m2);
	ddss_member_leave(m1);
	CU_ASSERT(etcd_ctl("thaw", 1));
}

/*
 * A slow etcd member: the first endpoint answers transactions 3 s late (a proxy), after
 * the client's 2 s, so the client asks the next endpoint, where the transaction the slow
 * one carried out already shows. The process must know its own work:
 *  - joining: it holds the one slot its transaction took (it took a second one, both on its
 *    lease: a member in the view that never serves);
 *  - creating a name: it is the creator (the name was "pending" under it for good, every
 *    retry -EAGAIN).
 */
#define SLOW_MS 3000

static void test_slow_member(void)
{
	struct ddss_member_cfg cfg;
	struct ddss_member *m = NULL, *m2 = NULL;
	struct delay_proxy *p;
	struct ddss_etcd_kvs kvs;
	struct ddss_etcd *etcd;
	char prefix[96], first[64], via[32], eps[256], key[160];
	uint64_t segkey = 0;
	json_object *b64;
	int r;

	if (cluster_mode)
		return;
	snprintf(first, sizeof(first), "%s", endpoints);
	first[strcspn(first, ",")] = 0;
	unique_prefix(prefix, sizeof(prefix), "slow");
	/* The transaction that claims slot 1 (its key, as the request carries it). */
	snprintf(key, sizeof(key), "%smembers/00001", prefix);
	b64 = etcd_b64(key, strlen(key));
	CU_ASSERT_EQUAL_FATAL(delay_proxy_start(first, json_object_get_string(b64), SLOW_MS, &p,
						via), 0);
	json_object_put(b64);
	snprintf(eps, sizeof(eps), "%s,%s", via, endpoints);
	cfg_for(&cfg, prefix, "10.0.0.91:7091", NULL);
	cfg.endpoints = eps;
	cfg.ttl_ms = 4 * SLOW_MS; /* the join outlasts a wait for the slow member */
	CU_ASSERT_EQUAL_FATAL(ddss_member_join(&cfg, &m), 0);
	CU_ASSERT(delay_proxy_delayed(p) >= 1);
	CU_ASSERT_EQUAL(ddss_member_slot(m), 1);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_open(endpoints, 0, &etcd), 0);
	snprintf(key, sizeof(key), "%smembers/", prefix);
	CU_ASSERT_EQUAL_FATAL(ddss_etcd_get(etcd, key, true, &kvs), 0);
	printf("joined through a slow member: slot %u, %zu member key(s) ", ddss_member_slot(m),
	       kvs.count);
	CU_ASSERT_EQUAL(kvs.count, 1);
	ddss_etcd_kvs_free(&kvs);

	/* A name, through a member that answered everything until now. */
	delay_proxy_hold(p, "");
	cfg_for(&cfg, prefix, "10.0.0.92:7092", NULL);
	cfg.endpoints = eps;
	cfg.ttl_ms = 4 * SLOW_MS;
	CU_ASSERT_EQUAL_FATAL(ddss_member_join(&cfg, &m2), 0);
	delay_proxy_hold(p, "POST /v3/kv/txn");
	r = ddss_member_name_acquire(m2, "slow-name", true, &segkey);
	printf("; a name created through it: %d ", r);
	CU_ASSERT_EQUAL(r, DDSS_MEMBER_NAME_CREATE);
	if (r == DDSS_MEMBER_NAME_CREATE)
		CU_ASSERT_EQUAL(ddss_member_name_bind(m2, "slow-name", 0x1234, 1), 0);
	delay_proxy_hold(p, "");
	ddss_etcd_close(etcd);
	ddss_member_leave(m2);
	ddss_member_leave(m);
	delay_proxy_stop(p);
}

static void test_cleanup(void)
{
	for (unsigned i = 0; i < RACERS; i++)
		if (racers[i].m) {
			CU_ASSERT_EQUAL(ddss_member_acting(racers[i].m), 0);
			ddss_member_leave(racers[i].m);
			racers[i].m = NULL;
		}
}

int main(int argc, char **argv)
{
	CU_pSuite suite;
	unsigned failed;

	self_path = argv[0];
	endpoints = getenv("DDSS_TEST_ETCD");
	if (argc == 4 && !strcmp(argv[1], "--frozen-child")) {
		if (!endpoints)
			return 2;
		return frozen_child(argv[2], atoi(argv[3]));
	}
	if (argc == 2 && !strcmp(argv[1], "--cluster")) {
		cluster_mode = true;
		TTL_MS = 5000;
	}
	if (!endpoints) {
		printf("SKIP: run under tests/coord/with_etcd.sh (no DDSS_TEST_ETCD)\n");
		return TEST_SKIP_EXIT;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite(cluster_mode ? "member (3 etcd members)" : "member", NULL, NULL);
	CU_add_test(suite, "bad configuration: -EINVAL; no etcd: -ECONNREFUSED", test_bad_cfg);
	CU_add_test(suite, "racing joiners: one slot each, the rest -ENOSPC, one view",
		    test_join_race);
	CU_add_test(suite, "a slot left is taken by the next joiner, a new incarnation",
		    test_leave_and_replace);
	CU_add_test(suite, "a reported member stops acting and leaves the view", test_report);
	CU_add_test(suite, "a frozen process leaves the view; thawed, it does not act",
		    test_frozen_process);
	CU_add_test(suite, "a slow etcd member: one slot, and a name's creator knows it",
		    test_slow_member);
	CU_add_test(suite, "one etcd member of three down disturbs nothing", test_etcd_member_down);
	CU_add_test(suite, "one etcd member of three frozen: the view follows, joins work",
		    test_etcd_member_frozen);
	CU_add_test(suite, "the others acted throughout, and leave", test_cleanup);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
