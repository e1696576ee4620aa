/*
 * The daemon's own life, seen from a client: one instance per socket, a forked child's
 * copy of an attachment is dead there and harmless to the parent, a daemon that is
 * killed turns the calls of its clients (one of them blocked inside the daemon) into
 * -ENOTCONN quickly, a frozen one is given up within DDSS_DAEMON_STALL_MS, a crashed
 * daemon's successor starts on the same socket, SIGTERM stops
 * a daemon cleanly (exit 0) with a client still attached and holding a lock.
 *
 *   daemon_life PATH/TO/ddssd
 *
 * Starts its own one-rank ddssd (tcp), as ddssrun would, so it can kill it.
 */
#include "common/test_util.h"
#include "daemon/proto.h"
#include "daemon/sock.h"
#include "ddss/ddss.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEAD_BOUND_MS 2000 /* a blocked call must notice a dead daemon within this */

static const char *ddssd;
static char sock_path[64];
static bool use_default_socket; /* start(): no --socket, the daemon's default */
static const char *daemon_log;   /* start(): the daemon's stderr goes to this file */
static uint32_t me = 1; /* for EXPECT_RC */

/*
 * Start a one-rank ddssd serving sock_path; returns its pid once it is ready, or -1 (then
 * *status_p is its exit status if it ended: a second instance exits with 3). @daemonize:
 * as a service would (--daemonize): the command returns once the daemon serves, and the
 * daemon's pid is the one in its instance lock file (we are a subreaper: it stays ours).
 */
