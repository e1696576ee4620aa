/*
 * The automatic transport choice (DDSS_TRANSPORT=auto) on a machine with a usable RDMA
 * device, 2 ranks under ddssrun --transport verbs (this program switches to auto):
 *   verbs_auto --expect verbs   verbs starts: auto keeps it;
 *   verbs_auto --expect tcp     with DDSS_VERBS_DISABLE=start verbs opens but cannot start:
 *                               auto falls back to tcp, says why at warning level, and the
 *                               group works.
 * The log lines are what the user sees: this program reads its own stderr back.
 */
#include "common/test_util.h"
#include "core/ctx.h"
#include "ddss/ddss.h"
#include "net/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_path[] = "/tmp/ddss-auto-XXXXXX";

static char *log_text(void)
{
	fflush(stderr);
	return test_read_file(log_path);
}

int main(int argc, char **argv)
{
	const char *expect = argc == 3 && !strcmp(argv[1], "--expect") ? argv[2] : NULL;
	unsigned char buf[256], back[256];
	int fd, saved, r, fails = 0;
	ddss_ctx_t *ctx;
	const char *name;
	ddss_key_t key;
	struct ddss_seg_attr a = { .name = "auto", .placement = DDSS_PLACE_RANK, .rank = 1 };
	char *t;

	if (!expect) {
		fprintf(stderr, "usage: verbs_auto --expect verbs|tcp\n");
		return 2;
	}
	setenv("DDSS_TRANSPORT", "auto", 1);
	setenv("DDSS_LOG_LEVEL", "info", 1);
	fd = mkstemp(log_path);
	saved = dup(2);
	if (fd < 0 || saved < 0 || dup2(fd, 2) < 0) {
		perror("verbs_auto: redirecting stderr");
		return 1;
	}
	close(fd);
	r = ddss_init(NULL, &ctx);
	if (r) {
		fails++;
		name = "(none)";
	} else {
		name = ddss_net_transport_name(ctx->net);
		if (strcmp(name, expect))
			fails++;
		/* Rank 1 writes, rank 2 reads: the group works on what auto chose. */
		test_fill(buf, sizeof(buf), 7);
		r = ddss_allocate_ss(ctx, sizeof(buf), &a, &key);
		if (!r && ddss_rank(ctx) == 1)
			r = ddss_put(ctx, key, 0, buf, sizeof(buf));
		if (!r)
			r = ddss_barrier(ctx);
		if (!r)
			r = ddss_get(ctx, key, 0, back, sizeof(back));
		if (r || memcmp(buf, back, sizeof(buf)))
			fails++;
		if (!r)
			r = ddss_barrier(ctx);
		if (ddss_finalize(ctx))
			fails++;
	}
	t = log_text();
	/* "ddss[rank] WARN ddss_tp_start_pool:line: transport auto: ..." */
	if (!strcmp(expect, "tcp")) {
		const char *w = strstr(t, "transport auto: verbs cannot start (No such device); "
					  "falling back to tcp");
		const char *line = w;

		while (line && line > t && line[-1] != '\n')
			line--;
		if (!w || !strstr(line, " WARN ") || strstr(line, " WARN ") > w ||
		    !strstr(t, "not starting on") || !strstr(t, "DDSS_VERBS_DISABLE=start"))
			fails++;
	}
	if (!strcmp(expect, "verbs") && strstr(t, "falling back"))
		fails++;
	dup2(saved, 2);
	printf("verbs_auto: expected %s, running on %s, data %s: %s\n", expect, name,
	       r ? ddss_strerror(r) : "ok", fails ? "FAIL" : "ok");
	if (fails)
		fprintf(stderr, "---- log ----\n%s", t);
	free(t);
	unlink(log_path);
	return fails ? 1 : 0;
}
