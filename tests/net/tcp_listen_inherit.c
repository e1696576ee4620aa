/*
 * A listening socket the rank inherits (DDSS_LISTEN_FD: ddssrun binds it and passes it
 * through exec) must not reach the processes the rank starts in turn. If it did, the
 * port would go on accepting connections after the rank died, and a peer that reconnects
 * would wait out a handshake nobody answers (5 s) instead of being refused at once.
 *
 * A rank process runs one transport as rank 1 of 1 on an inherited listening socket (opened
 * without close-on-exec, as a launcher passes it) and starts a child process (fork + exec
 * of sleep). Checked:
 *  1. once the transport started, the socket is close-on-exec;
 *  2. with the rank killed (SIGKILL: no shutdown of the socket), a connect to its port is
 *     refused: the child does not hold the socket.
 */
#include "common/test_util.h"
#include "net/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define POOL_LEN 65536

/* Start sleep(1) as a process of ours would; returns once it has exec'd (or -1). */
static pid_t start_child(void)
{
	int p[2], err = 0, status;
	pid_t pid;
	ssize_t n;

	/* The write end closes at exec: EOF on the read end says the exec is done, and an
	 * errno written there says it failed. */
	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
		err = errno;
		if (write(p[1], &err, sizeof(err)) < 0)
			_exit(126);
		_exit(127);
	}
	close(p[1]);
	do
		n = read(p[0], &err, sizeof(err));
	while (pid > 0 && n < 0 && errno == EINTR);
	close(p[0]);
	if (pid > 0 && n != 0) {
		printf("the child could not exec /bin/sleep: %s\n", n > 0 ? strerror(err) : "?");
		waitpid(pid, &status, 0);
		return -1;
	}
	return pid;
}

/* 0 if a connect to loopback @port is accepted, else -errno. */
static int try_connect(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		r = -errno;
	close(fd);
	return r;
}

/* The rank process: reports the socket's flags and its child's pid on @out, then waits
 * to be killed. */
static void rank_main(int lfd, unsigned port, int out)
{
	struct ddss_tp_node node = { "127.0.0.1", (uint16_t)port };
	struct ddss_tp_config cfg = {
		.rank = 1, .size = 1, .group = 0x1f0e, .nodes = &node, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 30000,
		.connect_timeout_ms = 3000,
	};
	void *pool = test_alloc_pool(POOL_LEN);
	struct ddss_tp *tp;
	struct ddss_tp_mr *mr;
	int report[2] = { -1, -1 };

	if (pool && !ddss_tp_open("tcp", &cfg, &tp) &&
	    !ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr) && !ddss_tp_start(tp)) {
		report[0] = fcntl(lfd, F_GETFD);
		report[1] = (int)start_child();
	}
	if (write(out, report, sizeof(report)) != sizeof(report))
		_exit(1);
	for (;;)
		pause();
}

int main(void)
{
	int lfd, p[2], report[2] = { -1, -1 }, r, status;
	unsigned port;
	pid_t rank;

	prctl(PR_SET_CHILD_SUBREAPER, 1); /* the rank's child comes to us when it dies */
	lfd = test_listen_loopback(&port); /* no close-on-exec, as inherited */
	if (lfd < 0 || pipe(p)) {
		printf("FAIL: loopback listener\n");
		return 1;
	}
	rank = fork();
	if (rank == 0) {
		close(p[0]);
		rank_main(lfd, port, p[1]);
	}
	close(p[1]);
	close(lfd); /* the rank's alone now */
	if (rank < 0 || read(p[0], report, sizeof(report)) != sizeof(report)) {
		printf("FAIL: the rank process did not start its transport\n");
		return 1;
	}
	close(p[0]);

	printf("1. the inherited listening socket after start: flags %#x\n", report[0]);
	TEST_CHECK(1, report[0] >= 0 && (report[0] & FD_CLOEXEC), "not close-on-exec");
	TEST_CHECK(1, report[1] > 0, "the rank could not start a child process");

	kill(rank, SIGKILL);
	waitpid(rank, &status, 0);
	r = try_connect(port);
	printf("2. the rank killed, its child running: connect %d (%s)\n", r,
	       r ? strerror(-r) : "accepted");
	TEST_CHECK(1, r == -ECONNREFUSED, "the port still accepts: the child holds the socket");
	if (report[1] > 0) {
		kill(report[1], SIGKILL);
		waitpid(report[1], &status, 0); /* ours: we are its subreaper */
	}
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}
