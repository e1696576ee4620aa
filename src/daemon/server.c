/*
 * Daemon mode, the daemon's side (server.h): clients, their channels' workers, barriers.
 *
 * Lifetimes: a client is referenced by the listener (until its socket hangs up) and by
 * each of its workers; the last reference frees it. A worker owns its channel. When a
 * client goes, the listener closes its channels (its workers see -EPIPE once they finish
 * the call under way) and releases its locks; each worker releases them again as it
 * leaves, for a lock its last call took after that.
 */
#include "daemon/serve.h"
#include "alloc/pool.h"
#include "core/config.h"
#include "core/ctx.h"
#include "core/log.h"
#include "daemon/lane.h"
#include "daemon/sock.h"
#include "lock/lock.h"
#include "net/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CHANS_PER_CLIENT 1024 /* a client cannot make the daemon start more threads */
#define HELLO_TIMEOUT_MS 2000 /* how long a new connection has to say hello */
#define HELLO_PENDING_MAX 32  /* connections awaiting their hello; the oldest goes first */

struct srv_worker {
	struct srv_client *cl;
	struct ddss_chan *chan;
	struct srv_worker *next;
	struct ddss_lane_seat seat; /* lent to the fast lane between calls (lane.h) */
};

struct srv_client {
	struct ddss_server *srv;
	int sock;
	uint32_t id;
	int pid;
	bool gone;  /* atomic */
	int refs;   /* atomic */
	unsigned nchans;
	unsigned refused; /* listener: channels refused (only the first is logged) */
	struct srv_worker *workers; /* under srv->mu */
	struct srv_client *next;
};

struct ddss_server {
	ddss_ctx_t *ctx;
	struct ddss_server_conf conf;
	int lsock, stop_fd;
	int pool_ro_fd;              /* the pool memfd opened read-only: what clients get */
	pthread_t listener;
	pthread_t beater;            /* the channels' heartbeat (beat_main) */
	struct ddss_lane *lane;      /* NULL: every call runs in its channel's worker */
	unsigned serving;            /* workers in a call now (atomic) */
	pthread_mutex_t mu;          /* clients, workers, barrier */
	pthread_cond_t cv;           /* a worker left; a barrier completed */
	struct srv_client *clients;
	unsigned nclients, nworkers;
	uint32_t next_id;
	bool stopping;               /* atomic */
	/* Connections accepted whose hello has not come yet (the listener thread's): it waits
	 * for them beside the clients, never in their way. */
	struct { int fd; int64_t until_ns; } hello[HELLO_PENDING_MAX];
	unsigned nhello;
	/* The barrier: the last client to arrive runs the daemons' barrier for everyone. */
	unsigned arrived;
	bool barrier_running;        /* that last client is in the daemons' barrier now */
	uint64_t barrier_gen;
	int barrier_rc;
};

