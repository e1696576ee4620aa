/*
 * Daemon mode, the client's side (client.h): the socket to the daemon and the channels.
 */
#include "daemon/client.h"
#include "core/config.h"
#include "core/log.h"
#include "daemon/chan.h"
#include "daemon/local.h"
#include "daemon/sock.h"
#include "net/transport.h" /* ddss_now_ns */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct client_chan {
	struct ddss_chan *chan;
	struct client_chan *next; /* on the free list */
	bool broken;              /* atomic: a call on it failed in transport: never reused */
};

struct ddss_client {
	int sock;
	uint32_t rank, size, id;
	pthread_mutex_t mu;       /* the free list, the channel count, the socket's replies */
	struct client_chan *free;
	struct client_chan **all; /* every channel, for detach */
	unsigned nall, cap;
	bool gone;                /* atomic: the daemon hung up (or we are a fork's copy) */
	int stall_ms;             /* a daemon that beats no more for this long is given up */
	bool forked;              /* a fork's copy: the channels are the parent's */
	struct ddss_local *local; /* the daemon's pool, read-only (NULL: no local reads) */
	struct ddss_client *next_attached; /* on the process's list (fork handling) */
};

/*
 * Every attachment of this process. A child made by fork() must not keep its parent's
 * socket open: the daemon learns that a client died from the socket's hang-up, which would
 * wait for the child too. The child's copies are closed (its contexts then say -ENOTCONN;
 * a child attaches anew with ddss_init).
 */
static pthread_mutex_t attached_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ddss_client *attached;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
	pthread_mutex_lock(&attached_mu);
}

static void after_fork_parent(void)
{
	pthread_mutex_unlock(&attached_mu);
}

static void after_fork_child(void)
{
	for (struct ddss_client *cl = attached; cl; cl = cl->next_attached) {
		close(cl->sock);
		cl->sock = -1;
		cl->forked = true;
		__atomic_store_n(&cl->gone, true, __ATOMIC_RELEASE);
	}
	attached = NULL;
	pthread_mutex_unlock(&attached_mu);
}

static void register_atfork(void)
{
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void list_add(struct ddss_client *cl)
{
	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&attached_mu);
	cl->next_attached = attached;
	attached = cl;
	pthread_mutex_unlock(&attached_mu);
}

static void list_del(struct ddss_client *cl)
{
	pthread_mutex_lock(&attached_mu);
	for (struct ddss_client **pp = &attached; *pp; pp = &(*pp)->next_attached)
		if (*pp == cl) {
			*pp = cl->next_attached;
			break;
		}
	pthread_mutex_unlock(&attached_mu);
}

/*
 * Give up a daemon that has not run for cl->stall_ms (frozen, or never scheduled): every
 * call of ours then returns -ENOTCONN, as for a dead one. The hang-up is also our goodbye:
 * once the daemon runs again it drops our channels and releases our locks, so a lock its
 * worker grants us after we gave up does not stay held (server.c, client_gone).
 */
static void give_up(struct ddss_client *cl, const char *waiting_for)
{
	if (__atomic_exchange_n(&cl->gone, true, __ATOMIC_ACQ_REL))
		return;
	shutdown(cl->sock, SHUT_RDWR); /* not close: other threads may poll it */
	DDSS_WARN("daemon mode: ddssd did not run for %d ms (frozen?) while we waited for %s: "
		  "detached, calls now return -ENOTCONN (DDSS_DAEMON_STALL_MS)", cl->stall_ms,
		  waiting_for);
}

/* What a wait for the daemon knows of its heartbeat. */
struct daemon_watch {
	struct ddss_client *cl;
	const struct ddss_chan *chan; /* whose beat we watch (NULL: none yet, time alone) */
	uint64_t beat;      /* the last beat seen */
	int64_t since_ns;   /* when it was first seen */
	int64_t checked_ns; /* the last look */
};

