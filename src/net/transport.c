/*
 * Provider registry, the -EOPNOTSUPP stubs that fill a provider's gaps, the parts of a
 * transport every provider shares, and blocking helpers built on post + wait.
 */
#include "net/transport.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DDSS_HAVE_VERBS
#include "net/verbs/verbs.h"
#endif

extern const struct ddss_tp_ops ddss_tcp_ops;

int64_t ddss_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct timespec ddss_time_after(clockid_t clock, int64_t ns)
{
	struct timespec t;

	clock_gettime(clock, &t);
	t.tv_sec += ns / 1000000000;
	t.tv_nsec += ns % 1000000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}

/* Stubs: one per signature, so callers never test for NULL. */
static int stub_start(struct ddss_tp *tp) { return -EOPNOTSUPP; }
static int stub_mem_register(struct ddss_tp *tp, void *a, size_t l, bool e, struct ddss_tp_mr **m)
{ return -EOPNOTSUPP; }
static int stub_mem_deregister(struct ddss_tp *tp, struct ddss_tp_mr *m) { return -EOPNOTSUPP; }
static int stub_rank(struct ddss_tp *tp, uint32_t r) { return -EOPNOTSUPP; }
static int stub_peer_info(struct ddss_tp *tp, uint32_t r, struct ddss_tp_peer_info *i)
{ return -EOPNOTSUPP; }
static int stub_read(struct ddss_tp *tp, uint32_t p, uint64_t o, void *l, size_t n,
		     struct ddss_tp_req *q) { return -EOPNOTSUPP; }
static int stub_write(struct ddss_tp *tp, uint32_t p, uint64_t o, const void *l, size_t n,
		      struct ddss_tp_req *q) { return -EOPNOTSUPP; }
/* Without held doorbells or fences, post at once: for providers that run all in order. */
static int post_ex_now(struct ddss_tp *tp, enum ddss_tp_op op, uint32_t p, uint64_t o, void *l,
		       size_t n, uint64_t a, uint64_t b, unsigned flags, struct ddss_tp_req *q)
{
	switch (op) {
	case DDSS_TP_OP_READ:
		return tp->ops->post_read(tp, p, o, l, n, q);
	case DDSS_TP_OP_WRITE:
		return tp->ops->post_write(tp, p, o, l, n, q);
	case DDSS_TP_OP_CAS:
		return tp->ops->post_cas(tp, p, o, a, b, q);
	case DDSS_TP_OP_FADD:
		return tp->ops->post_fadd(tp, p, o, a, q);
	}
	return -EINVAL;
}
static int stub_cas(struct ddss_tp *tp, uint32_t p, uint64_t o, uint64_t c, uint64_t s,
		    struct ddss_tp_req *q) { return -EOPNOTSUPP; }
static int stub_fadd(struct ddss_tp *tp, uint32_t p, uint64_t o, uint64_t a, struct ddss_tp_req *q)
{ return -EOPNOTSUPP; }
static int stub_notify_many(struct ddss_tp *tp, uint32_t p, const uint32_t *v, unsigned n)
{ return -EOPNOTSUPP; }
static int stub_msg(struct ddss_tp *tp, uint32_t p, uint16_t t, const void *b, size_t l)
{ return -EOPNOTSUPP; }
static int stub_test(struct ddss_tp *tp, struct ddss_tp_req *q) { return -EOPNOTSUPP; }
static int stub_wait(struct ddss_tp *tp, struct ddss_tp_req *q, int t) { return -EOPNOTSUPP; }
static int stub_thread_fds(struct ddss_tp *tp, int *f, size_t m) { return -EOPNOTSUPP; }
static int stub_readmit(struct ddss_tp *tp, uint32_t r, const struct ddss_tp_node *n)
{ return -EOPNOTSUPP; }

#define FILL(field, stub) do { if (!o->field) o->field = stub; } while (0)
static void fill_stubs(struct ddss_tp_ops *o)
{
	FILL(start, stub_start);
	FILL(mem_register, stub_mem_register);
	FILL(mem_deregister, stub_mem_deregister);
	FILL(peer_connect, stub_rank);
	FILL(peer_disconnect, stub_rank);
	FILL(peer_info, stub_peer_info);
	FILL(peer_readmit, stub_readmit);
	FILL(post_read, stub_read);
	FILL(post_write, stub_write);
	FILL(post_ex, post_ex_now);
	FILL(post_cas, stub_cas);
	FILL(post_fadd, stub_fadd);
	FILL(notify_many, stub_notify_many);
	FILL(msg_send, stub_msg);
	FILL(test, stub_test);
	FILL(wait, stub_wait);
	FILL(thread_fds, stub_thread_fds);
}
#undef FILL

