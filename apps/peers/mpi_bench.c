/*
 * ddss-mpi-bench: MPI one-sided RMA (passive target), the DDSS workload's other peer.
 *
 *   mpirun -np 2 ddss-mpi-bench [--iters N] [--rounds R] [--quick] [--label L] [--csv]
 *                               [--csv-out FILE] [--probe]
 *
 * MPI rank 0 measures (DDSS's rank 1), the window is MPI rank 1's (DDSS's rank 2, the home),
 * which only waits in a barrier meanwhile. run-peers.sh starts it on loopback with
 * "--mca pml ob1 --mca btl self,tcp --mca osc pt2pt" (--label says so in the output): the
 * default on one machine would be osc/sm, where MPI_Get is a memcpy through shared memory
 * and nothing crosses a network stack, which is no comparison for a network transport.
 *
 * Timed calls, interleaved in blocks of 25 (each contender in turn, --rounds times --iters):
 *   get / put 1 B, 64 B, 4 KiB, two ways of passive-target access:
 *     flush     inside one MPI_Win_lock_all epoch (opened and closed between blocks,
 *               untimed): MPI_Get (MPI_Put) + MPI_Win_flush(1): the data transfer alone
 *     lock/op   MPI_Win_lock(SHARED for get, EXCLUSIVE for put, 1) + MPI_Get (MPI_Put) +
 *               MPI_Win_unlock(1): an access that also takes the window's lock
 *   lock + unlock: MPI_Win_lock(EXCLUSIVE, 1) + MPI_Win_unlock(1) with an empty epoch, and
 *               the same SHARED. An implementation may take a lock lazily (at the first
 *               operation or at unlock); then an empty epoch is cheap, which the output notes.
 * Times from CLOCK_MONOTONIC; medians, p99 and means in microseconds. Open MPI progresses by
 * polling, so these are polling-mode numbers. --csv prints CSV (the same columns as
 * ddss-peers-bench), --csv-out FILE writes it to FILE as well. --probe only starts and
 * stops MPI (run-peers.sh uses it to see whether mpirun works here at all). --quick:
 * --iters 200 --rounds 1.
 * Exit status: 0; 1 if an MPI call failed; 2 on bad usage or other than 2 processes.
 */
#include <mpi.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TARGET 1
#define BLOCK 25
#define WARMUP 200
#define MAX_SIZE 4096
#define NSIZES 3
#define LAZY_US 1.0 /* an empty epoch faster than this took no round trip */

static const int sizes[NSIZES] = { 1, 64, 4096 };

enum call { C_GET_FLUSH, C_GET_LOCK, C_PUT_FLUSH, C_PUT_LOCK, C_DATA_COUNT };
enum { L_EXCL, L_SHARED, L_COUNT };

/* The CSV's call column: short and stable (run-peers.sh selects rows by it). */
static const char *const data_calls[C_DATA_COUNT] = { "get+flush", "lock(S)+get+unlock",
						      "put+flush", "lock(X)+put+unlock" };
static const char *const lock_calls[L_COUNT] = { "lock(X)+unlock", "lock(S)+unlock" };
static const char *const data_names[C_DATA_COUNT] = {
	"MPI_Get + MPI_Win_flush (in lock_all)",
	"MPI_Win_lock(SHARED) + MPI_Get + unlock",
	"MPI_Put + MPI_Win_flush (in lock_all)",
	"MPI_Win_lock(EXCLUSIVE) + MPI_Put + unlock",
};
static const char *const data_tests[C_DATA_COUNT] = { "get", "get", "put", "put" };
static const char *const lock_names[L_COUNT] = {
	"MPI_Win_lock(EXCLUSIVE) + MPI_Win_unlock",
	"MPI_Win_lock(SHARED) + MPI_Win_unlock",
};

struct opts {
	unsigned iters, rounds;
	bool csv, probe;
	const char *label, *csv_out;
};

struct stat3 {
	double med, p99, mean;
};

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void summarize(double *v, size_t n, struct stat3 *s)
{
	double sum = 0;

	qsort(v, n, sizeof(double), cmp_double);
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	s->med = v[n / 2];
	s->p99 = v[n * 99 / 100];
	s->mean = sum / (double)n;
}

static int check(int err, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (err == MPI_SUCCESS)
		return 0;
	MPI_Error_string(err, msg, &len);
	fprintf(stderr, "ddss-mpi-bench: %s: %s\n", what, msg);
	return 1;
}

