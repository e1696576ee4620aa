/*
 * QPs taken out of service, freed once nothing of theirs is left (docs/transport.md,
 * "Tearing a QP down").
 *
 * A QP that takes receives (a served one; an outgoing one that took liveness messages from
 * the SRQ) cannot be destroyed as soon as it is in the error state: completions of messages
 * it took may still wait in the receive CQ, and a provider such as libmlx5 discards them at
 * destruction, buffers and all (verbs_recv.c). So it waits here:
 *  - with an SRQ, for the device's last-WQE event (no completion of it comes after that),
 *    then for one pass of the receive thread over the CQ;
 *  - without one, until every buffer posted to its receive queue has come back flushed.
 * Each wait is bounded by VERBS_TEARDOWN_MS; a device that does not report in time is not
 * waited for again. Meanwhile the receive thread still delivers its messages as its rank's
 * (verbs_grave_rank).
 *
 * Nobody blocks on it. The thread that takes the QP out of service hands it over and goes
 * on: the cm thread for a served QP, the sender that reconnects for an outgoing one, which
 * is the receive thread itself when a message handler sends. The cm thread looks at the
 * graves every GRAVE_TICK_MS and frees what is ready. (Waiting in place stalled the cm
 * thread for every peer that left, and on the receive thread waited for its own pass.)
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define GRAVE_TICK_MS 10

struct verbs_grave {
	struct verbs_grave *next;
	struct rdma_cm_id *id;   /* its QP still on it: both destroyed together */
	uint32_t qp_num, peer;
	bool last_wqe_done;      /* (SRQ) the last-WQE wait is over */
	bool pass_asked;         /* (SRQ) a pass of the receive thread was asked for... */
	uint64_t pass_from;      /* ...while its count stood here */
	int64_t until;           /* the current wait's bound (ddss_now_ns) */
};

static int64_t teardown_bound(bool device_silent)
{
	/* A device found silent once gets a token wait: the receive thread's pass still runs. */
	return ddss_now_ns() + (int64_t)(device_silent ? 20 : VERBS_TEARDOWN_MS) * 1000000;
}

int verbs_grave_open(struct verbs_tp *vt)
{
	pthread_mutex_init(&vt->grave_mu, NULL);
	vt->grave_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return vt->grave_fd < 0 ? -errno : 0;
}

static void grave_free(struct verbs_tp *vt, struct verbs_grave *g, bool reclaim)
{
	rdma_destroy_qp(g->id);
	rdma_destroy_id(g->id);
	if (reclaim) /* without an SRQ: buffers that never came back are free again */
		verbs_recv_reclaim(vt, g->qp_num);
	free(g);
}

void verbs_grave_add(struct verbs_tp *vt, struct rdma_cm_id *id, uint32_t peer)
{
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct verbs_grave *g = calloc(1, sizeof(*g));
	uint64_t one = 1;

	/*
	 * Tell the peer now, as destroying the id would: its end of the connection is freed at
	 * once, and its count of our connections (VERBS_SERVED_PER_RANK) stays right while we
	 * reconnect. Fails harmlessly when the id is not connected.
	 */
	rdma_disconnect(id);
	if (ibv_modify_qp(id->qp, &err, IBV_QP_STATE))
		DDSS_WARN("verbs: cannot move qp %u to the error state: %s", id->qp->qp_num,
			  strerror(errno));
	if (!g) { /* nothing to wait with: free it now, as at close */
		DDSS_WARN("verbs: out of memory; qp %u freed without waiting for its receives",
			  id->qp->qp_num);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
		return;
	}
	g->id = id;
	g->qp_num = id->qp->qp_num;
	g->peer = peer;
	pthread_mutex_lock(&vt->grave_mu);
	g->until = teardown_bound(vt->srq ? vt->no_last_wqe : vt->no_rq_flush);
	g->next = vt->graves;
	vt->graves = g;
	pthread_mutex_unlock(&vt->grave_mu);
	if (write(vt->grave_fd, &one, sizeof(one)) != sizeof(one))
		DDSS_WARN("verbs: cannot wake the cm thread for qp %u", g->qp_num);
}