/* Each provider's table with its gaps filled, built once. */
static struct ddss_tp_ops filled_tcp;
#ifdef DDSS_HAVE_VERBS
static struct ddss_tp_ops filled_verbs;
#endif
static pthread_once_t fill_once = PTHREAD_ONCE_INIT;

static void fill_tables(void)
{
	filled_tcp = ddss_tcp_ops;
	fill_stubs(&filled_tcp);
#ifdef DDSS_HAVE_VERBS
	filled_verbs = ddss_verbs_ops;
	fill_stubs(&filled_verbs);
#endif
}

const struct ddss_tp_ops *ddss_tp_find(const char *name)
{
	pthread_once(&fill_once, fill_tables);
	if (!name)
		return NULL;
	if (!strcmp(name, "tcp"))
		return &filled_tcp;
#ifdef DDSS_HAVE_VERBS
	if (!strcmp(name, "verbs"))
		return &filled_verbs;
#endif
	return NULL;
}

/* The automatic choice: verbs when some device has an active port, else tcp. */
static const char *auto_provider(void)
{
#ifdef DDSS_HAVE_VERBS
	if (ddss_verbs_usable())
		return "verbs";
	DDSS_INFO("transport auto: no RDMA device with an active port; using tcp");
#endif
	return "tcp";
}

int ddss_tp_open(const char *provider, const struct ddss_tp_config *cfg, struct ddss_tp **tp_p)
{
	const struct ddss_tp_ops *ops;
	const char *name = provider;
	bool automatic = false;
	int r;

	if (!name || !*name)
		name = getenv("DDSS_TRANSPORT");
	if (!name || !*name || !strcmp(name, "auto")) {
		automatic = true;
		name = auto_provider();
	}
	ops = ddss_tp_find(name);
	if (!ops) {
		DDSS_ERR("transport '%s' is not available in this build", name);
		return -ENOENT;
	}
	r = ops->open(cfg, tp_p);
	if (r && automatic && strcmp(name, "tcp")) {
		/* The provider logged the details; this says what happens next. */
		DDSS_WARN("transport auto: %s cannot open (%s); falling back to tcp", name,
			  strerror(-r));
		name = "tcp";
		ops = ddss_tp_find(name);
		r = ops->open(cfg, tp_p);
	}
	if (!r && cfg->tcp_protect != DDSS_TP_PROTECT_OFF && strcmp(name, "tcp"))
		DDSS_WARN("DDSS_TCP_PROTECT applies to tcp only: this rank's %s traffic is not "
			  "protected (use an encrypted fabric, docs/security.md)", name);
	if (r)
		return r;
	/* The provider's open set its own table; use the filled copy from now on. */
	(*tp_p)->ops = ops;
	(*tp_p)->chosen_auto = automatic && strcmp(name, "tcp");
	return 0;
}

/* Register the exposed pool and start; undo the registration if the start fails. */
static int start_one(struct ddss_tp *tp, void *pool, size_t len, struct ddss_tp_mr **mr_p)
{
	struct ddss_tp_mr *mr;
	int r = ddss_tp_mem_register(tp, pool, len, true, &mr);

	if (r)
		return r;
	r = ddss_tp_start(tp);
	if (r) {
		/* A provider may refuse to deregister its pool once started: close frees it. */
		ddss_tp_mem_deregister(tp, mr);
		return r;
	}
	*mr_p = mr;
	return 0;
}

