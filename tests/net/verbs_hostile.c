/*
 * verbs provider against a hostile member (issue 29 item 4), one process: rank 1 is a real
 * provider with a group secret; "rank 2" is either a real provider or a hand-made rdma_cm
 * client that knows the secret and does what a member may try (run under scripts/rdma-exec,
 * which gives the device's address in DDSS_RDMA_HOST):
 *  - a rank declared dead can no longer write through any QP it ever had (it connected
 *    twice and kept both);
 *  - a replayed connect request is refused: from another QP, after the target's restart,
 *    with the epoch edited; a request stamped far ahead is refused and locks nobody out;
 *  - at most VERBS_SERVED_PER_RANK QPs per rank (-EBUSY beyond), and the reconnect after a
 *    fabric error still works, again and again.
 * Every write that must not land is checked in rank 1's memory.
 */
#include "common/test_util.h"
#include "net/auth.h"
#include "net/auth_replay.h"
#include "net/transport.h"
#include "net/verbs/verbs_int.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_LEN 65536
#define GROUP 0x29
#define SECRET "verbs-hostile-secret"

static char host[64];
static uint16_t base_port;
static struct ddss_auth_key key;

static void nodes_init(struct ddss_tp_node *nodes)
{
	for (uint32_t i = 0; i < 2; i++) {
		snprintf(nodes[i].host, sizeof(nodes[i].host), "%s", host);
		nodes[i].port = (uint16_t)(base_port + i);
	}
	base_port += 2;
}

static struct ddss_tp *open_rank(struct ddss_tp_node *nodes, uint32_t rank, uint64_t *pool)
{
	struct ddss_tp_config cfg = {
		.rank = rank, .size = 2, .group = GROUP, .nodes = nodes, .listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 10000,
		.connect_timeout_ms = 5000, .auth = &key,
	};
	struct ddss_tp_mr *mr;
	struct ddss_tp *tp = NULL;

	if (ddss_tp_open("verbs", &cfg, &tp))
		return NULL;
	if (ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr) || ddss_tp_start(tp)) {
		ddss_tp_close(tp);
		return NULL;
	}
	return tp;
}

/* Rank @rank's served QPs at @tp (retired ones included), and how many of them are live. */
static unsigned served_n(struct ddss_tp *tp, uint32_t rank, unsigned *live_p)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	unsigned n = 0, live = 0;

	pthread_mutex_lock(&vt->served_mu);
	for (struct verbs_served *s = vt->served; s; s = s->next)
		if (s->peer == rank) {
			n++;
			live += !s->retired;
		}
	pthread_mutex_unlock(&vt->served_mu);
	if (live_p)
		*live_p = live;
	return n;
}

/* Wait (bounded) until rank @rank has @want served QPs at @tp. */
static bool wait_served(struct ddss_tp *tp, uint32_t rank, unsigned want)
{
	double until = test_now_ms() + 10000;

	while (served_n(tp, rank, NULL) != want)
		if (test_now_ms() > until)
			return false;
		else
			usleep(1000);
	return true;
}

/* ---- the hand-made member: one rdma_cm connection, its own PD, CQ and QP ---- */

struct rogue {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint64_t buf[2];
	uint64_t raddr;
	uint32_t rkey;
	unsigned char sent[VERBS_AUTH_REQ_LEN]; /* the connect request's private data */
};

