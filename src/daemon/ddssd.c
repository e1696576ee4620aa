/*
 * ddssd: the node daemon of daemon mode (docs/daemon.md). It is this node's rank (it joins
 * the group from the same environment a direct-mode rank reads: DDSS_RANK, DDSS_SIZE,
 * DDSS_NODES...) and serves the node's client processes over shared memory.
 *
 *   ddssd [--socket PATH] [--clients K] [--ready-fd N] [--log-level L] [--daemonize]
 *
 *   --socket PATH   where clients attach (default $DDSS_DAEMON_SOCKET, else
 *                   $XDG_RUNTIME_DIR/ddss/ddssd.sock, for root /run/ddss/ddssd.sock,
 *                   else /tmp/ddss-UID/ddssd.sock: a directory of mode 0700, made here).
 *                   One ddssd per socket: a second one exits with status 3.
 *   --clients K     barriers wait for K clients (default $DDSS_DAEMON_CLIENTS, else those
 *                   attached when a barrier fills)
 *   --ready-fd N    write one byte to fd N once clients can attach (ddssrun --daemon)
 *   --log-level L   none, error, warn, info, debug (default $DDSS_LOG_LEVEL, else warn)
 *   --daemonize     run in the background (as a service); returns once ready
 *
 * SIGTERM or SIGINT stops it cleanly: clients are detached (their calls then fail with
 * -ENOTCONN), their locks released, and the group left as ddss_finalize does.
 */
#include "core/ctx.h"
#include "core/log.h"
#include "daemon/server.h"
#include "daemon/sock_path.h"
#include "ddss/ddss.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_SECOND_INSTANCE 3

struct opts {
	const char *socket;
	long clients;
	int ready_fd;
	bool daemonize;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ddssd [--socket PATH] [--clients K] [--ready-fd N] "
		   "[--log-level L] [--daemonize]\n"
		   "  the node daemon of DDSS daemon mode; see docs/daemon.md\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "ready-fd", required_argument, NULL, 'r' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "daemonize", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *env_clients = getenv("DDSS_DAEMON_CLIENTS");
	char *end;
	int c;

	o->socket = getenv("DDSS_DAEMON_SOCKET");
	if (!o->socket || !*o->socket)
		o->socket = NULL; /* the default, in a private directory (below) */
	o->clients = env_clients && *env_clients ? strtol(env_clients, NULL, 10) : 0;
	o->ready_fd = -1;
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'c':
			o->clients = strtol(optarg, &end, 10);
			if (*end || o->clients < 0 || o->clients > 1000000)
				return -EINVAL;
			break;
		case 'r':
			o->ready_fd = (int)strtol(optarg, &end, 10);
			if (*end || o->ready_fd < 0)
				return -EINVAL;
			break;
		case 'l':
			setenv("DDSS_LOG_LEVEL", optarg, 1);
			break;
		case 'd':
			o->daemonize = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	return optind == argc && o->clients >= 0 ? 0 : -EINVAL;
}

/*
 * One ddssd per node: an exclusive flock on "<socket>.lock", held for the process's life
 * (the kernel drops it when we die, so a crashed daemon never blocks its successor).
 */
static void record_pid(int fd)
{
	char pid[32];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());

	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		DDSS_WARN("could not record our pid in the instance lock file");
}

/* Returns the lock file's fd (>= 0), or -errno. */
static int claim_node(const char *socket)
{
	char path[PATH_MAX], pid[32];
	struct stat st;
	int fd, n;

	if (snprintf(path, sizeof(path), "%s.lock", socket) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	/* Not through a link another user planted, and only a file of ours (or root's). */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		n = -errno;
		if (n == -ELOOP)
			fprintf(stderr, "ddssd: %s is a symbolic link: refusing it\n", path);
		return n;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid != geteuid() && st.st_uid != 0)) {
		fprintf(stderr, "ddssd: %s is not a regular file of ours: refusing it\n", path);
		close(fd);
		return -EACCES;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = errno == EWOULDBLOCK ? -EEXIST : -errno;

		n = (int)pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (r == -EEXIST)
			fprintf(stderr, "ddssd: another ddssd (pid %s) already serves %s\n",
				pid[0] ? pid : "?", socket);
		close(fd);
		return r;
	}
	record_pid(fd);
	return fd; /* stays open: it is the claim (a fork shares it) */
}