/* One data call; the flush kind runs inside the caller's lock_all epoch. */
static int data_call(MPI_Win win, enum call c, char *buf, int size)
{
	switch (c) {
	case C_GET_FLUSH:
		return check(MPI_Get(buf, size, MPI_BYTE, TARGET, 0, size, MPI_BYTE, win), "MPI_Get") ||
		       check(MPI_Win_flush(TARGET, win), "MPI_Win_flush");
	case C_PUT_FLUSH:
		return check(MPI_Put(buf, size, MPI_BYTE, TARGET, 0, size, MPI_BYTE, win), "MPI_Put") ||
		       check(MPI_Win_flush(TARGET, win), "MPI_Win_flush");
	case C_GET_LOCK:
		return check(MPI_Win_lock(MPI_LOCK_SHARED, TARGET, 0, win), "MPI_Win_lock") ||
		       check(MPI_Get(buf, size, MPI_BYTE, TARGET, 0, size, MPI_BYTE, win), "MPI_Get") ||
		       check(MPI_Win_unlock(TARGET, win), "MPI_Win_unlock");
	default:
		return check(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, TARGET, 0, win), "MPI_Win_lock") ||
		       check(MPI_Put(buf, size, MPI_BYTE, TARGET, 0, size, MPI_BYTE, win), "MPI_Put") ||
		       check(MPI_Win_unlock(TARGET, win), "MPI_Win_unlock");
	}
}

static int lock_call(MPI_Win win, int kind)
{
	return check(MPI_Win_lock(kind == L_EXCL ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, TARGET, 0,
				  win), "MPI_Win_lock") ||
	       check(MPI_Win_unlock(TARGET, win), "MPI_Win_unlock");
}

