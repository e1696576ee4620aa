/*
 * Coordinator mode (coordinator.h): the group's start and its deaths through etcd, by way
 * of the membership of coord/member.h.
 */
#include "net/coordinator.h"
#include "coord/member.h"
#include "core/config.h"
#include "core/log.h"
#include "core/wire.h"
#include "net/net_internal.h"
#include "net/nodes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define COORD_NAME_MAX 64
/* A lease shorter than this would expire in an etcd leader election (about 1-2 s). */
#define COORD_TTL_MIN_MS 3000
#define COORD_TTL_DEFAULT_MS 10000
#define DDSS_COORD_SLOTS_MAX 4096 /* coord/member_int.h's DDSS_MEMBER_SLOTS_MAX */

struct ddss_coord {
	int refs; /* atomic */
	struct ddss_member *member;
	uint32_t size;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* broadcast on each view */
	size_t view_count;      /* under mu */
	int64_t *incarnation;   /* [slot] under mu: the start view's; -1 once declared dead */
	int64_t *reported;      /* [slot] under mu: the incarnation last reported (-1: said why not) */
	unsigned reporting;     /* under mu: report threads running (report_main) */
	int64_t *left_view;     /* [slot] under mu: the view its start incarnation left, 0 */
	int64_t *left_ns;       /* [slot] under mu: when we saw that view */
	bool started;           /* under mu: incarnation[] is filled */
	struct ddss_net *net;   /* under mu: where deaths go, once attached */
	unsigned net_users;     /* under mu: view callbacks using net outside mu (detach waits) */
	bool closed;            /* under mu: detached, the process is leaving */
	uint32_t self;          /* our slot */
	int64_t ttl_ns;
	/* etcd outage (coord_tick): is etcd down for every member, or only for us? */
	uint32_t ask_epoch;     /* under mu: the current question's number, 0: none */
	uint8_t *answer;        /* [slot] under mu: 0 none, else an ANSWER_ */
	bool in_outage;         /* under mu: we said etcd is down for everyone */
	bool said_alone;        /* under mu: we said etcd answers others but not us */
	bool said_slow;         /* under mu: we said etcd may be alive but not answering */
};

/* COORD_ANSWER: an older member's answer, reached or not (it cannot tell "no leader"
 * from "no answer in time": read as the latter); COORD_ANSWER3: one of the WIRE_ values. */
enum { COORD_ASK = 1, COORD_ANSWER = 2, COORD_ANSWER3 = 3 };

struct ddss_admit {
	uint32_t slot; /* 0: none */
	uint64_t incarnation;
	uint32_t generation;
	struct ddss_tp_node node;
};
/* What a member says of etcd (ddss_coord_tick): its renewals work; etcd has no leader
 * (nothing runs, or no quorum: ddss_member_etcd_lost); or no answer in time. */
enum { ANSWER_DOWN = 1, ANSWER_UP = 2, ANSWER_SLOW = 3 };
/* On the wire (the answer's third word). */
enum { WIRE_LOST = 0, WIRE_REACHED = 1, WIRE_NO_ANSWER = 2 };

bool ddss_coord_wanted(void)
{
	const char *s = getenv("DDSS_COORDINATOR");

	return s && *s;
}

/* "etcd://EP[,EP...]/NAME" into endpoints and the key prefix "/ddss/NAME/". */
static int parse_url(const char *url, char **endpoints_p, char *prefix, size_t len)
{
	const char *p, *slash, *name;

	if (strncmp(url, "etcd://", 7))
		goto bad;
	p = url + 7;
	slash = strchr(p, '/');
	if (!slash || slash == p)
		goto bad;
	name = slash + 1;
	if (!*name || strlen(name) > COORD_NAME_MAX)
		goto bad;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.'))
			goto bad;
	*endpoints_p = strndup(p, (size_t)(slash - p));
	if (!*endpoints_p)
		return -ENOMEM;
	snprintf(prefix, len, "/ddss/%s/", name);
	return 0;
bad:
	DDSS_ERR("DDSS_COORDINATOR=%s: expected etcd://HOST:PORT[,HOST:PORT...]/NAME (NAME of "
		 "letters, digits, '-', '_' or '.')", url);
	return -EINVAL;
}

/* A new incarnation in slot @s of the view, whose old one is dead here (mu held): let it
 * in once the old one is cut (net/readmit.c). */