int ddss_tp_start_pool(struct ddss_tp **tp_p, void *pool, size_t len, struct ddss_tp_mr **mr_p)
{
	struct ddss_tp *tp = *tp_p, *tcp;
	struct ddss_tp_config cfg;
	struct ddss_auth_key auth = { 0 };
	struct ddss_tp_node *nodes;
	int r = start_one(tp, pool, len, mr_p);

	if (!r || !tp->chosen_auto)
		return r;
	DDSS_WARN("transport auto: %s cannot start (%s); falling back to tcp", tp->ops->name,
		  strerror(-r));
	/* The configuration outlives the transport that owns its copy. */
	cfg = tp->cfg;
	nodes = malloc(cfg.size * sizeof(*nodes));
	if (!nodes)
		return r;
	memcpy(nodes, tp->nodes, cfg.size * sizeof(*nodes));
	cfg.nodes = nodes;
	if (cfg.auth) {
		ddss_auth_key_copy(&auth, cfg.auth);
		cfg.auth = &auth;
	}
	ddss_tp_close(tp);
	*tp_p = NULL;
	r = ddss_tp_open("tcp", &cfg, &tcp);
	free(nodes);
	ddss_auth_key_clear(&auth);
	if (r)
		return r;
	r = start_one(tcp, pool, len, mr_p);
	if (r) {
		ddss_tp_close(tcp);
		return r;
	}
	*tp_p = tcp;
	return 0;
}

int ddss_tp_init_common(struct ddss_tp *tp, const struct ddss_tp_ops *ops,
			const struct ddss_tp_config *cfg)
{
	if (!cfg || cfg->size == 0 || cfg->rank < 1 || cfg->rank > cfg->size || !cfg->nodes)
		return -EINVAL;
	tp->ops = ops;
	tp->cfg = *cfg;
	tp->nodes = calloc(cfg->size, sizeof(*tp->nodes));
	if (!tp->nodes)
		return -ENOMEM;
	memcpy(tp->nodes, cfg->nodes, cfg->size * sizeof(*tp->nodes));
	tp->cfg.nodes = tp->nodes;
	tp->refused = calloc(cfg->size + 1, 1);
	if (!tp->refused) {
		free(tp->nodes);
		tp->nodes = NULL;
		return -ENOMEM;
	}
	if (cfg->incarnations) {
		tp->incarnation = calloc(cfg->size + 1, sizeof(*tp->incarnation));
		tp->generation = calloc(cfg->size + 1, sizeof(*tp->generation));
		if (!tp->incarnation || !tp->generation) {
			free(tp->incarnation);
			free(tp->generation);
			tp->incarnation = NULL;
			tp->generation = NULL;
			free(tp->refused);
			free(tp->nodes);
			tp->refused = NULL;
			tp->nodes = NULL;
			return -ENOMEM;
		}
		memcpy(tp->incarnation, cfg->incarnations, (cfg->size + 1) * sizeof(uint64_t));
		if (cfg->generations)
			memcpy(tp->generation, cfg->generations, (cfg->size + 1) * sizeof(uint32_t));
	}
	/* tp->incarnation and tp->generation are the copies that change */
	tp->cfg.incarnations = NULL;
	tp->cfg.generations = NULL;
	tp->atomics = true; /* a provider without them says so in its open */
	if (tp->cfg.connect_timeout_ms <= 0)
		tp->cfg.connect_timeout_ms = 30000;
	tp->cfg.auth = NULL;
	if (cfg->auth && cfg->auth->on) {
		ddss_auth_key_copy(&tp->auth, cfg->auth);
		tp->cfg.auth = &tp->auth;
	}
	return 0;
}

unsigned long ddss_tp_handshakes_failed(const struct ddss_tp *tp)
{
	return __atomic_load_n(&tp->handshakes_failed, __ATOMIC_ACQUIRE);
}

void ddss_tp_handshake_failed(struct ddss_tp *tp)
{
	__atomic_fetch_add(&tp->handshakes_failed, 1, __ATOMIC_RELEASE);
}

void ddss_tp_fini_common(struct ddss_tp *tp)
{
	free(tp->nodes);
	tp->nodes = NULL;
	free(tp->refused);
	tp->refused = NULL;
	free(tp->incarnation);
	tp->incarnation = NULL;
	free(tp->generation);
	tp->generation = NULL;
	ddss_auth_key_clear(&tp->auth);
}

void ddss_tp_peer_changed(struct ddss_tp *tp, int *state_p, uint32_t rank,
			  enum ddss_tp_peer_state state)
{
	const struct ddss_tp_handlers *hd = &tp->cfg.handlers;
	int old;

	if (state == DDSS_TP_PEER_UP && ddss_tp_peer_refused(tp, rank))
		return; /* a handshake that raced with the refusal: it is closed right after */
	old = __atomic_exchange_n(state_p, (int)state, __ATOMIC_ACQ_REL);

