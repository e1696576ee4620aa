/*
 * Group barrier over control messages: every rank sends ARRIVE(epoch) to rank 1; when
 * rank 1 has all of them it sends RELEASE(epoch) to everyone. O(N) messages, enough for
 * start-up and tests; nothing on a data path uses it.
 */
#include "net/net_internal.h"
#include "net/coordinator.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <string.h>
#include <time.h>

enum { BARRIER_ARRIVE = 1, BARRIER_RELEASE = 2 };

struct barrier_msg {
	uint32_t kind;
	uint32_t epoch;
};

static int send_barrier(struct ddss_net *net, uint32_t to, uint32_t kind, uint32_t epoch)
{
	struct barrier_msg m = { htole32(kind), htole32(epoch) };

	return ddss_net_send(net, to, DDSS_MSG_BARRIER, &m, sizeof(m));
}

/* mu held. */
static void release_locked(struct ddss_net *net, uint32_t epoch)
{
	if ((int32_t)(epoch - net->barrier_released) > 0)
		net->barrier_released = epoch;
	pthread_cond_broadcast(&net->cv);
}

/* Coordinator, mu held: count an arrival; true when it was the last one. */
static bool arrive_locked(struct ddss_net *net, uint32_t epoch)
{
	uint32_t *count = &net->barrier_arrived[epoch & 1];

	if (++*count < net->env.size)
		return false;
	*count = 0;
	release_locked(net, epoch);
	return true;
}

/*
 * Coordinator, mu NOT held: sending may connect, and a connect reports the peer's state
 * through on_peer, which takes mu.
 */
static void release_others(struct ddss_net *net, uint32_t epoch)
{
	for (uint32_t r = 2; r <= net->env.size; r++) {
		int err = send_barrier(net, r, BARRIER_RELEASE, epoch);

		if (err)
			DDSS_WARN("barrier %u: cannot release rank %u: %s", epoch, r, strerror(-err));
	}
}

void ddss_net_barrier_on_msg(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_net *net = arg;
	struct barrier_msg m;
	bool last = false;

	if (len != sizeof(m)) {
		DDSS_WARN("malformed barrier message from rank %u", from);
		return;
	}
	memcpy(&m, buf, sizeof(m));
	m.kind = le32toh(m.kind);
	m.epoch = le32toh(m.epoch);
	pthread_mutex_lock(&net->mu);
	if (m.kind == BARRIER_ARRIVE && net->env.rank == 1)
		last = arrive_locked(net, m.epoch);
	else if (m.kind == BARRIER_RELEASE && from == 1)
		release_locked(net, m.epoch);
	else
		DDSS_WARN("unexpected barrier message %u from rank %u", m.kind, from);
	pthread_mutex_unlock(&net->mu);
	if (last)
		release_others(net, m.epoch);
}

/* mu held: a rank this barrier depends on went down. */
static bool needed_rank_down(struct ddss_net *net)
{
	if (net->env.rank != 1)
		return net->peer_state[1] == DDSS_TP_PEER_DOWN;
	for (uint32_t r = 2; r <= net->env.size; r++)
		if (net->peer_state[r] == DDSS_TP_PEER_DOWN)
			return true;
	return false;
}

int ddss_net_barrier(struct ddss_net *net, int timeout_ms)
{
	int64_t deadline;
	uint32_t epoch;
	int r = 0;

	if (timeout_ms < 0)
		timeout_ms = net->env.connect_timeout_ms;
	deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;
	pthread_mutex_lock(&net->mu);
	epoch = ++net->barrier_epoch;
	if (net->env.rank == 1) {
		if (arrive_locked(net, epoch)) {
			pthread_mutex_unlock(&net->mu);
			release_others(net, epoch);
			pthread_mutex_lock(&net->mu);
		}
	} else {
		pthread_mutex_unlock(&net->mu);
		/* Outside mu: sending may connect, and the handshake must not wait for us. */
		r = send_barrier(net, 1, BARRIER_ARRIVE, epoch);
		pthread_mutex_lock(&net->mu);
	}
	while (!r && (int32_t)(net->barrier_released - epoch) < 0) {
		if (needed_rank_down(net)) {
			r = -EHOSTDOWN;
			break;
		}
		if (!ddss_net_cond_wait(net, deadline) && ddss_now_ns() >= deadline)
			r = (int32_t)(net->barrier_released - epoch) < 0 ? -ETIMEDOUT : 0;
	}
	pthread_mutex_unlock(&net->mu);
	if (!r)
		ddss_tp_set_formed(net->tp); /* every rank has been up */
	return r;
}

/* A replacement (coordinator mode): reach every other member of the start view; each lets
 * us in once it has applied the view we joined in (net/readmit.c), so a refusal is asked
 * again until the connect timeout. */
static int enter_running(struct ddss_net *net)
{
	int64_t deadline = ddss_now_ns() + (int64_t)net->env.connect_timeout_ms * 1000000;

	for (uint32_t r = 1; r <= net->env.size; r++) {
		int err;

		if (r == net->env.rank)
			continue;
		for (;;) {
			err = ddss_tp_peer_connect(net->tp, r);
			if (!err || ddss_now_ns() >= deadline)
				break;
			/* Bounded retry: the other side applies the view on its own thread. */
			struct timespec ts = { 0, 20 * 1000000 };
			nanosleep(&ts, NULL);
		}
		if (err) {
			DDSS_ERR("replacing rank %u: rank %u did not let this process in: %s",
				 net->env.rank, r, strerror(-err));
			return err;
		}
	}
	/* The others passed the start barrier: count from there, like them. */
	pthread_mutex_lock(&net->mu);
	net->barrier_epoch = net->barrier_released = 1;
	pthread_mutex_unlock(&net->mu);
	ddss_tp_set_formed(net->tp);
	return 0;
}

int ddss_net_begin(struct ddss_net *net)
{
	int r = net->env.running ? enter_running(net) : ddss_net_barrier(net, -1);

	if (!r && net->env.coord)
		ddss_coord_set_serving(net->env.coord);
	return r;
}
