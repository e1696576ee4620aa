/*
 * hello_outside: a program outside the DDSS tree that links the *installed* library, found
 * with find_package(ddss) (CMakeLists.txt here) or pkg-config (Makefile here). Public API
 * only: every rank allocates the same named segment, takes its lock, adds its rank to a
 * shared sum and writes its greeting, then, after a barrier, checks what everyone wrote.
 *
 *   ddssrun -n 2 ./hello_outside
 */
#include <ddss/ddss.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define LINE 48

/* The segment: the sum, then one greeting per rank. */
#define SEG_SIZE(n) (8 + (size_t)(n) * LINE)

static int fail(const char *what, int r)
{
	fprintf(stderr, "hello_outside: %s: %s\n", what, ddss_strerror(r));
	return 1;
}

int main(void)
{
	char line[LINE], got[LINE];
	uint64_t sum, want = 0;
	ddss_ctx_t *ctx;
	ddss_key_t key;
	uint32_t me, n;
	unsigned lines_ok = 0;
	bool ok;
	int r;

	r = ddss_init(NULL, &ctx);
	if (r)
		return fail("ddss_init", r);
	me = ddss_rank(ctx);
	n = ddss_size(ctx);
	r = ddss_allocate_ss(ctx, SEG_SIZE(n), &(struct ddss_seg_attr){ .name = "outside" },
			     &key);
	if (r)
		return fail("ddss_allocate_ss", r);

	/* The sum under the segment's exclusive lock: every rank's addition counts once. */
	r = ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE);
	if (r)
		return fail("ddss_acquire_lock_ss", r);
	r = ddss_get(ctx, key, 0, &sum, sizeof(sum));
	sum += me;
	if (!r)
		r = ddss_put(ctx, key, 0, &sum, sizeof(sum));
	if (r)
		return fail("get / put under the lock", r);
	r = ddss_release_lock_ss(ctx, key);
	if (r)
		return fail("ddss_release_lock_ss", r);
	snprintf(line, sizeof(line), "hello from rank %u", me);
	r = ddss_put(ctx, key, 8 + (size_t)(me - 1) * LINE, line, LINE);
	if (r)
		return fail("ddss_put", r);
	r = ddss_barrier(ctx);
	if (r)
		return fail("ddss_barrier", r);

	r = ddss_get(ctx, key, 0, &sum, sizeof(sum));
	for (uint32_t i = 1; !r && i <= n; i++) {
		want += i;
		r = ddss_get(ctx, key, 8 + (size_t)(i - 1) * LINE, got, LINE);
		snprintf(line, sizeof(line), "hello from rank %u", i);
		lines_ok += !r && strcmp(got, line) == 0;
	}
	if (r)
		return fail("ddss_get", r);
	ok = sum == want && lines_ok == n;
	printf("hello_outside: rank %u of %u, libddss %s: sum %llu (want %llu), %u/%u greetings "
	       "-> %s\n", me, n, ddss_version_string(), (unsigned long long)sum,
	       (unsigned long long)want, lines_ok, n, ok ? "OK" : "WRONG");
	r = ddss_barrier(ctx);
	if (!r && me == 1)
		r = ddss_release_ss(ctx, key);
	if (!r)
		r = ddss_finalize(ctx);
	else
		ddss_finalize(ctx);
	if (r)
		return fail("finish", r);
	return ok ? 0 : 1;
}
