/*
 * ddssrun - start N ranks of a DDSS program on this machine (like `mpirun -n`).
 *
 * Usage:
 *   ddssrun -n N [--transport tcp|verbs] [--host ADDR[,ADDR...]] [--timeout SEC] [--] prog [args...]
 *
 *   -n, --np N         number of ranks, 1..1024 (required)
 *   --transport T      tcp or verbs (default: $DDSS_TRANSPORT, else tcp)
 *   --host ADDRS       IPv4 address(es) the ranks listen on; with several (comma
 *                      separated, up to 8) rank r gets address (r-1) mod count, e.g.
 *                      two RDMA devices' addresses so ranks talk across a link
 *                      (default 127.0.0.1; for verbs: $DDSS_RDMA_HOST, else $RXE_IP,
 *                      else 127.0.0.1)
 *   --timeout SEC      SIGKILL all ranks after SEC seconds and exit 124 (0 = never, default)
 *   -h, --help         show usage
 *
 * Environment given to every rank (on top of the inherited environment):
 *   DDSS_RANK       this rank, 1..N
 *   DDSS_SIZE       N
 *   DDSS_NODES      "ADDR:port1,ADDR:port2,...", entry r is rank r's listen address
 *   DDSS_TRANSPORT  tcp or verbs
 *   DDSS_LISTEN_FD  (tcp only) fd 3, an already bound and listening TCP socket on
 *                   this rank's DDSS_NODES entry; using it avoids a race for the port
 *   DDSS_GROUP      random 64-bit hex id, identical for all ranks of one run
 * An inherited DDSS_NODES_FILE (and, for verbs, DDSS_LISTEN_FD) is removed so it
 * cannot contradict DDSS_NODES. For verbs the ports are only reserved as numbers:
 * rdma_cm has its own port space, so the sockets are closed before the ranks start.
 * Ranks get /dev/null as stdin.
 *
 * Output: each line a rank writes to stdout/stderr is written to ddssrun's
 * stdout/stderr as "[r] line", one write() per line.
 *
 * Exit status: 0 if every rank exits 0. Otherwise the remaining ranks get SIGTERM
 * (SIGKILL 3 s later) and ddssrun exits with the first failing rank's exit status,
 * or 128+signal if it was killed; 124 on --timeout; 128+signal if ddssrun itself
 * got SIGINT/SIGTERM/SIGHUP; 2 on bad usage; 1 if it could not start the ranks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    MAX_RANKS = 1024,
    CHILD_LISTEN_FD = 3,
    LISTEN_BACKLOG = 128,
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
    EXIT_EXEC_FAILED = 127,
    PREFIX_MAX = 16,               /* "[1024] " plus slack */
    GROUP_ID_LEN = 16,             /* hex digits of a 64-bit id */
};

/* A 64 KiB line plus its newline must fit, so it is never split. */
#define LINE_BUF_SIZE ((size_t)64 * 1024 + 1)
#define MAX_TIMEOUT_SEC (365L * 24 * 3600)
#define NS_PER_SEC INT64_C(1000000000)
#define NS_PER_MS INT64_C(1000000)
#define TERM_GRACE_NS (3 * NS_PER_SEC)
#define DRAIN_GRACE_NS (1 * NS_PER_SEC)
#define MAX_HOSTS 8

enum parse_result { PARSE_OK, PARSE_HELP, PARSE_ERROR };

struct options {
    int nranks;
    const char *transport;
    const char *host;
    long timeout_sec;
    char **prog_argv;
};

/* Everything a forked child needs to become a rank. */
struct launch {
    int nranks;
    bool use_tcp;
    int nhosts;
    char hosts[MAX_HOSTS][INET_ADDRSTRLEN]; /* rank r listens on hosts[(r-1) % nhosts] */
    char *nodes;
    char group[GROUP_ID_LEN + 1];
    int *listen_fds;                /* tcp: one per rank, until all ranks are forked */
    char **prog_argv;
    sigset_t saved_mask;
    struct sigaction saved_sigpipe;
    struct rlimit saved_nofile;
};

/* One rank's stdout or stderr pipe and its not yet complete line. */
struct stream {
    int fd;                         /* -1 once closed */
    int dest_fd;
    int rank;
    char *buf;                      /* allocated on first data: most streams stay silent */
    size_t len;
};

