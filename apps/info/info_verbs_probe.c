/*
 * What the verbs provider decides about a device, found by letting it decide: a group of
 * one rank is opened and started on the device's address, and its loopback QP connected,
 * exactly as ddss_init would (net/verbs/verbs_provider.c: query_device, the atomic byte
 * order probe; verbs_recv.c: the SRQ; verbs_conn.c: the inline size). So the answer
 * follows the provider, DDSS_VERBS_DISABLE and the other switches included, and a device
 * reported usable is one a rank has just started on.
 */
#include "info_verbs.h"

#include "net/transport.h"
#include "net/verbs/verbs_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The probe's pool: small, so the check itself is not what the memlock limit refuses. */
#define PROBE_POOL_LEN (64u << 10)

/*
 * A port number for the probe's listener. rdma_cm has a port space of its own; like
 * ddssrun, take one the kernel's TCP has free, which rdma_cm's almost always has too.
 */
static uint16_t free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	uint16_t port = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return 0;
	if (!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &sl))
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void read_caps(struct verbs_tp *vt, struct info_verbs_caps *c)
{
	struct ibv_device_attr da;
	uint32_t vendor = 0;

	if (!ibv_query_device(vt->ctx, &da))
		vendor = da.vendor_id;
	c->port = vt->listen_id->port_num;
	c->atomics = vt->base.atomics;
	c->atomic_be = vt->atomic_be;
	if (!c->atomics)
		c->atomics_why = verbs_simulate_lack("atomics") ? "no (DDSS_VERBS_DISABLE=atomics)"
								 : "no (the device reports none)";
	else
		c->atomics_why = da.atomic_cap == IBV_ATOMIC_GLOB ? "yes (atomic with CPU atomics too)"
								  : "yes (atomic among NIC atomics)";
	c->srq = vt->srq != NULL;
	c->rd_atom = vt->rd_atom;
	c->ack_timeout = vt->ack_timeout;
	/* The provider's own deciders again: they only restate what open chose. */
	c->fence = verbs_fence_decide(vt, vendor);
	c->guard = verbs_guard_decide(vt, vendor);
	c->inline_max = vt->peers[1].out.inline_max;
}

int info_verbs_probe(const char *dev, const char *ip, int timeout_ms,
		     struct info_verbs_caps *caps_p, char *why, size_t len)
{
	struct ddss_tp_node node = { .port = free_port() };
	struct ddss_tp_config cfg = {
		.rank = 1,
		.size = 1,
		.nodes = &node,
		.listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT,
		.op_timeout_ms = timeout_ms,
		.connect_timeout_ms = timeout_ms,
		.device = dev,
	};
	struct ddss_tp *tp;
	struct ddss_tp_mr *mr;
	void *pool;
	int r;

	snprintf(node.host, sizeof(node.host), "%s", ip);
	r = ddss_tp_open("verbs", &cfg, &tp);
	if (r) {
		snprintf(why, len, "the provider cannot open on %s: %s", ip, strerror(-r));
		return r;
	}
	if (posix_memalign(&pool, 4096, PROBE_POOL_LEN)) {
		ddss_tp_close(tp);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	memset(pool, 0, PROBE_POOL_LEN);
	r = ddss_tp_mem_register(tp, pool, PROBE_POOL_LEN, true, &mr);
	if (r) {
		snprintf(why, len, "cannot register memory: %s%s", strerror(-r),
			 r == -ENOMEM || r == -EPERM ? " (ulimit -l)" : "");
		goto close;
	}
	r = ddss_tp_start(tp);
	if (r) {
		snprintf(why, len, "the provider cannot start: %s", strerror(-r));
		goto close;
	}
	/* Started with atomics, it has connected to itself already (the byte order probe). */
	r = ddss_tp_peer_connect(tp, 1);
	if (r) {
		snprintf(why, len, "its loopback QP does not connect: %s", strerror(-r));
		goto close;
	}
	read_caps(verbs_tp_of(tp), caps_p);
close:
	ddss_tp_close(tp); /* deregisters the pool */
	free(pool);
	return r;
}

/* Wait up to @timeout_ms for the next rdma_cm event on @ch: its type, or -ETIMEDOUT. */
static int next_event(struct rdma_event_channel *ch, int timeout_ms, int *status_p)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	int type;

	if (poll(&p, 1, timeout_ms) != 1)
		return -ETIMEDOUT;
	if (rdma_get_cm_event(ch, &e))
		return -errno;
	type = e->event;
	*status_p = e->status;
	rdma_ack_cm_event(e);
	return type;
}

bool info_verbs_cm_loopback(int timeout_ms, char *why, size_t len)
{
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	bool ok = false;
	int type, status = 0;

	if (!ch) {
		snprintf(why, len, "rdma_cm is not available (%s)", strerror(errno));
		return false;
	}
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		snprintf(why, len, "rdma_create_id: %s", strerror(errno));
		goto destroy_channel;
	}
	/* What a rank listening on 127.0.0.1 does first (verbs_conn_open). */
	if (rdma_bind_addr(id, (struct sockaddr *)&lo)) {
		snprintf(why, len, "rdma_bind_addr(127.0.0.1): %s", strerror(errno));
		goto destroy_id;
	}
	if (!id->verbs) {
		snprintf(why, len, "no RDMA device owns 127.0.0.1 (lo has none)");
		goto destroy_id;
	}
	rdma_destroy_id(id);
	/* Bound to a device: can a rank reach another on 127.0.0.1 too? */
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		id = NULL;
		snprintf(why, len, "rdma_create_id: %s", strerror(errno));
		goto destroy_channel;
	}
	lo.sin_port = htons(free_port());
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&lo, timeout_ms)) {
		snprintf(why, len, "rdma_resolve_addr(127.0.0.1): %s", strerror(errno));
		goto destroy_id;
	}
	type = next_event(ch, timeout_ms + 500, &status);
	ok = type == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs;
	if (type < 0)
		snprintf(why, len, "resolving 127.0.0.1: %s", strerror(-type));
	else if (!ok)
		snprintf(why, len, "resolving 127.0.0.1: %s (status %d)", rdma_event_str(type),
			 status);
destroy_id:
	rdma_destroy_id(id);
destroy_channel:
	rdma_destroy_event_channel(ch);
	return ok;
}
