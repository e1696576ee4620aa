/*
 * ddssrun - start N ranks of a DDSS program on this machine (like `mpirun -n`).
 *
 * Usage:
 *   ddssrun -n N [--transport tcp|verbs] [--host ADDR[,ADDR...]] [--timeout SEC]
 *           [--daemon [--clients K] [--ddssd PATH]] [--] prog [args...]
 *   ddssrun -n N --write-keys DIR
 *
 *   -n, --np N         number of ranks, 1..1024 (required)
 *   --transport T      tcp or verbs (default: $DDSS_TRANSPORT, else tcp)
 *   --host ADDRS       IPv4 address(es) the ranks listen on; with several (comma
 *                      separated, up to 8) rank r gets address (r-1) mod count, e.g.
 *                      two RDMA devices' addresses so ranks talk across a link
 *                      (default 127.0.0.1; for verbs: $DDSS_RDMA_HOST, else $RXE_IP,
 *                      else 127.0.0.1)
 *   --timeout SEC      SIGKILL all ranks after SEC seconds and exit 124 (0 = never, default)
 *   --daemon           daemon mode: each rank is a ddssd, and prog runs as its clients
 *   --clients K        daemon mode: K clients of prog per rank, 1..256 (default 1)
 *   --ddssd PATH       daemon mode: the daemon binary (default: ddssd in the directory
 *                      of ddssrun's own executable)
 *   --write-keys DIR   write the keys files of a group of N ranks (DIR/rank-R.keys,
 *                      mode 0600; DIR is made 0700 if missing) for a deployment whose
 *                      ranks ddssrun does not start, and exit; each host gets only its
 *                      ranks' files, as DDSS_KEYS_FILE
 *   -h, --help         show usage
 *
 * Environment given to every rank (on top of the inherited environment):
 *   DDSS_RANK       this rank, 1..N
 *   DDSS_SIZE       N
 *   DDSS_MAX_SIZE   M (--coordinator --max-size M only)
 *   DDSS_NODES      "ADDR:port1,ADDR:port2,...", entry r is rank r's listen address
 *   DDSS_TRANSPORT  tcp or verbs
 *   DDSS_LISTEN_FD  (tcp only) fd 3, an already bound and listening TCP socket on
 *                   this rank's DDSS_NODES entry; using it avoids a race for the port
 *   DDSS_GROUP      random 64-bit hex id, identical for all ranks of one run
 *   DDSS_KEYS_FILE  this rank's keys file: random keys for each pair of ranks, made
 *                   for the run in a fresh /tmp/ddssrun-keys.XXXXXX (mode 0700, removed
 *                   at the end), so no rank can pass for another; not set when
 *                   DDSS_SECRET_FILE or DDSS_SECRET is (then the ranks inherit that
 *                   group secret, which authenticates the group but not each rank)
 * An inherited DDSS_NODES_FILE (and, for verbs, DDSS_LISTEN_FD) is removed so it
 * cannot contradict DDSS_NODES. For verbs the ports are only reserved as numbers:
 * rdma_cm has its own port space, so the sockets are closed before the ranks start.
 * Every child (rank, daemon, client) gets /dev/null as stdin.
 *
 * Daemon mode (--daemon): rank r is "ddssd --ready-fd FD", started as a rank above
 * with, in addition:
 *   DDSS_DAEMON_SOCKET   DIR/ddssd-r.sock, where it serves its clients; DIR is a fresh
 *                        /tmp/ddssrun.XXXXXX, removed with all it holds at the end
 *   DDSS_DAEMON_CLIENTS  K
 * FD is the inherited write end of a pipe; ddssd writes one byte to it once it serves
 * clients (after its collective init with the other daemons) and closes it. When all
 * daemons are ready, K clients of prog start per rank, with DDSS_RANK, DDSS_SIZE,
 * DDSS_NODES, DDSS_TRANSPORT and DDSS_GROUP of their rank (no DDSS_LISTEN_FD) and:
 *   DDSS_MODE            daemon
 *   DDSS_DAEMON_SOCKET   their rank's daemon socket
 *   DDSS_CLIENT          this client, 1..K
 *   DDSS_CLIENTS         K
 * When every client has exited, the daemons get SIGTERM (SIGKILL 10 s later). These
 * five variables are removed from every other kind of child.
 *
 * Output: each line a child writes to stdout/stderr is written to ddssrun's
 * stdout/stderr as "[r] line" (a rank, or the client when K is 1), "[r.i] line"
 * (client i of rank r) or "[ddssd r] line", one write() per line.
 *
 * Exit status: 0 if every rank (client) exits 0. Otherwise the remaining children get
 * SIGTERM (SIGKILL 3 s later) and ddssrun exits with the first failing one's exit
 * status, or 128+signal if it was killed; so the first SKIP (77) decides a run that
 * fails no other way. A daemon that exits before it is ready or while its clients run
 * fails the run the same way (with 1 if it exited 0); one that does not exit 0 on the
 * final SIGTERM gives its status (128+signal if killed) to a run that was otherwise
 * successful. 124 on --timeout; 128+signal if ddssrun itself got SIGINT/SIGTERM/SIGHUP;
 * 2 on bad usage (also a missing ddssd); 1 if it could not start the ranks.
 */
#include <arpa/inet.h>
#include <dirent.h>
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
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddssrun_etcd.h"
#include "ddssrun_keys.h"