	if (old != (int)state && hd->on_peer)
		hd->on_peer(hd->arg, rank, state);
}

void ddss_tp_peer_mark_refused(struct ddss_tp *tp, uint32_t rank)
{
	uint8_t none = 0;

	/* 0 -> marked only: a later mark must not take back a cut (DDSS_TP_REFUSED_CUT). */
	if (ddss_tp_valid_rank(tp, rank) && rank != tp->cfg.rank)
		__atomic_compare_exchange_n(&tp->refused[rank], &none, DDSS_TP_REFUSED_MARKED,
					    false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void ddss_tp_peer_refuse(struct ddss_tp *tp, uint32_t rank)
{
	uint8_t cutting = DDSS_TP_REFUSED_CUTTING;
	int r;

	if (!ddss_tp_valid_rank(tp, rank) || rank == tp->cfg.rank)
		return;
	/* Marked refused and "cutting" at once, then cut once the provider has closed both
	 * directions (verbs: its served QPs in the error state), so that nothing of it lands
	 * any more (ddss_tp_peer_cut); back to marked if it could not (also after an earlier
	 * cut: closing was asked for again, and failed). Readmission, the only way back to 0,
	 * runs on the same (heartbeat) thread. */
	__atomic_store_n(&tp->refused[rank], DDSS_TP_REFUSED_CUTTING, __ATOMIC_SEQ_CST);
	r = tp->ops->peer_disconnect(tp, rank);
	__atomic_compare_exchange_n(&tp->refused[rank], &cutting,
				    r == 0 ? DDSS_TP_REFUSED_CUT : DDSS_TP_REFUSED_MARKED, false,
				    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static int finish(struct ddss_tp *tp, struct ddss_tp_req *req, int r)
{
	if (r)
		return r;
	r = ddss_tp_wait(tp, req, DDSS_TP_TIMEOUT_DEFAULT);
	return r ? r : req->status;
}

/* The blocking helpers wait at once for what they post: DDSS_TP_WAITED. */
int ddss_tp_read(struct ddss_tp *tp, uint32_t peer, uint64_t off, void *local, size_t len)
{
	struct ddss_tp_req req;

	return finish(tp, &req, tp->ops->post_ex(tp, DDSS_TP_OP_READ, peer, off, local, len, 0, 0,
						 DDSS_TP_WAITED, &req));
}

int ddss_tp_write(struct ddss_tp *tp, uint32_t peer, uint64_t off, const void *local, size_t len)
{
	struct ddss_tp_req req;

	return finish(tp, &req, tp->ops->post_ex(tp, DDSS_TP_OP_WRITE, peer, off, (void *)local,
						 len, 0, 0, DDSS_TP_WAITED, &req));
}

int ddss_tp_cas(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare, uint64_t swap,
		uint64_t *old_p)
{
	return ddss_tp_cas_ex(tp, peer, off, compare, swap, 0, old_p);
}

int ddss_tp_fadd(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add, uint64_t *old_p)
{
	return ddss_tp_fadd_ex(tp, peer, off, add, 0, old_p);
}

int ddss_tp_cas_ex(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare,
		   uint64_t swap, unsigned flags, uint64_t *old_p)
{
	struct ddss_tp_req req;
	int r = finish(tp, &req, tp->ops->post_ex(tp, DDSS_TP_OP_CAS, peer, off, NULL, 0, compare,
						  swap, flags, &req));

	if (!r && old_p)
		*old_p = req.result;
	return r;
}

int ddss_tp_fadd_ex(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add,
		    unsigned flags, uint64_t *old_p)
{
	struct ddss_tp_req req;
	int r = finish(tp, &req, tp->ops->post_ex(tp, DDSS_TP_OP_FADD, peer, off, NULL, 0, add, 0,
						  flags, &req));

	if (!r && old_p)
		*old_p = req.result;
	return r;
}

static __thread int thread_post_bound_ms;

void ddss_tp_set_thread_post_bound(int ms)
{
	thread_post_bound_ms = ms > 0 ? ms : 0;
}

int ddss_tp_thread_post_bound(void)
{
	return thread_post_bound_ms;
}

static __thread int thread_connect_bound_ms;

void ddss_tp_set_thread_connect_bound(int ms)
{
	thread_connect_bound_ms = ms > 0 ? ms : 0;
}

int ddss_tp_thread_connect_bound(void)
{
	return thread_connect_bound_ms;
}
