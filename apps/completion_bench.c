/*
 * ddss-completion-bench: the completion modes side by side (issue 27). For each of event,
 * poll and adaptive: the latency of a 1 B ddss_get and ddss_put on a segment homed at the
 * other rank (median and p99), and the CPU time of the measuring process per operation
 * (getrusage(RUSAGE_SELF) user + sys over the timed operations, all its threads, divided
 * by the operations), printed as one table with the spin bound adaptive mode used.
 *
 *   ddssrun -n 2 [--transport tcp|verbs] ddss-completion-bench [--iters N] [--rounds R]
 *                [--modes LIST] [--no-pin]
 *   ddss-completion-bench ...            (the same, without the outer ddssrun: tcp)
 *
 * The mode is fixed when a rank joins (DDSS_COMPLETION), so every mode of every round is
 * a fresh pair of ranks: rank 1 of the outer run (or the program run alone) is the driver;
 * it starts `ddssrun -n 2 --transport T` (the ddssrun beside this program, T the outer
 * run's transport) on this program once per mode and round, with DDSS_COMPLETION set and
 * DDSS_COMPLETION_BENCH_CHILD=1, and reads the result line rank 1 of that run prints; the
 * outer rank 2 leaves at once. Modes take turns within a round (event, poll, adaptive,
 * event, ...), so drift on a shared machine hits all alike; the table gives, per mode,
 * the median over rounds of each round's figure.
 *
 * A child run: both ranks pin themselves (CPU rank-1) unless --no-pin, rank 1 allocates a
 * 1 B segment at rank 2, warms up, then times --iters gets and then --iters puts, each
 * phase between two getrusage calls. Everything else the child prints goes to stderr.
 * --modes takes a comma-separated list of event, poll, adaptive (default all three).
 * Exit status: 0, 1 if a run or an operation failed, 2 on bad usage.
 */
#include "core/ctx.h"
#include "net/spin.h"

#include "bench_util.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOME 2
#define WARMUP 500
#define CHILD_ENV "DDSS_COMPLETION_BENCH_CHILD"
#define MAX_ROUNDS 50
#define MAX_MODES 3

static const char *const all_modes[MAX_MODES] = { "event", "poll", "adaptive" };

/* What one child run measured (rank 1), in us. */
struct result {
	double get_med, get_p99, put_med, put_p99, get_cpu, put_cpu;
	double spin_us, wake_us;
};

/* ---- the child: one mode, one pair of ranks ---- */

static double cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Time @n operations of one kind; samples in ticks, CPU per operation in us. */
static int phase(struct ddss_ctx *ctx, ddss_key_t key, bool put, double *lat, unsigned n,
		 double *cpu_p)
{
	char byte = 0x5a;
	double c0 = cpu_us();

	for (unsigned i = 0; i < n; i++) {
		uint64_t t0 = bench_ticks();
		int r = put ? ddss_put(ctx, key, 0, &byte, 1) : ddss_get(ctx, key, 0, &byte, 1);

		if (r) {
			fprintf(stderr, "ddss-completion-bench: %s failed: %s\n", put ? "put" : "get",
				ddss_strerror(r));
			return 1;
		}
		lat[i] = (double)(bench_ticks() - t0);
	}
	*cpu_p = (cpu_us() - c0) / n;
	return 0;
}

