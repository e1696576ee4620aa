/*
 * The verbs provider's ops table: lifecycle, memory, peers, argument checks, and turning
 * each operation into work requests on the peer's outgoing QP (see verbs_int.h).
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Outstanding RDMA reads/atomics per QP we ask for (bounded by the device). */
#define RD_ATOM_WANT 16

bool ddss_verbs_usable(void)
{
	struct ibv_device **list;
	int n;
	bool usable = false;

	list = ibv_get_device_list(&n);
	if (!list)
		return false;
	for (int i = 0; i < n && !usable; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;

		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) == 0)
			for (uint8_t p = 1; p <= da.phys_port_cnt && !usable; p++) {
				struct ibv_port_attr pa;

				usable = ibv_query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
			}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return usable;
}

/*
 * Let what was sent land before the QPs go: messages and notifications return once queued,
 * so a rank that sends its last barrier message and closes would otherwise destroy it with
 * its QP whenever a lost packet left it waiting for a retransmit (seen with 2% loss in the
 * fabric tests). Bounded: a dead peer's WRs would wait for their retries to run out.
 */
static void drain_outgoing(struct verbs_tp *vt, int timeout_ms)
{
	int64_t deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;

	for (uint32_t r = 1; r <= vt->base.cfg.size; r++) {
		struct verbs_out *o = &vt->peers[r].out;

		while (__atomic_load_n(&o->qp, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&o->fail, __ATOMIC_ACQUIRE) &&
		       __atomic_load_n(&o->sq_posted, __ATOMIC_ACQUIRE) !=
			       __atomic_load_n(&o->sq_done, __ATOMIC_ACQUIRE) &&
		       ddss_now_ns() < deadline) {
			if (verbs_progress(vt) == 0)
				sched_yield();
		}
	}
}

static void verbs_close(struct ddss_tp *tp)
{
	struct verbs_tp *vt = verbs_tp_of(tp);

	/*
	 * Peers that leave now have their QPs freed at once, not put in graves to wait for
	 * the receive thread (which stops below): at close the buffers go with the pool
	 * (served_free).
	 */
	__atomic_store_n(&vt->closing, true, __ATOMIC_RELEASE);
	if (vt->peers && vt->started)
		drain_outgoing(vt, 2000);
	verbs_conn_stop(vt);
	if (vt->peers) {
		verbs_conn_close(vt);
		for (uint32_t r = 1; r <= tp->cfg.size; r++) {
			struct verbs_out *o = &vt->peers[r].out;

			ddss_lookup_drop(&o->lookup);
			pthread_mutex_destroy(&o->mu);
			pthread_mutex_destroy(&o->sq_mu);
			pthread_cond_destroy(&o->cv);
		}
	}
	verbs_mem_close(vt);
	verbs_recv_close(vt);
	verbs_cq_close(vt);
	if (vt->pd)
		ibv_dealloc_pd(vt->pd);
	free(vt->served_qpn);
	free(vt->served_qp);
	free(vt->served_liveness);
	free(vt->liveness_inflight);
	free(vt->peers);
	ddss_tp_fini_common(tp);
	free(vt);
}


/*
 * Fork safety of registered memory. A fork makes the parent's private pages copy-on-write;
 * on a kernel that does not copy pinned pages at fork (before 5.13), the parent's next
 * write to a registered page moves it to a new frame the NIC never sees. The pool, the
 * staging arena and the probe page are marked MADV_DONTFORK instead of calling
 * ibv_fork_init(): that must come before any other verbs call of the process (an
 * application may have made some), and it makes every registration, the per-operation
 * ones of the application's buffers included, madvise whole pages the child then lacks.
 */
static const char *fork_note(void)
{
	switch (ibv_is_fork_initialized()) {
	case IBV_FORK_UNNEEDED:
		return "the kernel copies pinned pages";
	case IBV_FORK_ENABLED:
		return "ibv_fork_init in force";
	default:
		return "pool and staging not inherited (MADV_DONTFORK)";
	}
}