struct rank {
    pid_t pid;
    bool running;                   /* forked and not yet reaped */
    struct stream out;
    struct stream err;
};

struct run {
    struct rank *ranks;
    int nranks;
    int running;
    pid_t pgid;
    int sigfd;
    char *scratch;                  /* prefix + line + newline, assembled for one write() */
    bool terminating;
    int exit_code;                  /* -1 until something decides it */
    long timeout_sec;
    int64_t timeout_deadline;       /* 0 = none */
    int64_t kill_deadline;          /* 0 = none */
    int64_t drain_deadline;         /* 0 until the last rank is reaped */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Our stdout may be a non-blocking fd we inherited. */
            struct pollfd pfd = { .fd = fd, .events = POLLOUT };
            poll(&pfd, 1, -1);
        } else {
            /* Output is gone (EPIPE, ...): drop it, but keep draining the ranks so
             * they do not block on a full pipe. */
            return;
        }
    }
}

/* Formats into one buffer so a message is a single write() and never interleaves. */
__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    write_all(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

static void usage(FILE *to)
{
    fputs("usage: ddssrun -n N [--transport tcp|verbs] [--host ADDR[,ADDR..]] [--timeout SEC] [--] prog [args...]\n"
          "  -n, --np N        number of ranks (1..1024)\n"
          "  --transport T     tcp or verbs (default: $DDSS_TRANSPORT, else tcp)\n"
          "  --host ADDRS      IPv4 address(es) to listen on, comma separated; rank r gets\n"
          "                    address (r-1) mod count (default 127.0.0.1; verbs:\n"
          "                    $DDSS_RDMA_HOST, else $RXE_IP)\n"
          "  --timeout SEC     kill all ranks after SEC seconds, exit 124 (0 = never)\n"
          "  -h, --help        show this help\n",
          to);
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static const char *nonempty_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Split a comma-separated list of IPv4 addresses into @out (if given); count or -1. */
static int parse_hosts(const char *list, char (*out)[INET_ADDRSTRLEN])
{
    int n = 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        char one[INET_ADDRSTRLEN];
        struct in_addr addr;
        if (len == 0 || len >= sizeof one || n == MAX_HOSTS) {
            say("ddssrun: --host wants 1..%d comma-separated IPv4 addresses, not '%s'\n",
                MAX_HOSTS, list);
            return -1;
        }
        memcpy(one, p, len);
        one[len] = 0;
        if (inet_pton(AF_INET, one, &addr) != 1) {
            say("ddssrun: '%s' is not an IPv4 address\n", one);
            return -1;
        }
        if (out)
            inet_ntop(AF_INET, &addr, out[n], INET_ADDRSTRLEN);
        n++;
        if (p[len] == 0)
            return n;
        p += len + 1;
    }
}

static enum parse_result check_options(struct options *opt, int argc, char **argv)
{
    bool tcp = strcmp(opt->transport, "tcp") == 0;
    if (!tcp && strcmp(opt->transport, "verbs") != 0) {
        say("ddssrun: transport must be tcp or verbs, not '%s'\n", opt->transport);
        return PARSE_ERROR;
    }
    if (opt->nranks == 0) {
        say("ddssrun: -n N is required\n");
        return PARSE_ERROR;
    }
    if (optind >= argc) {
        say("ddssrun: no program given\n");
        return PARSE_ERROR;
    }
    if (!opt->host) {
        const char *rdma_ip = tcp ? NULL : nonempty_env("DDSS_RDMA_HOST");
        if (!rdma_ip && !tcp)
            rdma_ip = nonempty_env("RXE_IP");
        opt->host = rdma_ip ? rdma_ip : "127.0.0.1";
    }
    if (parse_hosts(opt->host, NULL) < 0)
        return PARSE_ERROR;
    opt->prog_argv = argv + optind;
    return PARSE_OK;
}

static enum parse_result parse_options(int argc, char **argv, struct options *opt)
{
    static const struct option longopts[] = {
        { "np", required_argument, NULL, 'n' },
        { "transport", required_argument, NULL, 't' },
        { "host", required_argument, NULL, 'H' },
        { "timeout", required_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *env_transport = nonempty_env("DDSS_TRANSPORT");
    *opt = (struct options){ .transport = env_transport ? env_transport : "tcp" };
    long value;
    int c;

    /* '+': stop at the program name so its own options are left alone. */
    while ((c = getopt_long(argc, argv, "+n:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!parse_long(optarg, 1, MAX_RANKS, &value)) {
                say("ddssrun: -n must be a number from 1 to %d\n", MAX_RANKS);
                return PARSE_ERROR;
            }
            opt->nranks = (int)value;
            break;
        case 't':
            opt->transport = optarg;
            break;
        case 'H':
            opt->host = optarg;
            break;
        case 'T':
            if (!parse_long(optarg, 0, MAX_TIMEOUT_SEC, &value)) {
                say("ddssrun: --timeout must be a number of seconds >= 0\n");
                return PARSE_ERROR;
            }
            opt->timeout_sec = value;
            break;
        case 'h':
            return PARSE_HELP;
        default:
            return PARSE_ERROR;     /* getopt has already said why */
        }
    }
    return check_options(opt, argc, argv);
}

/* Fds we create must never land on 0-2, or dup2() onto stdio in the child would
 * clobber them. */
static void ensure_stdio_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nul = open("/dev/null", O_RDWR);
            if (nul >= 0 && nul != fd)
                close(nul);         /* cannot happen: open() takes the lowest free fd */
        }
    }
}