uint32_t verbs_grave_rank(struct verbs_tp *vt, uint32_t qp_num)
{
	uint32_t rank = 0;

	pthread_mutex_lock(&vt->grave_mu);
	for (struct verbs_grave *g = vt->graves; g && !rank; g = g->next)
		if (g->qp_num == qp_num)
			rank = g->peer;
	pthread_mutex_unlock(&vt->grave_mu);
	return rank;
}

static void stalled(struct verbs_tp *vt, struct verbs_grave *g, const char *what)
{
	__atomic_add_fetch(&vt->teardown_stalls, 1, __ATOMIC_RELAXED);
	DDSS_WARN("verbs: %s in %d ms (qp %u of rank %u); freeing it anyway", what,
		  VERBS_TEARDOWN_MS, g->qp_num, g->peer);
}

/* cm thread, grave_mu held: may @g be destroyed now? Steps it along if not. */
static bool grave_ready(struct verbs_tp *vt, struct verbs_grave *g, int64_t now)
{
	if (!vt->srq) {
		if (!verbs_recv_held_by(vt, g->qp_num))
			return true;
		if (now < g->until) {
			verbs_recv_ask_pass(vt); /* the flushed completions are its to take */
			return false;
		}
		if (!vt->no_rq_flush)
			stalled(vt, g, "its receives were not flushed");
		vt->no_rq_flush = true;
		return true;
	}
	if (!g->last_wqe_done) {
		if (!vt->no_last_wqe && !verbs_async_take_last_wqe(vt, g->qp_num)) {
			if (now < g->until)
				return false;
			vt->no_last_wqe = true;
			DDSS_WARN("verbs: %s reported no last-WQE event for qp %u in %d ms; QPs on "
				  "the SRQ are freed once the receive CQ is polled",
				  ibv_get_device_name(vt->ctx->device), g->qp_num, VERBS_TEARDOWN_MS);
		}
		g->last_wqe_done = true;
	}
	if (!g->pass_asked) {
		g->pass_from = verbs_recv_ask_pass(vt);
		g->pass_asked = true;
		g->until = teardown_bound(false);
		return false;
	}
	if (verbs_recv_passed(vt, g->pass_from))
		return true;
	if (now < g->until)
		return false;
	stalled(vt, g, "the receive thread did not poll its CQ");
	return true;
}

int verbs_grave_reap(struct verbs_tp *vt)
{
	struct verbs_grave *ready = NULL, **pp, *g;
	int64_t now = ddss_now_ns();
	uint64_t n;
	bool left;

	if (read(vt->grave_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		DDSS_DBG("verbs: reading the grave eventfd: %s", strerror(errno));
	pthread_mutex_lock(&vt->grave_mu);
	for (pp = &vt->graves; (g = *pp);) {
		if (grave_ready(vt, g, now)) {
			*pp = g->next;
			g->next = ready;
			ready = g;
		} else {
			pp = &g->next;
		}
	}
	left = vt->graves != NULL;
	pthread_mutex_unlock(&vt->grave_mu);
	/* Out of the list first: from here on the receive thread knows it by no rank. */
	while ((g = ready)) {
		ready = g->next;
		grave_free(vt, g, true);
	}
	return left ? GRAVE_TICK_MS : -1;
}

void verbs_grave_close(struct verbs_tp *vt)
{
	struct verbs_grave *g;

	/* The helper threads have stopped: nothing polls any more; buffers go with the pool. */
	while ((g = vt->graves)) {
		vt->graves = g->next;
		grave_free(vt, g, false);
	}
	if (vt->grave_fd >= 0)
		close(vt->grave_fd);
	vt->grave_fd = -1;
	pthread_mutex_destroy(&vt->grave_mu);
}
