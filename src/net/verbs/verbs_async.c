/*
 * Fabric events: the cm thread also reads the device's asynchronous events
 * (ibv_get_async_event; it polls the device's async fd beside the rdma_cm channel, so no
 * helper thread is added), and handles them here.
 *
 *  - PORT_ERR on our port: logged; every outgoing QP fails with -ENETDOWN at once (its
 *    outstanding operations complete with it) and new operations fail with -ENETDOWN
 *    without trying, until PORT_ACTIVE: then the next operation reconnects. No peer is
 *    reported down for it: whether peers live is the peer timeout's call.
 *  - DEVICE_FATAL: the same with -ENODEV, for good (the device must be reopened).
 *  - QP_LAST_WQE_REACHED: a QP on the SRQ in the error state will take no more receive
 *    buffers; noted here, and the QP's grave (verbs_grave.c) waits for it.
 *  - QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR: logged; an outgoing QP fails (reconnects later).
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>

#define RING (sizeof(((struct verbs_tp *)0)->last_wqe) / sizeof(uint32_t))

static void note_last_wqe(struct verbs_tp *vt, uint32_t qp_num)
{
	pthread_mutex_lock(&vt->ev_mu);
	vt->last_wqe[vt->last_wqe_n++ % RING] = qp_num;
	pthread_mutex_unlock(&vt->ev_mu);
}

bool verbs_async_take_last_wqe(struct verbs_tp *vt, uint32_t qp_num)
{
	bool seen = false;

	pthread_mutex_lock(&vt->ev_mu);
	for (unsigned i = 0; i < RING && i < vt->last_wqe_n && !seen; i++)
		seen = vt->last_wqe[i] == qp_num;
	if (seen) /* forget it: the number may come back on a later QP */
		for (unsigned i = 0; i < RING; i++)
			if (vt->last_wqe[i] == qp_num)
				vt->last_wqe[i] = 0;
	pthread_mutex_unlock(&vt->ev_mu);
	return seen;
}

/* An outgoing QP that broke by itself: fail it (it reconnects on next use). */
static void qp_error(struct verbs_tp *vt, struct ibv_qp *qp, const char *what)
{
	for (uint32_t r = 1; r <= vt->base.cfg.size; r++) {
		struct verbs_out *o = &vt->peers[r].out;

		if (__atomic_load_n(&o->qp, __ATOMIC_ACQUIRE) == qp) {
			DDSS_WARN("verbs: connection to rank %u: %s", r, what);
			verbs_out_wc_fail(o, IBV_WC_WR_FLUSH_ERR, -ECONNRESET);
			return;
		}
	}
	DDSS_WARN("verbs: served connection (qp %u): %s", qp->qp_num, what);
}

static void handle(struct verbs_tp *vt, const struct ibv_async_event *ev, uint8_t port)
{
	const char *dev = ibv_get_device_name(vt->ctx->device);
	int expected;

	switch (ev->event_type) {
	case IBV_EVENT_PORT_ERR:
		if (ev->element.port_num != port)
			break;
		DDSS_ERR("verbs: %s port %u is down: operations fail with -ENETDOWN until it is "
			 "active again", dev, port);
		__atomic_store_n(&vt->port_err, -ENETDOWN, __ATOMIC_RELEASE);
		verbs_out_fail_all(vt, -ENETDOWN);
		break;
	case IBV_EVENT_PORT_ACTIVE:
		expected = -ENETDOWN;
		if (ev->element.port_num == port &&
		    __atomic_compare_exchange_n(&vt->port_err, &expected, 0, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			DDSS_INFO("verbs: %s port %u is active again: reconnecting on demand", dev,
				  port);
		break;
	case IBV_EVENT_DEVICE_FATAL:
		DDSS_ERR("verbs: %s reported a fatal error: every operation fails with -ENODEV",
			 dev);
		__atomic_store_n(&vt->port_err, -ENODEV, __ATOMIC_RELEASE);
		verbs_out_fail_all(vt, -ENODEV);
		break;
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		note_last_wqe(vt, ev->element.qp->qp_num);
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		qp_error(vt, ev->element.qp, ibv_event_type_str(ev->event_type));
		break;
	case IBV_EVENT_SRQ_ERR:
		DDSS_ERR("verbs: %s: the shared receive queue failed; messages stop", dev);
		break;
	case IBV_EVENT_CQ_ERR:
		DDSS_ERR("verbs: %s: a completion queue overran", dev);
		break;
	default:
		DDSS_DBG("verbs: %s: %s", dev, ibv_event_type_str(ev->event_type));
		break;
	}
}

void verbs_async_handle(struct verbs_tp *vt)
{
	struct ibv_async_event ev;

	while (ibv_get_async_event(vt->ctx, &ev) == 0) {
		handle(vt, &ev, vt->port);
		ibv_ack_async_event(&ev);
	}
}

int verbs_async_open(struct verbs_tp *vt)
{
	int fd = vt->ctx->async_fd;

	/* Read until empty on each wake-up: the fd must not block. */
	vt->port = vt->listen_id->port_num;
	return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) ? -errno : 0;
}