/* The parent holds up to 3 fds per rank at once; 1024 ranks exceed the usual
 * soft limit. Children get the original limit back. */
static void raise_fd_limit(int nranks, struct rlimit *saved)
{
    if (getrlimit(RLIMIT_NOFILE, saved) < 0)
        return;
    rlim_t need = (rlim_t)nranks * 3 + 64;
    if (saved->rlim_cur != RLIM_INFINITY && saved->rlim_cur < need) {
        struct rlimit raised = *saved;
        raised.rlim_cur = saved->rlim_max == RLIM_INFINITY || saved->rlim_max > need
                              ? need : saved->rlim_max;
        setrlimit(RLIMIT_NOFILE, &raised);
    }
}

static int open_listener(const struct in_addr *addr, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = *addr, .sin_port = 0 };
    socklen_t len = sizeof sin;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
        listen(fd, LISTEN_BACKLOG) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *port = ntohs(sin.sin_port);
    return fd;
}

static void close_listeners(struct launch *l)
{
    if (!l->listen_fds)
        return;
    for (int i = 0; i < l->nranks; i++) {
        if (l->listen_fds[i] >= 0)
            close(l->listen_fds[i]);
    }
    free(l->listen_fds);
    l->listen_fds = NULL;
}

static const char *rank_host(const struct launch *l, int i)
{
    return l->hosts[i % l->nhosts];
}

static char *build_nodes(const struct launch *l, const uint16_t *ports)
{
    size_t cap = (size_t)l->nranks * (INET_ADDRSTRLEN + sizeof ":65535,") + 1;
    char *nodes = malloc(cap);
    if (!nodes)
        return NULL;
    size_t len = 0;
    for (int i = 0; i < l->nranks; i++)
        len += (size_t)snprintf(nodes + len, cap - len, "%s%s:%u", i ? "," : "",
                                rank_host(l, i), (unsigned)ports[i]);
    return nodes;
}

/* Binding every port before any rank starts means each rank's address is known
 * to all ranks up front and no other process can take it in between. */
static bool reserve_ports(struct launch *l)
{
    uint16_t *ports = calloc((size_t)l->nranks, sizeof *ports);
    l->listen_fds = malloc((size_t)l->nranks * sizeof *l->listen_fds);
    if (!ports || !l->listen_fds) {
        say("ddssrun: out of memory\n");
        free(ports);
        return false;
    }
    for (int i = 0; i < l->nranks; i++)
        l->listen_fds[i] = -1;
    for (int i = 0; i < l->nranks; i++) {
        struct in_addr addr;
        inet_pton(AF_INET, rank_host(l, i), &addr);
        l->listen_fds[i] = open_listener(&addr, &ports[i]);
        if (l->listen_fds[i] < 0) {
            say("ddssrun: cannot listen on %s: %s\n", rank_host(l, i), strerror(errno));
            free(ports);
            return false;
        }
    }
    l->nodes = build_nodes(l, ports);
    free(ports);
    if (!l->nodes) {
        say("ddssrun: out of memory\n");
        return false;
    }
    return true;
}