/* The next event on @r's channel (within 10 s): its type, private data copied; -ETIMEDOUT. */
static int rogue_event(struct rogue *r, unsigned char *pdata, size_t *len_p)
{
	struct pollfd pfd = { .fd = r->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int type;

	if (poll(&pfd, 1, 10000) != 1 || rdma_get_cm_event(r->ch, &ev))
		return -ETIMEDOUT;
	type = ev->event;
	if (pdata) {
		*len_p = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
		if (*len_p > 256)
			*len_p = 256;
		if (*len_p)
			memcpy(pdata, ev->param.conn.private_data, *len_p);
	}
	rdma_ack_cm_event(ev);
	return type;
}

static void rogue_close(struct rogue *r)
{
	if (r->id && r->id->qp)
		rdma_destroy_qp(r->id);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
	memset(r, 0, sizeof(*r));
}

/* A QP routed to @nodes[0] (rank 1), not connected yet. */
static int rogue_open(struct rogue *r, const struct ddss_tp_node *nodes)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	struct addrinfo *src, *dst;
	char port[8];
	uint8_t ack_timeout = 12; /* 16.8 ms: a write nobody answers fails fast */
	int r2 = -EIO;

	memset(r, 0, sizeof(*r));
	snprintf(port, sizeof(port), "%u", nodes[0].port);
	if (getaddrinfo(nodes[0].host, port, &hints, &dst))
		return -EHOSTUNREACH;
	if (getaddrinfo(nodes[0].host, "0", &hints, &src)) {
		freeaddrinfo(dst);
		return -EHOSTUNREACH;
	}
	r->ch = rdma_create_event_channel();
	if (!r->ch || rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(r->id, src->ai_addr, dst->ai_addr, 2000) ||
	    rogue_event(r, NULL, NULL) != RDMA_CM_EVENT_ADDR_RESOLVED ||
	    rdma_resolve_route(r->id, 2000) ||
	    rogue_event(r, NULL, NULL) != RDMA_CM_EVENT_ROUTE_RESOLVED)
		goto out;
	r->pd = ibv_alloc_pd(r->id->verbs);
	r->cq = r->pd ? ibv_create_cq(r->id->verbs, 16, NULL, NULL, 0) : NULL;
	if (!r->cq)
		goto out;
	qa.send_cq = qa.recv_cq = r->cq;
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!r->mr || rdma_create_qp(r->id, r->pd, &qa))
		goto out;
	rdma_set_option(r->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
			sizeof(ack_timeout));
	r2 = 0;
out:
	freeaddrinfo(src);
	freeaddrinfo(dst);
	if (r2)
		rogue_close(r);
	return r2;
}

/* A valid connect request of rank 2 for @r's QP and the target's @epoch, stamped @ahead_s
 * seconds from now. */
static void rogue_request(struct rogue *r, uint64_t epoch, int64_t ahead_s,
			  unsigned char out[VERBS_AUTH_REQ_LEN])
{
	struct verbs_auth_req a = { .group = GROUP, .rank = 2, .epoch = epoch };
	struct ddss_auth_transcript tr = { .group = GROUP, .initiator = 2, .target = 1, .size = 2 };
	unsigned char proof[DDSS_AUTH_PROOF_LEN];
	uint64_t t;

	ddss_auth_stamp(a.nonce);
	memcpy(&t, a.nonce, 8);
	t = htole64(le64toh(t) + (uint64_t)ahead_s);
	memcpy(a.nonce, &t, 8);
	memcpy(tr.nonce_i, a.nonce, sizeof(tr.nonce_i));
	ddss_auth_bind(epoch, r->id->route.addr.addr.ibaddr.sgid.raw, r->id->qp->qp_num,
		       tr.nonce_t);
	ddss_auth_prove(&key, DDSS_AUTH_INITIATOR, &tr, proof);
	memcpy(a.proof, proof, sizeof(a.proof));
	verbs_auth_req_encode(&a, out);
}

/*
 * Connect as rank 2 with the request in @pdata (NULL: rogue_request(@epoch, @ahead_s)).
 * 0 (r->raddr, r->rkey learned), or the reject's -errno and *epoch_p its epoch. The
 * request sent is kept in r->sent.
 */
