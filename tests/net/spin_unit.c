/*
 * net/spin.c, the spin bound of adaptive completion: the wake-up measurement gives a
 * plausible round trip, the bound stays within its cap, DDSS_SPIN_US overrides it and
 * garbage in it fails with a message naming the variable; DDSS_COMPLETION takes adaptive
 * (the default) and refuses anything else with a message listing the three modes; a
 * thread's floor (a daemon's worker) raises the bound for that thread only, within the cap,
 * and not over DDSS_SPIN_US.
 */
#include "net/spin.h"
#include "net/nodes.h"
#include "common/test_util.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run @fn with stderr captured; its output (truncated) in @out. */
static int captured(int (*fn)(void), char *out, size_t len)
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO), r;
	size_t n = 0;

	CU_ASSERT_FATAL(tmp && saved >= 0);
	fflush(stderr);
	dup2(fileno(tmp), STDERR_FILENO);
	r = fn();
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, len - 1, tmp);
	out[n] = 0;
	fclose(tmp);
	return r;
}

static int load_status(void)
{
	struct ddss_net_env env;
	int r = ddss_net_env_load(&env);

	if (r == 0)
		ddss_net_env_free(&env);
	return r;
}

static long env_us;
static int spin_env(void)
{
	return ddss_spin_env(&env_us);
}

static void set_group(void)
{
	setenv("DDSS_NODES", "127.0.0.1:1", 1);
	setenv("DDSS_RANK", "1", 1);
	unsetenv("DDSS_NODES_FILE");
	unsetenv("DDSS_SIZE");
}

static void test_measure(void)
{
	int64_t ns = 0;

	CU_ASSERT_EQUAL(ddss_spin_measure_wake(0, &ns), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(ddss_spin_measure_wake(50, &ns), 0);
	/* Two wake-ups take more than 100 ns anywhere and less than 100 ms on any machine
	 * that runs these tests. */
	CU_ASSERT(ns > 100 && ns < 100 * 1000000);
	fprintf(stderr, "wake-up round trip here: %.1f us\n", (double)ns / 1000);
}

static void test_bound_clamped(void)
{
	int64_t ns;

	CU_ASSERT_EQUAL(ddss_spin_bound_for(0), DDSS_SPIN_MIN_NS);
	CU_ASSERT_EQUAL(ddss_spin_bound_for(1), DDSS_SPIN_MIN_NS);
	CU_ASSERT_EQUAL(ddss_spin_bound_for(20000), 20000);
	CU_ASSERT_EQUAL(ddss_spin_bound_for(DDSS_SPIN_MAX_NS + 1), DDSS_SPIN_MAX_NS);
	CU_ASSERT_EQUAL(ddss_spin_bound_for(INT64_MAX), DDSS_SPIN_MAX_NS);
	CU_ASSERT_EQUAL_FATAL(ddss_spin_measure_wake(DDSS_SPIN_ITERS, &ns), 0);
	ns = ddss_spin_bound_for(ns);
	CU_ASSERT(ns >= DDSS_SPIN_MIN_NS && ns <= DDSS_SPIN_MAX_NS);
}

static void test_env(void)
{
	static const char *const bad[] = { "abc", "-1", "10001", "5us", " 5", "+5", "1e3" };
	char out[512];

	unsetenv("DDSS_SPIN_US");
	CU_ASSERT_EQUAL(spin_env(), 0);
	CU_ASSERT_EQUAL(env_us, -1);
	setenv("DDSS_SPIN_US", "", 1);
	CU_ASSERT_EQUAL(spin_env(), 0);
	CU_ASSERT_EQUAL(env_us, -1);
	setenv("DDSS_SPIN_US", "0", 1);
	CU_ASSERT_EQUAL(spin_env(), 0);
	CU_ASSERT_EQUAL(env_us, 0);
	setenv("DDSS_SPIN_US", "250", 1);
	CU_ASSERT_EQUAL(spin_env(), 0);
	CU_ASSERT_EQUAL(env_us, 250);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("DDSS_SPIN_US", bad[i], 1);
		CU_ASSERT_EQUAL(captured(spin_env, out, sizeof(out)), -EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "DDSS_SPIN_US"));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i]));
	}
	/* Whatever the mode: the load refuses it too. */
	set_group();
	setenv("DDSS_SPIN_US", "fast", 1);
	setenv("DDSS_COMPLETION", "event", 1);
	CU_ASSERT_EQUAL(captured(load_status, out, sizeof(out)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "DDSS_SPIN_US=fast"));
	unsetenv("DDSS_SPIN_US");
	unsetenv("DDSS_COMPLETION");
}