/* Device limits that shape every QP. */
static int query_device(struct verbs_tp *vt)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	const char *why, *fence, *guard;

	if (ibv_query_device(vt->ctx, &da) || ibv_query_port(vt->ctx, vt->listen_id->port_num, &pa))
		return -errno;
	vt->rd_atom = RD_ATOM_WANT;
	if (da.max_qp_rd_atom < vt->rd_atom)
		vt->rd_atom = (uint8_t)da.max_qp_rd_atom;
	if (da.max_qp_init_rd_atom < vt->rd_atom)
		vt->rd_atom = (uint8_t)da.max_qp_init_rd_atom;
	vt->max_msg = pa.max_msg_sz ? pa.max_msg_sz : 1u << 30;
	if (verbs_max_msg_lower(vt))
		return -EINVAL;
	snprintf(vt->base.device, sizeof(vt->base.device), "%s",
		 ibv_get_device_name(vt->ctx->device));
	/*
	 * Without atomics (irdma on E810, bnxt_re without PCIe AtomicOps, or the test switch)
	 * the transport says so (base.atomics) and the layers above run without them: SRSL
	 * locks, and the models that fetch&add a version word refused at allocation.
	 */
	if (da.atomic_cap == IBV_ATOMIC_NONE)
		why = "no (the device reports none)";
	else if (verbs_simulate_lack("atomics"))
		why = "no (DDSS_VERBS_DISABLE=atomics)";
	else
		why = da.atomic_cap == IBV_ATOMIC_HCA ? "yes (HCA: atomic among NIC atomics)" :
						       "yes (GLOB: atomic with CPU atomics too)";
	vt->has_atomics = why[0] == 'y';
	vt->base.atomics = vt->has_atomics;
	/* Soft-RoCE (rxe; its vendor id): an 8-byte read takes 2x a fetch&add (perftest:
	 * ib_read_lat 119 us, ib_atomic_lat 61 us in the guest). A NIC reads as fast or faster,
	 * and serves reads of one word from many readers in parallel, atomics one by one. */
	vt->base.fetch_by_fadd = vt->has_atomics && da.vendor_id == RXE_VENDOR_ID;
	fence = verbs_fence_decide(vt, da.vendor_id);
	guard = verbs_guard_decide(vt, da.vendor_id);
	if (verbs_ack_timeout_decide(vt, da.vendor_id))
		return -EINVAL;
	DDSS_INFO("verbs: rank %u on %s port %u: %d outstanding reads/atomics; atomics %s%s; "
		  "fences: %s; reads/atomics alone on the QP: %s; fork: %s", vt->base.cfg.rank,
		  vt->base.device, vt->listen_id->port_num, vt->rd_atom, why,
		  vt->has_atomics ? ", byte order probed at start" :
		  ": locks use SRSL, version/write/delta segments are refused",
		  fence, guard, fork_note());
	return 0;
}

static int verbs_open(const struct ddss_tp_config *cfg, struct ddss_tp **tp_p)
{
	struct verbs_tp *vt = calloc(1, sizeof(*vt));
	int r;

	if (!vt)
		return -ENOMEM;
	r = ddss_tp_init_common(&vt->base, &ddss_verbs_ops, cfg);
	if (r) {
		free(vt);
		return r;
	}
	vt->stop_fd = -1;
	vt->grave_fd = -1;
	if (vt->base.cfg.op_timeout_ms <= 0)
		vt->base.cfg.op_timeout_ms = 30000;
	vt->peers = calloc(cfg->size + 1, sizeof(*vt->peers));
	vt->served_qpn = calloc(cfg->size + 1, sizeof(*vt->served_qpn));
	vt->served_qp = calloc(cfg->size + 1, sizeof(*vt->served_qp));
	vt->served_liveness = calloc(cfg->size + 1, sizeof(*vt->served_liveness));
	vt->liveness_inflight = calloc(cfg->size + 1, sizeof(*vt->liveness_inflight));
	if (!vt->peers || !vt->served_qpn || !vt->served_qp || !vt->served_liveness ||
	    !vt->liveness_inflight) {
		r = -ENOMEM;
		goto err;
	}
	for (uint32_t rank = 1; rank <= cfg->size; rank++) {
		struct verbs_out *o = &vt->peers[rank].out;

		o->kind = VERBS_CTX_OUT;
		o->tp = vt;
		o->peer = rank;
		pthread_mutex_init(&o->mu, NULL);
		pthread_mutex_init(&o->sq_mu, NULL);
		pthread_mutex_init(&o->guard_mu, NULL);
		pthread_cond_init(&o->guard_cv, NULL);
		pthread_cond_init(&o->cv, NULL);
	}
	r = verbs_conn_open(vt);
	if (r)
		goto err;
	r = query_device(vt);
	if (r)
		goto err;
	vt->pd = ibv_alloc_pd(vt->ctx);
	if (!vt->pd) {
		r = -errno;
		goto err;
	}
	r = verbs_cq_open(vt);
	if (!r)
		r = verbs_recv_open(vt);
	if (!r)
		r = verbs_mem_open(vt);
	if (r)
		goto err;
	*tp_p = &vt->base;
	return 0;
err:
	DDSS_ERR("verbs: cannot open the transport: %s", strerror(-r));
	verbs_close(&vt->base);
	return r;
}