static int rogue_connect(struct rogue *r, const unsigned char *pdata, uint64_t epoch,
			 int64_t ahead_s, uint64_t *epoch_p)
{
	struct rdma_conn_param cp = {
		.private_data = r->sent, .private_data_len = VERBS_AUTH_REQ_LEN,
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 1,
		.rnr_retry_count = 1,
	};
	unsigned char got[256];
	struct verbs_hello h;
	size_t len = 0;
	int type, e;

	if (pdata)
		memcpy(r->sent, pdata, VERBS_AUTH_REQ_LEN);
	else
		rogue_request(r, epoch, ahead_s, r->sent);
	if (rdma_connect(r->id, &cp))
		return -errno;
	type = rogue_event(r, got, &len);
	if (type == RDMA_CM_EVENT_ESTABLISHED) {
		if (verbs_hello_decode(got, len, &h))
			return -EPROTO;
		r->raddr = h.pool_addr;
		r->rkey = h.rkey;
		return 0;
	}
	if (type == RDMA_CM_EVENT_REJECTED) {
		e = verbs_reject_decode(got, len, epoch_p);
		return e ? e : -ECONNREFUSED;
	}
	return type < 0 ? type : -EHOSTUNREACH;
}

/* The target's epoch, learned as any initiator does: a request for epoch 0 is rejected. */
static uint64_t learn_epoch(const struct ddss_tp_node *nodes)
{
	struct rogue r;
	uint64_t epoch = 0;

	if (rogue_open(&r, nodes))
		return 0;
	CU_ASSERT_EQUAL(rogue_connect(&r, NULL, 0, 0, &epoch), -ESTALE);
	rogue_close(&r);
	return epoch;
}

/* A connected member: 0, or why not. */
static int rogue_join(struct rogue *r, const struct ddss_tp_node *nodes, uint64_t epoch)
{
	int e = rogue_open(r, nodes);

	if (!e)
		e = rogue_connect(r, NULL, epoch, 0, NULL);
	return e;
}

/* RDMA-write @v to word @word of rank 1's pool: 0 if the write completed, else -EIO. */
static int rogue_write(struct rogue *r, unsigned word, uint64_t v)
{
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf, .length = 8, .lkey = r->mr->lkey };
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	double until = test_now_ms() + 20000;
	int n;

	r->buf[0] = v;
	wr.wr.rdma.remote_addr = r->raddr + word * 8u;
	wr.wr.rdma.rkey = r->rkey;
	if (ibv_post_send(r->id->qp, &wr, &bad))
		return -EIO; /* the QP is in the error state already */
	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0 && test_now_ms() < until)
		usleep(100);
	if (n != 1) {
		CU_FAIL("a write neither completed nor failed in 20 s");
		return -ETIMEDOUT;
	}
	return wc.status == IBV_WC_SUCCESS ? 0 : -EIO;
}

/* ---- the tests ---- */

static void test_dead_rank_all_qps(void)
{
	struct ddss_tp_node nodes[2];
	volatile uint64_t *pool = test_alloc_pool(POOL_LEN);
	struct rogue a, b, c;
	struct ddss_tp *t1;
	uint64_t epoch;

	nodes_init(nodes);
	t1 = open_rank(nodes, 1, (uint64_t *)pool);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
	epoch = learn_epoch(nodes);
	CU_ASSERT_NOT_EQUAL_FATAL(epoch, 0);
	/* Two QPs, both kept open. */
	CU_ASSERT_EQUAL_FATAL(rogue_join(&a, nodes, epoch), 0);
	CU_ASSERT_EQUAL(rogue_write(&a, 0, 0xa1), 0);
	CU_ASSERT_EQUAL(pool[0], 0xa1);
	CU_ASSERT_EQUAL_FATAL(rogue_join(&b, nodes, epoch), 0);
	CU_ASSERT_EQUAL(rogue_write(&b, 1, 0xb1), 0);
	CU_ASSERT_EQUAL(pool[1], 0xb1);
	/* Declared dead: nothing it ever had still writes. */
	ddss_tp_peer_refuse(t1, 2);
	CU_ASSERT_EQUAL(rogue_write(&b, 3, 0xb2), -EIO);
	CU_ASSERT_EQUAL(rogue_write(&a, 2, 0xa2), -EIO);
	CU_ASSERT_EQUAL(pool[2], 0);
	CU_ASSERT_EQUAL(pool[3], 0);
	/* And it gets no new one. */
	if (rogue_open(&c, nodes) == 0) {
		CU_ASSERT_EQUAL(rogue_connect(&c, NULL, epoch, 0, NULL), -ECONNREFUSED);
		rogue_close(&c);
	}
	CU_ASSERT_EQUAL(pool[4], 0);
	rogue_close(&a);
	rogue_close(&b);
	ddss_tp_close(t1);
	free((void *)pool);
}

