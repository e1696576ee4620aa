/*
 * counter: the README's first program. Every rank adds 1 to a shared counter N times, each
 * time under the segment's exclusive lock; then rank 1 checks that the total is N times the
 * number of ranks. Public API only.
 *
 *   cc counter.c $(pkg-config --cflags --libs ddss) -o counter
 *   ddssrun -n 3 ./counter [N]          (N: increments per rank, 1000 if not given)
 *
 * Exit status 0 when the total is right, 1 when it is not or a call fails.
 */
#include <ddss/ddss.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call) do { int r_ = (call); if (r_) { \
	fprintf(stderr, "counter: %s: %s\n", #call, ddss_strerror(r_)); exit(1); } } while (0)

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000, count;
	ddss_ctx_t *ctx;
	ddss_key_t key;
	int ok = 1;

	CHECK(ddss_init(NULL, &ctx)); /* join the group that ddssrun started */
	/* Every rank asks for the segment named "counter": one creates it, all get its key. */
	struct ddss_seg_attr attr = { .name = "counter" };
	CHECK(ddss_allocate_ss(ctx, sizeof(count), &attr, &key));
	for (uint64_t i = 0; i < n; i++) {
		CHECK(ddss_acquire_lock_ss(ctx, key, DDSS_LOCK_EXCLUSIVE));
		CHECK(ddss_get(ctx, key, 0, &count, sizeof(count)));
		count++;
		CHECK(ddss_put(ctx, key, 0, &count, sizeof(count)));
		CHECK(ddss_release_lock_ss(ctx, key));
	}
	CHECK(ddss_barrier(ctx)); /* every rank's increments are in */
	if (ddss_rank(ctx) == 1) { /* ranks are numbered 1..size */
		CHECK(ddss_get(ctx, key, 0, &count, sizeof(count)));
		ok = count == n * ddss_size(ctx);
		printf("counter: %llu from %u ranks x %llu -> %s\n", (unsigned long long)count,
		       ddss_size(ctx), (unsigned long long)n, ok ? "OK" : "WRONG");
	}
	CHECK(ddss_finalize(ctx)); /* collective: nobody leaves while rank 1 still reads */
	return ok ? 0 : 1;
}