/* @n calls of one contender (a data call at @size, or a lock kind when @size is 0). */
static int run_block(MPI_Win win, int c, int size, char *buf, unsigned n, double *lat)
{
	bool flush = size && (c == C_GET_FLUSH || c == C_PUT_FLUSH);
	int rc = 0;

	if (flush && check(MPI_Win_lock_all(0, win), "MPI_Win_lock_all"))
		return 1;
	for (unsigned i = 0; !rc && i < n; i++) {
		double t0 = now_us();

		rc = size ? data_call(win, (enum call)c, buf, size) : lock_call(win, c);
		if (lat)
			lat[i] = now_us() - t0;
	}
	if (flush && check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all"))
		return 1;
	return rc;
}

/* Contenders 0..@nc-1 in turn, BLOCK calls each. */
static int measure(MPI_Win win, const struct opts *o, int size, int nc, char *buf,
		   struct stat3 *st)
{
	size_t n = (size_t)o->iters * o->rounds;
	double *lat[C_DATA_COUNT] = { NULL };
	int rc = 0;

	for (int c = 0; c < nc; c++) {
		lat[c] = calloc(n, sizeof(double));
		if (!lat[c])
			rc = 1;
	}
	for (int c = 0; !rc && c < nc; c++)
		rc = run_block(win, c, size, buf, WARMUP, NULL);
	for (unsigned r = 0; !rc && r < o->rounds; r++)
		for (unsigned blk = 0; !rc && blk < o->iters; blk += BLOCK)
			for (int c = 0; !rc && c < nc; c++) {
				unsigned len = o->iters - blk < BLOCK ? o->iters - blk : BLOCK;

				rc = run_block(win, c, size, buf, len,
					       lat[c] + (size_t)r * o->iters + blk);
			}
	for (int c = 0; c < nc; c++) {
		if (!rc)
			summarize(lat[c], n, &st[c]);
		free(lat[c]);
	}
	return rc;
}

static void csv(FILE *f, const struct opts *o, struct stat3 (*dst)[C_DATA_COUNT],
		const struct stat3 *lst)
{
	size_t n = (size_t)o->iters * o->rounds;

	fprintf(f, "mode,transport,completion,kind,test,size,system,call,median_us,p99_us,mean_us,"
		   "ops_per_s,samples,ratio,target,met\n");
	for (int s = 0; s < NSIZES; s++)
		for (int c = 0; c < C_DATA_COUNT; c++)
			fprintf(f, "mpi,%s,poll,latency,%s,%d,MPI,%s,%.3f,%.3f,%.3f,,%zu,,,\n",
				o->label, data_tests[c], sizes[s], data_calls[c],
				dst[s][c].med, dst[s][c].p99, dst[s][c].mean, n);
	for (int k = 0; k < L_COUNT; k++)
		fprintf(f, "mpi,%s,poll,latency,lock+unlock,0,MPI,%s,%.3f,%.3f,%.3f,,%zu,,,\n",
			o->label, lock_calls[k], lst[k].med, lst[k].p99, lst[k].mean, n);
}

static void text(const struct opts *o, struct stat3 (*dst)[C_DATA_COUNT], const struct stat3 *lst)
{
	char ver[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0;

	MPI_Get_library_version(ver, &len);
	ver[strcspn(ver, ",\n")] = '\0';
	printf("ddss-mpi-bench: %s, one-sided RMA (passive target) over %s; window at rank 1, "
	       "rank 0 measures\n", ver, o->label);
	printf("%zu samples per call, contenders taking turns in blocks of %d; flush = one "
	       "MPI_Win_lock_all epoch per block, a flush per call; lock/op = MPI_Win_lock + "
	       "call + MPI_Win_unlock per call\n", (size_t)o->iters * o->rounds, BLOCK);
	printf("latency in us\n%-12s %6s  %-6s %-44s %9s %9s %9s\n", "test", "size", "system",
	       "call", "median", "p99", "mean");
	for (int c = 0; c < C_DATA_COUNT; c++)
		for (int s = 0; s < NSIZES; s++)
			printf("%-12s %4d B  %-6s %-44s %9.2f %9.2f %9.2f\n", data_tests[c], sizes[s],
			       "MPI", data_names[c], dst[s][c].med, dst[s][c].p99, dst[s][c].mean);
	for (int k = 0; k < L_COUNT; k++)
		printf("%-12s %6s  %-6s %-44s %9.2f %9.2f %9.2f%s\n", "lock+unlock", "", "MPI",
		       lock_names[k], lst[k].med, lst[k].p99, lst[k].mean,
		       lst[k].med < LAZY_US ? "  (no round trip: the lock is taken lazily)" : "");
}

static int parse(int argc, char **argv, struct opts *o)
{
	unsigned iters = 0, rounds = 0;
	bool quick = false;

	*o = (struct opts){ .iters = 1000, .rounds = 5, .label = "mpi" };
	for (int i = 1; i < argc; i++) {
		bool v = i + 1 < argc;

		if (!strcmp(argv[i], "--iters") && v)
			iters = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && v)
			rounds = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--label") && v)
			o->label = argv[++i];
		else if (!strcmp(argv[i], "--csv-out") && v)
			o->csv_out = argv[++i];
		else if (!strcmp(argv[i], "--csv"))
			o->csv = true;
		else if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--probe"))
			o->probe = true;
		else
			return -1;
	}
	if (quick) {
		o->iters = 200;
		o->rounds = 1;
	}
	o->iters = iters ? iters : o->iters;
	o->rounds = rounds ? rounds : o->rounds;
	/* The label goes into a CSV field. */
	return o->iters <= 1000000 && o->rounds <= 1000 && !strpbrk(o->label, ",\n") ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct stat3 dst[NSIZES][C_DATA_COUNT], lst[L_COUNT];
	struct opts o;
	int rank = 0, size = 0, rc = 0, all_rc = 0;
	char *base, *buf;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (parse(argc, argv, &o) || size != 2) {
		if (!rank)
			fprintf(stderr, "usage: mpirun -np 2 %s [--iters N] [--rounds R] [--quick] "
				"[--label L] [--csv] [--csv-out FILE] [--probe]\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	if (o.probe) {
		if (!rank)
			printf("ddss-mpi-bench: MPI runs here (2 processes)\n");
		MPI_Finalize();
		return 0;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	buf = malloc(MAX_SIZE);
	if (!buf || check(MPI_Win_allocate(MAX_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
			  "MPI_Win_allocate"))
		MPI_Abort(MPI_COMM_WORLD, 1);
	MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
	memset(buf, 0x5a, MAX_SIZE);
	if (rank == 0) {
		for (int s = 0; !rc && s < NSIZES; s++)
			rc = measure(win, &o, sizes[s], C_DATA_COUNT, buf, dst[s]);
		if (!rc)
			rc = measure(win, &o, 0, L_COUNT, buf, lst);
		if (rc) {
			fprintf(stderr, "ddss-mpi-bench: measurement failed\n");
		} else {
			if (o.csv)
				csv(stdout, &o, dst, lst);
			else
				text(&o, dst, lst);
			fflush(stdout);
			if (o.csv_out) {
				FILE *f = fopen(o.csv_out, "w");

				if (!f) {
					perror(o.csv_out);
					rc = 1;
				} else {
					csv(f, &o, dst, lst);
					rc = fclose(f) ? 1 : 0;
				}
			}
		}
	}
	/* The target serves passive-target requests while it waits here (it polls). */
	MPI_Allreduce(&rc, &all_rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Win_free(&win);
	free(buf);
	MPI_Finalize();
	return all_rc ? 1 : 0;
}