enum {
    MAX_RANKS = 1024,
    MAX_CLIENTS = 256,              /* per rank */
    CHILD_LISTEN_FD = 3,
    LISTEN_BACKLOG = 128,
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
    EXIT_EXEC_FAILED = 127,
    PREFIX_MAX = 32,               /* "[1024.256] ", "[ddssd 1024] "; room for any int */
    NAME_MAX_LEN = 40,             /* "rank 1024 client 256"; room for any int */
    GROUP_ID_LEN = 16,             /* hex digits of a 64-bit id */
};

/* A 64 KiB line plus its newline must fit, so it is never split. */
#define LINE_BUF_SIZE ((size_t)64 * 1024 + 1)
#define MAX_TIMEOUT_SEC (365L * 24 * 3600)
#define NS_PER_SEC INT64_C(1000000000)
#define NS_PER_MS INT64_C(1000000)
#define TERM_GRACE_NS (3 * NS_PER_SEC)
#define DRAIN_GRACE_NS (1 * NS_PER_SEC)
#define DAEMON_GRACE_NS (10 * NS_PER_SEC)
/* How long a daemon that closed its ready pipe without the byte gets to exit by itself
 * (and so tell us why) before we stop it. */
#define READY_CLOSE_GRACE_NS (1 * NS_PER_SEC)
#define SOCK_DIR_TEMPLATE "/tmp/ddssrun.XXXXXX"
#define KEYS_DIR_TEMPLATE "/tmp/ddssrun-keys.XXXXXX"
#define MAX_HOSTS 8

enum parse_result { PARSE_OK, PARSE_HELP, PARSE_ERROR };

struct options {
    int nranks;
    const char *transport;
    const char *host;
    long timeout_sec;
    bool daemon;
    int clients;                    /* 0 until given */
    const char *ddssd;
    char ddssd_default[PATH_MAX];
    const char *write_keys;         /* --write-keys DIR */
    bool coordinator;               /* --coordinator: a private etcd, coordinator mode */
    int slot;                       /* --slot S: only slot S, into a running group; 0: all */
    int max_size;                   /* --max-size M: slots to grow into; 0: N */
    char **prog_argv;
};

/* Everything a forked child needs to become a rank. */
struct launch {
    int nranks;                     /* listening sockets: one per slot up to N (or S) */
    int size;                       /* N: DDSS_SIZE, the ranks that start the group */
    int max_size;                   /* --max-size: DDSS_MAX_SIZE; 0: not set */
    bool use_tcp;
    bool coordinator;
    bool user_group;                /* DDSS_GROUP was set by the user */
    struct ddssrun_etcd etcd;       /* --coordinator */
    int nhosts;
    char hosts[MAX_HOSTS][INET_ADDRSTRLEN]; /* rank r listens on hosts[(r-1) % nhosts] */
    char *nodes;
    char group[GROUP_ID_LEN + 1];
    char keys_dir[sizeof KEYS_DIR_TEMPLATE]; /* keys made for the run; "" when the user gave a secret */
    int *listen_fds;                /* tcp: one per rank, until all ranks are forked */
    char **prog_argv;
    bool daemon;
    int clients;                    /* per rank, daemon mode */
    const char *ddssd;
    char sock_dir[sizeof SOCK_DIR_TEMPLATE]; /* daemon mode; "" when there is none */
    sigset_t saved_mask;
    struct sigaction saved_sigpipe;
    struct rlimit saved_nofile;
};

struct child;

/* One child's stdout or stderr pipe and its not yet complete line. */
struct stream {
    int fd;                         /* -1 once closed */
    int dest_fd;
    const struct child *owner;
    char *buf;                      /* allocated on first data: most streams stay silent */
    size_t len;
};

enum child_kind {
    CHILD_RANK,                     /* prog as a rank (direct mode) */
    CHILD_DAEMON,                   /* ddssd as a rank (daemon mode) */
    CHILD_CLIENT,                   /* prog as a client of its rank's ddssd */
};

struct child {
    enum child_kind kind;
    int rank;                       /* 1..N */
    int client;                     /* CHILD_CLIENT: 1..K, else 0 */
    char name[NAME_MAX_LEN];        /* for messages: "rank 2", "rank 2 client 3", "ddssd of rank 2" */
    char prefix[PREFIX_MAX];        /* of its output lines: "[2] ", "[2.3] ", "[ddssd 2] " */
    pid_t pid;
    bool running;                   /* forked and not yet reaped */
    struct stream out;
    struct stream err;
    int ready_fd;                   /* CHILD_DAEMON: read end of its ready pipe, -1 once closed */
    bool ready;                     /* CHILD_DAEMON: wrote its ready byte */
};