/* One atomic on the loopback QP, targeting the probe page; waits for it. */
static int probe_post(struct verbs_tp *vt, struct ibv_mr *mr, enum ibv_wr_opcode opcode,
		      uint64_t *target, uint64_t *result, uint64_t compare_add, uint64_t swap)
{
	struct verbs_out *o = &vt->peers[vt->base.cfg.rank].out;
	struct ddss_tp_req req = { .peer = vt->base.cfg.rank };
	struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { 0 };
	int r;

	wr.wr_id = (uintptr_t)&req;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.wr.atomic.remote_addr = (uintptr_t)target;
	wr.wr.atomic.rkey = mr->rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	r = verbs_post(o, &wr);
	if (r == 0)
		r = verbs_wait(vt, &req, DDSS_TP_TIMEOUT_DEFAULT);
	return r ? r : req.status;
}

/*
 * The byte order of atomics, found once through the loopback QP on a page of its own
 * (registered for remote atomics only while the probe runs):
 *  1. the result: a compare&swap that fails returns a word the CPU wrote, unchanged; some
 *     devices (mlx5 outside host-endian mode) return it big-endian: converted from then on;
 *  2. the target: a fetch&add of 1 on a word the CPU wrote, then a CPU load, must show the
 *     word + 1 in host order. CPU loads, RDMA reads and writes touch the words atomics
 *     update (lock, version, overflow words), so any other answer refuses to start.
 */
static int probe_atomic_order(struct verbs_tp *vt)
{
	const uint64_t pattern = 0x0102030405060708ull;
	struct verbs_out *o = &vt->peers[vt->base.cfg.rank].out;
	const char *dev = vt->base.device;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct ibv_mr *mr = NULL;
	uint64_t *words = NULL, seen;
	int r;

	if (!vt->has_atomics)
		return 0;
	r = verbs_out_ensure(o);
	if (r) {
		DDSS_ERR("verbs: cannot connect to itself through %s: %s", dev, strerror(-r));
		return r;
	}
	if (posix_memalign((void **)&words, page, page))
		return -ENOMEM;
	verbs_dontfork(words, page);
	words[0] = pattern; /* the target */
	words[1] = 0;       /* the result */
	mr = ibv_reg_mr(vt->pd, words, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr) {
		r = errno ? -errno : -ENOMEM;
		DDSS_ERR("verbs: cannot register the atomic probe's page on %s: %s", dev,
			 strerror(-r));
		goto free_page;
	}
	r = probe_post(vt, mr, IBV_WR_ATOMIC_CMP_AND_SWP, &words[0], &words[1], ~pattern, 0);
	if (r) {
		DDSS_ERR("verbs: loopback compare&swap probe failed on %s: %s", dev, strerror(-r));
		goto dereg;
	}
	seen = __atomic_load_n(&words[1], __ATOMIC_ACQUIRE);
	if (seen == __builtin_bswap64(pattern)) {
		vt->atomic_be = true;
	} else if (seen != pattern) {
		DDSS_ERR("verbs: %s returned 0x%016llx for a compare&swap on 0x%016llx: neither "
			 "byte order; not starting", dev, (unsigned long long)seen,
			 (unsigned long long)pattern);
		r = -EPROTO;
		goto dereg;
	}
	words[1] = 0;
	r = probe_post(vt, mr, IBV_WR_ATOMIC_FETCH_AND_ADD, &words[0], &words[1], 1, 0);
	if (r) {
		DDSS_ERR("verbs: loopback fetch&add probe failed on %s: %s", dev, strerror(-r));
		goto dereg;
	}
	seen = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
	if (seen != pattern + 1 || (vt->atomic_be ? be64toh(words[1]) : words[1]) != pattern) {
		DDSS_ERR("verbs: %s's fetch&add of 1 on 0x%016llx left 0x%016llx in memory "
			 "(returned 0x%016llx): its atomics do not use host byte order on the "
			 "target word, which the CPU and RDMA reads also touch; not starting "
			 "(DDSS_TRANSPORT=tcp, or DDSS_VERBS_DISABLE=atomics to run without them)",
			 dev, (unsigned long long)pattern, (unsigned long long)seen,
			 (unsigned long long)words[1]);
		r = -EPROTO;
		goto dereg;
	}
	DDSS_INFO("verbs: %s: atomic results %s, target words in host order", dev,
		  vt->atomic_be ? "big-endian (converted)" : "in host order");
dereg:
	ibv_dereg_mr(mr);
free_page:
	free(words);
	return r;
}

static int verbs_start(struct ddss_tp *tp)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	int r;

	if (vt->started)
		return -EALREADY;
	if (!vt->pool) {
		DDSS_ERR("start: register the pool first");
		return -EINVAL;
	}
	/* Test switch: a device that opens but cannot start (the automatic choice's
	 * fallback to tcp is tested with it). */
	if (verbs_simulate_lack("start")) {
		DDSS_ERR("verbs: not starting on %s: DDSS_VERBS_DISABLE=start", vt->base.device);
		return -ENODEV;
	}
	r = verbs_conn_start(vt);
	return r ? r : probe_atomic_order(vt);
}

