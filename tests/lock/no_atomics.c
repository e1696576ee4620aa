/*
 * A group without NIC atomics (run with DDSS_VERBS_DISABLE=atomics on verbs, 2 ranks): the
 * transport says so, every lock runs SRSL whatever was asked for, the coherence models that
 * fetch&add a version word (version, write, delta) are refused at allocation with
 * -EOPNOTSUPP and a message naming the model and the device, fencing numbers and lock
 * schemes on NIC atomics likewise; strict, read and temporal segments work. The messages
 * are what the user sees: this program reads its own stderr back.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "ddss/ddss.h"
#include "lock/lock.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITERS 40

static ddss_ctx_t *ctx;
static uint32_t me;
static char log_path[] = "/tmp/ddss-no-atomics-XXXXXX";
static int saved_stderr = -1;

/* Everything logged so far (stderr goes to log_path), NUL-terminated; free it. */
static char *log_text(void)
{
	fflush(stderr);
	return test_read_file(log_path);
}

static bool log_has(const char *needle)
{
	char *t = log_text();
	bool found = t && strstr(t, needle);

	if (!found)
		printf("rank %u: the log lacks \"%s\"\n", me, needle);
	free(t);
	return found;
}

static void test_transport_states_it(void)
{
	CU_ASSERT_FALSE(ctx->tp->atomics);
	CU_ASSERT_TRUE(log_has("atomics no (DDSS_VERBS_DISABLE=atomics)"));
	CU_ASSERT_TRUE(log_has("has no NIC atomics: locks use srsl instead of ncosed"));
	/* Other schemes cannot be chosen later either. */
	CU_ASSERT_EQUAL(ddss_lock_scheme_set(ctx, DDSS_LOCK_NCOSED, false), -EOPNOTSUPP);
	CU_ASSERT_TRUE(log_has("lock scheme ncosed needs NIC atomics"));
	CU_ASSERT_EQUAL(ddss_lock_scheme_set(ctx, DDSS_LOCK_SRSL, false), 0);
}

static void test_models_refused(void)
{
	static const struct { enum ddss_coherence m; uint32_t delta; const char *name; } refused[] = {
		{ DDSS_COHERENCE_VERSION, 0, "version" },
		{ DDSS_COHERENCE_WRITE, 0, "write" },
		{ DDSS_COHERENCE_DELTA, 2, "delta" },
	};
	char want[160];

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct ddss_seg_attr a = { .coherence = refused[i].m, .delta = refused[i].delta };
		ddss_key_t key;

		EXPECT_RC(ddss_allocate_ss(ctx, 64, &a, &key), -EOPNOTSUPP);
		snprintf(want, sizeof(want), "the %s coherence model needs NIC atomics",
			 refused[i].name);
		CU_ASSERT_TRUE(log_has(want));
		snprintf(want, sizeof(want), "which %s lacks", ctx->tp->device);
		CU_ASSERT_TRUE(log_has(want));
	}
}

/* Both ranks add ITERS to a counter under the user lock (SRSL), and ITERS to another
 * through strict get/put pairs inside it; read and temporal segments move data. */