static pid_t start(bool daemonize, int *status_p)
{
	unsigned port = 0;
	int ls = test_listen_loopback(&port), p[2];
	pid_t pid;
	char b;

	*status_p = -1;
	if (ls < 0 || pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		char nodes[64];

		snprintf(nodes, sizeof(nodes), "127.0.0.1:%u", port);
		dup2(ls, 3);
		dup2(p[1], 4);
		if (daemon_log) {
			int lf = open(daemon_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

			if (lf < 0 || dup2(lf, 2) < 0)
				_exit(126);
		}
		setenv("DDSS_RANK", "1", 1);
		setenv("DDSS_SIZE", "1", 1);
		setenv("DDSS_NODES", nodes, 1);
		setenv("DDSS_TRANSPORT", "tcp", 1);
		setenv("DDSS_LISTEN_FD", "3", 1);
		setenv("DDSS_GROUP", "0x5eed", 1);
		unsetenv("DDSS_MODE");
		unsetenv("DDSS_DAEMON_SOCKET");
		if (use_default_socket)
			execl(ddssd, "ddssd", "--ready-fd", "4", (char *)NULL);
		else if (daemonize)
			execl(ddssd, "ddssd", "--socket", sock_path, "--daemonize", (char *)NULL);
		else
			execl(ddssd, "ddssd", "--socket", sock_path, "--ready-fd", "4",
			      (char *)NULL);
		_exit(127);
	}
	close(ls);
	close(p[1]);
	if (daemonize) {
		char path[80], buf[32] = "";
		FILE *f;

		close(p[0]);
		if (pid < 0 || waitpid(pid, status_p, 0) != pid || !WIFEXITED(*status_p) ||
		    WEXITSTATUS(*status_p) != 0)
			return -1;
		snprintf(path, sizeof(path), "%s.lock", sock_path);
		f = fopen(path, "r");
		if (!f || !fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		if (f)
			fclose(f);
		return (pid_t)atoi(buf) > 0 ? (pid_t)atoi(buf) : -1;
	}
	/* The byte comes once it serves; EOF if it exits first. */
	if (pid < 0 || read(p[0], &b, 1) != 1) {
		close(p[0]);
		if (pid > 0)
			waitpid(pid, status_p, 0);
		return -1;
	}
	close(p[0]);
	return pid;
}

static pid_t start_daemon(int *status_p)
{
	return start(false, status_p);
}

static int attach_quiet(ddss_ctx_t **c)
{
	struct ddss_attr attr;

	ddss_attr_init(&attr);
	attr.mode = DDSS_MODE_DAEMON;
	attr.daemon_socket = sock_path;
	return ddss_init(&attr, c);
}

static ddss_ctx_t *attach(void)
{
	struct ddss_attr attr;
	ddss_ctx_t *c = NULL;
	int r;

	ddss_attr_init(&attr);
	attr.mode = DDSS_MODE_DAEMON;
	attr.daemon_socket = sock_path;
	r = ddss_init(&attr, &c);
	EXPECT_RC(r, 0);
	return r ? NULL : c;
}

struct blocked {
	ddss_ctx_t *ctx;
	ddss_key_t key;
	int started; /* atomic */
	int rc;
	double returned_ms;
	int done;    /* atomic: rc and returned_ms are set */
};

static void *block_in_lock(void *p)
{
	struct blocked *b = p;

	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	b->rc = ddss_acquire_lock_ss(b->ctx, b->key, DDSS_LOCK_EXCLUSIVE);
	b->returned_ms = test_now_ms();
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Whether @b's call returned within @ms (looked at every 10 ms). */
static bool returned_within(struct blocked *b, double ms)
{
	double until = test_now_ms() + ms;

	while (!__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) && test_now_ms() < until)
		usleep(10000);
	return __atomic_load_n(&b->done, __ATOMIC_ACQUIRE);
}

static void test_no_daemon(void)
{
	struct ddss_attr attr;
	ddss_ctx_t *c = NULL;
	int r;

	ddss_attr_init(&attr);
	attr.mode = DDSS_MODE_DAEMON;
	attr.daemon_socket = "/tmp/ddss-no-such-daemon.sock";
	r = ddss_init(&attr, &c);
	CU_ASSERT(r == -ENOENT || r == -ECONNREFUSED);
	attr.mode = 9;
	CU_ASSERT_EQUAL(ddss_init(&attr, &c), -EINVAL);
}

static void test_killed(void)
{
	struct blocked b = { 0 };
	ddss_key_t key;
	pid_t d, second;
	double killed;
	int st;
	uint64_t v = 42;

	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	/* One daemon per socket. */
	second = start_daemon(&st);
	CU_ASSERT_EQUAL(second, -1);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 3);

	b.ctx = attach();
	CU_ASSERT_FATAL(b.ctx != NULL);
	EXPECT_RC(ddss_allocate_ss(b.ctx, 64, NULL, &key), 0);
	EXPECT_RC(ddss_put(b.ctx, key, 0, &v, 8), 0);
	v = 0;
	EXPECT_RC(ddss_get(b.ctx, key, 0, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 42);
	/* A fork's copy of the attachment is dead in the child and leaves the parent's alone. */
	pid_t child = fork();

	if (child == 0) {
		int r = ddss_get(b.ctx, key, 0, &v, 8);

		ddss_finalize(b.ctx);
		_exit(r == -ENOTCONN ? 0 : 1);
	}
	CU_ASSERT_EQUAL_FATAL(waitpid(child, &st, 0), child);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	v = 0;
	EXPECT_RC(ddss_get(b.ctx, key, 0, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 42);
	/* Hold the lock, and have a second thread wait for it inside the daemon. */
	b.key = key;
	EXPECT_RC(ddss_acquire_lock_ss(b.ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
	pthread_t th;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, block_in_lock, &b) == 0);
	while (!__atomic_load_n(&b.started, __ATOMIC_ACQUIRE))
		sched_yield();
	CU_ASSERT_EQUAL(kill(d, SIGKILL), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	killed = test_now_ms();
	pthread_join(th, NULL);
	printf("\n    blocked lock call after the daemon was killed: %d (%s) after %.1f ms",
	       b.rc, ddss_strerror(b.rc), b.returned_ms - killed);
	CU_ASSERT_EQUAL(b.rc, -ENOTCONN);
	CU_ASSERT(b.returned_ms - killed < DEAD_BOUND_MS);
	EXPECT_RC(ddss_get(b.ctx, key, 0, &v, 8), -ENOTCONN);
	EXPECT_RC(ddss_release_lock_ss(b.ctx, key), -ENOTCONN);
	EXPECT_RC(ddss_barrier(b.ctx), -ENOTCONN);
	EXPECT_RC(ddss_finalize(b.ctx), 0);
}

/*
 * A frozen daemon (SIGSTOP). While it runs, a lock wait longer than the stall bound is not
 * cut (its heartbeat goes on). Frozen, the call blocked in it returns -ETIMEDOUT within the
 * bound and the client is detached (-ENOTCONN at once). Running again, the daemon has
 * dropped that client and its locks: another client takes the lock. (Until 2026-12-06 the
 * blocked call waited for as long as the daemon was stopped.)
 */
#define STALL_MS 1000
#define STALL_SLACK_MS 2000 /* a beat is 100 ms; a loaded 2-core machine */

static void test_frozen(void)
{
	struct blocked b = { 0 };
	ddss_ctx_t *other;
	ddss_key_t key;
	double frozen;
	pthread_t th;
	uint64_t v = 7;
	pid_t d;
	int st, r = -EBUSY;

	setenv("DDSS_DAEMON_STALL_MS", "1000", 1);
	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	b.ctx = attach();
	other = attach();
	CU_ASSERT_FATAL(b.ctx && other);
	EXPECT_RC(ddss_allocate_ss(b.ctx, 64, NULL, &key), 0);
	EXPECT_RC(ddss_put(b.ctx, key, 0, &v, 8), 0);
	EXPECT_RC(ddss_acquire_lock_ss(b.ctx, key, DDSS_LOCK_EXCLUSIVE), 0);
	b.key = key;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, block_in_lock, &b) == 0);
	/* The daemon runs: its heartbeat keeps the long wait alive past the bound. */
	CU_ASSERT_FALSE(returned_within(&b, 2.5 * STALL_MS));
	CU_ASSERT_EQUAL(kill(d, SIGSTOP), 0);
	CU_ASSERT(test_wait_stopped(d, 5000));
	frozen = test_now_ms();
	if (!returned_within(&b, STALL_MS + STALL_SLACK_MS)) {
		CU_FAIL("a call blocked in a frozen daemon did not return");
		kill(d, SIGKILL); /* a dead one ends it (test_killed) */
	} else {
		printf("\n    blocked lock call in a frozen daemon: %d (%s) after %.1f ms", b.rc,
		       ddss_strerror(b.rc), b.returned_ms - frozen);
		CU_ASSERT_EQUAL(b.rc, -ETIMEDOUT);
		EXPECT_RC(ddss_get(b.ctx, key, 0, &v, 8), -ENOTCONN);
	}
	pthread_join(th, NULL);
	kill(d, SIGCONT);
	/* Running again: the given-up client's hold (and its queued request) are released. */
	for (double until = test_now_ms() + 5000; test_now_ms() < until;) {
		r = ddss_try_lock_ss(other, key, DDSS_LOCK_EXCLUSIVE);
		if (r != -EBUSY && r != -EAGAIN)
			break;
		usleep(10000);
	}
	EXPECT_RC(r, 0);
	v = 0;
	EXPECT_RC(ddss_get(other, key, 0, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 7);
	if (!r)
		EXPECT_RC(ddss_release_lock_ss(other, key), 0);
	EXPECT_RC(ddss_finalize(b.ctx), 0);
	EXPECT_RC(ddss_finalize(other), 0);
	unsetenv("DDSS_DAEMON_STALL_MS");
	kill(d, SIGTERM);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
}

static void test_sigterm(void)
{
	ddss_ctx_t *c;
	ddss_key_t key;
	pid_t d;
	int st;

	/* The killed daemon's successor takes the same socket. */
	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	c = attach();
	CU_ASSERT_FATAL(c != NULL);
	EXPECT_RC(ddss_allocate_ss(c, 64, NULL, &key), 0);
	EXPECT_RC(ddss_acquire_lock_ss(c, key, DDSS_LOCK_EXCLUSIVE), 0);
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_RC(ddss_release_lock_ss(c, key), -ENOTCONN);
	EXPECT_RC(ddss_finalize(c), 0);
	CU_ASSERT_EQUAL(access(sock_path, F_OK), -1); /* it removed its socket */
}

/* In a child running as user 65534: ddss_init's result against the daemon, as an exit code. */
static int attach_as_stranger(void)
{
	pid_t child = fork();
	int st;

	if (child == 0) {
		ddss_ctx_t *c = NULL;
		int r;

		if (setgid(65534) || setuid(65534))
			_exit(100);
		r = attach_quiet(&c);
		_exit(r == 0 ? 0 : r == -EACCES ? 1 : 2);
	}
	if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void test_other_user(void)
{
	struct stat sb;
	ddss_ctx_t *c;
	pid_t d;
	int st;

	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	/* The socket is its owner's alone... */
	CU_ASSERT_EQUAL(stat(sock_path, &sb), 0);
	CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
	if (geteuid() == 0) {
		/* ...so another user cannot even connect; and were the file opened up, the
		 * daemon itself refuses a user that is not its own. */
		CU_ASSERT_EQUAL(attach_as_stranger(), 1);
		CU_ASSERT_EQUAL(chmod(sock_path, 0666), 0);
		CU_ASSERT_EQUAL(attach_as_stranger(), 1);
	} else {
		printf("\n    not root: the other-user checks need setuid (skipped)");
	}
	/* Our own user still gets in. */
	c = attach();
	CU_ASSERT(c != NULL);
	if (c)
		EXPECT_RC(ddss_finalize(c), 0);
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
}

/*
 * Hostile (issue 29): another local user binds the socket path first and answers like a
 * daemon. The client must see who serves the socket (SO_PEERCRED) and refuse: else the
 * squatter reads every put and answers every get. The squatter binds as root in our
 * directory, then drops to user 65534 before listen(): the socket's credentials are the
 * listener's.
 */
static void test_squatted_socket(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	ddss_ctx_t *c = NULL;
	int ready[2], s, st;
	pid_t squatter;
	char b;

	if (geteuid() != 0) {
		printf("\n    not root: a squatter of another user needs setuid (skipped)");
		return;
	}
	CU_ASSERT_FATAL(pipe(ready) == 0);
	unlink(sock_path);
	squatter = fork();
	if (squatter == 0) {
		struct dsock_welcome w = { .op = DSOCK_WELCOME, .rank = 1, .size = 1,
					   .daemon_pid = getpid(), .client = 1 };
		struct dsock_hello h;
		int cs;

		close(ready[0]);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
		s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || chmod(sock_path, 0666) ||
		    setgid(65534) || setuid(65534) || listen(s, 4))
			_exit(100);
		if (write(ready[1], "r", 1) != 1)
			_exit(101);
		for (;;) { /* welcome whoever comes, as a daemon would */
			cs = accept(s, NULL, NULL);
			if (cs < 0)
				_exit(102);
			if (ddss_sock_recv(cs, &h, sizeof(h), NULL, 5000) == 0)
				ddss_sock_send(cs, &w, sizeof(w), -1);
			close(cs);
		}
	}
	close(ready[1]);
	CU_ASSERT_FATAL(squatter > 0);
	CU_ASSERT_FATAL(read(ready[0], &b, 1) == 1);
	close(ready[0]);
	EXPECT_RC(attach_quiet(&c), -EACCES);
	if (c)
		ddss_finalize(c);
	kill(squatter, SIGKILL);
	waitpid(squatter, &st, 0);
	unlink(sock_path);
}

/*
 * Hostile (issue 29): a client gets the daemon's pool fd to read null segments locally.
 * Truncating it would crash the daemon with SIGBUS; writing it would bypass every lock.
 * The fd is read-only and the memfd sealed, even against a reopen through /proc.
 */
/* A connection to the daemon's socket (-1 if it fails). */
static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a))) {
		close(s);
		s = -1;
	}
	return s;
}