static void admit_locked(struct ddss_coord *c, const struct ddss_view_member *m,
			 struct ddss_admit *admit)
{
	struct ddss_tp_node *node;
	uint32_t n;
	int r = ddss_nodes_parse(m->addr, &node, &n);

	if (r || n != 1) {
		DDSS_ERR("coordinator mode: slot %" PRIu32 " (incarnation %" PRId64 ") published "
			 "'%s', not HOST:PORT: it stays refused here", m->slot, m->incarnation,
			 m->addr);
		if (!r)
			free(node);
		return;
	}
	if (c->left_view[m->slot])
		DDSS_WARN("rank %" PRIu32 " is taken over by a new process (incarnation %" PRId64
			  ", %s)", m->slot, m->incarnation, m->addr);
	else /* a free slot: the group grows */
		DDSS_INFO("rank %" PRIu32 " joins the group (incarnation %" PRId64 ", %s)",
			  m->slot, m->incarnation, m->addr);
	c->incarnation[m->slot] = m->incarnation;
	admit->slot = m->slot;
	admit->incarnation = (uint64_t)m->incarnation;
	admit->generation = m->generation;
	admit->node = *node;
	free(node);
}

/*
 * Apply view @v (mu held): start members that left it are dead, for every rank alike; a
 * dead or free slot that a new process took is let in once its old one is cut. The slots
 * to declare dead go to @gone, those to let in to @admit (room for size each).
 */
static void apply_view_locked(struct ddss_coord *c, const struct ddss_view *v, uint32_t *gone,
			      size_t *ngone, struct ddss_admit *admit, size_t *nadmit)
{
	/* Past the final barrier the others leave too: that is the end, not a death. */
	bool leaving = c->closed || (c->net && __atomic_load_n(&c->net->leaving, __ATOMIC_ACQUIRE));

	for (uint32_t s = 1; c->started && s <= c->size; s++) {
		const struct ddss_view_member *m = ddss_view_find(v, s);

		if (s == c->self || c->incarnation[s] <= 0 ||
		    (m && m->incarnation == c->incarnation[s]))
			continue;
		if (leaving) {
			DDSS_INFO("rank %" PRIu32 " left the group (view %" PRId64 ")", s,
				  v->number);
			c->incarnation[s] = 0;
			continue;
		}
		DDSS_WARN("rank %" PRIu32 " (incarnation %" PRId64 ") left the view %" PRId64
			  ": dead", s, c->incarnation[s], v->number);
		c->incarnation[s] = -1;
		c->left_view[s] = v->number;
		c->left_ns[s] = ddss_now_ns();
		if (gone)
			gone[(*ngone)++] = s;
		else
			DDSS_ERR("out of memory: rank %" PRIu32 " left the view but is not declared "
				 "dead here", s);
	}
	/* A dead or free slot taken by a new process: it is let in after the old one is cut. */
	for (uint32_t s = 1; c->started && c->net && !leaving && admit && s <= c->size; s++) {
		const struct ddss_view_member *m = ddss_view_find(v, s);

		if (s != c->self && m && c->incarnation[s] < 0) {
			admit_locked(c, m, &admit[*nadmit]);
			*nadmit += admit[*nadmit].slot != 0;
		}
	}
}

/* Outside mu: what apply_view_locked asked for. Deaths first: a slot's old incarnation is
 * always cut before its new one is let in. */
static void apply_view_done(struct ddss_net *net, uint32_t *gone, size_t ngone,
			    struct ddss_admit *admit, size_t nadmit)
{
	for (size_t i = 0; net && i < ngone; i++)
		ddss_net_declare_dead(net, gone[i]);
	for (size_t i = 0; net && i < nadmit; i++)
		ddss_net_readmit(net, admit[i].slot, &admit[i].node, admit[i].incarnation,
				 admit[i].generation);
	free(gone);
	free(admit);
}

