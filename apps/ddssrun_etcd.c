/*
 * ddssrun --coordinator: a private etcd for the run (coordinator mode, docs/membership.md),
 * unless DDSS_COORDINATOR names one already.
 * One member on loopback, its data in a temporary directory; started before the ranks,
 * killed and removed after them. Readiness is asked of Debian's etcdctl, so ddssrun
 * speaks no HTTP itself.
 */
#include "ddssrun_etcd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ETCD_READY_TRIES 200 /* x 100 ms */
#define ETCD_START_TRIES 3  /* etcd exited at start: fresh ports, again */

/* A loopback port nobody holds now (etcd binds it a moment later). */
static int free_port(void)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sin;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

static pid_t spawn(char *const argv[], const char *log_path)
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

        if (fd < 0 || null < 0)
            _exit(127);
        dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        setpgid(0, 0); /* not in the ranks' process group: ddssrun stops it last */
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* etcdctl endpoint health, once: true when the member serves (it has a leader). */
static bool healthy(const struct ddssrun_etcd *e)
{
    char ep[64];
    char *argv[] = { "etcdctl", "--endpoints", ep, "--command-timeout=1s", "endpoint",
                     "health", NULL };
    char log[sizeof e->dir + 32];
    int status;
    pid_t pid;

    snprintf(ep, sizeof ep, "127.0.0.1:%d", e->client_port);
    snprintf(log, sizeof log, "%s/etcdctl.log", e->dir);
    setenv("ETCDCTL_API", "3", 1);
    pid = spawn(argv, log);
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* One start of the member on two fresh ports, data in @dir/data-@attempt: 1 it serves,
 * 0 it exited at start (a port taken meanwhile, or no etcd), -1 it did not become healthy. */
static int start_once(struct ddssrun_etcd *e, const char *group, int attempt)
{
    char client_url[64], peer_url[64], cluster[96], data[sizeof e->dir + 32],
        log[sizeof e->dir + 16];
    int peer_port;

    e->client_port = free_port();
    peer_port = free_port();
    if (e->client_port < 0 || peer_port < 0 || peer_port == e->client_port) {
        fprintf(stderr, "ddssrun: no free loopback port for etcd\n");
        return -1;
    }
    snprintf(client_url, sizeof client_url, "http://127.0.0.1:%d", e->client_port);
    snprintf(peer_url, sizeof peer_url, "http://127.0.0.1:%d", peer_port);
    snprintf(cluster, sizeof cluster, "ddssrun=%s", peer_url);
    snprintf(data, sizeof data, "%s/data-%d", e->dir, attempt);
    snprintf(log, sizeof log, "%s/etcd.log", e->dir);
    char *argv[] = { "etcd", "--name", "ddssrun", "--data-dir", data,
                     "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", cluster, NULL };
    e->pid = spawn(argv, log);
    if (e->pid < 0) {
        fprintf(stderr, "ddssrun: cannot start etcd: %s\n", strerror(errno));
        return -1;
    }
    for (int i = 0; i < ETCD_READY_TRIES; i++) {
        struct timespec pause = { 0, 100 * 1000 * 1000 };
        int status;

        if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
            e->pid = -1;
            return 0;
        }
        if (healthy(e)) {
            snprintf(e->url, sizeof e->url, "etcd://127.0.0.1:%d/%s", e->client_port, group);
            return 1;
        }
        nanosleep(&pause, NULL); /* a bounded poll: etcd says when it serves */
    }
    fprintf(stderr, "ddssrun: etcd did not become healthy in %d s; its log: %s\n",
            ETCD_READY_TRIES / 10, log);
    return -1;
}

bool ddssrun_etcd_start(struct ddssrun_etcd *e, const char *group)
{
    const char *given = getenv("DDSS_COORDINATOR");
    int r = 0;

    memset(e, 0, sizeof *e);
    e->pid = -1;
    snprintf(e->dir, sizeof e->dir, "/tmp/ddssrun-etcd.XXXXXX");
    if (!mkdtemp(e->dir)) {
        fprintf(stderr, "ddssrun: cannot make a directory for etcd: %s\n", strerror(errno));
        e->dir[0] = 0;
        return false;
    }
    if (given && *given) { /* the user's etcd: only the directory (for the secret) is ours */
        snprintf(e->url, sizeof e->url, "%s", given);
        return true;
    }
    /* The ports are free when picked, and etcd binds them a moment later: another process
     * may take one in between. etcd then exits at once; so try again on fresh ports. */
    for (int attempt = 1; attempt <= ETCD_START_TRIES && r == 0; attempt++)
        r = start_once(e, group, attempt);
    if (r == 0)
        fprintf(stderr, "ddssrun: etcd exited at start, %d times (is etcd-server installed? "
                        "scripts/install-deps.sh); its log: %s/etcd.log\n",
                ETCD_START_TRIES, e->dir);
    return r == 1;
}

static void remove_tree(const char *path)
{
    char *argv[] = { "rm", "-rf", (char *)path, NULL };
    int status;
    pid_t pid = spawn(argv, "/dev/null");

    if (pid > 0)
        waitpid(pid, &status, 0);
}

void ddssrun_etcd_stop(struct ddssrun_etcd *e)
{
    int status;

    if (e->pid > 0) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, &status, 0);
        e->pid = -1;
    }
    if (e->dir[0]) {
        remove_tree(e->dir);
        e->dir[0] = 0;
    }
}

const char *ddssrun_etcd_secret(struct ddssrun_etcd *e)
{
    static char path[sizeof e->dir + 16];
    unsigned char raw[32];
    char hex[65];
    int fd;

    if (getentropy(raw, sizeof raw))
        return NULL;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    snprintf(path, sizeof path, "%s/secret", e->dir);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    if (write(fd, hex, 64) != 64) {
        close(fd);
        return NULL;
    }
    close(fd);
    return path;
}