/* Looks come every 100 ms of waiting (chan.c asks at least every slice). */
#define WATCH_SLICE_MS 100

static void watch_start(struct daemon_watch *dw, struct ddss_client *cl,
			const struct ddss_chan *chan)
{
	*dw = (struct daemon_watch){ .cl = cl, .chan = chan, .since_ns = ddss_now_ns() };
	dw->checked_ns = dw->since_ns;
	if (chan)
		dw->beat = ddss_chan_beats(chan);
}

/* 0, or -ETIMEDOUT once the daemon has not beaten for the stall bound (then given up). */
static int watch_look(struct daemon_watch *dw, const char *waiting_for)
{
	int64_t now = ddss_now_ns();
	uint64_t beat;

	if (dw->cl->stall_ms <= 0)
		return 0;
	/* Stopped with it (a paused VM or container, a suspended job): our own silence is no
	 * sign of the daemon's, and its beat thread may not have run since it went on. A
	 * pause shorter than half the bound cannot make us give up (the beat resumes within
	 * a slice of it), so only a longer one starts the count again: a thread that is
	 * merely late now and then still gives up a frozen daemon. */
	if (now - dw->checked_ns > (int64_t)dw->cl->stall_ms * 500000)
		dw->since_ns = now;
	dw->checked_ns = now;
	beat = dw->chan ? ddss_chan_beats(dw->chan) : dw->beat;
	if (beat != dw->beat) {
		dw->beat = beat;
		dw->since_ns = now;
	} else if (now - dw->since_ns > (int64_t)dw->cl->stall_ms * 1000000) {
		give_up(dw->cl, waiting_for);
		return -ETIMEDOUT;
	}
	return 0;
}

