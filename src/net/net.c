#include "net/coordinator.h"
#include "net/exposure.h"
#include "net/net_internal.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len)
{
	struct ddss_net *net = arg;
	bool marked;

	if (tag >= DDSS_MSG_TAG_MAX || !net->msg[tag].fn) {
		DDSS_WARN("dropping a message with unknown tag %u from rank %u", tag, from);
		return;
	}
	marked = ddss_net_dispatch_begin(net);
	net->msg[tag].fn(net->msg[tag].arg, from, buf, len);
	ddss_net_dispatch_end(net, marked);
}

static void on_notify(void *arg, uint32_t from, uint32_t value)
{
	struct ddss_net *net = arg;
	bool marked;

	if (!net->notify_fn)
		return;
	marked = ddss_net_dispatch_begin(net);
	net->notify_fn(net->notify_arg, from, value);
	ddss_net_dispatch_end(net, marked);
}

static void on_peer(void *arg, uint32_t rank, enum ddss_tp_peer_state state)
{
	struct ddss_net *net = arg;

	ddss_net_reconnect_peer_changed(net, rank, state);
	DDSS_INFO("rank %u is %s", rank, state == DDSS_TP_PEER_UP ? "up" : "down");
	if (state == DDSS_TP_PEER_UP)
		ddss_net_heartbeat_peer_up(net, rank);
	pthread_mutex_lock(&net->mu);
	net->peer_state[rank] = state;
	pthread_cond_broadcast(&net->cv);
	pthread_mutex_unlock(&net->mu);
}

int ddss_net_open(const struct ddss_net_env *env, struct ddss_net **net_p)
{
	struct ddss_net *net = calloc(1, sizeof(*net));
	struct ddss_tp_handlers h = { on_msg, on_notify, on_peer, net };
	struct ddss_tp_config cfg;
	pthread_condattr_t ca;
	int r;

	if (!net)
		return -ENOMEM;
	if (env) {
		net->env = *env;
		net->env.nodes = malloc(env->size * sizeof(*env->nodes));
		if (!net->env.nodes) {
			free(net);
			return -ENOMEM;
		}
		memcpy(net->env.nodes, env->nodes, env->size * sizeof(*env->nodes));
		net->env.incarnations = NULL;
		net->env.generations = NULL;
		if (env->incarnations) {
			size_t n = (env->size + 1) * sizeof(*env->incarnations);
			size_t g = (env->size + 1) * sizeof(*env->generations);

			net->env.incarnations = malloc(n);
			net->env.generations = malloc(g);
			if (!net->env.incarnations || !net->env.generations) {
				free(net->env.incarnations);
				free(net->env.generations);
				free(net->env.nodes);
				free(net);
				return -ENOMEM;
			}
			memcpy(net->env.incarnations, env->incarnations, n);
			memcpy(net->env.generations, env->generations, g);
		}
		/* Its own reference to a keys file's row: both envs are freed. */
		ddss_auth_key_copy(&net->env.auth, &env->auth);
		ddss_coord_ref(net->env.coord);
	} else if ((r = ddss_net_env_load(&net->env))) {
		free(net);
		return r;
	} else if ((r = ddss_net_env_join(&net->env))) {
		ddss_net_env_free(&net->env);
		free(net);
		return r;
	}
	ddss_log_set_rank(net->env.rank);
	r = ddss_net_check_exposure(&net->env);
	if (r)
		goto err_env;
	net->peer_state = calloc(net->env.size + 1, sizeof(*net->peer_state));
	net->barrier_arrived = calloc(net->env.size + 1, sizeof(*net->barrier_arrived));
	if (!net->peer_state || !net->barrier_arrived) {
		free(net->peer_state);
		free(net->barrier_arrived);
		r = -ENOMEM;
		goto err_env;
	}
	pthread_mutex_init(&net->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&net->cv, &ca);
	pthread_condattr_destroy(&ca);
	net->msg[DDSS_MSG_BARRIER] = (struct net_msg_slot){ ddss_net_barrier_on_msg, net };
	r = ddss_net_heartbeat_init(net);
	if (!r)
		r = ddss_net_reconnect_init(net);
	if (!r)
		r = ddss_net_readmit_init(net);
	if (r)
		goto err_sync;
	ddss_net_heartbeat_register(net);
	ddss_net_env_to_config(&net->env, &h, &cfg);
	r = ddss_tp_open(net->env.transport, &cfg, &net->tp);
	if (r)
		goto err_sync;
	if (net->env.coord) /* who leaves the view is dead, here as everywhere */
		ddss_coord_attach(net->env.coord, net);
	*net_p = net;
	return 0;

err_sync:
	ddss_net_readmit_fini(net);
	ddss_net_reconnect_fini(net);
	ddss_net_heartbeat_fini(net);
	pthread_mutex_destroy(&net->mu);
	pthread_cond_destroy(&net->cv);
	free(net->peer_state);
	free(net->barrier_arrived);
err_env:
	ddss_net_env_free(&net->env);
	free(net);
	return r;
}