/* --daemonize: the parent returns once the child is ready (its exit status says how). */
static int go_background(int *ready_fd_p)
{
	int p[2];
	char b;
	pid_t pid;

	if (pipe(p) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(p[1]);
		exit(read(p[0], &b, 1) == 1 ? 0 : 1);
	}
	close(p[0]);
	setsid();
	*ready_fd_p = p[1];
	return 0;
}

static void say_ready(int fd)
{
	char b = 'r';

	if (fd < 0)
		return;
	if (write(fd, &b, 1) != 1)
		DDSS_WARN("ready fd %d: %s", fd, strerror(errno));
	close(fd);
}

/* The clients' totals (ddss_stats_get of the daemon's context; ddss-info --daemon reads
 * them while it runs), logged as the daemon stops. */
static void log_totals(ddss_ctx_t *ctx)
{
	struct ddss_stats st;
	uint64_t errors = 0;

	if (ddss_stats_get(ctx, &st))
		return;
	for (unsigned e = 0; e < DDSS_STAT_NERRNO; e++)
		errors += st.errors[e];
	DDSS_INFO("clients' totals: get %llu (%llu B), put %llu (%llu B), lock %llu "
		  "(%llu contended), unlock %llu, failed calls %llu, timeouts %llu",
		  (unsigned long long)st.ops[DDSS_STAT_GET],
		  (unsigned long long)st.bytes[DDSS_STAT_GET],
		  (unsigned long long)st.ops[DDSS_STAT_PUT],
		  (unsigned long long)st.bytes[DDSS_STAT_PUT],
		  (unsigned long long)st.ops[DDSS_STAT_LOCK],
		  (unsigned long long)st.lock_contended,
		  (unsigned long long)st.ops[DDSS_STAT_UNLOCK], (unsigned long long)errors,
		  (unsigned long long)st.timeouts);
}

int main(int argc, char **argv)
{
	static char default_socket[PATH_MAX];
	struct ddss_attr attr;
	struct ddss_server *srv;
	struct opts o = { 0 };
	ddss_ctx_t *ctx;
	int sig, busy, r, bg_ready = -1, claim;
	sigset_t stop;

	if (parse(argc, argv, &o)) {
		usage(stderr);
		return 2;
	}
	if (!o.socket) {
		/* The default lives in a directory of ours that nobody else may enter. */
		if (ddss_daemon_socket_default(default_socket, sizeof(default_socket)) ||
		    ddss_daemon_socket_dir_prepare(default_socket))
			return 1;
		o.socket = default_socket;
	}
	claim = claim_node(o.socket);
	if (claim < 0)
		return claim == -EEXIST ? EXIT_SECOND_INSTANCE : 1;
	if (o.daemonize) {
		if (go_background(&bg_ready)) {
			fprintf(stderr, "ddssd: cannot go to the background: %s\n",
				strerror(errno));
			return 1;
		}
		record_pid(claim); /* the daemon is the child now */
	}
	/* Every thread inherits the mask: only sigwait below takes these. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	unsetenv("DDSS_MODE"); /* we are the rank, whatever our clients are told */
	ddss_ctx_share_pool = true; /* clients read null segments homed here from it */
	ddss_attr_init(&attr);
	attr.mode = DDSS_MODE_DIRECT;
	r = ddss_init(&attr, &ctx);
	if (r) {
		fprintf(stderr, "ddssd: joining the group: %s\n", ddss_strerror(r));
		return 1;
	}
	r = ddss_server_start(ctx, &(struct ddss_server_conf){
		.socket_path = o.socket, .expected_clients = (uint32_t)o.clients,
		.barrier_timeout_ms = 60000 }, &srv);
	if (r) {
		fprintf(stderr, "ddssd: listening at %s: %s\n", o.socket, ddss_strerror(r));
		ddss_finalize(ctx);
		return 1;
	}
	DDSS_INFO("rank %u of %u serving clients at %s", ddss_rank(ctx), ddss_size(ctx),
		  o.socket);
	say_ready(o.ready_fd);
	say_ready(bg_ready);

	while (sigwait(&stop, &sig) != 0)
		;
	DDSS_INFO("signal %d: stopping", sig);
	busy = ddss_server_stop(srv, 10000);
	if (busy) {
		/* Their calls still use the context: leave without freeing it. */
		DDSS_ERR("%d client call(s) did not finish; exiting without leaving the group",
			 busy);
		_exit(1);
	}
	log_totals(ctx);
	r = ddss_finalize(ctx);
	if (r)
		DDSS_WARN("leaving the group: %s", ddss_strerror(r));
	return 0;
}