static void test_replay(void)
{
	struct ddss_tp_node nodes[2];
	uint64_t *pool = test_alloc_pool(POOL_LEN);
	unsigned char captured[VERBS_AUTH_REQ_LEN], edited[VERBS_AUTH_REQ_LEN];
	uint64_t epoch, epoch2 = 0, le;
	struct rogue a, r;
	struct ddss_tp *t1;

	nodes_init(nodes);
	t1 = open_rank(nodes, 1, pool);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
	epoch = learn_epoch(nodes);
	CU_ASSERT_NOT_EQUAL_FATAL(epoch, 0);
	/* A request made for QP a, sent first from another QP (the target never saw its
	 * authenticator): refused, it is bound to a's QP number; then from a: accepted. */
	CU_ASSERT_EQUAL_FATAL(rogue_open(&a, nodes), 0);
	rogue_request(&a, epoch, 0, captured);
	CU_ASSERT_EQUAL_FATAL(rogue_open(&r, nodes), 0);
	CU_ASSERT_EQUAL(rogue_connect(&r, captured, 0, 0, NULL), -EACCES);
	rogue_close(&r);
	CU_ASSERT_EQUAL(rogue_connect(&a, captured, 0, 0, NULL), 0);
	rogue_close(&a);
	/* Again from another QP, same boot: refused (bound, and seen once). */
	CU_ASSERT_EQUAL_FATAL(rogue_open(&r, nodes), 0);
	CU_ASSERT_EQUAL(rogue_connect(&r, captured, 0, 0, NULL), -EACCES);
	rogue_close(&r);
	/* The target restarts (same address): the request is for a boot that is gone. */
	ddss_tp_close(t1);
	t1 = open_rank(nodes, 1, pool);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
	CU_ASSERT_EQUAL_FATAL(rogue_open(&r, nodes), 0);
	CU_ASSERT_EQUAL(rogue_connect(&r, captured, 0, 0, &epoch2), -ESTALE);
	rogue_close(&r);
	CU_ASSERT(epoch2 != 0 && epoch2 != epoch);
	/* With the new epoch written in, the proof no longer holds. */
	memcpy(edited, captured, sizeof(edited));
	le = htole64(epoch2);
	memcpy(edited + 16, &le, 8);
	CU_ASSERT_EQUAL_FATAL(rogue_open(&r, nodes), 0);
	CU_ASSERT_EQUAL(rogue_connect(&r, edited, 0, 0, NULL), -EACCES);
	rogue_close(&r);
	/* A valid request stamped 60 s ahead: refused, and it locks nobody out. */
	CU_ASSERT_EQUAL_FATAL(rogue_open(&r, nodes), 0);
	CU_ASSERT_EQUAL(rogue_connect(&r, NULL, epoch2, 60, NULL), -EACCES);
	rogue_close(&r);
	CU_ASSERT_EQUAL_FATAL(rogue_join(&r, nodes, epoch2), 0);
	CU_ASSERT_EQUAL(rogue_write(&r, 5, 0x55), 0);
	CU_ASSERT_EQUAL(pool[5], 0x55);
	rogue_close(&r);
	CU_ASSERT_EQUAL(pool[0], 0);
	ddss_tp_close(t1);
	free(pool);
}