static bool make_group_id(char out[GROUP_ID_LEN + 1])
{
    uint64_t id;
    ssize_t n;
    do {
        n = getrandom(&id, sizeof id, 0);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof id) {
        say("ddssrun: getrandom: %s\n", n < 0 ? strerror(errno) : "short read");
        return false;
    }
    snprintf(out, GROUP_ID_LEN + 1, "%016" PRIx64, id);
    return true;
}

static void free_launch(struct launch *l)
{
    close_listeners(l);
    free(l->nodes);
    l->nodes = NULL;
}

static bool prepare_launch(const struct options *opt, struct launch *l)
{
    *l = (struct launch){
        .nranks = opt->nranks,
        .use_tcp = strcmp(opt->transport, "tcp") == 0,
        .prog_argv = opt->prog_argv,
    };
    l->nhosts = parse_hosts(opt->host, l->hosts);
    raise_fd_limit(opt->nranks, &l->saved_nofile);
    if (!make_group_id(l->group) || !reserve_ports(l)) {
        free_launch(l);
        return false;
    }
    if (!l->use_tcp)
        close_listeners(l);
    return true;
}

static void set_rank_env(const struct launch *l, int rank)
{
    char num[16];
    snprintf(num, sizeof num, "%d", rank);
    setenv("DDSS_RANK", num, 1);
    snprintf(num, sizeof num, "%d", l->nranks);
    setenv("DDSS_SIZE", num, 1);
    setenv("DDSS_NODES", l->nodes, 1);
    setenv("DDSS_TRANSPORT", l->use_tcp ? "tcp" : "verbs", 1);
    setenv("DDSS_GROUP", l->group, 1);
    if (l->use_tcp) {
        snprintf(num, sizeof num, "%d", CHILD_LISTEN_FD);
        setenv("DDSS_LISTEN_FD", num, 1);
    } else {
        unsetenv("DDSS_LISTEN_FD");
    }
    unsetenv("DDSS_NODES_FILE");
}

/* Ranks share no stdin: N readers of one terminal or pipe would only fight over
 * it, and a background process group reading the tty would be stopped. */
static bool redirect_stdin_to_null(void)
{
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0)
        return false;
    bool ok = nul == STDIN_FILENO || dup2(nul, STDIN_FILENO) == STDIN_FILENO;
    if (nul != STDIN_FILENO)
        close(nul);
    return ok;
}

/* Runs in the forked child; the parent is single-threaded, so setenv() is safe here. */
_Noreturn static void exec_rank(const struct launch *l, int rank, pid_t pgid, int out_w, int err_w)
{
    setpgid(0, pgid);
    sigprocmask(SIG_SETMASK, &l->saved_mask, NULL);
    sigaction(SIGPIPE, &l->saved_sigpipe, NULL);

    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0)
        _exit(EXIT_EXEC_FAILED);
    if (!redirect_stdin_to_null()) {
        dprintf(STDERR_FILENO, "ddssrun: cannot open /dev/null: %s\n", strerror(errno));
        _exit(EXIT_EXEC_FAILED);
    }
    if (l->use_tcp) {
        int fd = l->listen_fds[rank - 1];
        /* dup2() onto itself would leave FD_CLOEXEC set, hence the explicit fcntl(). */
        if ((fd != CHILD_LISTEN_FD && dup2(fd, CHILD_LISTEN_FD) < 0) ||
            fcntl(CHILD_LISTEN_FD, F_SETFD, 0) < 0) {
            dprintf(STDERR_FILENO, "ddssrun: cannot pass listen socket: %s\n", strerror(errno));
            _exit(EXIT_EXEC_FAILED);
        }
    }
    set_rank_env(l, rank);
    /* Only now: the inherited fds above the old limit would make open() fail. */
    setrlimit(RLIMIT_NOFILE, &l->saved_nofile);
    execvp(l->prog_argv[0], l->prog_argv);
    dprintf(STDERR_FILENO, "ddssrun: cannot exec %s: %s\n", l->prog_argv[0], strerror(errno));
    _exit(EXIT_EXEC_FAILED);
}

