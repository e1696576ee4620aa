/*
 * ddss-hello: several ranks share state through DDSS segments, using only the public API
 * (include/ddss/ddss.h), as a service linking the library would:
 *   - every rank allocates the same named segment, "board", and gets the same key;
 *   - each writes a line at its own offset with one put (one RDMA write);
 *   - after a barrier each reads the whole board with one get and checks every line;
 *   - each allocates a private segment placed round robin, and says where it landed.
 *
 *   ddssrun -n 4 ddss-hello
 */
#include <ddss/ddss.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_LEN 64

static int fail(const char *what, int r)
{
	fprintf(stderr, "ddss-hello: %s: %s\n", what, ddss_strerror(r));
	return 1;
}

int main(void)
{
	struct ddss_seg_info info;
	ddss_ctx_t *ctx;
	ddss_key_t board, mine;
	uint32_t me, n;
	char line[LINE_LEN], *all;
	int r, bad = 0;

	r = ddss_init(NULL, &ctx);
	if (r)
		return fail("ddss_init", r);
	me = ddss_rank(ctx);
	n = ddss_size(ctx);
	all = calloc(n, LINE_LEN);
	if (!all)
		return fail("calloc", -12);

	r = ddss_allocate_ss(ctx, (size_t)n * LINE_LEN, &(struct ddss_seg_attr){ .name = "board" },
			     &board);
	if (r)
		return fail("allocate the board", r);
	snprintf(line, sizeof(line), "hello from rank %u of %u", me, n);
	r = ddss_put(ctx, board, (size_t)(me - 1) * LINE_LEN, line, LINE_LEN);
	if (r)
		return fail("put my line", r);
	r = ddss_barrier(ctx);
	if (r)
		return fail("barrier", r);

	r = ddss_get(ctx, board, 0, all, (size_t)n * LINE_LEN);
	if (r)
		return fail("get the board", r);
	for (uint32_t i = 1; i <= n; i++) {
		snprintf(line, sizeof(line), "hello from rank %u of %u", i, n);
		bad += strcmp(all + (size_t)(i - 1) * LINE_LEN, line) != 0;
	}
	r = ddss_allocate_ss(ctx, 4096, NULL, &mine);
	if (!r)
		r = ddss_stat_ss(ctx, mine, &info);
	if (r)
		return fail("allocate a private segment", r);
	printf("rank %u: board key %#llx, %u/%u lines correct; my segment %#llx lives on rank %u\n",
	       me, (unsigned long long)board, n - bad, n, (unsigned long long)mine, info.home);
	if (me == 1)
		for (uint32_t i = 0; i < n; i++)
			printf("  board[%u] = \"%s\"\n", i + 1, all + (size_t)i * LINE_LEN);
	r = ddss_release_ss(ctx, mine);
	if (r)
		return fail("release", r);
	r = ddss_barrier(ctx);
	if (!r && me == 1)
		r = ddss_release_ss(ctx, board);
	free(all);
	r = r ? r : ddss_finalize(ctx);
	if (r)
		return fail("finish", r);
	return bad ? 1 : 0;
}