static void test_qp_cap(void)
{
	struct ddss_tp_node nodes[2];
	volatile uint64_t *p1 = test_alloc_pool(POOL_LEN);
	uint64_t *p2 = test_alloc_pool(POOL_LEN);
	struct rogue q[VERBS_SERVED_PER_RANK + 1];
	struct ddss_tp *t1, *t2;
	struct ddss_tp_peer_info info;
	unsigned live = 0;
	uint64_t epoch, v;

	nodes_init(nodes);
	t1 = open_rank(nodes, 1, (uint64_t *)p1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
	epoch = learn_epoch(nodes);
	CU_ASSERT_NOT_EQUAL_FATAL(epoch, 0);
	/* Connections kept open: each new one retires the older, up to the cap. */
	for (unsigned i = 0; i < VERBS_SERVED_PER_RANK; i++)
		CU_ASSERT_EQUAL_FATAL(rogue_join(&q[i], nodes, epoch), 0);
	CU_ASSERT_EQUAL(served_n(t1, 2, &live), VERBS_SERVED_PER_RANK);
	CU_ASSERT_EQUAL(live, 1);
	CU_ASSERT_EQUAL(rogue_join(&q[VERBS_SERVED_PER_RANK], nodes, epoch), -EBUSY);
	CU_ASSERT_EQUAL(served_n(t1, 2, NULL), VERBS_SERVED_PER_RANK);
	CU_ASSERT_EQUAL(rogue_write(&q[0], 0, 0xc0), -EIO); /* retired */
	CU_ASSERT_EQUAL(rogue_write(&q[VERBS_SERVED_PER_RANK - 1], 1, 0xc1), 0);
	CU_ASSERT_EQUAL(p1[0], 0);
	CU_ASSERT_EQUAL(p1[1], 0xc1);
	for (unsigned i = 0; i <= VERBS_SERVED_PER_RANK; i++)
		rogue_close(&q[i]);
	CU_ASSERT_TRUE_FATAL(wait_served(t1, 2, 0)); /* closed: freed at once */

	/* The real rank 2: after each fabric error the next write reconnects (a new QP while
	 * the old one may still be going), and lands. */
	t2 = open_rank(nodes, 2, p2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t2);
	for (unsigned i = 0; i < 2 * VERBS_SERVED_PER_RANK; i++) {
		v = 0x100 + i;
		CU_ASSERT_EQUAL_FATAL(ddss_tp_write(t2, 1, 64, &v, sizeof(v)), 0);
		CU_ASSERT_EQUAL(p1[8], v);
		CU_ASSERT(served_n(t1, 2, &live) <= 2);
		CU_ASSERT_EQUAL(live, 1);
		verbs_out_wc_fail(&verbs_tp_of(t2)->peers[1].out, IBV_WC_RETRY_EXC_ERR, -ETIMEDOUT);
	}
	v = 0x200;
	CU_ASSERT_EQUAL(ddss_tp_write(t2, 1, 64, &v, sizeof(v)), 0);
	CU_ASSERT_EQUAL(p1[8], 0x200);
	CU_ASSERT_EQUAL(ddss_tp_peer_info(t2, 1, &info), 0);
	CU_ASSERT_EQUAL(info.state, DDSS_TP_PEER_UP);
	ddss_tp_close(t2);
	ddss_tp_close(t1);
	free((void *)p1);
	free(p2);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	test_rdma_host_or_skip(host, sizeof(host));
	base_port = (uint16_t)(24000 + getpid() % 2000 * 8);
	unsetenv("DDSS_SECRET_FILE");
	unsetenv("DDSS_SECRET");
	unsetenv("DDSS_KEYS_FILE");
	if (ddss_auth_key_load(SECRET, &key)) {
		printf("cannot load the test secret\n");
		return 1;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("verbs_hostile", NULL, NULL);
	CU_add_test(suite, "a rank declared dead can no longer write through any QP it ever had",
		    test_dead_rank_all_qps);
	CU_add_test(suite, "a replayed connect request after a target restart is refused",
		    test_replay);
	CU_add_test(suite, "per-rank QP cap refuses extra connections; the reconnect still works",
		    test_qp_cap);
	failed = test_run_all();
	CU_cleanup_registry();
	ddss_auth_key_clear(&key);
	return failed ? 1 : 0;
}