static void init_stream(struct stream *s, int fd, int dest_fd, int rank)
{
    *s = (struct stream){ .fd = fd, .dest_fd = dest_fd, .rank = rank };
}

static bool spawn_rank(struct run *run, const struct launch *l, int index)
{
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) < 0)
        return false;
    if (pipe2(err_pipe, O_CLOEXEC) < 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return false;
    }
    pid_t pid = fork();
    if (pid == 0)
        exec_rank(l, index + 1, run->pgid, out_pipe[1], err_pipe[1]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        return false;
    }
    if (run->pgid == 0)
        run->pgid = pid;
    /* Parent and child both set the group, so it exists before the next fork no
     * matter which of them runs first. EACCES just means the child already exec'd. */
    setpgid(pid, run->pgid);

    struct rank *r = &run->ranks[index];
    r->pid = pid;
    r->running = true;
    run->running++;
    init_stream(&r->out, out_pipe[0], STDOUT_FILENO, index + 1);
    init_stream(&r->err, err_pipe[0], STDERR_FILENO, index + 1);
    return true;
}

/* Only while one of our children is unreaped is the group id guaranteed to still
 * be ours; after that the number may belong to someone else. */
static void signal_ranks(const struct run *run, int sig)
{
    if (run->running == 0)
        return;
    killpg(run->pgid, sig);
    /* A rank that moved to its own group (setsid) still gets the signal. */
    for (int i = 0; i < run->nranks; i++) {
        if (run->ranks[i].running)
            kill(run->ranks[i].pid, sig);
    }
}

static void start_shutdown(struct run *run, int exit_code)
{
    if (run->exit_code < 0)
        run->exit_code = exit_code;
    if (run->terminating)
        return;
    run->terminating = true;
    signal_ranks(run, SIGTERM);
    run->kill_deadline = now_ns() + TERM_GRACE_NS;
}

static void spawn_all(struct run *run, const struct launch *l)
{
    for (int i = 0; i < run->nranks; i++) {
        if (!spawn_rank(run, l, i)) {
            say("ddssrun: cannot start rank %d: %s\n", i + 1, strerror(errno));
            start_shutdown(run, 1);
            return;
        }
    }
}

static void emit_line(const struct stream *s, const char *line, size_t len, char *scratch)
{
    int prefix = snprintf(scratch, PREFIX_MAX, "[%d] ", s->rank);
    memcpy(scratch + prefix, line, len);
    scratch[(size_t)prefix + len] = '\n';
    write_all(s->dest_fd, scratch, (size_t)prefix + len + 1);
}