static int verbs_mem_register(struct ddss_tp *tp, void *addr, size_t len, bool expose,
			      struct ddss_tp_mr **mr_p)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	int access = IBV_ACCESS_LOCAL_WRITE;
	struct ddss_tp_mr *m;
	int64_t t0;

	if (!addr || !len || !mr_p)
		return -EINVAL;
	/* Atomics need 8-byte-aligned words, so the pool must start aligned. */
	if (expose && (vt->pool || vt->started || (uintptr_t)addr % 8))
		return -EINVAL;
	if (expose)
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	if (expose) /* the pool is ours, page-aligned: not the application's memory */
		verbs_dontfork(addr, len);
	t0 = ddss_now_ns();
	m->mr = ibv_reg_mr(vt->pd, addr, len, access);
	if (!m->mr) {
		int r = errno ? -errno : -ENOMEM;

		DDSS_ERR("verbs: cannot register %zu bytes: %s%s", len, strerror(-r),
			 r == -ENOMEM || r == -EPERM ? " (check ulimit -l)" : "");
		free(m);
		return r;
	}
	m->exposed = expose;
	/* Pinning is most of the cost, so huge pages show here (DDSS_HUGEPAGES, docs). */
	if (expose)
		DDSS_INFO("verbs: pool of %zu MiB registered on %s in %.1f ms", len >> 20,
			  vt->base.device, (double)(ddss_now_ns() - t0) / 1e6);
	pthread_mutex_lock(&vt->mr_mu);
	m->next = vt->mrs;
	vt->mrs = m;
	if (expose)
		vt->pool = m;
	pthread_mutex_unlock(&vt->mr_mu);
	*mr_p = m;
	return 0;
}

static int verbs_mem_deregister(struct ddss_tp *tp, struct ddss_tp_mr *mr)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	struct ddss_tp_mr **pp;
	int r = -EINVAL;

	if (!mr || (mr->exposed && vt->started))
		return -EINVAL;
	pthread_mutex_lock(&vt->mr_mu);
	for (pp = &vt->mrs; *pp; pp = &(*pp)->next)
		if (*pp == mr) {
			*pp = mr->next;
			r = 0;
			break;
		}
	if (r == 0 && mr == vt->pool)
		vt->pool = NULL;
	pthread_mutex_unlock(&vt->mr_mu);
	if (r == 0) {
		ibv_dereg_mr(mr->mr);
		free(mr);
	}
	return r;
}

static int verbs_peer_connect(struct ddss_tp *tp, uint32_t rank)
{
	if (!ddss_tp_valid_rank(tp, rank))
		return -EINVAL;
	return verbs_out_ensure(&verbs_tp_of(tp)->peers[rank].out);
}

static int verbs_peer_disconnect(struct ddss_tp *tp, uint32_t rank)
{
	struct verbs_out *o;
	int r = 0;

	if (!ddss_tp_valid_rank(tp, rank))
		return -EINVAL;
	o = &verbs_tp_of(tp)->peers[rank].out;
	/*
	 * A refused rank loses access to our memory first: failing our own QP reports the
	 * peer down, and whoever sees that may already act on the refusal.
	 */
	if (ddss_tp_peer_refused(tp, rank))
		r = verbs_serve_cut(verbs_tp_of(tp), rank);
	verbs_out_fail(o, -ECONNRESET);
	pthread_mutex_lock(&o->mu);
	if (o->id && o->phase == VERBS_UP)
		rdma_disconnect(o->id);
	pthread_mutex_unlock(&o->mu);
	return r; /* a QP still serving it: ddss_tp_peer_refuse does not call it cut */
}

static int verbs_peer_readmit(struct ddss_tp *tp, uint32_t rank, const struct ddss_tp_node *node)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	struct verbs_out *o = &vt->peers[rank].out;

	verbs_out_fail(o, -ECONNRESET); /* one a connect opened as the refusal came */
	pthread_mutex_lock(&o->mu);
	/* An attempt to the old incarnation's address: over, and the next caller makes one
	 * to the new (a caller that waited on it would take its failure for its answer). */
	if (__atomic_load_n(&o->phase, __ATOMIC_ACQUIRE) == VERBS_CONNECTING) {
		o->conn_err = -ECONNRESET;
		o->retriable = true;
		__atomic_store_n(&o->phase, VERBS_FAILED, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&o->cv);
	}
	tp->nodes[rank - 1] = *node; /* out_start reads it under o->mu */
	ddss_lookup_drop(&o->lookup); /* a new process: its name is looked up afresh */
	__atomic_store_n(&o->ever_up, false, __ATOMIC_RELAXED);
	o->readmitted = true; /* it may still be starting: wait for it as at a first start */
	o->peer_epoch = 0;    /* a new process: it tells us its epoch in its first reject */
	pthread_mutex_unlock(&o->mu);
	__atomic_store_n(&vt->peers[rank].pool_len, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&vt->peers[rank].state, DDSS_TP_PEER_UNKNOWN, __ATOMIC_RELEASE);
	return 0;
}