static void test_completion_modes(void)
{
	static const char *const bad[] = { "bogus", "POLL", "Adaptive", "event ", "spin" };
	struct ddss_net_env env;
	char out[512];

	set_group();
	unsetenv("DDSS_COMPLETION");
	/* The first bound fixed in this process: the override, not a measurement. */
	setenv("DDSS_SPIN_US", "37", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_ADAPTIVE);
	ddss_net_env_free(&env);
	CU_ASSERT_EQUAL(ddss_spin_init(), 0);
	CU_ASSERT_EQUAL(ddss_spin_ns(), 37000);
	CU_ASSERT_EQUAL(ddss_spin_wake_ns(), 0);
	unsetenv("DDSS_SPIN_US");
	setenv("DDSS_COMPLETION", "", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_ADAPTIVE);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "adaptive", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_ADAPTIVE);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "event", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_EVENT);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "poll", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_POLL);
	ddss_net_env_free(&env);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("DDSS_COMPLETION", bad[i], 1);
		CU_ASSERT_EQUAL(captured(load_status, out, sizeof(out)), -EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "DDSS_COMPLETION="));
		CU_ASSERT_PTR_NOT_NULL(strstr(out, "event, poll or adaptive"));
	}
	unsetenv("DDSS_COMPLETION");
}

static void *other_thread_bound(void *arg)
{
	*(int64_t *)arg = ddss_spin_ns();
	return NULL;
}

/*
 * In a fresh process (this program run again: the bound is fixed on first use, and a fork
 * would inherit this one's): DDSS_SPIN_US=@env_us_set (or unset when
 * negative). Exit status 0 when the floor behaves, else the number of the check failed.
 */
static int floor_child(long env_us_set)
{
	int64_t base, other = -1;
	pthread_t th;

	if (env_us_set >= 0) {
		char v[24];

		snprintf(v, sizeof(v), "%ld", env_us_set);
		setenv("DDSS_SPIN_US", v, 1);
	} else {
		unsetenv("DDSS_SPIN_US");
	}
	base = ddss_spin_ns();
	if (env_us_set >= 0) { /* the variable wins over any floor */
		ddss_spin_thread_floor(base + 20000);
		return ddss_spin_ns() == env_us_set * 1000 ? 0 : 1;
	}
	if (base >= DDSS_SPIN_MAX_NS) { /* nothing to raise: the wake-up is that dear here */
		ddss_spin_thread_floor(base + 1000);
		printf("\nthe bound is at its cap (%lld ns): only checked that a floor keeps it\n",
		       (long long)base);
		return ddss_spin_ns() == DDSS_SPIN_MAX_NS ? 0 : 7;
	}
	ddss_spin_thread_floor(base / 2);
	if (ddss_spin_ns() != base)
		return 2; /* a lower floor changes nothing */
	ddss_spin_thread_floor(base + 1000);
	if (ddss_spin_ns() != (base + 1000 < DDSS_SPIN_MAX_NS ? base + 1000 : DDSS_SPIN_MAX_NS))
		return 3;
	if (pthread_create(&th, NULL, other_thread_bound, &other) || pthread_join(th, NULL) ||
	    other != base)
		return 4; /* the floor is this thread's only */
	ddss_spin_thread_floor(10ll * DDSS_SPIN_MAX_NS);
	if (ddss_spin_ns() != DDSS_SPIN_MAX_NS)
		return 5; /* capped */
	ddss_spin_thread_floor(0);
	return ddss_spin_ns() == base ? 0 : 6;
}

static void test_thread_floor(void)
{
	long envs[] = { -1, 3 };

	for (unsigned i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		int status = 0;
		pid_t pid = fork();

		CU_ASSERT_FATAL(pid >= 0);
		if (pid == 0) {
			char v[24];

			snprintf(v, sizeof(v), "%ld", envs[i]);
			execl("/proc/self/exe", "spin_unit", "--floor-child", v, (char *)NULL);
			_exit(127);
		}
		CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			printf("\nthread floor, DDSS_SPIN_US %ld: check %d failed\n", envs[i],
			       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

int main(int argc, char **argv)
{
	CU_pSuite s;
	unsigned failed;

	if (argc == 3 && !strcmp(argv[1], "--floor-child"))
		return floor_child(atol(argv[2]));

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("spin", NULL, NULL);
	CU_add_test(s, "the wake-up round trip is measured", test_measure);
	CU_add_test(s, "the bound stays within its cap", test_bound_clamped);
	CU_add_test(s, "DDSS_SPIN_US: values and garbage", test_env);
	CU_add_test(s, "DDSS_COMPLETION: adaptive by default, three modes", test_completion_modes);
	CU_add_test(s, "a thread's floor: its own, capped, not over DDSS_SPIN_US", test_thread_floor);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
