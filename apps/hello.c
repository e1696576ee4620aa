/*
 * ddss-hello: several ranks share state through one rank's registered pool, with
 * one-sided operations only (rank 1's CPU serves nothing by hand):
 *   - a leader is elected with compare&swap on a word at rank 1,
 *   - a visitor counter is bumped with fetch&add,
 *   - every rank writes a line on a shared board, and every rank reads the whole board.
 *
 *   ddssrun -n 4 ddss-hello
 */
#include "net/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOME 1
#define W_LEADER 0
#define W_VISITORS 8
#define BOARD_OFF 64
#define LINE_LEN 64
#define MAX_RANKS 64
#define POOL_LEN (BOARD_OFF + MAX_RANKS * LINE_LEN)

static int fail(const char *what, int r)
{
	fprintf(stderr, "ddss-hello: %s: %s\n", what, strerror(-r));
	return 1;
}

int main(void)
{
	struct ddss_net *net;
	struct ddss_tp *tp;
	char host[32] = "?", line[LINE_LEN], board[MAX_RANKS * LINE_LEN];
	uint64_t old, visitors, leader;
	uint32_t me, n;
	void *pool;
	int r;

	r = ddss_net_open(NULL, &net);
	if (r)
		return fail("cannot join the group (run me under ddssrun)", r);
	tp = ddss_net_tp(net);
	me = ddss_net_rank(net);
	n = ddss_net_size(net);
	if (n > MAX_RANKS)
		return fail("too many ranks for the board", -EINVAL);
	pool = aligned_alloc(64, POOL_LEN);
	memset(pool, 0, POOL_LEN);
	r = ddss_net_start(net, pool, POOL_LEN);
	if (!r)
		r = ddss_net_barrier(net, -1);
	if (r)
		return fail("cannot start", r);

	r = ddss_tp_cas(tp, HOME, W_LEADER, 0, me, &old);
	if (r)
		return fail("compare&swap", r);
	r = ddss_tp_fadd(tp, HOME, W_VISITORS, 1, &old);
	if (r)
		return fail("fetch&add", r);
	gethostname(host, sizeof(host) - 1);
	snprintf(line, sizeof(line), "rank %u of %u on %s, visitor #%llu", me, n, host,
		 (unsigned long long)old + 1);
	r = ddss_tp_write(tp, HOME, BOARD_OFF + (uint64_t)(me - 1) * LINE_LEN, line, sizeof(line));
	if (r)
		return fail("write", r);
	r = ddss_net_barrier(net, -1);
	if (r)
		return fail("barrier", r);

	if ((r = ddss_tp_read(tp, HOME, W_LEADER, &leader, 8)) ||
	    (r = ddss_tp_read(tp, HOME, W_VISITORS, &visitors, 8)) ||
	    (r = ddss_tp_read(tp, HOME, BOARD_OFF, board, (size_t)n * LINE_LEN)))
		return fail("read", r);
	if (me == n) { /* one rank prints the shared view */
		printf("transport %s: leader is rank %llu, %llu visitors; the board at rank %u:\n",
		       ddss_net_transport_name(net), (unsigned long long)leader,
		       (unsigned long long)visitors, HOME);
		for (uint32_t i = 0; i < n; i++)
			printf("  %.*s\n", LINE_LEN, board + (size_t)i * LINE_LEN);
	}
	r = visitors == n && leader >= 1 && leader <= n ? 0 : -EPROTO;
	if (r)
		fprintf(stderr, "rank %u: inconsistent shared state\n", me);
	ddss_net_barrier(net, -1);
	ddss_net_close(net);
	free(pool);
	return r ? 1 : 0;
}