static void on_view(void *arg, const struct ddss_view *v)
{
	struct ddss_coord *c = arg;
	struct ddss_admit *admit;
	struct ddss_net *net;
	size_t ngone = 0, nadmit = 0;
	uint32_t *gone;

	pthread_mutex_lock(&c->mu);
	c->view_count = v->count;
	gone = calloc(c->size + 1, sizeof(*gone));
	admit = calloc(c->size + 1, sizeof(*admit));
	apply_view_locked(c, v, gone, &ngone, admit, &nadmit);
	net = c->net;
	c->net_users += net != NULL;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	apply_view_done(net, gone, ngone, admit, nadmit);
	if (net) {
		pthread_mutex_lock(&c->mu);
		c->net_users--;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
}

/* Our own address: DDSS_LISTEN, with the port of DDSS_LISTEN_FD or of a socket we bind. */
static int listen_addr(struct ddss_net_env *env, char *addr, size_t len)
{
	const char *s = getenv("DDSS_LISTEN");
	struct ddss_tp_node *node;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_PASSIVE };
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	uint32_t n;
	char port[8];
	int fd, r;

	if (!s || !*s) {
		DDSS_ERR("coordinator mode: set DDSS_LISTEN=HOST:PORT, the address this process "
			 "serves on and publishes (port 0: any free one)");
		return -EINVAL;
	}
	/* Port 0 is ours to resolve; the node parser wants a real one. */
	{
		size_t slen = strlen(s);
		char tmp[DDSS_MEMBER_ADDR_MAX];

		if (slen >= sizeof(tmp) - 1) {
			DDSS_ERR("DDSS_LISTEN is too long");
			return -EINVAL;
		}
		strcpy(tmp, s);
		if (slen > 2 && !strcmp(tmp + slen - 2, ":0"))
			strcpy(tmp + slen - 2, ":1");
		r = ddss_nodes_parse(tmp, &node, &n);
		if (r || n != 1) {
			if (!r)
				free(node);
			DDSS_ERR("DDSS_LISTEN=%s: expected one HOST:PORT", s);
			return -EINVAL;
		}
		if (slen > 2 && !strcmp(s + slen - 2, ":0"))
			node->port = 0;
	}
	if (env->listen_fd >= 0 || node->port) {
		snprintf(addr, len, "%s", s);
		free(node);
		return 0;
	}
	/* Port 0: bind it here and hand the socket to the transport (tcp serves on it). */
	snprintf(port, sizeof(port), "0");
	r = getaddrinfo(node->host, port, &hints, &ai);
	if (r) {
		DDSS_ERR("DDSS_LISTEN=%s: %s", s, gai_strerror(r));
		free(node);
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		r = -errno;
		DDSS_ERR("DDSS_LISTEN=%s: cannot listen: %s", s, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		free(node);
		return r;
	}
	freeaddrinfo(ai);
	env->listen_fd = fd;
	snprintf(addr, len, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", node->host,
		 ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
					    ntohs(((struct sockaddr_in *)&ss)->sin_port));
	free(node);
	return 0;
}

/* Wait on c->cv (bounded) for the next view, or @ms at most. */
static void wait_view(struct ddss_coord *c, int ms)
{
	struct timespec ts;
	int64_t ns;

	clock_gettime(CLOCK_REALTIME, &ts);
	ns = ts.tv_nsec + (int64_t)ms * 1000000;
	ts.tv_sec += ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	pthread_mutex_lock(&c->mu);
	pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	pthread_mutex_unlock(&c->mu);
}

/*
 * Wait (bounded) until this process knows its part: a process joining a running group
 * (*@running true: another member serves), or a founder of the group (on its start list:
 * *@founders_p gets the list, *@running false). Serving is asked first: once the group
 * serves, its list is history (its founders may all be gone), and no founder can serve
 * before every founder has passed the start barrier. A process that joined while the
 * group was starting but is not on the list waits for the group to serve.
 */
static int wait_start(struct ddss_coord *c, uint32_t size, int timeout_ms, bool *running,
		      struct ddss_member_founder **founders_p, uint32_t *nf_p)
{
	int64_t deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000, rev = 0;
	struct ddss_member_founder *f = calloc(c->size, sizeof(*f));
	bool said = false, serving = false;
	uint32_t nf = 0;
	int r;

	if (!f)
		return -ENOMEM;
	for (;;) {
		r = ddss_member_group_serving(c->member, &serving);
		if (!r && serving) {
			*running = true;
			free(f);
			return 0;
		}
		if (!r)
			r = ddss_member_start(c->member, size, f, &nf, &rev);
		for (uint32_t i = 0; !r && i < nf; i++) {
			if (f[i].slot != c->self ||
			    f[i].incarnation != ddss_member_incarnation(c->member))
				continue;
			/* The list is fresh from etcd; our view must have caught up with it, or
			 * a founder whose key our watch has not delivered yet would start
			 * refused here. */
			if (ddss_member_seen_rev(c->member) < rev) {
				r = -EAGAIN;
				break;
			}
			*running = false;
			*founders_p = f;
			*nf_p = nf;
			return 0;
		}
		if (!r && !said) {
			DDSS_INFO("coordinator mode: the group started without this process; it "
				  "joins once the group serves");
			said = true;
		}
		if (r && r != -EAGAIN && r != -ETIMEDOUT && r != -ECONNREFUSED)
			break;
		if (ddss_now_ns() >= deadline) {
			pthread_mutex_lock(&c->mu);
			DDSS_ERR("coordinator mode: the group did not form: %zu of %" PRIu32
				 " members joined within %d ms", c->view_count, size, timeout_ms);
			pthread_mutex_unlock(&c->mu);
			r = -ETIMEDOUT;
			break;
		}
		wait_view(c, 20); /* a view change, or ask etcd again: the list has no watch */
	}
	free(f);
	return r;
}

/*
 * The view this process starts from: the nodes, and each slot's incarnation. A founder
 * takes the founders that are still members (@f, @nf); a process joining a running group
 * takes every member (@f NULL). Every other slot is free, or its member is not ours to
 * count: it starts refused (incarnation -1 here, 0 in @env), and a process that takes it
 * later is let in like a replacement.
 */
static int take_view(struct ddss_coord *c, struct ddss_net_env *env,
		     const struct ddss_member_founder *f, uint32_t nf)
{
	struct ddss_view v;
	int r = ddss_member_view(c->member, &v);

	if (r)
		return r;
	env->nodes = calloc(c->size, sizeof(*env->nodes));
	env->incarnations = calloc(c->size + 1, sizeof(*env->incarnations));
	env->generations = calloc(c->size + 1, sizeof(*env->generations));
	if (!env->nodes || !env->incarnations || !env->generations) {
		ddss_view_free(&v);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->mu);
	for (uint32_t s = 1; s <= c->size; s++)
		c->incarnation[s] = -1;
	for (size_t i = 0; i < v.count && !r; i++) {
		const struct ddss_view_member *m = &v.members[i];
		struct ddss_tp_node *node;
		bool founder = !f;
		uint32_t n;

		for (uint32_t j = 0; j < nf && !founder; j++)
			founder = f[j].slot == m->slot && f[j].incarnation == m->incarnation;
		if (!founder)
			continue;
		if (m->slot > c->size || ddss_nodes_parse(m->addr, &node, &n) || n != 1) {
			DDSS_ERR("coordinator mode: slot %" PRIu32 " published '%s', not HOST:PORT",
				 m->slot, m->addr);
			r = -EPROTO;
			break;
		}
		env->nodes[m->slot - 1] = *node;
		free(node);
		c->incarnation[m->slot] = m->incarnation;
		env->incarnations[m->slot] = (uint64_t)m->incarnation;
		env->generations[m->slot] = m->generation;
	}
	if (!r && c->incarnation[1] <= 0 && f) {
		/* Rank 1 runs the barriers (net/barrier.c): a group cannot start without it. */
		DDSS_ERR("coordinator mode: slot 1 is not among the group's founders: it runs the "
			 "start barrier; start the group with slot 1 (DDSS_RANK=1 or unset)");
		r = -EHOSTDOWN;
	}
	c->started = !r;
	pthread_mutex_unlock(&c->mu);
	ddss_view_free(&v);
	return r;
}

static struct ddss_coord *coord_new(void)
{
	struct ddss_coord *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->refs = 1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	return c;
}

/* The group's slots, once joined: the group's maximum size, which its first member set. */
static int coord_size(struct ddss_coord *c, uint32_t size)
{
	int r = 0;

	pthread_mutex_lock(&c->mu);
	if (!(c->incarnation = calloc(size + 1, sizeof(*c->incarnation))) ||
	    !(c->reported = calloc(size + 1, sizeof(*c->reported))) ||
	    !(c->answer = calloc(size + 1, 1)) ||
	    !(c->left_view = calloc(size + 1, sizeof(*c->left_view))) ||
	    !(c->left_ns = calloc(size + 1, sizeof(*c->left_ns))))
		r = -ENOMEM; /* coord_free frees what there is */
	else
		c->size = size;
	pthread_mutex_unlock(&c->mu);
	return r;
}

static void coord_free(struct ddss_coord *c)
{
	pthread_mutex_lock(&c->mu);
	c->closed = true;
	while (c->reporting) /* they use the member */
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	ddss_member_leave(c->member); /* stops the view's thread first */
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->incarnation);
	free(c->reported);
	free(c->answer);
	free(c->left_view);
	free(c->left_ns);
	free(c);
}