static int verbs_peer_info(struct ddss_tp *tp, uint32_t rank, struct ddss_tp_peer_info *info_p)
{
	struct verbs_tp *vt = verbs_tp_of(tp);

	if (!ddss_tp_valid_rank(tp, rank) || !info_p)
		return -EINVAL;
	if (rank == tp->cfg.rank) {
		info_p->state = DDSS_TP_PEER_UP;
		info_p->pool_len = vt->pool ? vt->pool->mr->length : 0;
		info_p->served = false;
		return 0;
	}
	info_p->state = __atomic_load_n(&vt->peers[rank].state, __ATOMIC_ACQUIRE);
	info_p->pool_len = __atomic_load_n(&vt->peers[rank].pool_len, __ATOMIC_ACQUIRE);
	info_p->served = false;
	if (info_p->state == DDSS_TP_PEER_DOWN) {
		pthread_mutex_lock(&vt->served_mu);
		info_p->served = vt->served_qpn[rank] != 0;
		pthread_mutex_unlock(&vt->served_mu);
	}
	return 0;
}

static bool in_range(uint64_t off, uint64_t len, uint64_t pool_len)
{
	return off <= pool_len && len <= pool_len - off;
}

/* Checks shared by every one-sided operation; connects if needed. */
static inline __attribute__((always_inline)) int begin(struct verbs_tp *vt, uint32_t peer, uint64_t off, size_t len,
		 struct ddss_tp_req *req, struct verbs_out **o_p)
{
	struct verbs_out *o;
	int r;

	if (!req || !ddss_tp_valid_rank(&vt->base, peer))
		return -EINVAL;
	o = &vt->peers[peer].out;
	r = verbs_out_ensure(o);
	if (r)
		return r;
	if (!in_range(off, len, __atomic_load_n(&vt->peers[peer].pool_len, __ATOMIC_ACQUIRE)))
		return -ERANGE;
	memset(verbs_priv(req), 0, sizeof(struct verbs_req_priv));
	req->done = 0;
	req->status = 0;
	req->peer = peer;
	req->remote_off = off;
	*o_p = o;
	return 0;
}

/*
 * A read or write posted "more" (ddss_tp_post_*_more): this thread's one held WR, posted
 * in one chain with the thread's next WR to the same peer, or alone when the thread posts
 * elsewhere, waits or tests. Per thread, so another thread's posts never reorder ours.
 */
static __thread struct {
	struct verbs_out *o;
	struct ddss_tp_req *req;
	struct ibv_send_wr wr;
	struct ibv_sge sge;
} held;

/* Post the held WR, alone or with @wr (same peer) behind it; @wr NULL: alone. */
static int post_held(struct verbs_tp *vt, struct ibv_send_wr *wr)
{
	struct verbs_out *o = held.o;
	struct ddss_tp_req *req = held.req;
	int r;

	held.o = NULL;
	held.wr.sg_list = &held.sge;
	held.wr.next = wr;
	r = verbs_post(o, &held.wr);
	if (r) /* its poster already has 0: it learns the error when it waits */
		verbs_req_finish(vt, req, r);
	return r;
}

/* Before any other post, wait or test of this thread: ring the held doorbell. */
static inline void push_held(struct verbs_tp *vt)
{
	if (__builtin_expect(held.o != NULL, 0))
		post_held(vt, NULL);
}

/*
 * DDSS_TP_FENCE on @o: the send flag that keeps it, or, where the device's flag cannot be
 * trusted (fence_by_wait, verbs_caps.c), 0 once this thread's held WR is posted and @o's
 * earlier WRs have completed. Negative: the connection failed meanwhile.
 */
static int fence_flag(struct verbs_tp *vt, struct verbs_out *o)
{
	if (!vt->fence_by_wait)
		return IBV_SEND_FENCE;
	push_held(vt);
	return verbs_wait_earlier(o);
}

/*
 * This thread's chain of WRs posted "more" (DDSS_TP_MORE): the connection, and the connect
 * attempt whose QP its first WR went into. An atomic posted "more" completes what they
 * wrote (a write or delta put's fetch&add behind its copy), so it must go on their QP: if
 * that one failed meanwhile and begin() connected again, the WRs before it were flushed,
 * and the atomic on the new QP would complete a version whose copy was lost. It fails with
 * -ECONNRESET instead, as on tcp (tcp_chan.c, "chain"). A copy longer than the port's
 * largest message is posted at once as several WRs, apart from its fetch&add (a held one
 * goes in one chain with the atomic, on one QP). The chain ends at a post without "more",
 * a wait or a test of this thread. The attempt is read before begin(): a reconnect in
 * between makes the atomic fail for nothing (safe), never pass wrongly.
 */