static void client_unref(struct srv_client *cl)
{
	if (__atomic_sub_fetch(&cl->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(cl);
}

static int worker_alive(void *arg)
{
	struct srv_worker *w = arg;

	if (__atomic_load_n(&w->cl->gone, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&w->cl->srv->stopping, __ATOMIC_ACQUIRE))
		return -ECANCELED;
	return 0;
}

static void *worker_main(void *arg)
{
	struct srv_worker *w = arg;
	struct srv_client *cl = w->cl;
	struct ddss_server *srv = cl->srv;
	struct srv_worker **pp;
	bool lend = false;
	unsigned others;

	ddss_lock_act_for(cl->id);
	/* While this worker waits on the fabric, its client spins for the answer (as long as
	 * the channel spin, or longer): the worker's waits spin at least as long, rather than
	 * sleep and be woken onto a core the spinning client holds (net/spin.h). */
	ddss_spin_thread_floor(ddss_chan_spin_ns());
	for (;;) {
		struct dmsg_req q;
		struct dmsg_resp a;
		const void *msg;
		void *slot;

		if (lend) {
			ddss_lane_lend(srv->lane, &w->seat);
			if (w->seat.broken)
				break;
		}
		if (ddss_chan_wait_req(w->chan, -1, worker_alive, w, &msg))
			break;
		memcpy(&q, msg, sizeof(q));
		ddss_chan_req_done(w->chan);
		__atomic_add_fetch(&srv->serving, 1, __ATOMIC_RELAXED);
		ddss_serve_call(srv, srv->ctx, w->chan, &q, &a);
		others = __atomic_sub_fetch(&srv->serving, 1, __ATOMIC_RELAXED);
		if (ddss_chan_resp_slot(w->chan, &slot))
			break; /* closed, or the client broke the one-call-at-a-time rule */
		memcpy(slot, &a, sizeof(a));
		ddss_chan_resp_post(w->chan);
		/*
		 * The lane pays when channels are busy together: then it posts their calls
		 * in one go and spares each worker its wake-up. So a channel goes to it after
		 * a get or put (which may start a stream of them) made while other workers
		 * served calls too, or while the lane holds other channels. A lone stream
		 * stays here, where its calls go a little faster; so does anything but a get
		 * or put (a lock and its release, most often), which the lane would only hand
		 * back.
		 */
		lend = srv->lane && (q.op == DOP_GET || q.op == DOP_PUT) &&
		       (others > 0 || ddss_lane_held(srv->lane) > 0);
	}
	pthread_mutex_lock(&srv->mu);
	for (pp = &cl->workers; *pp != w; pp = &(*pp)->next)
		;
	*pp = w->next;
	pthread_mutex_unlock(&srv->mu);
	if (__atomic_load_n(&cl->gone, __ATOMIC_ACQUIRE))
		ddss_lock_release_owner(srv->ctx, cl->id);
	ddss_chan_destroy(w->chan);
	free(w);
	client_unref(cl);
	pthread_mutex_lock(&srv->mu);
	srv->nworkers--;
	pthread_cond_broadcast(&srv->cv);
	pthread_mutex_unlock(&srv->mu);
	return NULL;
}

/* A channel's fd arrived: map it and start its worker. 0 or -errno (told to the client). */
static int add_channel(struct srv_client *cl, int fd)
{
	struct ddss_server *srv = cl->srv;
	struct srv_worker *w;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	if (cl->nchans >= CHANS_PER_CLIENT) {
		close(fd);
		return -ENOSPC;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		close(fd);
		return -ENOMEM;
	}
	r = ddss_chan_attach(fd, &w->chan);
	close(fd); /* the channel keeps its own */
	if (r) {
		free(w);
		return r;
	}
	w->cl = cl;
	w->seat.chan = w->chan;
	__atomic_add_fetch(&cl->refs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&srv->mu);
	w->next = cl->workers;
	cl->workers = w;
	srv->nworkers++;
	pthread_mutex_unlock(&srv->mu);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = -pthread_create(&th, &attr, worker_main, w);
	pthread_attr_destroy(&attr);
	if (r) {
		/* Undo as the worker itself would have. */
		ddss_chan_close(w->chan);
		pthread_mutex_lock(&srv->mu);
		cl->workers = w->next;
		srv->nworkers--;
		pthread_mutex_unlock(&srv->mu);
		ddss_chan_destroy(w->chan);
		free(w);
		client_unref(cl);
		return r;
	}
	cl->nchans++;
	return 0;
}

/* The client hung up (or the daemon stops): nothing it asked for may outlive it. */
static void client_gone(struct srv_client *cl)
{
	struct ddss_server *srv = cl->srv;
	struct srv_client **pp;

	__atomic_store_n(&cl->gone, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&srv->mu);
	for (struct srv_worker *w = cl->workers; w; w = w->next)
		ddss_chan_close(w->chan);
	for (pp = &srv->clients; *pp != cl; pp = &(*pp)->next)
		;
	*pp = cl->next;
	srv->nclients--;
	pthread_mutex_unlock(&srv->mu);
	close(cl->sock);
	int n = ddss_lock_release_owner(srv->ctx, cl->id);
	DDSS_INFO("client %u (pid %d) left%s; %d lock hold(s) released", cl->id, cl->pid,
		  __atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE) ? " (daemon stopping)" : "",
		  n);
	client_unref(cl);
}

static void client_message(struct srv_client *cl)
{
	struct dsock_chan m;
	int fd, r;

	r = ddss_sock_recv(cl->sock, &m, sizeof(m), &fd, 0);
	if (r == -ETIMEDOUT)
		return;
	if (!r && (m.op != DSOCK_CHAN || fd < 0)) {
		r = -EPROTO;
		if (fd >= 0)
			close(fd);
	}
	if (r) {
		if (r != -ECONNRESET)
			DDSS_WARN("client %u (pid %d): %s; dropping it", cl->id, cl->pid,
				  ddss_strerror(r));
		client_gone(cl);
		return;
	}
	m.op = DSOCK_CHAN_OK;
	m.rc = add_channel(cl, fd);
	if (m.rc && !cl->refused++)
		DDSS_WARN("client %u (pid %d): its channel refused: %s; later refusals of this "
			  "client are not logged", cl->id, cl->pid, ddss_strerror(m.rc));
	r = ddss_sock_send(cl->sock, &m, sizeof(m), -1);
	if (r) {
		/* A client waits for each answer before it asks again: a full socket is one
		 * that asks without reading. */
		if (r == -EAGAIN)
			DDSS_WARN("client %u (pid %d) does not read its answers; dropping it",
				  cl->id, cl->pid);
		client_gone(cl);
	}
}

/*
 * A client maps this rank's whole pool, so only our own user (or root) may attach: the
 * socket file is ours alone (listen_at), and the kernel's word on who connected decides.
 */
static int client_allowed(int s)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	if (cred.uid != geteuid() && cred.uid != 0) {
		DDSS_WARN("refusing pid %d: user %u is not ours", (int)cred.pid, (unsigned)cred.uid);
		return -EACCES;
	}
	return 0;
}