/*
 * etcd may not serve yet (starting, electing a leader), and the slot asked for may still
 * be held by a process that died (its lease has not expired yet): ask again until the
 * connect timeout.
 */
static int join_retrying(const struct ddss_member_cfg *cfg, int timeout_ms,
			 struct ddss_member **m_p)
{
	struct timespec now, pause = { 0, 250 * 1000000 };
	bool said = false;
	int64_t deadline;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &now);
	deadline = now.tv_sec * 1000LL + now.tv_nsec / 1000000 + timeout_ms;
	for (;;) {
		r = ddss_member_join(cfg, m_p);
		if (r == -EBUSY && !said) {
			DDSS_WARN("coordinator mode: slot %" PRIu32 " has a member; waiting up to %d "
				  "ms for it to leave (a dead one's lease expires)", cfg->slot,
				  timeout_ms);
			said = true;
		}
		if (r != -ECONNREFUSED && r != -EAGAIN && r != -ETIMEDOUT && r != -EBUSY)
			return r;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec * 1000LL + now.tv_nsec / 1000000 >= deadline)
			return r;
		nanosleep(&pause, NULL); /* a bounded retry: nothing to wait on but etcd */
	}
}

int ddss_coord_env_load(struct ddss_net_env *env)
{
	char prefix[COORD_NAME_MAX + 16], addr[DDSS_MEMBER_ADDR_MAX], *endpoints = NULL;
	struct ddss_member_cfg cfg = { 0 };
	struct ddss_member_founder *founders = NULL;
	struct ddss_coord *c;
	long size, max, want;
	uint32_t nf = 0;
	int r;

	if (getenv("DDSS_NODES") || getenv("DDSS_NODES_FILE")) {
		DDSS_ERR("coordinator mode: DDSS_NODES and DDSS_NODES_FILE must not be set (the "
			 "view gives the nodes)");
		return -EINVAL;
	}
	r = ddss_env_long("DDSS_SIZE", 0, DDSS_COORD_SLOTS_MAX, 0, &size);
	if (!r && size == 0) {
		DDSS_ERR("coordinator mode: set DDSS_SIZE, the group's size at its start (1..%d)",
			 DDSS_COORD_SLOTS_MAX);
		r = -EINVAL;
	}
	/* Slots to grow into; the group's first member sets them, later ones read them. */
	if (!r)
		r = ddss_env_long("DDSS_MAX_SIZE", 0, DDSS_COORD_SLOTS_MAX, size, &max);
	if (!r && max < size) {
		DDSS_ERR("coordinator mode: DDSS_MAX_SIZE=%ld is below DDSS_SIZE=%ld", max, size);
		r = -EINVAL;
	}
	/* The slot to take; unset: the first free one. Checked against the group's slots at
	 * the join (a process that joins a grown group need not know its size). */
	if (!r)
		r = ddss_env_long("DDSS_RANK", 0, DDSS_COORD_SLOTS_MAX, 0, &want);
	if (r)
		return r;
	r = parse_url(getenv("DDSS_COORDINATOR"), &endpoints, prefix, sizeof(prefix));
	if (r)
		return r;
	r = listen_addr(env, addr, sizeof(addr));
	if (r)
		goto out;
	c = coord_new();
	if (!c) {
		r = -ENOMEM;
		goto out;
	}
	cfg.endpoints = endpoints;
	cfg.prefix = prefix;
	cfg.max = (uint32_t)max;
	cfg.ttl_ms = env->peer_timeout_ms > 0 ? env->peer_timeout_ms : COORD_TTL_DEFAULT_MS;
	if (cfg.ttl_ms < COORD_TTL_MIN_MS)
		cfg.ttl_ms = COORD_TTL_MIN_MS;
	c->ttl_ns = (int64_t)((cfg.ttl_ms + 999) / 1000) * 1000000000;
	cfg.addr = addr;
	cfg.slot = (uint32_t)want;
	cfg.on_view = on_view;
	cfg.arg = c;
	r = join_retrying(&cfg, env->connect_timeout_ms, &c->member);
	if (r) {
		DDSS_ERR("coordinator mode: cannot join %s through %s: %s", prefix, endpoints,
			 strerror(-r));
		goto err_coord;
	}
	c->self = ddss_member_slot(c->member);
	/* The group's size, not ours: a process that joins later need not know it. */
	r = coord_size(c, ddss_member_max(c->member));
	if (!r && (uint32_t)size > c->size) {
		DDSS_ERR("coordinator mode: DDSS_SIZE=%ld, but the group has %" PRIu32 " slots",
			 size, c->size);
		r = -EINVAL;
	}
	if (!r)
		r = wait_start(c, (uint32_t)size, env->connect_timeout_ms, &env->running,
			       &founders, &nf);
	if (!r)
		r = take_view(c, env, founders, nf);
	free(founders);
	if (r)
		goto err_member;
	if (env->running)
		DDSS_INFO("coordinator mode: the group is running; this process joins it as rank %"
			  PRIu32, c->self);
	env->rank = c->self;
	env->size = c->size;
	if (!env->group) { /* every member of the group derives the same one */
		unsigned char h[8];

		crypto_generichash(h, sizeof(h), (const unsigned char *)prefix, strlen(prefix),
				   NULL, 0);
		memcpy(&env->group, h, sizeof(env->group));
	}
	env->coord = c;
	free(endpoints);
	return 0;
err_member:
	free(env->nodes);
	env->nodes = NULL;
	free(env->incarnations);
	env->incarnations = NULL;
	free(env->generations);
	env->generations = NULL;
err_coord:
	coord_free(c); /* without a member too: nothing was reported yet */
out:
	free(endpoints);
	return r;
}