static __thread struct {
	const struct verbs_out *o;
	unsigned attempt;
} chain;

static unsigned out_attempt(struct verbs_tp *vt, uint32_t peer)
{
	return ddss_tp_valid_rank(&vt->base, peer) ?
		       __atomic_load_n(&vt->peers[peer].out.attempts, __ATOMIC_ACQUIRE) : 0;
}

/* After a post to @o with @flags that began with connect attempt @attempt. */
static inline void chain_note(const struct verbs_out *o, unsigned flags, unsigned attempt)
{
	if (!(flags & DDSS_TP_MORE)) {
		if (chain.o == o)
			chain.o = NULL;
	} else if (chain.o != o) {
		chain.o = o;
		chain.attempt = attempt;
	}
}

/* Every post of this provider: behind the thread's held WR, in one chain if to its peer. */
static inline __attribute__((always_inline)) int post_wr(struct verbs_tp *vt, struct verbs_out *o,
							 struct ibv_send_wr *wr)
{
	if (__builtin_expect(held.o != NULL, 0)) {
		/* With the read guard a READ/atomic goes alone (verbs_guard.c): no chain. */
		if (held.o == o && !vt->read_guard)
			return post_held(vt, wr);
		post_held(vt, NULL);
	}
	return verbs_post(o, wr);
}

/*
 * Reads and writes. A transfer longer than the port's largest message goes as several
 * WRs; only the last carries the request (an RC QP completes them in order). Inlined into
 * each operation, like post_atomic: one call less on the fast path (verbs_fast.h says why).
 */
static inline __attribute__((always_inline)) int post_rw(struct verbs_tp *vt, uint32_t peer, enum ddss_tp_op op, uint64_t off,
		   void *local, size_t len, struct ddss_tp_req *req, unsigned flags)
{
	bool hold = flags & DDSS_TP_MORE;
	unsigned attempt = hold ? out_attempt(vt, peer) : 0;
	struct verbs_out *o;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { 0 };
	size_t done = 0;
	int fence, r;

	if (!local || len == 0)
		return -EINVAL;
	r = begin(vt, peer, off, len, req, &o);
	if (r)
		return r;
	chain_note(o, flags, attempt);
	fence = flags & DDSS_TP_FENCE ? fence_flag(vt, o) : 0;
	if (fence < 0)
		return fence;
	req->op = op;
	req->local = local;
	req->len = len;
	wr.opcode = op == DDSS_TP_OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.rkey = o->rkey;
	if (op == DDSS_TP_OP_WRITE && len <= o->inline_max) {
		/* Inline: the bytes are copied at post time; no registration, no staging. */
		sge = (struct ibv_sge){ .addr = (uintptr_t)local, .length = (uint32_t)len };
		wr.send_flags = IBV_SEND_INLINE;
	} else {
		r = verbs_mem_prepare(vt, req, local, len, op == DDSS_TP_OP_READ, &sge);
		if (r)
			return r;
	}
	wr.send_flags |= (unsigned)fence;
	for (;;) {
		size_t chunk = len - done < vt->max_msg ? len - done : vt->max_msg;
		bool last = done + chunk == len;
		struct ibv_sge part = sge;

		part.addr = sge.addr + done;
		part.length = (uint32_t)chunk;
		wr.sg_list = &part;
		wr.wr_id = last ? (uintptr_t)req : verbs_wrid_credit(peer);
		wr.wr.rdma.remote_addr = o->raddr + off + done;
		if (hold && last && !done && held.o != o) {
			/* One WR, held for this thread's next (post_held; its sge copied). A
			 * second held one to the same peer goes below, chained behind the first. */
			push_held(vt);
			held.o = o;
			held.req = req;
			held.wr = wr;
			held.sge = part;
			return 0;
		}
		r = post_wr(vt, o, &wr);
		if (r) {
			/* Earlier chunks (if any) are in flight on a QP that now fails as a whole. */
			if (done)
				verbs_out_fail(o, r);
			verbs_mem_finish(vt, req, false);
			return r;
		}
		done += chunk;
		if (last) {
			if (len > vt->max_msg)
				__atomic_add_fetch(&vt->base.transfers_split, 1, __ATOMIC_RELAXED);
			return 0;
		}
	}
}

static int verbs_post_read(struct ddss_tp *tp, uint32_t peer, uint64_t off, void *local,
			   size_t len, struct ddss_tp_req *req)
{
	return post_rw(verbs_tp_of(tp), peer, DDSS_TP_OP_READ, off, local, len, req, 0);
}