/* Children are ranks (direct mode), or N daemons followed by N*K clients. */
struct run {
    struct child *children;
    int nchildren;
    int nranks;
    int running;
    int clients_running;
    int daemons_ready;
    bool clients_started;
    bool stopping;                  /* the clients are done, the daemons got SIGTERM */
    pid_t pgid;
    int sigfd;
    char *scratch;                  /* prefix + line + newline, assembled for one write() */
    bool terminating;
    int exit_code;                  /* -1 until something decides it */
    long timeout_sec;
    int64_t timeout_deadline;       /* 0 = none */
    int64_t kill_deadline;          /* 0 = none */
    int64_t kill_grace_ns;          /* SIGTERM to kill_deadline, for the message */
    int64_t ready_close_deadline;   /* 0 = none; see READY_CLOSE_GRACE_NS */
    int64_t drain_deadline;         /* 0 until the last child is reaped */
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
    fputs("usage: ddssrun -n N [--transport tcp|verbs] [--host ADDR[,ADDR..]] [--timeout SEC]\n"
          "               [--daemon [--clients K] [--ddssd PATH]]\n"
          "               [--coordinator [--max-size M] [--slot S]]\n"
          "               [--] prog [args...]\n"
          "       ddssrun -n N --write-keys DIR\n"
          "  -n, --np N        number of ranks (1..1024)\n"
          "  --transport T     tcp or verbs (default: $DDSS_TRANSPORT, else tcp)\n"
          "  --host ADDRS      IPv4 address(es) to listen on, comma separated; rank r gets\n"
          "                    address (r-1) mod count (default 127.0.0.1; verbs:\n"
          "                    $DDSS_RDMA_HOST, else $RXE_IP)\n"
          "  --timeout SEC     kill all ranks after SEC seconds, exit 124 (0 = never)\n"
          "  --daemon          daemon mode: each rank is a ddssd, prog runs as its clients\n"
          "  --clients K       daemon mode: clients of prog per rank (1..256, default 1)\n"
          "  --ddssd PATH      daemon mode: the daemon binary (default: ddssd next to ddssrun)\n"
          "  --coordinator     coordinator mode: the ranks form the group through etcd: the\n"
          "                    one $DDSS_COORDINATOR names, else a private one on loopback\n"
          "                    for the run (docs/membership.md)\n"
          "  --max-size M      with --coordinator: the group has M slots (N..4096, default\n"
          "                    N): it starts with N ranks and grows into the free slots\n"
          "  --slot S          with --coordinator and $DDSS_COORDINATOR: start only slot S of\n"
          "                    the group (S <= M), to take over a dead member's slot or a\n"
          "                    free one while the group runs; needs the group's secret\n"
          "                    ($DDSS_SECRET_FILE)\n"
          "  --write-keys DIR  write the ranks' keys files (DIR/rank-R.keys) and exit\n"
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

/* Default: ddssd beside our own executable, so a build tree or an install finds its own. */
static bool find_ddssd(struct options *opt)
{
    if (!opt->ddssd) {
        char *buf = opt->ddssd_default;
        ssize_t n = readlink("/proc/self/exe", buf, sizeof opt->ddssd_default);
        if (n < 0 || (size_t)n >= sizeof opt->ddssd_default) {
            say("ddssrun: cannot find my own executable, give the daemon with --ddssd PATH\n");
            return false;
        }
        buf[n] = 0;
        char *dir_end = strrchr(buf, '/') + 1;  /* the link is an absolute path */
        size_t room = sizeof opt->ddssd_default - (size_t)(dir_end - buf);
        if ((size_t)snprintf(dir_end, room, "ddssd") >= room) {
            say("ddssrun: path of ddssd too long, give it with --ddssd PATH\n");
            return false;
        }
        opt->ddssd = buf;
    }
    if (access(opt->ddssd, X_OK) < 0) {
        say("ddssrun: no daemon binary %s: %s (give one with --ddssd PATH)\n",
            opt->ddssd, strerror(errno));
        return false;
    }
    return true;
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
    if (opt->write_keys) {
        if (optind < argc || opt->daemon) {
            say("ddssrun: --write-keys starts nothing: give only -n N\n");
            return PARSE_ERROR;
        }
        return PARSE_OK;
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
    if (!opt->daemon && (opt->clients || opt->ddssd)) {
        say("ddssrun: --clients and --ddssd need --daemon\n");
        return PARSE_ERROR;
    }
    if (opt->daemon && !find_ddssd(opt))
        return PARSE_ERROR;
    if (opt->max_size && (!opt->coordinator || opt->max_size < opt->nranks)) {
        say("ddssrun: --max-size M needs --coordinator and M >= N\n");
        return PARSE_ERROR;
    }
    if (opt->slot && (!opt->coordinator || opt->daemon ||
                      opt->slot > (opt->max_size ? opt->max_size : opt->nranks) ||
                      !nonempty_env("DDSS_COORDINATOR") ||
                      !(nonempty_env("DDSS_SECRET_FILE") || nonempty_env("DDSS_SECRET")))) {
        say("ddssrun: --slot S joins a running group: it needs --coordinator, S <= N (or M), no "
            "--daemon, and the group's DDSS_COORDINATOR and DDSS_SECRET_FILE\n");
        return PARSE_ERROR;
    }
    if (opt->clients == 0)
        opt->clients = 1;
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
        { "daemon", no_argument, NULL, 'D' },
        { "clients", required_argument, NULL, 'C' },
        { "ddssd", required_argument, NULL, 'B' },
        { "write-keys", required_argument, NULL, 'K' },
        { "coordinator", no_argument, NULL, 'E' },
        { "slot", required_argument, NULL, 'S' },
        { "max-size", required_argument, NULL, 'M' },
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
        case 'D':
            opt->daemon = true;
            break;
        case 'C':
            if (!parse_long(optarg, 1, MAX_CLIENTS, &value)) {
                say("ddssrun: --clients must be a number from 1 to %d\n", MAX_CLIENTS);
                return PARSE_ERROR;
            }
            opt->clients = (int)value;
            break;
        case 'B':
            opt->ddssd = optarg;
            break;
        case 'K':
            opt->write_keys = optarg;
            break;
        case 'E':
            opt->coordinator = true;
            break;
        case 'S':
            if (!parse_long(optarg, 1, MAX_RANKS, &value)) {
                say("ddssrun: --slot must be a number from 1 to %d\n", MAX_RANKS);
                return PARSE_ERROR;
            }
            opt->slot = (int)value;
            break;
        case 'M':
            if (!parse_long(optarg, 1, 4096, &value)) {
                say("ddssrun: --max-size must be a number from 1 to 4096\n");
                return PARSE_ERROR;
            }
            opt->max_size = (int)value;
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

static int child_count(const struct options *opt)
{
    if (opt->slot)
        return 1; /* --slot: that rank only */
    return opt->daemon ? opt->nranks + opt->nranks * opt->clients : opt->nranks;
}

/* The parent holds up to 3 fds per child at once; 1024 ranks exceed the usual
 * soft limit. Children get the original limit back. */
static void raise_fd_limit(int nchildren, struct rlimit *saved)
{
    if (getrlimit(RLIMIT_NOFILE, saved) < 0)
        return;
    rlim_t need = (rlim_t)nchildren * 3 + 64;
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

/*
 * Keys files for the run (secure by default, docs/security.md): random keys per pair of
 * ranks, so the ranks authenticate each other and none can pass for another. Not when
 * the user configured a group secret (DDSS_SECRET_FILE or DDSS_SECRET: the ranks inherit
 * it). Clients need none.
 */
static bool make_keys(struct launch *l)
{
    l->keys_dir[0] = 0;
    if (getenv("DDSS_SECRET_FILE") || getenv("DDSS_SECRET"))
        return true;
    if (getenv("DDSS_KEYS_FILE")) {
        say("ddssrun: DDSS_KEYS_FILE holds one rank's keys; ddssrun makes keys for the ranks "
            "it starts (unset it, or set DDSS_SECRET_FILE for a group secret)\n");
        return false;
    }
    memcpy(l->keys_dir, KEYS_DIR_TEMPLATE, sizeof KEYS_DIR_TEMPLATE);
    if (!mkdtemp(l->keys_dir)) {
        say("ddssrun: cannot create a directory for the keys: %s\n", strerror(errno));
        l->keys_dir[0] = 0;
        return false;
    }
    if (!keys_write(l->keys_dir, l->nranks)) {
        keys_remove(l->keys_dir, l->nranks);
        l->keys_dir[0] = 0;
        return false;
    }
    return true;
}

/* --write-keys DIR: the keys files of a group whose ranks ddssrun does not start. */
static int write_keys_only(const struct options *opt)
{
    if (mkdir(opt->write_keys, 0700) < 0 && errno != EEXIST) {
        say("ddssrun: cannot create %s: %s\n", opt->write_keys, strerror(errno));
        return 1;
    }
    if (!keys_write(opt->write_keys, opt->nranks))
        return 1;
    say("ddssrun: wrote %s/rank-1.keys .. rank-%d.keys; give each rank its own file as "
        "DDSS_KEYS_FILE, and nothing else\n", opt->write_keys, opt->nranks);
    return 0;
}

/* Called when no daemon runs any more; one that was killed left its socket behind. */
static void remove_sock_dir(struct launch *l)
{
    if (!l->sock_dir[0])
        return;
    DIR *dir = opendir(l->sock_dir);
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(dir), e->d_name, 0);
        }
        closedir(dir);
    }
    if (rmdir(l->sock_dir) < 0)
        say("ddssrun: cannot remove %s: %s\n", l->sock_dir, strerror(errno));
    l->sock_dir[0] = 0;
}

static void free_launch(struct launch *l)
{
    close_listeners(l);
    free(l->nodes);
    l->nodes = NULL;
    remove_sock_dir(l);
    if (l->keys_dir[0])
        keys_remove(l->keys_dir, l->nranks);
    l->keys_dir[0] = 0;
    ddssrun_etcd_stop(&l->etcd);
}

static bool make_sock_dir(struct launch *l)
{
    memcpy(l->sock_dir, SOCK_DIR_TEMPLATE, sizeof SOCK_DIR_TEMPLATE);
    if (!mkdtemp(l->sock_dir)) {
        say("ddssrun: cannot create a directory for the daemon sockets: %s\n", strerror(errno));
        l->sock_dir[0] = 0;
        return false;
    }
    return true;
}

/*
 * --coordinator: the run's own etcd, and a group secret in its directory (the ranks take
 * their slots in any order, so per-rank keys files cannot be handed out in advance; a
 * secret the user configured is kept).
 */
static bool start_coordinator(struct launch *l)
{
    char name[GROUP_ID_LEN + 8];
    const char *secret;

    snprintf(name, sizeof name, "run-%s", l->group);
    if (!ddssrun_etcd_start(&l->etcd, name))
        return false;
    if (nonempty_env("DDSS_SECRET") || nonempty_env("DDSS_SECRET_FILE") ||
        nonempty_env("DDSS_KEYS_FILE"))
        return true;
    secret = ddssrun_etcd_secret(&l->etcd);
    if (!secret) {
        say("ddssrun: cannot write the run's group secret: %s\n", strerror(errno));
        return false;
    }
    setenv("DDSS_SECRET_FILE", secret, 1);
    /* How to add a process to this group while it runs (ddssrun --slot). */
    if (!nonempty_env("DDSS_COORDINATOR"))
        say("ddssrun: coordinator: DDSS_COORDINATOR=%s DDSS_SECRET_FILE=%s\n", l->etcd.url,
            secret);
    return true;
}

/* Entry @rank (1..N) of the node list, "host:port", into @out. */
static void node_entry(const struct launch *l, int rank, char *out, size_t len)
{
    const char *p = l->nodes;

    for (int i = 1; i < rank && p; i++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    snprintf(out, len, "%.*s", p ? (int)strcspn(p, ",") : 0, p ? p : "");
}

static bool prepare_launch(const struct options *opt, struct launch *l)
{
    *l = (struct launch){
        /* --slot S above N: its address is entry S of the node list */
        .nranks = opt->slot > opt->nranks ? opt->slot : opt->nranks,
        .size = opt->nranks,
        .max_size = opt->max_size,
        .use_tcp = strcmp(opt->transport, "tcp") == 0,
        .coordinator = opt->coordinator,
        .user_group = nonempty_env("DDSS_GROUP") != NULL,
        .etcd = { .pid = -1 },
        .prog_argv = opt->prog_argv,
        .daemon = opt->daemon,
        .clients = opt->clients,
        .ddssd = opt->ddssd,
    };
    l->nhosts = parse_hosts(opt->host, l->hosts);
    raise_fd_limit(child_count(opt), &l->saved_nofile);
    if (!make_group_id(l->group) || (l->coordinator && !start_coordinator(l)) ||
        !make_keys(l) || !reserve_ports(l) ||
        (l->daemon && !make_sock_dir(l))) {
        free_launch(l);
        return false;
    }
    if (!l->use_tcp)
        close_listeners(l);
    return true;
}

/* Daemon mode's variables; an inherited one must not reach a child it does not fit. */
static const char *const daemon_mode_env[] = {
    "DDSS_MODE", "DDSS_DAEMON_SOCKET", "DDSS_DAEMON_CLIENTS", "DDSS_CLIENT", "DDSS_CLIENTS",
};

static void setenv_int(const char *name, int value)
{
    char num[16];
    snprintf(num, sizeof num, "%d", value);
    setenv(name, num, 1);
}

static void set_rank_env(const struct launch *l, int rank)
{
    if (l->coordinator) {
        /* The slot taken is the rank, and the view gives the others' addresses. */
        char listen[INET_ADDRSTRLEN + 8];

        node_entry(l, rank, listen, sizeof listen);
        setenv("DDSS_COORDINATOR", l->etcd.url, 1);
        setenv("DDSS_LISTEN", listen, 1);
        setenv_int("DDSS_RANK", rank); /* the slot it asks for: all are free at start */
        unsetenv("DDSS_NODES");
    } else {
        setenv_int("DDSS_RANK", rank);
        setenv("DDSS_NODES", l->nodes, 1);
    }
    setenv_int("DDSS_SIZE", l->size);
    if (l->max_size)
        setenv_int("DDSS_MAX_SIZE", l->max_size);
    setenv("DDSS_TRANSPORT", l->use_tcp ? "tcp" : "verbs", 1);
    /* Coordinator mode: every member derives the group id from the group's name, so that a
     * process started later (--slot, by hand, by systemd) matches; a user's stays. */
    if (!l->coordinator)
        setenv("DDSS_GROUP", l->group, 1);
    else if (!l->user_group)
        unsetenv("DDSS_GROUP");
    if (l->use_tcp)
        setenv_int("DDSS_LISTEN_FD", CHILD_LISTEN_FD);
    else
        unsetenv("DDSS_LISTEN_FD");
    unsetenv("DDSS_NODES_FILE");
    if (l->keys_dir[0] && !l->coordinator) {
        char path[sizeof l->keys_dir + 32];
        keys_path(path, sizeof path, l->keys_dir, rank);
        setenv("DDSS_KEYS_FILE", path, 1);
    }
}

static void set_child_env(const struct launch *l, const struct child *c)
{
    for (size_t i = 0; i < sizeof daemon_mode_env / sizeof daemon_mode_env[0]; i++)
        unsetenv(daemon_mode_env[i]);
    set_rank_env(l, c->rank);
    if (c->kind == CHILD_RANK)
        return;
    char path[sizeof l->sock_dir + 32];
    snprintf(path, sizeof path, "%s/ddssd-%d.sock", l->sock_dir, c->rank);
    setenv("DDSS_DAEMON_SOCKET", path, 1);
    if (c->kind == CHILD_DAEMON) {
        setenv_int("DDSS_DAEMON_CLIENTS", l->clients);
        return;
    }
    unsetenv("DDSS_LISTEN_FD");
    unsetenv("DDSS_KEYS_FILE"); /* the daemon is the rank; a client needs no keys */
    setenv("DDSS_MODE", "daemon", 1);
    setenv_int("DDSS_CLIENT", c->client);
    setenv_int("DDSS_CLIENTS", l->clients);
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

_Noreturn static void exec_program(const struct launch *l, const struct child *c, int ready_fd)
{
    if (c->kind == CHILD_DAEMON) {
        char flag[] = "--ready-fd";
        char num[16];
        snprintf(num, sizeof num, "%d", ready_fd);
        char *argv[] = { (char *)l->ddssd, flag, num, NULL };
        execv(l->ddssd, argv);
        dprintf(STDERR_FILENO, "ddssrun: cannot exec %s: %s\n", l->ddssd, strerror(errno));
    } else {
        execvp(l->prog_argv[0], l->prog_argv);
        dprintf(STDERR_FILENO, "ddssrun: cannot exec %s: %s\n", l->prog_argv[0], strerror(errno));
    }
    _exit(EXIT_EXEC_FAILED);
}

/* Runs in the forked child; the parent is single-threaded, so setenv() is safe here. */
_Noreturn static void exec_child(const struct launch *l, const struct child *c, pid_t pgid,
                                 int out_w, int err_w, int ready_w)
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
    /* F_DUPFD gives a copy without FD_CLOEXEC, above the listen socket's fd. */
    int ready_fd = -1;
    if (c->kind == CHILD_DAEMON && (ready_fd = fcntl(ready_w, F_DUPFD, CHILD_LISTEN_FD + 1)) < 0) {
        dprintf(STDERR_FILENO, "ddssrun: cannot pass the ready fd: %s\n", strerror(errno));
        _exit(EXIT_EXEC_FAILED);
    }
    if (l->use_tcp && c->kind != CHILD_CLIENT) {
        int fd = l->listen_fds[c->rank - 1];
        /* dup2() onto itself would leave FD_CLOEXEC set, hence the explicit fcntl(). */
        if ((fd != CHILD_LISTEN_FD && dup2(fd, CHILD_LISTEN_FD) < 0) ||
            fcntl(CHILD_LISTEN_FD, F_SETFD, 0) < 0) {
            dprintf(STDERR_FILENO, "ddssrun: cannot pass listen socket: %s\n", strerror(errno));
            _exit(EXIT_EXEC_FAILED);
        }
    }
    set_child_env(l, c);
    /* Only now: the inherited fds above the old limit would make open() fail. */
    setrlimit(RLIMIT_NOFILE, &l->saved_nofile);
    exec_program(l, c, ready_fd);
}

static void init_stream(struct stream *s, int fd, int dest_fd, const struct child *owner)
{
    *s = (struct stream){ .fd = fd, .dest_fd = dest_fd, .owner = owner };
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Makes @n pipes; all or none. */
static bool make_pipes(int (*pipes)[2], int n)
{
    for (int i = 0; i < n; i++) {
        if (pipe2(pipes[i], O_CLOEXEC) < 0) {
            while (i-- > 0) {
                close(pipes[i][0]);
                close(pipes[i][1]);
            }
            return false;
        }
    }
    return true;
}

static bool spawn_child(struct run *run, const struct launch *l, struct child *c)
{
    enum { OUT, ERR, READY };
    int pipes[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
    int npipes = c->kind == CHILD_DAEMON ? 3 : 2;
    if (!make_pipes(pipes, npipes))
        return false;
    pid_t pid = fork();
    if (pid == 0)
        exec_child(l, c, run->pgid, pipes[OUT][1], pipes[ERR][1], pipes[READY][1]);
    for (int i = 0; i < npipes; i++)
        close(pipes[i][1]);
    if (pid < 0) {
        for (int i = 0; i < npipes; i++)
            close(pipes[i][0]);
        return false;
    }
    if (run->pgid == 0)
        run->pgid = pid;
    /* Parent and child both set the group, so it exists before the next fork no
     * matter which of them runs first. EACCES just means the child already exec'd. */
    setpgid(pid, run->pgid);

    c->pid = pid;
    c->running = true;
    run->running++;
    if (c->kind == CHILD_CLIENT)
        run->clients_running++;
    init_stream(&c->out, pipes[OUT][0], STDOUT_FILENO, c);
    init_stream(&c->err, pipes[ERR][0], STDERR_FILENO, c);
    c->ready_fd = pipes[READY][0];
    if (c->ready_fd >= 0)
        fcntl(c->ready_fd, F_SETFL, O_NONBLOCK);
    return true;
}

/* Only while one of our children is unreaped is the group id guaranteed to still
 * be ours; after that the number may belong to someone else. */
static void signal_children(const struct run *run, int sig)
{
    if (run->running == 0)
        return;
    killpg(run->pgid, sig);
    /* A child that moved to its own group (setsid) still gets the signal. */
    for (int i = 0; i < run->nchildren; i++) {
        if (run->children[i].running)
            kill(run->children[i].pid, sig);
    }
}

static void terminate_children(struct run *run, int64_t grace_ns)
{
    signal_children(run, SIGTERM);
    run->kill_grace_ns = grace_ns;
    run->kill_deadline = now_ns() + grace_ns;
}

static void start_shutdown(struct run *run, int exit_code)
{
    if (run->exit_code < 0)
        run->exit_code = exit_code;
    if (run->terminating)
        return;
    run->terminating = true;
    terminate_children(run, TERM_GRACE_NS);
}

/* Starts children[from..to); on failure the run shuts down. */
static void spawn_children(struct run *run, const struct launch *l, int from, int to)
{
    for (int i = from; i < to; i++) {
        if (!spawn_child(run, l, &run->children[i])) {
            say("ddssrun: cannot start %s: %s\n", run->children[i].name, strerror(errno));
            start_shutdown(run, 1);
            return;
        }
    }
}

static void emit_line(const struct stream *s, const char *line, size_t len, char *scratch)
{
    size_t prefix = strlen(s->owner->prefix);
    memcpy(scratch, s->owner->prefix, prefix);
    memcpy(scratch + prefix, line, len);
    scratch[prefix + len] = '\n';
    write_all(s->dest_fd, scratch, prefix + len + 1);
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
        say("ddssrun: out of memory, dropping output of %s\n", s->owner->name);
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

static struct child *find_child(struct run *run, pid_t pid)
{
    for (int i = 0; i < run->nchildren; i++) {
        if (run->children[i].pid == pid && run->children[i].running)
            return &run->children[i];
    }
    return NULL;
}

/* "status 3" or "signal 9 (SIGKILL)". */
static const char *describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status)) {
        snprintf(buf, size, "status %d", WEXITSTATUS(status));
    } else {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        snprintf(buf, size, "signal %d (SIG%s)", WTERMSIG(status), abbrev ? abbrev : "?");
    }
    return buf;
}

static bool exited_ok(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The run's exit code for a child that failed with @status; never 0. */
static int failure_code(int status)
{
    if (!WIFEXITED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1;
}

static void on_program_exit(struct run *run, struct child *c, int status)
{
    if (c->kind == CHILD_CLIENT)
        run->clients_running--;
    if (exited_ok(status))
        return;
    /* Deaths we caused ourselves would only bury the real cause. */
    if (run->terminating)
        return;
    char what[48];
    describe_status(status, what, sizeof what);
    say("ddssrun: %s %s %s\n", c->name, WIFEXITED(status) ? "exited with" : "killed by", what);
    start_shutdown(run, failure_code(status));
}

/* A daemon's ready pipe is readable: the byte, or the end without it. */
static void read_ready(struct run *run, struct child *c)
{
    char byte;
    ssize_t n = read(c->ready_fd, &byte, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    close_fd(&c->ready_fd);
    if (n == 1) {
        c->ready = true;
        run->daemons_ready++;
    } else if (c->running && run->ready_close_deadline == 0) {
        /* Most likely it is exiting: its status, soon reaped, will say why. */
        run->ready_close_deadline = now_ns() + READY_CLOSE_GRACE_NS;
    }
}

static void on_daemon_exit(struct run *run, struct child *c, int status)
{
    /* The byte may still sit in the pipe when the exit is seen first. */
    if (c->ready_fd >= 0)
        read_ready(run, c);
    close_fd(&c->ready_fd);         /* a grandchild may hold the write end */
    if (run->terminating)
        return;
    char what[48];
    describe_status(status, what, sizeof what);
    if (!c->ready) {
        say("ddssrun: %s exited before it was ready: %s\n", c->name, what);
        start_shutdown(run, failure_code(status));
    } else if (!run->stopping) {
        say("ddssrun: %s died while its clients ran: %s\n", c->name, what);
        start_shutdown(run, failure_code(status));
    } else if (!exited_ok(status)) {
        say("ddssrun: %s did not stop cleanly: %s\n", c->name, what);
        if (run->exit_code < 0)
            run->exit_code = failure_code(status);
    }
}

static void reap_children(struct run *run)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        struct child *c = find_child(run, pid);
        if (!c)
            continue;
        c->running = false;
        run->running--;
        if (c->kind == CHILD_DAEMON)
            on_daemon_exit(run, c, status);
        else
            on_program_exit(run, c, status);
    }
    if (run->running == 0 && run->drain_deadline == 0)
        run->drain_deadline = now_ns() + DRAIN_GRACE_NS;
}

static void on_shutdown_signal(struct run *run, int sig)
{
    if (run->terminating) {
        /* Asked again: the user does not want to wait for the grace period. */
        signal_children(run, SIGKILL);
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
    signal_children(run, SIGKILL);
}

/* The grace of READY_CLOSE_GRACE_NS is over: a daemon still running will never be ready. */
static void on_ready_close_deadline(struct run *run)
{
    run->ready_close_deadline = 0;
    for (int i = 0; i < run->nchildren && !run->terminating; i++) {
        const struct child *c = &run->children[i];
        if (c->kind == CHILD_DAEMON && c->running && !c->ready && c->ready_fd < 0) {
            say("ddssrun: %s closed its ready fd without writing to it\n", c->name);
            start_shutdown(run, 1);
        }
    }
}

static void check_deadlines(struct run *run)
{
    int64_t now = now_ns();
    if (run->timeout_deadline && !run->terminating && now >= run->timeout_deadline)
        on_timeout(run);
    if (run->ready_close_deadline && now >= run->ready_close_deadline)
        on_ready_close_deadline(run);
    if (run->kill_deadline && run->running > 0 && now >= run->kill_deadline) {
        say("ddssrun: %s still running %d s after SIGTERM, sending SIGKILL\n",
            run->terminating ? "ranks" : "daemons", (int)(run->kill_grace_ns / NS_PER_SEC));
        signal_children(run, SIGKILL);
        run->kill_deadline = 0;
    }
}

static int64_t next_deadline(const struct run *run)
{
    int64_t next = INT64_MAX;
    if (run->timeout_deadline && !run->terminating && run->timeout_deadline < next)
        next = run->timeout_deadline;
    if (run->ready_close_deadline && run->ready_close_deadline < next)
        next = run->ready_close_deadline;
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

/* What one pollfd is: the signalfd (both NULL), a child's output stream, or a
 * daemon's ready pipe (stream NULL). */
struct watch {
    struct child *child;
    struct stream *stream;
};

static void add_watch(int fd, struct child *c, struct stream *s, struct pollfd *pfds,
                      struct watch *watches, size_t *n)
{
    if (fd < 0)
        return;
    pfds[*n] = (struct pollfd){ .fd = fd, .events = POLLIN };
    watches[*n] = (struct watch){ .child = c, .stream = s };
    (*n)++;
}

static size_t build_pollset(struct run *run, struct pollfd *pfds, struct watch *watches,
                            size_t *open_streams)
{
    size_t n = 0;
    add_watch(run->sigfd, NULL, NULL, pfds, watches, &n);
    *open_streams = 0;
    for (int i = 0; i < run->nchildren; i++) {
        struct child *c = &run->children[i];
        *open_streams += (c->out.fd >= 0) + (c->err.fd >= 0);
        add_watch(c->out.fd, c, &c->out, pfds, watches, &n);
        add_watch(c->err.fd, c, &c->err, pfds, watches, &n);
        add_watch(c->ready_fd, c, NULL, pfds, watches, &n);
    }
    return n;
}

static void dispatch(struct run *run, const struct watch *w)
{
    if (!w->child)
        handle_signals(run);
    else if (w->stream)
        pump_stream(w->stream, run->scratch);
    else if (w->child->ready_fd >= 0)      /* not closed by a reap in this round */
        read_ready(run, w->child);
}

/* Daemon mode moves on when all daemons are ready (the clients start) and when all
 * clients are gone (the daemons stop). */
static void advance_daemon_mode(struct run *run, const struct launch *l)
{
    if (!l->daemon || run->terminating || run->stopping)
        return;
    if (!run->clients_started && run->daemons_ready == run->nranks) {
        run->clients_started = true;
        spawn_children(run, l, run->nranks, run->nchildren);
    } else if (run->clients_started && run->clients_running == 0) {
        run->stopping = true;
        terminate_children(run, DAEMON_GRACE_NS);
    }
}

static bool run_finished(const struct run *run, size_t open_streams)
{
    if (run->running > 0)
        return false;
    /* A grandchild may hold a pipe open forever; do not wait for it. */
    return open_streams == 0 || now_ns() >= run->drain_deadline;
}

static void event_loop(struct run *run, const struct launch *l)
{
    size_t max = 1 + 2 * (size_t)run->nchildren + (size_t)run->nranks;
    struct pollfd *pfds = malloc(max * sizeof *pfds);
    struct watch *watches = malloc(max * sizeof *watches);
    if (!pfds || !watches) {
        say("ddssrun: out of memory\n");
        signal_children(run, SIGKILL);
        if (run->exit_code < 0)
            run->exit_code = 1;
        free(pfds);
        free(watches);
        return;
    }
    if (run->running == 0)
        run->drain_deadline = now_ns();
    for (;;) {
        size_t open_streams;
        size_t n = build_pollset(run, pfds, watches, &open_streams);
        if (run_finished(run, open_streams))
            break;
        int ready = poll(pfds, n, poll_timeout_ms(run));
        if (ready < 0 && errno != EINTR) {
            say("ddssrun: poll: %s\n", strerror(errno));
            signal_children(run, SIGKILL);
            if (run->exit_code < 0)
                run->exit_code = 1;
            break;
        }
        for (size_t i = 0; ready > 0 && i < n; i++) {
            if (pfds[i].revents)
                dispatch(run, &watches[i]);
        }
        check_deadlines(run);
        advance_daemon_mode(run, l);
    }
    free(pfds);
    free(watches);
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

static void init_child(struct child *c, const struct options *opt, int index)
{
    *c = (struct child){ .out.fd = -1, .err.fd = -1, .ready_fd = -1 };
    if (opt->slot) {
        c->kind = CHILD_RANK;
        c->rank = opt->slot;
    } else if (index < opt->nranks) {
        c->kind = opt->daemon ? CHILD_DAEMON : CHILD_RANK;
        c->rank = index + 1;
    } else {
        c->kind = CHILD_CLIENT;
        c->rank = (index - opt->nranks) / opt->clients + 1;
        c->client = (index - opt->nranks) % opt->clients + 1;
    }
    if (c->kind == CHILD_DAEMON) {
        snprintf(c->name, sizeof c->name, "ddssd of rank %d", c->rank);
        snprintf(c->prefix, sizeof c->prefix, "[ddssd %d] ", c->rank);
    } else if (c->kind == CHILD_CLIENT && opt->clients > 1) {
        snprintf(c->name, sizeof c->name, "rank %d client %d", c->rank, c->client);
        snprintf(c->prefix, sizeof c->prefix, "[%d.%d] ", c->rank, c->client);
    } else {
        snprintf(c->name, sizeof c->name, "rank %d", c->rank);
        snprintf(c->prefix, sizeof c->prefix, "[%d] ", c->rank);
    }
}

static bool init_run(struct run *run, const struct options *opt)
{
    /* --slot: one rank of the group is ours to start */
    *run = (struct run){ .nranks = opt->slot ? 1 : opt->nranks, .nchildren = child_count(opt),
                         .sigfd = -1,
                         .exit_code = -1, .timeout_sec = opt->timeout_sec };
    run->children = calloc((size_t)run->nchildren, sizeof *run->children);
    run->scratch = malloc(PREFIX_MAX + LINE_BUF_SIZE + 1);
    if (!run->children || !run->scratch) {
        say("ddssrun: out of memory\n");
        return false;
    }
    for (int i = 0; i < run->nchildren; i++)
        init_child(&run->children[i], opt, i);
    return true;
}

static int finish_run(struct run *run)
{
    for (int i = 0; run->children && i < run->nchildren; i++) {
        close_stream(&run->children[i].out, run->scratch);
        close_stream(&run->children[i].err, run->scratch);
        close_fd(&run->children[i].ready_fd);
    }
    if (run->sigfd >= 0)
        close(run->sigfd);
    free(run->children);
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

    if (opt.write_keys)
        return write_keys_only(&opt);

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

    /* In daemon mode the first nranks children are the daemons; the clients follow
     * once those are ready (advance_daemon_mode). */
    spawn_children(&run, &launch, 0, run.nranks);
    /* The children hold their own copies now; keeping ours would keep the ports
     * open after a rank exits. */
    close_listeners(&launch);
    event_loop(&run, &launch);

    int code = finish_run(&run);
    free_launch(&launch);
    return code;
}