static int daemon_alive(void *arg)
{
	struct daemon_watch *dw = arg;
	struct ddss_client *cl = dw->cl;
	struct pollfd p = { .fd = cl->sock, .events = POLLIN };

	if (__atomic_load_n(&cl->gone, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	/* Only the hang-up counts: a pending answer on the socket is someone's channel reply. */
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
		__atomic_store_n(&cl->gone, true, __ATOMIC_RELEASE);
		return -ENOTCONN;
	}
	return watch_look(dw, "an answer");
}

/*
 * Whether the process serving the socket may be our daemon: it runs as our user or as
 * root. Anyone can bind a path first (a squatter) and would then read every put of ours
 * and answer our gets with what it likes (docs/security.md, "Daemon mode").
 */
static int server_trusted(int s, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	if (cred.uid != geteuid() && cred.uid != 0) {
		DDSS_ERR("daemon mode: %s is served by pid %d of user %u, which is neither us "
			 "(user %u) nor root: not our ddssd, refusing it", path, (int)cred.pid,
			 (unsigned)cred.uid, (unsigned)geteuid());
		return -EACCES;
	}
	return 0;
}

int ddss_client_attach(const char *path, int timeout_ms, struct ddss_client **cl_p)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct dsock_hello hello = { .op = DSOCK_HELLO, .magic = DPROTO_MAGIC,
				     .version = DPROTO_VERSION, .pid = getpid() };
	struct dsock_welcome w;
	struct ddss_client *cl;
	int r, pool_fd = -1;
	long stall;

	if (!path || !path[0] || strlen(path) >= sizeof(a.sun_path))
		return -EINVAL;
	strcpy(a.sun_path, path);
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	pthread_mutex_init(&cl->mu, NULL);
	if (ddss_env_long("DDSS_DAEMON_STALL_MS", 0, 3600000, DDSS_DAEMON_STALL_MS_DEFAULT,
			  &stall) == 0)
		cl->stall_ms = (int)stall;
	else
		cl->stall_ms = DDSS_DAEMON_STALL_MS_DEFAULT;
	cl->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (cl->sock < 0 || connect(cl->sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		r = -errno;
		DDSS_ERR("daemon mode: cannot reach ddssd at %s: %s", path, ddss_strerror(r));
		goto fail;
	}
	r = server_trusted(cl->sock, path);
	if (r)
		goto fail;
	r = ddss_sock_send(cl->sock, &hello, sizeof(hello), -1);
	if (!r)
		r = ddss_sock_recv(cl->sock, &w, sizeof(w), &pool_fd, timeout_ms);
	if (!r && (w.op != DSOCK_WELCOME))
		r = -EPROTO;
	if (!r)
		r = w.rc;
	if (r) {
		DDSS_ERR("daemon mode: ddssd at %s did not take us: %s", path, ddss_strerror(r));
		goto fail;
	}
	cl->rank = w.rank;
	cl->size = w.size;
	cl->id = w.client;
	if (pool_fd >= 0 && w.pool_len) {
		r = ddss_local_open(pool_fd, w.pool_len, w.epoch_off, &cl->local);
		if (r)
			DDSS_WARN("daemon mode: cannot map the daemon's pool (%s): every get goes "
				  "through the daemon", ddss_strerror(r));
	}
	if (pool_fd >= 0)
		close(pool_fd);
	list_add(cl);
	*cl_p = cl;
	return 0;
fail:
	if (pool_fd >= 0)
		close(pool_fd);
	if (cl->sock >= 0)
		close(cl->sock);
	pthread_mutex_destroy(&cl->mu);
	free(cl);
	return r;
}

void ddss_client_detach(struct ddss_client *cl)
{
	if (!cl)
		return;
	list_del(cl);
	/* Closing the socket is the goodbye: the daemon then drops our channels and locks. */
	for (unsigned i = 0; i < cl->nall; i++) {
		if (!cl->forked) /* a fork's copy must not close its parent's channels */
			ddss_chan_close(cl->all[i]->chan);
		ddss_chan_destroy(cl->all[i]->chan);
		free(cl->all[i]);
	}
	free(cl->all);
	ddss_local_close(cl->local);
	if (cl->sock >= 0)
		close(cl->sock);
	pthread_mutex_destroy(&cl->mu);
	free(cl);
}

uint32_t ddss_client_rank(const struct ddss_client *cl)
{
	return cl->rank;
}

uint32_t ddss_client_size(const struct ddss_client *cl)
{
	return cl->size;
}

struct ddss_local *ddss_client_local(const struct ddss_client *cl)
{
	return __atomic_load_n(&cl->gone, __ATOMIC_ACQUIRE) ? NULL : cl->local;
}

/*
 * mu held: the beat to watch while the daemon's listener answers for a new channel, one of
 * our channels whose worker is there (not broken); NULL with none (then the bound alone).
 * The listener may be busy for a while (a client that left releases its locks there).
 */
static const struct ddss_chan *beating_chan(const struct ddss_client *cl)
{
	for (unsigned i = 0; i < cl->nall; i++)
		if (!__atomic_load_n(&cl->all[i]->broken, __ATOMIC_RELAXED))
			return cl->all[i]->chan;
	return NULL;
}

/* mu held: a new channel, handed to the daemon (which starts a worker for it). */
static int open_chan(struct ddss_client *cl, struct client_chan **cc_p)
{
	struct dsock_chan m = { .op = DSOCK_CHAN, .index = cl->nall };
	struct daemon_watch dw;
	struct client_chan *cc;
	int r;

	if (cl->nall == cl->cap) {
		unsigned cap = cl->cap ? 2 * cl->cap : 8;
		struct client_chan **all = realloc(cl->all, cap * sizeof(*all));

		if (!all)
			return -ENOMEM;
		cl->all = all;
		cl->cap = cap;
	}
	cc = calloc(1, sizeof(*cc));
	if (!cc)
		return -ENOMEM;
	r = ddss_chan_create(&cc->chan);
	if (r) {
		free(cc);
		return r;
	}
	watch_start(&dw, cl, beating_chan(cl));
	r = ddss_sock_send(cl->sock, &m, sizeof(m), ddss_chan_fd(cc->chan));
	while (!r) {
		r = ddss_sock_recv(cl->sock, &m, sizeof(m), NULL,
				   cl->stall_ms > 0 ? WATCH_SLICE_MS : -1);
		if (r != -ETIMEDOUT)
			break;
		r = watch_look(&dw, "a new channel");
	}
	if (!r && m.op != DSOCK_CHAN_OK)
		r = -EPROTO;
	if (!r)
		r = m.rc;
	if (r) {
		if (r == -EPIPE || r == -ECONNRESET)
			r = -ENOTCONN;
		ddss_chan_destroy(cc->chan);
		free(cc);
		return r;
	}
	cl->all[cl->nall++] = cc;
	*cc_p = cc;
	return 0;
}

static int take_chan(struct ddss_client *cl, struct client_chan **cc_p)
{
	int r = 0;

	pthread_mutex_lock(&cl->mu);
	if (cl->free) {
		*cc_p = cl->free;
		cl->free = cl->free->next;
	} else {
		r = open_chan(cl, cc_p);
	}
	pthread_mutex_unlock(&cl->mu);
	return r;
}

static void give_chan(struct ddss_client *cl, struct client_chan *cc)
{
	if (__atomic_load_n(&cc->broken, __ATOMIC_RELAXED))
		return; /* stays in `all` until detach */
	pthread_mutex_lock(&cl->mu);
	cc->next = cl->free;
	cl->free = cc;
	pthread_mutex_unlock(&cl->mu);
}

/* One call on @cc. *@posted: whether the request went out (then a failure breaks @cc). */
static int exchange(struct ddss_client *cl, struct client_chan *cc, struct dmsg_req *req,
		    const void *put_data, size_t put_len, void *get_buf, struct dmsg_resp *resp,
		    bool *posted)
{
	size_t data_len = put_len > req->len ? put_len : (size_t)req->len;
	void *data = NULL, *slot;
	const void *msg;
	int r;

	*posted = false;
	if ((put_len || get_buf) && data_len) {
		r = ddss_chan_data(cc->chan, data_len, &data);
		if (r)
			return r; /* the data area as it was: the channel serves on */
	}
	if (put_len)
		memcpy(data, put_data, put_len);
	req->data_off = 0;
	r = ddss_chan_req_slot(cc->chan, &slot); /* one call at a time: never full */
	if (r) {
		*posted = true; /* the daemon closed it: no use keeping it */
		return r == -EPIPE ? -ENOTCONN : r;
	}
	memcpy(slot, req, sizeof(*req));
	*posted = true;
	ddss_chan_req_post(cc->chan);
	struct daemon_watch dw;

	watch_start(&dw, cl, cc->chan);
	r = ddss_chan_wait_resp(cc->chan, -1, daemon_alive, &dw, &msg);
	if (r)
		return r == -EPIPE ? -ENOTCONN : r;
	memcpy(resp, msg, sizeof(*resp));
	ddss_chan_resp_done(cc->chan);
	if (!resp->rc && get_buf)
		memcpy(get_buf, data, req->len);
	return 0;
}

int ddss_client_call(struct ddss_client *cl, struct dmsg_req *req, const void *put_data,
		     size_t put_len, void *get_buf, struct dmsg_resp *resp)
{
	struct client_chan *cc;
	bool posted;
	int r;

	if (__atomic_load_n(&cl->gone, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	r = take_chan(cl, &cc);
	if (r)
		return r;
	r = exchange(cl, cc, req, put_data, put_len, get_buf, resp, &posted);
	if (r && posted)
		__atomic_store_n(&cc->broken, true, __ATOMIC_RELAXED); /* its answer may come */
	give_chan(cl, cc);
	return r ? r : resp->rc;
}