static int verbs_post_write(struct ddss_tp *tp, uint32_t peer, uint64_t off, const void *local,
			    size_t len, struct ddss_tp_req *req)
{
	return post_rw(verbs_tp_of(tp), peer, DDSS_TP_OP_WRITE, off, (void *)local, len, req, 0);
}

static inline __attribute__((always_inline)) int post_atomic(struct verbs_tp *vt, uint32_t peer, enum ddss_tp_op op, uint64_t off,
		       uint64_t a, uint64_t b, struct ddss_tp_req *req, unsigned flags)
{
	unsigned attempt = flags & DDSS_TP_MORE ? out_attempt(vt, peer) : 0;
	struct verbs_out *o;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { 0 };
	int fence, r;

	if (off % 8)
		return -EINVAL;
	if (!vt->has_atomics)
		return -EOPNOTSUPP;
	r = begin(vt, peer, off, 8, req, &o);
	if (r)
		return r;
	if ((flags & DDSS_TP_MORE) && chain.o == o &&
	    __atomic_load_n(&o->attempts, __ATOMIC_ACQUIRE) != chain.attempt)
		return -ECONNRESET; /* what it completes went with a QP that failed since */
	chain_note(o, flags, attempt);
	fence = flags & DDSS_TP_FENCE ? fence_flag(vt, o) : 0;
	if (fence < 0)
		return fence;
	req->op = op;
	req->local = &req->result;
	req->len = 8;
	req->operand[0] = a;
	req->operand[1] = b;
	r = verbs_mem_prepare(vt, req, &req->result, 8, true, &sge);
	if (r)
		return r;
	wr.wr_id = (uintptr_t)req;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op == DDSS_TP_OP_CAS ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = o->raddr + off;
	wr.wr.atomic.rkey = o->rkey;
	wr.wr.atomic.compare_add = a;
	wr.wr.atomic.swap = b;
	wr.send_flags = (unsigned)fence;
	r = post_wr(vt, o, &wr);
	if (r)
		verbs_mem_finish(vt, req, false);
	return r;
}

static int verbs_post_cas(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t compare,
			  uint64_t swap, struct ddss_tp_req *req)
{
	return post_atomic(verbs_tp_of(tp), peer, DDSS_TP_OP_CAS, off, compare, swap, req, 0);
}

static int verbs_post_fadd(struct ddss_tp *tp, uint32_t peer, uint64_t off, uint64_t add,
			   struct ddss_tp_req *req)
{
	return post_atomic(verbs_tp_of(tp), peer, DDSS_TP_OP_FADD, off, add, 0, req, 0);
}

/*
 * DDSS_TP_FENCE: the WR starts only once the QP's earlier READs and atomics have completed
 * (a real NIC lets a later request pass them): IBV_SEND_FENCE, or on rxe a wait in the
 * poster (fence_flag).
 */
static int verbs_post_ex(struct ddss_tp *tp, enum ddss_tp_op op, uint32_t peer, uint64_t off,
			 void *local, size_t len, uint64_t a, uint64_t b, unsigned flags,
			 struct ddss_tp_req *req)
{
	struct verbs_tp *vt = verbs_tp_of(tp);

	/* DDSS_TP_WAITED: a work request leaves at once anyway (nothing to combine); so does
	 * a DDSS_TP_LATER one. DDSS_TP_BOUND: kept by draining the old QP before connecting
	 * again. */
	if (flags & ~(unsigned)DDSS_TP_POST_FLAGS)
		return -EINVAL;
	switch (op) {
	case DDSS_TP_OP_READ:
	case DDSS_TP_OP_WRITE:
		return post_rw(vt, peer, op, off, local, len, req, flags);
	case DDSS_TP_OP_CAS:
	case DDSS_TP_OP_FADD:
		/* MORE: a hint here. The atomic goes at once, in one chain behind this
		 * thread's held WR (post_wr), so nothing is left for the caller to push. */
		return post_atomic(vt, peer, op, off, a, op == DDSS_TP_OP_CAS ? b : 0, req, flags);
	}
	return -EINVAL;
}

/* Each notification is a zero-byte SEND carrying the value as immediate data; n of them
 * go as one chain: one post, one doorbell (one alone takes the post fast path). */
static int verbs_notify_many(struct ddss_tp *tp, uint32_t peer, const uint32_t *values, unsigned n)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	struct ibv_send_wr wr[DDSS_TP_NOTIFY_BATCH];
	struct verbs_out *o;
	int r;

	if (!ddss_tp_notify_args_ok(tp, peer, values, n))
		return -EINVAL;
	o = &vt->peers[peer].out;
	r = verbs_out_ensure(o);
	if (r)
		return r;
	for (unsigned i = 0; i < n; i++)
		wr[i] = (struct ibv_send_wr){ .wr_id = verbs_wrid_credit(peer),
					      .opcode = IBV_WR_SEND_WITH_IMM,
					      .imm_data = htobe32(values[i]),
					      .next = i + 1 < n ? &wr[i + 1] : NULL };
	return post_wr(vt, o, wr);
}