struct ddss_coord *ddss_coord_ref(struct ddss_coord *c)
{
	if (c)
		__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void ddss_coord_unref(struct ddss_coord *c)
{
	if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		coord_free(c);
}

/* Receive thread: a member asks whether we reach etcd, or answers that question. */
static void on_coord_msg(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_coord *c = arg;
	struct ddss_net *net;
	uint8_t msg[12];
	uint32_t kind, epoch, reaches, down, up = 0, slow = 0, members = 0;

	if (len != sizeof(msg) || from < 1 || from > c->size) {
		DDSS_WARN("coordinator mode: malformed message from rank %" PRIu32 " dropped", from);
		return;
	}
	memcpy(msg, buf, sizeof(msg));
	kind = wire_get32(msg);
	epoch = wire_get32(msg + 4);
	reaches = wire_get32(msg + 8);
	if (kind == COORD_ASK) {
		pthread_mutex_lock(&c->mu);
		net = c->net;
		pthread_mutex_unlock(&c->mu);
		wire_put32(msg, COORD_ANSWER3);
		wire_put32(msg + 8, ddss_member_etcd_state(c->member) == 0 ? WIRE_REACHED :
				    ddss_member_etcd_lost(c->member) ? WIRE_LOST :
								       WIRE_NO_ANSWER);
		if (net)
			ddss_net_send(net, from, DDSS_MSG_COORD, msg, sizeof(msg));
		return;
	}
	if (kind == COORD_ANSWER)
		reaches = reaches ? WIRE_REACHED : WIRE_NO_ANSWER;
	else if (kind != COORD_ANSWER3)
		return;
	pthread_mutex_lock(&c->mu);
	if (epoch != c->ask_epoch || !epoch) {
		pthread_mutex_unlock(&c->mu);
		return; /* an old question's */
	}
	c->answer[from] = reaches == WIRE_REACHED ? ANSWER_UP :
			  reaches == WIRE_LOST ? ANSWER_DOWN : ANSWER_SLOW;
	/* We count ourselves, if what we see says as much. */
	down = ddss_member_etcd_lost(c->member);
	slow = !down;
	for (uint32_t s = 1; s <= c->size; s++) {
		down += c->answer[s] == ANSWER_DOWN;
		up += c->answer[s] == ANSWER_UP;
		slow += c->answer[s] == ANSWER_SLOW;
		members += s == c->self || c->incarnation[s] > 0; /* not the free slots */
	}
	if (up) {
		/* etcd answers someone: we are the one cut off, and stop at our deadline. */
		if (!c->said_alone)
			DDSS_ERR("coordinator mode: etcd answers rank %" PRIu32 " but not this rank: "
				 "it stops acting at its lease deadline", from);
		c->said_alone = true;
	} else if (2 * down > members) {
		/*
		 * A majority of the group sees etcd without a leader (refused everywhere, or
		 * no quorum): no view can change while that lasts, and the leader etcd elects
		 * when it is back gives every lease a full TTL again. So serve on for half a
		 * TTL more, and ask again before it ends.
		 */
		if (ddss_member_extend(c->member, ddss_now_ns() + c->ttl_ns / 2) == 0 &&
		    !c->in_outage) {
			c->in_outage = true;
			DDSS_WARN("coordinator mode: etcd is unreachable for %" PRIu32 " of %" PRIu32
				  " ranks: serving data and locks on; membership changes are "
				  "refused until it is back", down, members);
		}
	} else if (slow && !c->said_slow) {
		/*
		 * etcd does not answer in time (stalled, overloaded, or cut off from us all):
		 * its leader may be running all the same and expire our leases on its own
		 * clock, so serving on past the deadline could let a rank be granted what we
		 * hold. Stop at it (docs/failure.md, "A slow etcd").
		 */
		c->said_slow = true;
		DDSS_ERR("coordinator mode: etcd does not answer %" PRIu32 " of %" PRIu32 " ranks "
			 "in time (it may be alive and expire their leases): this rank stops "
			 "acting at its lease deadline", slow, members);
	}
	pthread_mutex_unlock(&c->mu);
}

void ddss_coord_tick(struct ddss_coord *c, struct ddss_net *net)
{
	uint8_t msg[12];
	uint32_t epoch;

	if (ddss_member_etcd_state(c->member) == 0) {
		pthread_mutex_lock(&c->mu);
		if (c->in_outage)
			DDSS_WARN("coordinator mode: etcd answers again; membership changes work "
				  "again");
		c->in_outage = c->said_alone = c->said_slow = false;
		c->ask_epoch = 0;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	/* Renewals fail: before the deadline comes near, ask the others whether they reach it. */
	if (ddss_member_time_left(c->member) > c->ttl_ns / 2 ||
	    ddss_member_acting(c->member))
		return;
	pthread_mutex_lock(&c->mu);
	epoch = ++c->ask_epoch ? c->ask_epoch : ++c->ask_epoch;
	memset(c->answer, 0, c->size + 1);
	pthread_mutex_unlock(&c->mu);
	wire_put32(msg, COORD_ASK);
	wire_put32(msg + 4, epoch);
	wire_put32(msg + 8, 0);
	for (uint32_t r = 1; r <= c->size; r++) {
		bool up;

		pthread_mutex_lock(&net->mu);
		up = net->peer_state[r] == DDSS_TP_PEER_UP;
		pthread_mutex_unlock(&net->mu);
		if (r != c->self && up) /* not under mu: a send may connect (on_peer takes it) */
			ddss_net_send(net, r, DDSS_MSG_COORD, msg, sizeof(msg));
	}
}

void ddss_coord_attach(struct ddss_coord *c, struct ddss_net *net)
{
	struct ddss_admit *admit;
	size_t n = 0, nadmit = 0;
	struct ddss_view v;
	uint32_t *gone;
	bool have_view;

	if (ddss_net_on_msg(net, DDSS_MSG_COORD, on_coord_msg, c))
		DDSS_WARN("coordinator mode: cannot take its messages; an etcd outage stops this "
			  "rank at its lease deadline");

	/* The net first: from here on the view's thread declares and admits itself, so the
	 * view read below is at least as new as any it applied without us. */
	pthread_mutex_lock(&c->mu);
	c->net = net;
	pthread_mutex_unlock(&c->mu);
	have_view = ddss_member_view(c->member, &v) == 0;
	pthread_mutex_lock(&c->mu);
	gone = calloc(c->size + 1, sizeof(*gone));
	admit = calloc(c->size + 1, sizeof(*admit));
	/* Free slots, and deaths seen while the net was opening: refused from the start. */
	for (uint32_t s = 1; gone && s <= c->size; s++)
		if (c->incarnation[s] < 0)
			gone[n++] = s; /* again if the view's thread did: a refusal is idempotent */
	/* Members this process does not count yet (joined while the group started, or
	 * since we read the view): let in, like a replacement. */
	if (have_view)
		apply_view_locked(c, &v, gone, &n, admit, &nadmit);
	pthread_mutex_unlock(&c->mu);
	apply_view_done(net, gone, n, admit, nadmit);
	if (have_view)
		ddss_view_free(&v);
}

bool ddss_coord_in_view(struct ddss_coord *c, uint32_t rank)
{
	bool in;

	if (rank < 1 || rank > c->size)
		return false;
	pthread_mutex_lock(&c->mu);
	in = rank == c->self || c->incarnation[rank] > 0;
	pthread_mutex_unlock(&c->mu);
	return in;
}

void ddss_coord_detach(struct ddss_coord *c)
{
	pthread_mutex_lock(&c->mu);
	c->net = NULL;
	c->closed = true;
	/* A view being applied took the net before this: the caller frees it next. */
	while (c->net_users)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

struct report {
	struct ddss_coord *c;
	uint32_t rank;
	int64_t inc, silent_ms;
};

/*
 * A thread of its own per report: an etcd member that does not answer costs the request
 * timeout, and the heartbeat thread must not miss its rounds meanwhile. Reports are rare
 * (one per silent incarnation).
 */
static void *report_main(void *arg)
{
	struct report *rep = arg;
	struct ddss_coord *c = rep->c;
	int r;

	/*
	 * Two members cut off from each other only report each other at about the same time;
	 * the first report stands (ddss_member_report). Let the lower slot be first: a higher
	 * one waits a quarter of the TTL, so the outcome does not depend on whose heartbeat
	 * thread woke first. (A rank that really died leaves at its lease expiry anyway.)
	 */
	if (c->self > rep->rank) {
		struct timespec pause = { (time_t)(c->ttl_ns / 4 / 1000000000),
					  (long)(c->ttl_ns / 4 % 1000000000) };

		nanosleep(&pause, NULL);
	}
	r = ddss_member_report(c->member, rep->rank, rep->inc);

	if (r == -EAGAIN || r == -ECONNREFUSED || r == -ETIMEDOUT) {
		/* etcd unreachable: the next heartbeat round asks again */
		pthread_mutex_lock(&c->mu);
		if (c->reported[rep->rank] == rep->inc)
			c->reported[rep->rank] = 0;
		pthread_mutex_unlock(&c->mu);
	} else if (r && r != -ESTALE && r != -EPERM) { /* -EPERM: we were reported first */
		DDSS_WARN("coordinator mode: cannot report rank %" PRIu32 " silent: %s; it leaves "
			  "the view when its lease expires", rep->rank, strerror(-r));
	} else if (!r) {
		DDSS_WARN("rank %" PRIu32 " silent for %lld ms: reported; it is dead when it "
			  "leaves the view", rep->rank, (long long)rep->silent_ms);
	}
	free(rep);
	pthread_mutex_lock(&c->mu);
	c->reporting--;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

void ddss_coord_report(struct ddss_coord *c, uint32_t rank, int64_t silent_ms)
{
	struct report *rep;
	pthread_attr_t a;
	pthread_t t;
	int64_t inc;

	if (rank < 1 || rank > c->size)
		return;
	pthread_mutex_lock(&c->mu);
	inc = c->incarnation[rank];
	if (inc <= 0 || c->reported[rank] == inc || c->closed) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->reported[rank] = inc;
	c->reporting++;
	pthread_mutex_unlock(&c->mu);
	rep = malloc(sizeof(*rep));
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (rep) {
		*rep = (struct report){ c, rank, inc, silent_ms };
		if (pthread_create(&t, &a, report_main, rep) == 0) {
			pthread_attr_destroy(&a);
			return;
		}
		free(rep);
	}
	pthread_attr_destroy(&a);
	pthread_mutex_lock(&c->mu);
	c->reported[rank] = 0; /* the next round tries again */
	c->reporting--;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void ddss_coord_unreported(struct ddss_coord *c, uint32_t rank, unsigned heard, unsigned others)
{
	if (rank < 1 || rank > c->size)
		return;
	pthread_mutex_lock(&c->mu);
	if (c->reported[rank] != 0) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->reported[rank] = -1; /* said once; a report later may still go */
	pthread_mutex_unlock(&c->mu);
	DDSS_WARN("rank %" PRIu32 " is silent but not reported: this rank hears only %u of "
		  "%u others (its lease settles it)", rank, heard, others);
}

int ddss_coord_set_serving(struct ddss_coord *c)
{
	int r = ddss_member_set_serving(c->member);

	if (r)
		DDSS_WARN("coordinator mode: cannot say this rank serves: %s (a process joining "
			  "now would wait for a start that has passed)", strerror(-r));
	return r;
}

int ddss_coord_acting(struct ddss_coord *c)
{
	return c ? ddss_member_acting(c->member) : 0;
}

struct ddss_member *ddss_coord_member(struct ddss_coord *c)
{
	return c ? c->member : NULL;
}

int ddss_coord_etcd_state(struct ddss_coord *c)
{
	return ddss_member_etcd_state(c->member);
}

int ddss_coord_left(struct ddss_coord *c, uint32_t rank, int64_t *view_p, int64_t *when_ns_p)
{
	int r = -ENOENT;

	if (rank < 1 || rank > c->size)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	if (c->left_view[rank]) {
		*view_p = c->left_view[rank];
		*when_ns_p = c->left_ns[rank];
		r = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return r;
}