/* Attach by hand, as the library would: its socket, the welcome in *@w, the pool fd in
 * *@fd_p (-1 without one); -1 (checked) if the daemon did not take us. */
static int raw_attach(struct dsock_welcome *w, int *fd_p)
{
	struct dsock_hello hello = { .op = DSOCK_HELLO, .magic = DPROTO_MAGIC,
				     .version = DPROTO_VERSION, .pid = getpid() };
	int s = raw_connect();

	*fd_p = -1;
	CU_ASSERT(s >= 0);
	if (s < 0)
		return -1;
	EXPECT_RC(ddss_sock_send(s, &hello, sizeof(hello), -1), 0);
	EXPECT_RC(ddss_sock_recv(s, w, sizeof(*w), fd_p, 5000), 0);
	return s;
}

static void test_pool_fd_hostile(void)
{
	struct dsock_welcome w;
	int s, fd = -1, rw, st;
	char path[64], byte = 1;
	ddss_ctx_t *c;
	ddss_key_t key;
	uint64_t v = 7;
	pid_t d;
	void *p;

	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	s = raw_attach(&w, &fd);
	CU_ASSERT_FATAL(s >= 0 && fd >= 0 && w.pool_len > 0);
	CU_ASSERT_NOT_EQUAL(ftruncate(fd, 0), 0);
	CU_ASSERT_EQUAL(pwrite(fd, &byte, 1, 0), -1);
	p = mmap(NULL, w.pool_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CU_ASSERT(p == MAP_FAILED);
	if (p != MAP_FAILED)
		munmap(p, w.pool_len);
	/* A read-write reopen of the same memfd gets no further: the seals hold. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw >= 0) {
		CU_ASSERT_NOT_EQUAL(ftruncate(rw, 0), 0);
		CU_ASSERT_NOT_EQUAL(ftruncate(rw, (off_t)w.pool_len * 2), 0);
		CU_ASSERT_EQUAL(pwrite(rw, &byte, 1, 0), -1);
		p = mmap(NULL, w.pool_len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
		CU_ASSERT(p == MAP_FAILED);
		if (p != MAP_FAILED)
			munmap(p, w.pool_len);
		close(rw);
	}
	close(fd);
	close(s);
	/* The daemon lives and serves. */
	c = attach();
	CU_ASSERT_FATAL(c != NULL);
	EXPECT_RC(ddss_allocate_ss(c, 64, NULL, &key), 0);
	EXPECT_RC(ddss_put(c, key, 0, &v, 8), 0);
	v = 0;
	EXPECT_RC(ddss_get(c, key, 0, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 7);
	EXPECT_RC(ddss_finalize(c), 0);
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * Hostile: a client that asks for channels (fds the daemon refuses, /dev/null) and never
 * reads the answers. The daemon's one listener thread answered with a blocking send: once
 * the answers filled the socket it waited there for good, and no client could attach,
 * open a channel or be cleaned up after. Now such a client is dropped and the rest go on.
 * Its refusals are logged once, not once each (its hundreds of asks flooded the log).
 */
static unsigned log_lines_with(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	char line[512];
	unsigned n = 0;

	if (!f)
		return UINT32_MAX;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

#define UNREAD_ASKS_MAX 20000
#define UNREAD_STALL_MS 3000 /* how long our sends may stay blocked before we stop */

static void test_unread_answers(void)
{
	struct dsock_chan ask = { .op = DSOCK_CHAN };
	struct dsock_welcome w;
	int s, fd = -1, null_fd, st, r = 0;
	unsigned asked = 0;
	double stalled_since = 0;
	ddss_ctx_t *c;
	ddss_key_t key;
	uint64_t v = 11;
	char log_path[sizeof(sock_path) + 8];
	unsigned logged;
	pid_t d;

	snprintf(log_path, sizeof(log_path), "%s.log", sock_path);
	daemon_log = log_path;
	d = start_daemon(&st);
	daemon_log = NULL;
	CU_ASSERT_FATAL(d > 0);
	s = raw_attach(&w, &fd);
	CU_ASSERT_FATAL(s >= 0);
	if (fd >= 0)
		close(fd);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CU_ASSERT_FATAL(null_fd >= 0);
	fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
	/* Ask until the daemon drops us (-EPIPE), or our sends stay blocked. */
	while (asked < UNREAD_ASKS_MAX) {
		r = ddss_sock_send(s, &ask, sizeof(ask), null_fd);
		if (r == 0) {
			asked++;
			stalled_since = 0;
			continue;
		}
		if (r != -EAGAIN)
			break;
		if (!stalled_since)
			stalled_since = test_now_ms();
		else if (test_now_ms() - stalled_since > UNREAD_STALL_MS)
			break;
		poll(&(struct pollfd){ .fd = s, .events = POLLOUT }, 1, 100);
	}
	printf("unread answers: %u asks sent, then %d (%s)\n", asked, r, ddss_strerror(r));
	CU_ASSERT(r == -EPIPE || r == -ECONNRESET);
	/* Another client attaches and is served. */
	c = attach();
	if (c) {
		EXPECT_RC(ddss_allocate_ss(c, 64, NULL, &key), 0);
		EXPECT_RC(ddss_put(c, key, 0, &v, 8), 0);
		v = 0;
		EXPECT_RC(ddss_get(c, key, 0, &v, 8), 0);
		CU_ASSERT_EQUAL(v, 11);
		EXPECT_RC(ddss_finalize(c), 0);
	}
	close(null_fd);
	close(s); /* before the stop: a listener still stuck sending to us gets free */
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	logged = log_lines_with(log_path, "channel");
	printf("daemon log lines about a channel: %u ", logged);
	CU_ASSERT_EQUAL(logged, 1);
	unlink(log_path);
}

/*
 * Hostile: connections that never say hello. The listener waited for each one's hello in
 * turn (2 s), so 20 of them kept every client from attaching for 40 s. Now it waits for
 * them beside its clients: a client attaches at once, and the silent ones are closed
 * after their 2 s.
 */
#define SILENT_CONNS 20
#define ATTACH_BOUND_MS 1500

static void test_silent_connections(void)
{
	int silent[SILENT_CONNS], st;
	double t0, took;
	ddss_ctx_t *c;
	char byte;
	pid_t d;

	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	for (unsigned i = 0; i < SILENT_CONNS; i++) {
		silent[i] = raw_connect();
		CU_ASSERT_FATAL(silent[i] >= 0);
	}
	t0 = test_now_ms();
	c = attach();
	took = test_now_ms() - t0;
	printf("attached behind %u silent connections in %.0f ms ", SILENT_CONNS, took);
	CU_ASSERT(c != NULL);
	CU_ASSERT(took < ATTACH_BOUND_MS);
	if (c)
		EXPECT_RC(ddss_finalize(c), 0);
	/* The silent ones are closed once their time is up (a read sees the end). */
	for (unsigned i = 0; i < SILENT_CONNS; i++) {
		struct pollfd p = { .fd = silent[i], .events = POLLIN };

		CU_ASSERT(poll(&p, 1, 10000) == 1 && recv(silent[i], &byte, 1, 0) <= 0);
		close(silent[i]);
	}
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Hostile (issue 29): the instance lock file is a planted link: the daemon refuses to
 * start and the link's target is untouched. */
static void test_lock_file_link(void)
{
	char lock[96], target[96], buf[16] = "";
	FILE *f;
	pid_t d;
	int st;

	snprintf(lock, sizeof(lock), "%s.lock", sock_path);
	snprintf(target, sizeof(target), "%s.victim", sock_path);
	unlink(lock);
	f = fopen(target, "w");
	CU_ASSERT_FATAL(f != NULL);
	fputs("precious\n", f);
	fclose(f);
	CU_ASSERT_FATAL(symlink(target, lock) == 0);
	d = start_daemon(&st);
	CU_ASSERT_EQUAL(d, -1);
	if (d > 0) {
		kill(d, SIGTERM);
		waitpid(d, &st, 0);
	}
	f = fopen(target, "r");
	CU_ASSERT_FATAL(f != NULL);
	CU_ASSERT(fgets(buf, sizeof(buf), f) && !strcmp(buf, "precious\n"));
	fclose(f);
	unlink(lock);
	unlink(target);
}

/*
 * Hostile (issue 29): the default socket is in a directory only the daemon's user may
 * enter ($XDG_RUNTIME_DIR/ddss here), not in /tmp where anyone could bind it first; and
 * a directory that others may enter, or that is someone else's, is refused.
 */
static void test_default_socket(void)
{
	char xdg[] = "/tmp/ddss-xdg-XXXXXX", dir[64], sock[80];
	struct stat sb;
	ddss_ctx_t *c = NULL;
	struct ddss_attr attr;
	pid_t d;
	int st;

	CU_ASSERT_FATAL(mkdtemp(xdg) != NULL);
	snprintf(dir, sizeof(dir), "%s/ddss", xdg);
	snprintf(sock, sizeof(sock), "%s/ddssd.sock", dir);
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	use_default_socket = true;
	d = start_daemon(&st);
	CU_ASSERT_FATAL(d > 0);
	CU_ASSERT_EQUAL(lstat(dir, &sb), 0);
	CU_ASSERT(S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700 && sb.st_uid == geteuid());
	CU_ASSERT_EQUAL(access(sock, F_OK), 0);
	/* A client finds it by the same rule. */
	ddss_attr_init(&attr);
	attr.mode = DDSS_MODE_DAEMON;
	unsetenv("DDSS_DAEMON_SOCKET");
	EXPECT_RC(ddss_init(&attr, &c), 0);
	if (c)
		EXPECT_RC(ddss_finalize(c), 0);
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	/* Opened to others: the daemon does not serve there. */
	CU_ASSERT_EQUAL(chmod(dir, 0777), 0);
	d = start_daemon(&st);
	CU_ASSERT_EQUAL(d, -1);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0);
	if (d > 0) {
		kill(d, SIGTERM);
		waitpid(d, &st, 0);
	}
	use_default_socket = false;
	unsetenv("XDG_RUNTIME_DIR");
	unlink(sock);
	snprintf(sock, sizeof(sock), "%s/ddssd.sock.lock", dir);
	unlink(sock);
	rmdir(dir);
	rmdir(xdg);
}

static void test_daemonize(void)
{
	ddss_ctx_t *c;
	ddss_key_t key;
	uint64_t v = 7;
	pid_t d;
	int st;

	d = start(true, &st);
	CU_ASSERT_FATAL(d > 0);
	c = attach(); /* ready as soon as the command returned */
	CU_ASSERT_FATAL(c != NULL);
	EXPECT_RC(ddss_allocate_ss(c, 64, NULL, &key), 0);
	EXPECT_RC(ddss_put(c, key, 0, &v, 8), 0);
	v = 0;
	EXPECT_RC(ddss_get(c, key, 0, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(kill(d, SIGTERM), 0);
	CU_ASSERT_EQUAL(waitpid(d, &st, 0), d);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_RC(ddss_finalize(c), 0);
}

int main(int argc, char **argv)
{
	unsigned failed;
	CU_pSuite s;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH/TO/ddssd\n", argv[0]);
		return 2;
	}
	ddssd = argv[1];
	/* A --daemonize'd ddssd is orphaned by its launcher: make it ours to wait for. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(sock_path, sizeof(sock_path), "/tmp/ddss-life-%d.sock", (int)getpid());
	signal(SIGPIPE, SIG_IGN);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("daemon life", NULL, NULL);
	CU_add_test(s, "no daemon at the socket: clear error", test_no_daemon);
	CU_add_test(s, "killed daemon: blocked and later calls give -ENOTCONN", test_killed);
	CU_add_test(s, "frozen daemon: a blocked call returns, the client is detached",
		    test_frozen);
	CU_add_test(s, "SIGTERM: clean stop with a client attached", test_sigterm);
	CU_add_test(s, "only the daemon's own user may attach", test_other_user);
	CU_add_test(s, "a squatted socket: the client refuses a server of another user",
		    test_squatted_socket);
	CU_add_test(s, "the pool fd a client gets: no truncate, write or writable map",
		    test_pool_fd_hostile);
	CU_add_test(s, "a client that never reads its answers is dropped; others attach",
		    test_unread_answers);
	CU_add_test(s, "connections that never say hello do not hold up a client",
		    test_silent_connections);
	CU_add_test(s, "the instance lock file as a planted link: refused, target untouched",
		    test_lock_file_link);
	CU_add_test(s, "the default socket: a private directory, refused if open to others",
		    test_default_socket);
	CU_add_test(s, "--daemonize: ready when the command returns, stops on SIGTERM",
		    test_daemonize);
	failed = test_run_all();
	CU_cleanup_registry();
	unlink(sock_path);
	strcat(sock_path, ".lock"); /* the daemons' instance lock */
	unlink(sock_path);
	return failed ? 1 : 0;
}