/* The heartbeat's lane: on the QP @peer connected to us (verbs_liveness.c). */
static int verbs_msg_send_unordered(struct ddss_tp *tp, uint32_t peer, uint16_t tag,
				    const void *buf, size_t len)
{
	if (!ddss_tp_valid_rank(tp, peer) || len > DDSS_TP_MSG_MAX || (len && !buf))
		return -EINVAL;
	return verbs_liveness_send(verbs_tp_of(tp), peer, tag, buf, len);
}

/*
 * A control message is one SEND of header + payload: inline when it fits, else from a
 * private copy that a provider-owned request frees on completion.
 */
static int verbs_msg_send(struct ddss_tp *tp, uint32_t peer, uint16_t tag, const void *buf,
			  size_t len)
{
	struct verbs_tp *vt = verbs_tp_of(tp);
	unsigned char hdr[VERBS_MSG_HDR_LEN];
	struct ibv_send_wr wr = { 0 };
	struct ibv_sge sge[2];
	struct ddss_tp_req *req;
	struct verbs_out *o;
	unsigned char *copy;
	int r;

	if (!ddss_tp_valid_rank(tp, peer) || len > DDSS_TP_MSG_MAX || (len && !buf))
		return -EINVAL;
	o = &vt->peers[peer].out;
	r = verbs_out_ensure(o);
	if (r)
		return r;
	verbs_msg_hdr_encode(tag, (uint32_t)len, hdr);
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = sge;
	if (VERBS_MSG_HDR_LEN + len <= o->inline_max) {
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)hdr, .length = VERBS_MSG_HDR_LEN };
		sge[1] = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = (uint32_t)len };
		wr.num_sge = len ? 2 : 1;
		wr.send_flags = IBV_SEND_INLINE;
		wr.wr_id = verbs_wrid_credit(peer);
		return post_wr(vt, o, &wr);
	}
	req = calloc(1, sizeof(*req));
	copy = malloc(VERBS_MSG_HDR_LEN + len);
	if (!req || !copy) {
		free(req);
		free(copy);
		return -ENOMEM;
	}
	memcpy(copy, hdr, VERBS_MSG_HDR_LEN);
	memcpy(copy + VERBS_MSG_HDR_LEN, buf, len);
	req->peer = peer;
	req->local = copy;
	req->len = VERBS_MSG_HDR_LEN + len;
	r = verbs_mem_prepare(vt, req, copy, req->len, false, &sge[0]);
	if (r) {
		free(copy);
		free(req);
		return r;
	}
	verbs_priv(req)->internal = 1;
	wr.num_sge = 1;
	wr.wr_id = (uintptr_t)req;
	r = post_wr(vt, o, &wr);
	if (r) {
		verbs_mem_finish(vt, req, false);
		free(copy);
		free(req);
	}
	return r;
}

static int verbs_test_op(struct ddss_tp *tp, struct ddss_tp_req *req)
{
	if (!req || !ddss_tp_valid_rank(tp, req->peer))
		return -EINVAL;
	chain.o = NULL; /* a wait or test ends this thread's chain */
	push_held(verbs_tp_of(tp));
	return verbs_test(verbs_tp_of(tp), req);
}

static int verbs_wait_op(struct ddss_tp *tp, struct ddss_tp_req *req, int timeout_ms)
{
	if (!req || !ddss_tp_valid_rank(tp, req->peer))
		return -EINVAL;
	chain.o = NULL;
	push_held(verbs_tp_of(tp));
	return verbs_wait(verbs_tp_of(tp), req, timeout_ms);
}

const struct ddss_tp_ops ddss_verbs_ops = {
	.name = "verbs",
	.open = verbs_open,
	.start = verbs_start,
	.close = verbs_close,
	.mem_register = verbs_mem_register,
	.mem_deregister = verbs_mem_deregister,
	.peer_connect = verbs_peer_connect,
	.peer_disconnect = verbs_peer_disconnect,
	.peer_info = verbs_peer_info,
	.peer_readmit = verbs_peer_readmit,
	.post_read = verbs_post_read,
	.post_write = verbs_post_write,
	.post_ex = verbs_post_ex,
	.post_cas = verbs_post_cas,
	.post_fadd = verbs_post_fadd,
	.notify_many = verbs_notify_many,
	.msg_send = verbs_msg_send,
	.msg_send_unordered = verbs_msg_send_unordered,
	.test = verbs_test_op,
	.wait = verbs_wait_op,
	.thread_fds = verbs_thread_fds,
};