int ddss_net_on_msg(struct ddss_net *net, uint16_t tag, ddss_net_msg_fn fn, void *arg)
{
	if (tag == 0 || tag >= DDSS_MSG_TAG_MAX || !fn || net->msg[tag].fn)
		return -EINVAL;
	net->msg[tag] = (struct net_msg_slot){ fn, arg };
	return 0;
}

void ddss_net_on_notify(struct ddss_net *net, ddss_net_notify_fn fn, void *arg)
{
	net->notify_fn = fn;
	net->notify_arg = arg;
}

int ddss_net_start(struct ddss_net *net, void *pool, size_t pool_len)
{
	/* An automatic choice may end on another transport (tcp): net->tp changes then. */
	int r = ddss_tp_start_pool(&net->tp, pool, pool_len, &net->pool_mr);

	if (r) {
		DDSS_ERR("cannot register the pool and start serving: %s", strerror(-r));
		net->pool_mr = NULL;
		return r;
	}
	r = ddss_net_heartbeat_start(net);
	return r ? r : ddss_net_reconnect_start(net);
}

void ddss_net_close(struct ddss_net *net)
{
	if (!net)
		return;
	if (net->env.coord)
		ddss_coord_detach(net->env.coord);
	ddss_net_heartbeat_stop(net);
	ddss_net_reconnect_stop(net);
	if (net->tp) /* NULL: a fallback that failed left none */
		ddss_tp_close(net->tp);
	ddss_net_heartbeat_fini(net);
	ddss_net_reconnect_fini(net);
	ddss_net_readmit_fini(net);
	pthread_mutex_destroy(&net->mu);
	pthread_cond_destroy(&net->cv);
	free(net->peer_state);
	free(net->barrier_arrived);
	ddss_net_env_free(&net->env);
	free(net);
}

struct ddss_tp *ddss_net_tp(struct ddss_net *net) { return net->tp; }
uint32_t ddss_net_rank(const struct ddss_net *net) { return net->env.rank; }
uint32_t ddss_net_size(const struct ddss_net *net) { return net->env.size; }
const char *ddss_net_transport_name(const struct ddss_net *net) { return net->tp->ops->name; }

int ddss_net_send(struct ddss_net *net, uint32_t peer, uint16_t tag, const void *buf, size_t len)
{
	return ddss_tp_msg_send(net->tp, peer, tag, buf, len);
}

int ddss_net_cond_wait(struct ddss_net *net, int64_t deadline_ns)
{
	struct timespec ts;

	if (deadline_ns == INT64_MAX)
		return pthread_cond_wait(&net->cv, &net->mu) == 0;
	ts.tv_sec = deadline_ns / 1000000000;
	ts.tv_nsec = deadline_ns % 1000000000;
	return pthread_cond_timedwait(&net->cv, &net->mu, &ts) == 0;
}

int ddss_net_wait_peer(struct ddss_net *net, uint32_t rank, enum ddss_tp_peer_state state,
		       int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : ddss_now_ns() + (int64_t)timeout_ms * 1000000;
	int r = 0;

	if (rank < 1 || rank > net->env.size)
		return -EINVAL;
	pthread_mutex_lock(&net->mu);
	while (net->peer_state[rank] != state) {
		if (!ddss_net_cond_wait(net, deadline) && ddss_now_ns() >= deadline) {
			r = net->peer_state[rank] == state ? 0 : -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&net->mu);
	return r;
}

void ddss_net_set_leaving(struct ddss_net *net)
{
	__atomic_store_n(&net->leaving, true, __ATOMIC_RELEASE);
}

int ddss_net_wait_others_gone(struct ddss_net *net, int timeout_ms)
{
	int64_t deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;
	uint32_t r = 1;
	int err = 0;

	/* Everyone passed the final barrier: from now on a silent rank has left, not died. */
	__atomic_store_n(&net->leaving, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&net->mu);
	while (r <= net->env.size) {
		if (r == net->env.rank || net->peer_state[r] != DDSS_TP_PEER_UP) {
			r++;
			continue;
		}
		if (!ddss_net_cond_wait(net, deadline) && ddss_now_ns() >= deadline) {
			err = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&net->mu);
	return err;
}

bool ddss_net_coordinated(const struct ddss_net *net)
{
	return net->env.coord != NULL;
}

struct ddss_member *ddss_net_member(struct ddss_net *net)
{
	return net->env.coord ? ddss_coord_member(net->env.coord) : NULL;
}

int ddss_net_acting(struct ddss_net *net)
{
	return net->env.coord ? ddss_coord_acting(net->env.coord) : 0;
}

int ddss_net_coord_state(struct ddss_net *net)
{
	return net->env.coord ? ddss_coord_etcd_state(net->env.coord) : 0;
}

int ddss_net_coord_left(struct ddss_net *net, uint32_t rank, int64_t *view_p, int64_t *when_ns_p)
{
	return net->env.coord ? ddss_coord_left(net->env.coord, rank, view_p, when_ns_p) :
				-EOPNOTSUPP;
}
