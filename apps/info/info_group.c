/*
 * --group: every rank joins the group with ddss_init, as an application would; rank 1 then
 * asks each rank in turn, itself included, for a small segment homed there (an answer
 * from that rank's segment service) and times gets of it (one RDMA read each, the null
 * model), reporting the median. A rank that does not answer is reported with the error,
 * after at most the operation timeout; the others are still measured.
 *
 * ddss_init is collective: a rank that never starts, or that no other rank can reach,
 * keeps every rank from joining, and each says so after the connect timeout.
 */
#include "info.h"

#include "core/ctx.h"
#include "net/nodes.h"

#include <ddss/ddss.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bounds of the probe, unless the environment sets them (it wins, as for any program). */
#define GROUP_CONNECT_MS 10000
#define GROUP_OP_MS 5000
/* Gets timed per rank (after one not counted), and their size. */
#define PROBE_GETS 21
#define PROBE_LEN 8

static const char *env_set(const char *name)
{
	const char *s = getenv(name);

	return s && *s ? s : NULL;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Where rank @r listens, from the node list ddssrun gave us ("?" without one). */
static void rank_addr(const struct ddss_tp_node *nodes, uint32_t count, uint32_t r, char *buf,
		      size_t len)
{
	if (nodes && r >= 1 && r <= count)
		snprintf(buf, len, "%s:%u", nodes[r - 1].host, nodes[r - 1].port);
	else
		snprintf(buf, len, "?");
}

/* Rank 1: ask rank @r; true if it answered. */
static bool probe_rank(ddss_ctx_t *ctx, uint32_t r, const char *addr)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK, .rank = r };
	int64_t t0 = now_ns(), rtt[PROBE_GETS];
	char buf[PROBE_LEN];
	ddss_key_t key;
	int err;

	err = ddss_allocate_ss(ctx, PROBE_LEN, &sa, &key);
	if (err) {
		printf("  rank %-4u %-22s no answer: %s (after %.0f ms)\n", r, addr,
		       ddss_strerror(err), (double)(now_ns() - t0) / 1e6);
		return false;
	}
	err = ddss_get(ctx, key, 0, buf, sizeof(buf)); /* the first one connects */
	for (int i = 0; !err && i < PROBE_GETS; i++) {
		t0 = now_ns();
		err = ddss_get(ctx, key, 0, buf, sizeof(buf));
		rtt[i] = now_ns() - t0;
	}
	if (err) {
		printf("  rank %-4u %-22s no answer: %s (a get of its segment)\n", r, addr,
		       ddss_strerror(err));
		ddss_release_ss(ctx, key);
		return false;
	}
	qsort(rtt, PROBE_GETS, sizeof(rtt[0]), cmp_i64);
	printf("  rank %-4u %-22s answers, rtt %.1f us (median of %d gets of %d bytes)%s\n", r,
	       addr, (double)rtt[PROBE_GETS / 2] / 1e3, PROBE_GETS, PROBE_LEN,
	       r == ddss_rank(ctx) ? ", this rank" : "");
	err = ddss_release_ss(ctx, key);
	if (err)
		printf("  rank %-4u releasing the probe's segment: %s\n", r, ddss_strerror(err));
	return true;
}

static void print_header(ddss_ctx_t *ctx)
{
	const struct ddss_tp *tp = ctx->tp;

	printf("ddss-info: DDSS %s, group of %u ranks, ", ddss_version_string(), ddss_size(ctx));
	if (ctx->client)
		printf("daemon mode (each rank's ddssd joined the group)\n");
	else if (tp->device[0])
		printf("transport %s on %s\n", tp->ops->name, tp->device);
	else
		printf("transport %s\n", tp->ops->name);
}

int info_group_run(void)
{
	struct ddss_tp_node *nodes = NULL;
	uint32_t count = 0, answered = 0, n, me;
	const char *list = env_set("DDSS_NODES");
	struct ddss_attr attr;
	ddss_ctx_t *ctx;
	int err;

	if (!env_set("DDSS_NODES") && !env_set("DDSS_NODES_FILE") &&
	    !(env_set("DDSS_MODE") && !strcmp(getenv("DDSS_MODE"), "daemon"))) {
		fprintf(stderr, "ddss-info: --group: not in a group; run it as every rank "
			"(ddssrun -n N -- ddss-info --group), or set DDSS_NODES and DDSS_RANK\n");
		return 2;
	}
	ddss_attr_init(&attr);
	attr.connect_timeout_ms = GROUP_CONNECT_MS;
	attr.op_timeout_ms = GROUP_OP_MS;
	attr.pool_size = 1u << 20; /* the probe needs a few bytes; pin no more than the least */
	err = ddss_init(&attr, &ctx);
	if (err) {
		bool unreached = err == -ETIMEDOUT || err == -EHOSTDOWN || err == -ECONNREFUSED ||
				 err == -ECONNRESET;

		fprintf(stderr, "ddss-info: rank %s cannot join the group: %s%s\n",
			env_set("DDSS_RANK") ? getenv("DDSS_RANK") : "?", ddss_strerror(err),
			unreached ? ". Every rank must run ddss-info --group; one that did not "
				    "start, or that cannot be reached at its DDSS_NODES address, keeps "
				    "all from joining (waited up to the connect timeout)" : "");
		return 1;
	}
	n = ddss_size(ctx);
	me = ddss_rank(ctx);
	if (me == 1) {
		if (list && ddss_nodes_parse(list, &nodes, &count))
			nodes = NULL;
		print_header(ctx);
		for (uint32_t r = 1; r <= n; r++) {
			char addr[96];

			rank_addr(nodes, count, r, addr, sizeof(addr));
			answered += probe_rank(ctx, r, addr);
			fflush(stdout);
		}
		printf("group: %u of %u ranks answer\n", answered, n);
		fflush(stdout);
		free(nodes);
	}
	err = ddss_finalize(ctx);
	if (err)
		fprintf(stderr, "ddss-info: leaving the group: %s\n", ddss_strerror(err));
	return me == 1 && answered < n ? 1 : 0;
}
