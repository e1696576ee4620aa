/*
 * net/thread_files.c on its own: a helper thread that makes its file table private keeps
 * exactly the fds it was given (and 0-2), does not keep the others' files open (a pipe
 * the main thread closes still reaches EOF), and no longer sees fds opened after it;
 * asked to keep too many, it changes nothing and stays shared.
 */
#include "common/test_util.h"
#include "net/thread_files.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

/* What the helper thread saw; checked by the main thread (CUnit is not thread-safe). */
struct seen {
	const int *keep;
	size_t nkeep;
	int probe_before;      /* fd open before the call, not kept */
	int ret;
	bool kept_ok, stderr_ok, wrote_kept;
	int errno_before;      /* errno of fcntl(probe_before) in the thread */
	int probe_after;       /* set by main after the first barrier */
	int errno_after;       /* 0 if the thread could see probe_after */
	pthread_barrier_t step;
};

static int fd_errno(int fd)
{
	return fcntl(fd, F_GETFD) < 0 ? errno : 0;
}

static void *helper(void *arg)
{
	struct seen *s = arg;

	s->ret = ddss_thread_files_private(s->keep, s->nkeep);
	s->errno_before = fd_errno(s->probe_before);
	s->stderr_ok = fd_errno(2) == 0;
	s->kept_ok = s->nkeep < 2 || fd_errno(s->keep[1]) == 0;
	s->wrote_kept = s->nkeep >= 2 && write(s->keep[1], "x", 1) == 1;
	pthread_barrier_wait(&s->step); /* main opens probe_after */
	pthread_barrier_wait(&s->step);
	s->errno_after = fd_errno(s->probe_after);
	pthread_barrier_wait(&s->step); /* main checks EOF while this table still exists */
	pthread_barrier_wait(&s->step);
	return NULL;
}

static void run_helper(struct seen *s, int drop_wr, int drop_rd, bool *eof_p)
{
	pthread_t th;
	char c;

	pthread_barrier_init(&s->step, NULL, 2);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, helper, s), 0);
	pthread_barrier_wait(&s->step);
	s->probe_after = open("/dev/null", O_RDONLY);
	pthread_barrier_wait(&s->step);
	pthread_barrier_wait(&s->step);
	close(drop_wr);
	/* EOF (0) if nobody else holds the write end; -1/EAGAIN if the helper's copy does. */
	*eof_p = read(drop_rd, &c, 1) == 0;
	pthread_barrier_wait(&s->step);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&s->step);
	close(s->probe_after);
}

static void test_private_keeps_only_given(void)
{
	int kept[2], dropped[2];
	char c = 0;
	bool eof;

	CU_ASSERT_EQUAL_FATAL(pipe(kept), 0);
	CU_ASSERT_EQUAL_FATAL(pipe2(dropped, O_NONBLOCK), 0);
	/* A negative entry and a duplicate are ignored; keep[1] is the fd the thread writes. */
	int keep[3] = { -1, kept[1], kept[1] };
	struct seen s = { .keep = keep, .nkeep = 3, .probe_before = dropped[0] };

	run_helper(&s, dropped[1], dropped[0], &eof);
	CU_ASSERT_EQUAL(s.ret, 0);
	CU_ASSERT_TRUE(s.kept_ok);
	CU_ASSERT_TRUE(s.wrote_kept);
	CU_ASSERT_TRUE(s.stderr_ok);
	CU_ASSERT_EQUAL(s.errno_before, EBADF); /* dropped from the helper's table ... */
	CU_ASSERT_EQUAL(fd_errno(dropped[0]), 0); /* ... and still open in ours */
	CU_ASSERT_EQUAL(s.errno_after, EBADF);  /* opened later: ours only */
	CU_ASSERT_TRUE(eof);                    /* the helper did not keep the pipe open */
	CU_ASSERT_EQUAL(read(kept[0], &c, 1), 1);
	CU_ASSERT_EQUAL(c, 'x');
	close(kept[0]);
	close(kept[1]);
	close(dropped[0]);
}

static void test_too_many_stays_shared(void)
{
	int keep[65], dropped[2];
	bool eof;

	for (int i = 0; i < 65; i++)
		keep[i] = -1;
	CU_ASSERT_EQUAL_FATAL(pipe2(dropped, O_NONBLOCK), 0);
	struct seen s = { .keep = keep, .nkeep = 65, .probe_before = dropped[0] };

	run_helper(&s, dropped[1], dropped[0], &eof);
	CU_ASSERT_EQUAL(s.ret, -E2BIG);
	CU_ASSERT_EQUAL(s.errno_before, 0); /* nothing closed */
	CU_ASSERT_EQUAL(s.errno_after, 0);  /* still one table */
	CU_ASSERT_TRUE(eof);
	close(dropped[0]);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("thread_files", NULL, NULL);
	CU_add_test(s, "a private table keeps only the fds given", test_private_keeps_only_given);
	CU_add_test(s, "too many fds to keep: nothing changes", test_too_many_stays_shared);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