static void emit_complete_lines(struct stream *s, char *scratch)
{
    size_t start = 0;
    const char *nl;
    while ((nl = memchr(s->buf + start, '\n', s->len - start)) != NULL) {
        size_t end = (size_t)(nl - s->buf);
        emit_line(s, s->buf + start, end - start, scratch);
        start = end + 1;
    }
    if (start == 0 && s->len == LINE_BUF_SIZE) {
        emit_line(s, s->buf, s->len, scratch);      /* overlong: split rather than stall */
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static void close_stream(struct stream *s, char *scratch)
{
    if (s->len > 0)
        emit_line(s, s->buf, s->len, scratch);
    s->len = 0;
    free(s->buf);
    s->buf = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

static void pump_stream(struct stream *s, char *scratch)
{
    if (!s->buf && !(s->buf = malloc(LINE_BUF_SIZE))) {
        say("ddssrun: out of memory, dropping output of rank %d\n", s->rank);
        close_stream(s, scratch);
        return;
    }
    ssize_t n = read(s->fd, s->buf + s->len, LINE_BUF_SIZE - s->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close_stream(s, scratch);
        return;
    }
    s->len += (size_t)n;
    emit_complete_lines(s, scratch);
}

static struct rank *find_rank(struct run *run, pid_t pid)
{
    for (int i = 0; i < run->nranks; i++) {
        if (run->ranks[i].pid == pid && run->ranks[i].running)
            return &run->ranks[i];
    }
    return NULL;
}

static void report_failure(int rank, int status)
{
    if (WIFEXITED(status)) {
        say("ddssrun: rank %d exited with status %d\n", rank, WEXITSTATUS(status));
    } else {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        say("ddssrun: rank %d killed by signal %d (SIG%s)\n", rank, sig, abbrev ? abbrev : "?");
    }
}

static void on_rank_exit(struct run *run, struct rank *r, int status)
{
    r->running = false;
    run->running--;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    /* Deaths we caused ourselves would only bury the real cause. */
    if (run->terminating)
        return;
    report_failure((int)(r - run->ranks) + 1, status);
    start_shutdown(run, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static void reap_children(struct run *run)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        struct rank *r = find_rank(run, pid);
        if (r)
            on_rank_exit(run, r, status);
    }
    if (run->running == 0 && run->drain_deadline == 0)
        run->drain_deadline = now_ns() + DRAIN_GRACE_NS;
}

static void on_shutdown_signal(struct run *run, int sig)
{
    if (run->terminating) {
        /* Asked again: the user does not want to wait for the grace period. */
        signal_ranks(run, SIGKILL);
        return;
    }
    say("ddssrun: got SIG%s, terminating ranks\n", sigabbrev_np(sig));
    start_shutdown(run, 128 + sig);
}

static void handle_signals(struct run *run)
{
    struct signalfd_siginfo si;
    while (read(run->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGCHLD)
            on_shutdown_signal(run, (int)si.ssi_signo);
    }
    /* SIGCHLDs coalesce, so always reap everything that is ready. */
    reap_children(run);
}

static void on_timeout(struct run *run)
{
    say("ddssrun: timeout after %ld s, killing all ranks\n", run->timeout_sec);
    if (run->exit_code < 0)
        run->exit_code = EXIT_TIMEOUT;
    run->terminating = true;
    run->kill_deadline = 0;
    signal_ranks(run, SIGKILL);
}

static void check_deadlines(struct run *run)
{
    int64_t now = now_ns();
    if (run->timeout_deadline && !run->terminating && now >= run->timeout_deadline)
        on_timeout(run);
    if (run->kill_deadline && run->running > 0 && now >= run->kill_deadline) {
        say("ddssrun: ranks still running %d s after SIGTERM, sending SIGKILL\n",
            (int)(TERM_GRACE_NS / NS_PER_SEC));
        signal_ranks(run, SIGKILL);
        run->kill_deadline = 0;
    }
}

static int64_t next_deadline(const struct run *run)
{
    int64_t next = INT64_MAX;
    if (run->timeout_deadline && !run->terminating && run->timeout_deadline < next)
        next = run->timeout_deadline;
    if (run->kill_deadline && run->running > 0 && run->kill_deadline < next)
        next = run->kill_deadline;
    if (run->running == 0 && run->drain_deadline < next)
        next = run->drain_deadline;
    return next;
}

static int poll_timeout_ms(const struct run *run)
{
    int64_t deadline = next_deadline(run);
    if (deadline == INT64_MAX)
        return -1;
    int64_t left = deadline - now_ns();
    if (left <= 0)
        return 0;
    /* Round up: waking just before the deadline would spin with a 0 ms timeout. */
    int64_t ms = (left + NS_PER_MS - 1) / NS_PER_MS;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static bool add_stream(struct stream *s, struct pollfd *pfds, struct stream **owners, size_t *n)
{
    if (s->fd < 0)
        return false;
    pfds[*n] = (struct pollfd){ .fd = s->fd, .events = POLLIN };
    owners[*n] = s;
    (*n)++;
    return true;
}

static size_t build_pollset(struct run *run, struct pollfd *pfds, struct stream **owners,
                            size_t *open_streams)
{
    size_t n = 0;
    pfds[n] = (struct pollfd){ .fd = run->sigfd, .events = POLLIN };
    owners[n++] = NULL;
    for (int i = 0; i < run->nranks; i++) {
        add_stream(&run->ranks[i].out, pfds, owners, &n);
        add_stream(&run->ranks[i].err, pfds, owners, &n);
    }
    *open_streams = n - 1;
    return n;
}

static bool run_finished(const struct run *run, size_t open_streams)
{
    if (run->running > 0)
        return false;
    /* A grandchild may hold a pipe open forever; do not wait for it. */
    return open_streams == 0 || now_ns() >= run->drain_deadline;
}

static void event_loop(struct run *run)
{
    size_t max = 1 + 2 * (size_t)run->nranks;
    struct pollfd *pfds = malloc(max * sizeof *pfds);
    struct stream **owners = malloc(max * sizeof *owners);
    if (!pfds || !owners) {
        say("ddssrun: out of memory\n");
        signal_ranks(run, SIGKILL);
        if (run->exit_code < 0)
            run->exit_code = 1;
        free(pfds);
        free(owners);
        return;
    }
    if (run->running == 0)
        run->drain_deadline = now_ns();
    for (;;) {
        size_t open_streams;
        size_t n = build_pollset(run, pfds, owners, &open_streams);
        if (run_finished(run, open_streams))
            break;
        int ready = poll(pfds, n, poll_timeout_ms(run));
        if (ready < 0 && errno != EINTR) {
            say("ddssrun: poll: %s\n", strerror(errno));
            signal_ranks(run, SIGKILL);
            if (run->exit_code < 0)
                run->exit_code = 1;
            break;
        }
        for (size_t i = 0; ready > 0 && i < n; i++) {
            if (!pfds[i].revents)
                continue;
            if (owners[i])
                pump_stream(owners[i], run->scratch);
            else
                handle_signals(run);
        }
        check_deadlines(run);
    }
    free(pfds);
    free(owners);
}

static bool setup_signals(struct run *run, struct launch *l)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    /* Blocked before the first fork so no SIGCHLD or Ctrl-C can slip past the signalfd. */
    if (sigprocmask(SIG_BLOCK, &mask, &l->saved_mask) < 0 ||
        (run->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        say("ddssrun: cannot set up signal handling: %s\n", strerror(errno));
        return false;
    }
    /* A closed stdout must show up as EPIPE, not kill us while ranks still run. */
    struct sigaction ignore = { .sa_handler = SIG_IGN };
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &l->saved_sigpipe);
    return true;
}

static bool init_run(struct run *run, const struct options *opt)
{
    *run = (struct run){ .nranks = opt->nranks, .sigfd = -1, .exit_code = -1,
                         .timeout_sec = opt->timeout_sec };
    run->ranks = calloc((size_t)opt->nranks, sizeof *run->ranks);
    run->scratch = malloc(PREFIX_MAX + LINE_BUF_SIZE + 1);
    if (!run->ranks || !run->scratch) {
        say("ddssrun: out of memory\n");
        return false;
    }
    for (int i = 0; i < opt->nranks; i++) {
        run->ranks[i].out.fd = -1;
        run->ranks[i].err.fd = -1;
    }
    return true;
}

static int finish_run(struct run *run)
{
    for (int i = 0; run->ranks && i < run->nranks; i++) {
        close_stream(&run->ranks[i].out, run->scratch);
        close_stream(&run->ranks[i].err, run->scratch);
    }
    if (run->sigfd >= 0)
        close(run->sigfd);
    free(run->ranks);
    free(run->scratch);
    return run->exit_code < 0 ? 0 : run->exit_code;
}

int main(int argc, char **argv)
{
    ensure_stdio_open();

    struct options opt;
    switch (parse_options(argc, argv, &opt)) {
    case PARSE_HELP:
        usage(stdout);
        return 0;
    case PARSE_ERROR:
        usage(stderr);
        return EXIT_USAGE;
    case PARSE_OK:
        break;
    }

    struct launch launch;
    if (!prepare_launch(&opt, &launch))
        return 1;
    struct run run;
    if (!init_run(&run, &opt) || !setup_signals(&run, &launch)) {
        finish_run(&run);
        free_launch(&launch);
        return 1;
    }
    if (opt.timeout_sec > 0)
        run.timeout_deadline = now_ns() + opt.timeout_sec * NS_PER_SEC;

    spawn_all(&run, &launch);
    /* The children hold their own copies now; keeping ours would keep the ports
     * open after a rank exits. */
    close_listeners(&launch);
    event_loop(&run);

    int code = finish_run(&run);
    free_launch(&launch);
    return code;
}