static int measure(struct ddss_ctx *ctx, const struct bench_opts *o)
{
	struct ddss_seg_attr sa = { .placement = DDSS_PLACE_RANK, .rank = HOME };
	double *get = calloc(o->iters, sizeof(double)), *put = calloc(o->iters, sizeof(double));
	const char *mode = getenv("DDSS_COMPLETION");
	struct result res = { 0 };
	double us_per_tick, mean;
	ddss_key_t key;
	char byte = 0;
	uint64_t tick0;
	int64_t ns0;
	int r, rc = 0;

	if (!get || !put) {
		fprintf(stderr, "ddss-completion-bench: out of memory\n");
		rc = 1;
		goto out_free;
	}
	r = ddss_allocate_ss(ctx, 1, &sa, &key);
	if (r) {
		fprintf(stderr, "ddss-completion-bench: cannot allocate 1 B at rank %d: %s\n", HOME,
			ddss_strerror(r));
		rc = 1;
		goto out_free;
	}
	for (unsigned i = 0; !rc && i < WARMUP; i++)
		if (ddss_get(ctx, key, 0, &byte, 1) || ddss_put(ctx, key, 0, &byte, 1))
			rc = 1;
	if (rc)
		fprintf(stderr, "ddss-completion-bench: warm-up failed\n");
	ns0 = ddss_now_ns();
	tick0 = bench_ticks();
	if (!rc)
		rc = phase(ctx, key, false, get, o->iters, &res.get_cpu);
	if (!rc)
		rc = phase(ctx, key, true, put, o->iters, &res.put_cpu);
	if (!rc) {
		us_per_tick = (double)(ddss_now_ns() - ns0) / 1000.0 / (double)(bench_ticks() - tick0);
		bench_summarize(get, o->iters, &res.get_med, &res.get_p99, &mean);
		bench_summarize(put, o->iters, &res.put_med, &res.put_p99, &mean);
		res.get_med *= us_per_tick;
		res.get_p99 *= us_per_tick;
		res.put_med *= us_per_tick;
		res.put_p99 *= us_per_tick;
		if (ctx->tp->cfg.completion == DDSS_TP_COMPLETION_ADAPTIVE) {
			res.spin_us = (double)ddss_spin_ns() / 1000;
			res.wake_us = (double)ddss_spin_wake_ns() / 1000;
		}
		/* The line the driver reads; everything else is for people. */
		printf("RESULT %s %s %.3f %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n",
		       ddss_net_transport_name(ctx->net), mode && *mode ? mode : "adaptive",
		       res.get_med, res.get_p99, res.put_med, res.put_p99, res.get_cpu,
		       res.put_cpu, res.spin_us, res.wake_us);
	}
	r = ddss_release_ss(ctx, key);
	if (r) {
		fprintf(stderr, "ddss-completion-bench: release failed: %s\n", ddss_strerror(r));
		rc = 1;
	}
out_free:
	free(get);
	free(put);
	return rc;
}

/* ---- the driver ---- */

struct driver_opts {
	unsigned iters, rounds;
	bool pin;
	const char *modes[MAX_MODES];
	unsigned nmodes;
};

static int parse_modes(char *list, struct driver_opts *d)
{
	d->nmodes = 0;
	for (char *m = strtok(list, ","); m; m = strtok(NULL, ",")) {
		unsigned k = 0;

		while (k < MAX_MODES && strcmp(m, all_modes[k]))
			k++;
		if (k == MAX_MODES || d->nmodes == MAX_MODES)
			return -1;
		d->modes[d->nmodes++] = all_modes[k];
	}
	return d->nmodes ? 0 : -1;
}

static int parse(int argc, char **argv, struct driver_opts *d)
{
	*d = (struct driver_opts){ .iters = 2000, .rounds = 3, .pin = true, .nmodes = MAX_MODES };
	memcpy(d->modes, all_modes, sizeof(all_modes));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			d->iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			d->rounds = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--modes") && i + 1 < argc) {
			if (parse_modes(argv[++i], d))
				return -1;
		} else if (!strcmp(argv[i], "--no-pin"))
			d->pin = false;
		else
			return -1;
	}
	return d->iters && d->rounds && d->rounds <= MAX_ROUNDS ? 0 : -1;
}

/* Run one child pair in @mode; its RESULT line parsed into @res. 0 or 1. */
static int run_child(const char *self, const char *ddssrun, const char *transport,
		     const char *mode, const struct driver_opts *d, struct result *res)
{
	char iters[16], line[512], tp[16], m[16];
	int fds[2], status, got = 0;
	FILE *in;
	pid_t pid;

	snprintf(iters, sizeof(iters), "%u", d->iters);
	if (pipe(fds))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		const char *argv[] = { ddssrun, "-n", "2", "--transport", transport, "--timeout",
				       "900", "--", self, "--iters", iters, "--rounds", "1",
				       d->pin ? NULL : "--no-pin", NULL };

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		setenv("DDSS_COMPLETION", mode, 1);
		setenv(CHILD_ENV, "1", 1);
		execv(ddssrun, (char *const *)argv);
		perror(ddssrun);
		_exit(127);
	}
	close(fds[1]);
	in = fdopen(fds[0], "r");
	while (in && fgets(line, sizeof(line), in)) {
		/* ddssrun prefixes each line with its rank: "[1] RESULT ...". */
		if (sscanf(line, "[1] RESULT %15s %15s %lf %lf %lf %lf %lf %lf %lf %lf", tp, m,
			   &res->get_med, &res->get_p99, &res->put_med, &res->put_p99,
			   &res->get_cpu, &res->put_cpu, &res->spin_us, &res->wake_us) == 10)
			got = 1;
		else
			fputs(line, stderr);
	}
	if (in)
		fclose(in);
	else
		close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "ddss-completion-bench: the %s run failed\n", mode);
		return 1;
	}
	if (!got)
		fprintf(stderr, "ddss-completion-bench: the %s run printed no result\n", mode);
	return got ? 0 : 1;
}