/*
 * The pool's memfd opened anew read-only (a client maps it to read, never to write, and
 * cannot resize it: the memfd is sealed, pool.c). -1 when the pool is not shared.
 */
static int pool_read_only_fd(ddss_ctx_t *ctx)
{
	char path[64];
	int fd = ddss_pool_fd(ctx->pool);

	if (fd < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		DDSS_WARN("daemon: cannot reopen the pool read-only (%s): clients read through "
			  "the daemon", strerror(errno));
	return fd;
}

/* A new connection: its hello is awaited in the listener's poll (hello_ready). */
static void accept_pending(struct ddss_server *srv)
{
	/* Non-blocking: one client that does not read its answers must not hold up this
	 * thread, which serves every client (client_message). */
	int s = accept4(srv->lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (s < 0)
		return;
	if (srv->nhello == HELLO_PENDING_MAX) {
		DDSS_WARN("daemon: %u connections have not said hello; closing the oldest",
			  HELLO_PENDING_MAX);
		close(srv->hello[0].fd);
		srv->nhello--;
		memmove(&srv->hello[0], &srv->hello[1], srv->nhello * sizeof(srv->hello[0]));
	}
	srv->hello[srv->nhello].fd = s;
	srv->hello[srv->nhello].until_ns = ddss_now_ns() + HELLO_TIMEOUT_MS * 1000000ll;
	srv->nhello++;
}

/* How long the listener may sleep: until the first hello's deadline (-1: none). */
static int hello_wait_ms(const struct ddss_server *srv)
{
	int64_t first = INT64_MAX, now = ddss_now_ns();

	for (unsigned i = 0; i < srv->nhello; i++)
		if (srv->hello[i].until_ns < first)
			first = srv->hello[i].until_ns;
	if (first == INT64_MAX)
		return -1;
	return first <= now ? 0 : (int)((first - now + 999999) / 1000000);
}

static void accept_client(struct ddss_server *srv, int s);

/* After the poll: the connections whose hello came (@ready[i]), and those out of time. */
static void hello_ready(struct ddss_server *srv, const struct pollfd *ready, unsigned n)
{
	int64_t now = ddss_now_ns();

	/* Last first: taking one out moves only those after it. */
	for (unsigned i = n; i-- > 0;) {
		int fd = srv->hello[i].fd;
		bool late = now >= srv->hello[i].until_ns;

		if (!ready[i].revents && !late)
			continue;
		srv->nhello--;
		memmove(&srv->hello[i], &srv->hello[i + 1],
			(srv->nhello - i) * sizeof(srv->hello[0]));
		if (ready[i].revents) {
			accept_client(srv, fd);
		} else {
			DDSS_WARN("refusing a client: no hello within %d ms", HELLO_TIMEOUT_MS);
			close(fd);
		}
	}
}

static void accept_client(struct ddss_server *srv, int s)
{
	int pool_fd = srv->pool_ro_fd;
	struct dsock_welcome w = { .op = DSOCK_WELCOME, .rank = ddss_rank(srv->ctx),
				   .size = ddss_size(srv->ctx), .daemon_pid = getpid(),
				   .pool_len = pool_fd < 0 ? 0 : ddss_pool_len(srv->ctx->pool),
				   .epoch_off = ddss_ctx_epoch_off() };
	struct dsock_hello h;
	struct srv_client *cl;
	int r;

	/* Its hello first (it has come), so that a refusal reaches it as an answer. */
	r = ddss_sock_recv(s, &h, sizeof(h), NULL, 0);
	if (!r)
		r = client_allowed(s);
	if (!r && (h.op != DSOCK_HELLO || h.magic != DPROTO_MAGIC || h.version != DPROTO_VERSION))
		r = -EPROTO;
	cl = r ? NULL : calloc(1, sizeof(*cl));
	if (!r && !cl)
		r = -ENOMEM;
	if (r) {
		DDSS_WARN("refusing a client: %s", ddss_strerror(r));
		w.rc = r;
		ddss_sock_send(s, &w, sizeof(w), -1);
		close(s);
		return;
	}
	cl->srv = srv;
	cl->sock = s;
	cl->pid = h.pid;
	cl->refs = 1;
	pthread_mutex_lock(&srv->mu);
	cl->id = ++srv->next_id;
	cl->next = srv->clients;
	srv->clients = cl;
	srv->nclients++;
	pthread_mutex_unlock(&srv->mu);
	w.client = cl->id;
	if (ddss_sock_send(s, &w, sizeof(w), pool_fd)) {
		client_gone(cl);
		return;
	}
	DDSS_INFO("client %u attached (pid %d)", cl->id, cl->pid);
}

static void *listener_main(void *arg)
{
	struct ddss_server *srv = arg;
	struct pollfd *p = NULL;
	struct srv_client **who = NULL;
	unsigned cap = 0;

	while (!__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
		unsigned n = 2, hellos;

		pthread_mutex_lock(&srv->mu);
		if (srv->nclients + 2 + HELLO_PENDING_MAX > cap) {
			cap = 2 * (srv->nclients + 2 + HELLO_PENDING_MAX);
			free(p);
			free(who);
			p = calloc(cap, sizeof(*p));
			who = calloc(cap, sizeof(*who));
		}
		if (!p || !who) {
			pthread_mutex_unlock(&srv->mu);
			DDSS_ERR("daemon: out of memory watching clients");
			break;
		}
		p[0] = (struct pollfd){ .fd = srv->stop_fd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = srv->lsock, .events = POLLIN };
		for (struct srv_client *cl = srv->clients; cl; cl = cl->next, n++) {
			p[n] = (struct pollfd){ .fd = cl->sock, .events = POLLIN };
			who[n] = cl;
		}
		pthread_mutex_unlock(&srv->mu);
		hellos = srv->nhello; /* after the clients in p[] */
		for (unsigned i = 0; i < hellos; i++)
			p[n + i] = (struct pollfd){ .fd = srv->hello[i].fd, .events = POLLIN };
		if (poll(p, n + hellos, hello_wait_ms(srv)) < 0)
			continue;
		if (p[0].revents)
			break;
		/* Only this thread removes clients: who[] stays valid. */
		for (unsigned i = 2; i < n; i++)
			if (p[i].revents & (POLLHUP | POLLERR | POLLNVAL))
				client_gone(who[i]);
			else if (p[i].revents & POLLIN)
				client_message(who[i]);
		hello_ready(srv, p + n, hellos);
		if (p[1].revents & POLLIN)
			accept_pending(srv);
	}
	for (unsigned i = 0; i < srv->nhello; i++)
		close(srv->hello[i].fd);
	srv->nhello = 0;
	free(p);
	free(who);
	return NULL;
}

/*
 * The heartbeat: every DDSS_CHAN_BEAT_MS, every channel's beat goes up (chan.h). A thread of
 * its own, so that no call a worker or the listener makes, however long, holds it back;
 * only a daemon that does not run at all (frozen, not scheduled) stops it.
 */
static void *beat_main(void *arg)
{
	struct ddss_server *srv = arg;
	struct pollfd stop = { .fd = srv->stop_fd, .events = POLLIN };

	while (!__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
		if (poll(&stop, 1, DDSS_CHAN_BEAT_MS) > 0)
			break;
		pthread_mutex_lock(&srv->mu);
		for (struct srv_client *cl = srv->clients; cl; cl = cl->next)
			for (struct srv_worker *w = cl->workers; w; w = w->next)
				ddss_chan_beat(w->chan);
		pthread_mutex_unlock(&srv->mu);
	}
	return NULL;
}

static int listen_at(const char *path, int *s_p)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s;

	if (!path || strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	/* The caller holds the node's instance lock: a socket file here is a dead one's. */
	unlink(path);
	/* Owner only before anyone can connect (listen comes after). */
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 ||
	    listen(s, 64) < 0) {
		int r = -errno;

		close(s);
		return r;
	}
	*s_p = s;
	return 0;
}

/*
 * The fast lane serves plain gets and puts (lane.h) unless DDSS_DAEMON_LANE=0, or the
 * channel spin is 0 (nobody looks at a quiet channel, so there is nothing to hand over).
 */
static bool lane_wanted(void)
{
	long on;

	if (ddss_env_long("DDSS_DAEMON_LANE", 0, 1, 1, &on))
		on = 1;
	return on && ddss_chan_spin_ns() > 0;
}

int ddss_server_start(ddss_ctx_t *ctx, const struct ddss_server_conf *conf,
		      struct ddss_server **srv_p)
{
	struct ddss_server *srv = calloc(1, sizeof(*srv));
	int r;

	if (!srv)
		return -ENOMEM;
	srv->ctx = ctx;
	srv->conf = *conf;
	srv->lsock = -1;
	srv->pool_ro_fd = pool_read_only_fd(ctx);
	pthread_mutex_init(&srv->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&srv->cv, &ca);
	pthread_condattr_destroy(&ca);
	srv->stop_fd = eventfd(0, EFD_CLOEXEC);
	r = srv->stop_fd < 0 ? -errno : listen_at(conf->socket_path, &srv->lsock);
	if (!r && lane_wanted())
		r = ddss_lane_start(ctx, DDSS_LANE_IDLE_NS, &srv->lane);
	if (!r)
		r = -pthread_create(&srv->beater, NULL, beat_main, srv);
	if (!r) {
		r = -pthread_create(&srv->listener, NULL, listener_main, srv);
		if (r) {
			__atomic_store_n(&srv->stopping, true, __ATOMIC_RELEASE);
			pthread_join(srv->beater, NULL); /* it sees `stopping` within a beat */
		}
	}
	if (r) {
		ddss_lane_stop(srv->lane);
		if (srv->lsock >= 0)
			close(srv->lsock);
		if (srv->stop_fd >= 0)
			close(srv->stop_fd);
		if (srv->pool_ro_fd >= 0)
			close(srv->pool_ro_fd);
		pthread_cond_destroy(&srv->cv);
		pthread_mutex_destroy(&srv->mu);
		free(srv);
		return r;
	}
	*srv_p = srv;
	return 0;
}

static struct timespec deadline_in(int ms)
{
	return ddss_time_after(CLOCK_MONOTONIC, (int64_t)ms * 1000000);
}

int ddss_server_stop(struct ddss_server *srv, int timeout_ms)
{
	struct timespec until = deadline_in(timeout_ms);
	uint64_t one = 1;
	int busy;

	__atomic_store_n(&srv->stopping, true, __ATOMIC_RELEASE);
	if (write(srv->stop_fd, &one, sizeof(one)) != sizeof(one))
		DDSS_WARN("daemon: waking the listener failed");
	pthread_join(srv->listener, NULL);
	pthread_join(srv->beater, NULL);
	while (srv->clients)
		client_gone(srv->clients);
	close(srv->lsock);
	unlink(srv->conf.socket_path);
	pthread_mutex_lock(&srv->mu);
	pthread_cond_broadcast(&srv->cv); /* clients waiting in a barrier */
	while (srv->nworkers &&
	       pthread_cond_timedwait(&srv->cv, &srv->mu, &until) != ETIMEDOUT)
		;
	busy = (int)srv->nworkers;
	pthread_mutex_unlock(&srv->mu);
	if (busy)
		return busy; /* their calls still use the server: it stays */
	ddss_lane_stop(srv->lane); /* it holds no channel: their workers are gone */
	close(srv->stop_fd);
	if (srv->pool_ro_fd >= 0)
		close(srv->pool_ro_fd);
	pthread_cond_destroy(&srv->cv);
	pthread_mutex_destroy(&srv->mu);
	free(srv);
	return 0;
}

uint64_t ddss_server_lane_calls(struct ddss_server *srv)
{
	return srv->lane ? ddss_lane_calls(srv->lane) : 0;
}

unsigned ddss_server_clients(struct ddss_server *srv)
{
	unsigned n;

	pthread_mutex_lock(&srv->mu);
	n = srv->nclients;
	pthread_mutex_unlock(&srv->mu);
	return n;
}

/*
 * A client may give up on the others (barrier_timeout_ms) only while the barrier is still
 * filling. Once it has filled, its last client runs the daemons' barrier (bounded by the
 * connect timeout) for all of them, and has reset the count for the next barrier: the
 * others wait for that result, and a client that comes meanwhile waits for the next one.
 */
int ddss_server_barrier(struct ddss_server *srv)
{
	struct timespec until;
	bool timed_out = false;
	unsigned want;
	uint64_t gen;
	int r;

	pthread_mutex_lock(&srv->mu);
	while (srv->barrier_running && !__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&srv->cv, &srv->mu);
	gen = srv->barrier_gen;
	want = srv->conf.expected_clients ? srv->conf.expected_clients : srv->nclients;
	if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
		r = -ECANCELED;
	} else if (++srv->arrived >= want) {
		/* Last here: the daemons' barrier, then everyone goes. */
		srv->arrived = 0;
		srv->barrier_running = true;
		pthread_mutex_unlock(&srv->mu);
		r = ddss_barrier(srv->ctx);
		pthread_mutex_lock(&srv->mu);
		srv->barrier_rc = r;
		srv->barrier_gen++;
		srv->barrier_running = false;
		pthread_cond_broadcast(&srv->cv);
	} else {
		until = deadline_in(srv->conf.barrier_timeout_ms);
		while (srv->barrier_gen == gen &&
		       !__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
			if (srv->barrier_running)
				pthread_cond_wait(&srv->cv, &srv->mu);
			else if (timed_out)
				break;
			else if (pthread_cond_timedwait(&srv->cv, &srv->mu, &until) == ETIMEDOUT)
				timed_out = true;
		}
		if (srv->barrier_gen != gen) {
			r = srv->barrier_rc;
		} else if (srv->barrier_running) {
			r = -ECANCELED; /* stopping: counted in the barrier under way */
		} else {
			/* Leave the count as if we had not come. */
			srv->arrived--;
			r = timed_out ? -ETIMEDOUT : -ECANCELED;
		}
	}
	pthread_mutex_unlock(&srv->mu);
	return r;
}