static void test_locks_and_models_run(void)
{
	struct ddss_seg_attr sa = { .coherence = DDSS_COHERENCE_STRICT, .name = "noat-strict",
				    .placement = DDSS_PLACE_RANK, .rank = 1 };
	struct ddss_seg_attr ra = { .coherence = DDSS_COHERENCE_READ, .name = "noat-read" };
	struct ddss_seg_attr ta = { .coherence = DDSS_COHERENCE_TEMPORAL, .temporal_ms = 1,
				    .name = "noat-temporal" };
	ddss_key_t sk, rk, tk;
	uint64_t v = 0, fence;

	EXPECT_RC(ddss_allocate_ss(ctx, 16, &sa, &sk), 0);
	EXPECT_RC(ddss_allocate_ss(ctx, 4096, &ra, &rk), 0);
	EXPECT_RC(ddss_allocate_ss(ctx, 4096, &ta, &tk), 0);
	EXPECT_RC(ddss_barrier(ctx), 0);
	for (int i = 0; i < ITERS; i++) {
		EXPECT_RC(ddss_acquire_lock_ss(ctx, sk, DDSS_LOCK_EXCLUSIVE), 0);
		if (i == 0) {
			EXPECT_RC(ddss_lock_fence_ss(ctx, sk, &fence), -EOPNOTSUPP);
			CU_ASSERT_TRUE(log_has("fencing numbers need NIC atomics"));
		}
		EXPECT_RC(ddss_get(ctx, sk, 0, &v, 8), 0);
		v++;
		EXPECT_RC(ddss_put(ctx, sk, 0, &v, 8), 0);
		EXPECT_RC(ddss_release_lock_ss(ctx, sk), 0);
		EXPECT_RC(ddss_acquire_lock_ss(ctx, sk, DDSS_LOCK_SHARED), 0);
		EXPECT_RC(ddss_get(ctx, sk, 0, &v, 8), 0);
		EXPECT_RC(ddss_release_lock_ss(ctx, sk), 0);
	}
	{
		unsigned char buf[4096], back[4096];

		test_fill(buf, sizeof(buf), me);
		if (me == 1) {
			EXPECT_RC(ddss_put(ctx, rk, 0, buf, sizeof(buf)), 0);
			EXPECT_RC(ddss_put(ctx, tk, 0, buf, sizeof(buf)), 0);
		}
		EXPECT_RC(ddss_barrier(ctx), 0);
		test_fill(buf, sizeof(buf), 1);
		EXPECT_RC(ddss_get(ctx, rk, 0, back, sizeof(back)), 0);
		CU_ASSERT_EQUAL(memcmp(buf, back, sizeof(buf)), 0);
		EXPECT_RC(ddss_get(ctx, tk, 0, back, sizeof(back)), 0);
		CU_ASSERT_EQUAL(memcmp(buf, back, sizeof(buf)), 0);
	}
	EXPECT_RC(ddss_barrier(ctx), 0);
	EXPECT_RC(ddss_get(ctx, sk, 0, &v, 8), 0);
	EXPECT_EQ(v, (uint64_t)ITERS * ddss_size(ctx), "counter");
	EXPECT_RC(ddss_barrier(ctx), 0);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;
	int fd, r;

	/* The info lines (scheme, capabilities) are part of what is checked. */
	setenv("DDSS_LOG_LEVEL", "info", 1);
	fd = mkstemp(log_path);
	saved_stderr = dup(2);
	if (fd < 0 || saved_stderr < 0 || dup2(fd, 2) < 0) {
		perror("no_atomics: redirecting stderr");
		return 1;
	}
	close(fd);
	r = ddss_init(NULL, &ctx);
	if (r) {
		char *t = log_text();

		dup2(saved_stderr, 2);
		fprintf(stderr, "no_atomics: ddss_init: %s\n%s", ddss_strerror(r), t ? t : "");
		free(t);
		unlink(log_path);
		return 1;
	}
	me = ddss_rank(ctx);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("no_atomics", NULL, NULL);
	CU_add_test(s, "the transport and the context say so", test_transport_states_it);
	CU_add_test(s, "version, write, delta refused at allocation", test_models_refused);
	CU_add_test(s, "SRSL locks, strict, read, temporal run", test_locks_and_models_run);
	failed = test_run_all();
	CU_cleanup_registry();
	r = ddss_finalize(ctx);
	{
		char *t = log_text();

		dup2(saved_stderr, 2);
		if (failed || r) /* the log, for the reader of a failure */
			fprintf(stderr, "---- rank %u's log ----\n%s", me, t ? t : "");
		free(t);
	}
	unlink(log_path);
	return failed || r ? 1 : 0;
}