static double median_of(double *v, unsigned n)
{
	qsort(v, n, sizeof(double), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int drive(int argc, char **argv)
{
	static struct result res[MAX_MODES][MAX_ROUNDS];
	char self[PATH_MAX], dir[PATH_MAX], ddssrun[PATH_MAX + 16];
	const char *transport = getenv("DDSS_TRANSPORT");
	struct driver_opts d;
	ssize_t n;

	if (parse(argc, argv, &d)) {
		fprintf(stderr, "usage: [ddssrun -n 2] %s [--iters N] [--rounds R<=%d] "
			"[--modes event,poll,adaptive] [--no-pin]\n", argv[0], MAX_ROUNDS);
		return 2;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		perror("ddss-completion-bench: /proc/self/exe");
		return 1;
	}
	self[n] = 0;
	strcpy(dir, self);
	snprintf(ddssrun, sizeof(ddssrun), "%s/ddssrun", dirname(dir));
	if (!transport || !*transport || !strcmp(transport, "auto"))
		transport = "tcp";
	for (unsigned r = 0; r < d.rounds; r++)
		for (unsigned k = 0; k < d.nmodes; k++)
			if (run_child(self, ddssrun, transport, d.modes[k], &d, &res[k][r]))
				return 1;
	printf("ddss-completion-bench: transport=%s, 1 B get and put to a segment at rank 2, "
	       "%u ops per op and run, %u round(s), %s\n", transport, d.iters, d.rounds,
	       d.pin ? "ranks pinned to CPUs 0 and 1" : "unpinned");
	printf("latency in us, cpu = getrusage user+sys of rank 1 (all threads) / ops in us; "
	       "each figure the median over rounds\n");
	printf("%-9s %9s %9s %9s %9s %11s %11s %9s %9s\n", "mode", "get_med", "get_p99",
	       "put_med", "put_p99", "get_cpu/op", "put_cpu/op", "spin_us", "wake_us");
	for (unsigned k = 0; k < d.nmodes; k++) {
		double col[8][MAX_ROUNDS];

		for (unsigned r = 0; r < d.rounds; r++) {
			const struct result *x = &res[k][r];

			col[0][r] = x->get_med;
			col[1][r] = x->get_p99;
			col[2][r] = x->put_med;
			col[3][r] = x->put_p99;
			col[4][r] = x->get_cpu;
			col[5][r] = x->put_cpu;
			col[6][r] = x->spin_us;
			col[7][r] = x->wake_us;
		}
		printf("%-9s %9.2f %9.2f %9.2f %9.2f %11.2f %11.2f", d.modes[k],
		       median_of(col[0], d.rounds), median_of(col[1], d.rounds),
		       median_of(col[2], d.rounds), median_of(col[3], d.rounds),
		       median_of(col[4], d.rounds), median_of(col[5], d.rounds));
		if (strcmp(d.modes[k], "adaptive"))
			printf(" %9s %9s\n", "-", "-");
		else
			printf(" %9.1f %9.1f\n", median_of(col[6], d.rounds),
			       median_of(col[7], d.rounds));
	}
	printf("spin_us: adaptive's bound; wake_us: the wake-up round trip it measured "
	       "(0: set by DDSS_SPIN_US)\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *rank = getenv("DDSS_RANK");

	if (getenv(CHILD_ENV))
		return bench_two_ranks_main(argc, argv, "ddss-completion-bench", "--size", 1, 1,
					    measure);
	/* Under an outer ddssrun: rank 1 drives, the others have nothing to do. */
	if (rank && strcmp(rank, "1"))
		return 0;
	return drive(argc, argv);
}
