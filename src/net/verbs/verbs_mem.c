/*
 * The local side of transfers. Callers pass any buffer; the NIC needs registered memory.
 *  - A small one (<= VERBS_STAGE_LEN) goes through a staging slot of one registered arena:
 *    a memcpy is far cheaper than a registration (or than looking one up).
 *  - A larger one inside a registered region (the pool, or mem_register(expose = false))
 *    is used in place: zero copy.
 *  - A larger one, or any when the slots run out, is registered for the duration of the
 *    operation (registration cost is small next to moving that many bytes).
 */
#include "net/verbs/verbs_int.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int verbs_mem_open(struct verbs_tp *vt)
{
	size_t len = (size_t)VERBS_STAGE_COUNT * VERBS_STAGE_LEN;

	pthread_mutex_init(&vt->mr_mu, NULL);
	if (posix_memalign((void **)&vt->stage_buf, 4096, len))
		return -ENOMEM;
	vt->stage_next = calloc(VERBS_STAGE_COUNT, sizeof(*vt->stage_next));
	if (!vt->stage_next)
		return -ENOMEM;
	/* Remote atomic access lets the loopback probe of atomic byte order target a slot. */
	vt->stage_mr = ibv_reg_mr(vt->pd, vt->stage_buf, len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!vt->stage_mr) {
		int r = -errno;

		DDSS_ERR("verbs: cannot register %zu staging bytes: %s", len, strerror(-r));
		return r;
	}
	for (uint32_t i = 0; i < VERBS_STAGE_COUNT; i++)
		verbs_stage_put(vt, VERBS_STAGE_COUNT - 1 - i);
	return 0;
}

void verbs_mem_close(struct verbs_tp *vt)
{
	struct ddss_tp_mr *m, *next;

	for (m = vt->mrs; m; m = next) {
		next = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
	vt->mrs = vt->pool = NULL;
	if (vt->stage_mr)
		ibv_dereg_mr(vt->stage_mr);
	free(vt->stage_buf);
	free(vt->stage_next);
	pthread_mutex_destroy(&vt->mr_mu);
}

void *verbs_stage_addr(struct verbs_tp *vt, uint32_t slot)
{
	return vt->stage_buf + (size_t)slot * VERBS_STAGE_LEN;
}

/*
 * The free slots are a lock-free stack (a mutex pair costs a few percent of an emulated
 * round trip). head = (tag << 32) | (slot + 1), 0 in the low half meaning empty; every
 * change bumps the tag, so a slot popped and pushed back in between cannot fool a CAS.
 */
#define STAGE_NONE 0u

static uint64_t stage_head(uint64_t tag, uint32_t slot_plus_1)
{
	return ((tag + 1) << 32) | slot_plus_1;
}

bool verbs_stage_get(struct verbs_tp *vt, uint32_t *slot_p)
{
	uint64_t h = __atomic_load_n(&vt->stage_top, __ATOMIC_ACQUIRE), next;
	uint32_t top;

	do {
		top = (uint32_t)h;
		if (top == STAGE_NONE)
			return false;
		/* Stale if another thread pops this slot first; then the CAS fails anyway. */
		next = stage_head(h >> 32, __atomic_load_n(&vt->stage_next[top - 1], __ATOMIC_RELAXED));
	} while (!__atomic_compare_exchange_n(&vt->stage_top, &h, next, true, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	*slot_p = top - 1;
	return true;
}

void verbs_stage_put(struct verbs_tp *vt, uint32_t slot)
{
	uint64_t h = __atomic_load_n(&vt->stage_top, __ATOMIC_ACQUIRE);

	do
		__atomic_store_n(&vt->stage_next[slot], (uint32_t)h, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&vt->stage_top, &h, stage_head(h >> 32, slot + 1), true,
					    __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
}

/* The registered region that holds all of [buf, buf+len), or NULL. */
static struct ibv_mr *covering_mr(struct verbs_tp *vt, const void *buf, size_t len)
{
	uintptr_t a = (uintptr_t)buf;
	struct ddss_tp_mr *m;
	struct ibv_mr *found = NULL;

	pthread_mutex_lock(&vt->mr_mu);
	for (m = vt->mrs; m && !found; m = m->next) {
		uintptr_t lo = (uintptr_t)m->mr->addr;

		if (a >= lo && a - lo <= m->mr->length && len <= m->mr->length - (a - lo))
			found = m->mr;
	}
	pthread_mutex_unlock(&vt->mr_mu);
	return found;
}

int verbs_mem_prepare(struct verbs_tp *vt, struct ddss_tp_req *req, void *buf, size_t len,
		      bool to_local, struct ibv_sge *sge)
{
	struct verbs_req_priv *pv = verbs_priv(req);
	struct ibv_mr *mr = NULL;
	uint32_t slot;

	sge->addr = (uintptr_t)buf;
	sge->length = (uint32_t)len;
	/* Copying a small buffer costs less than looking for its registration. */
	if (len > VERBS_STAGE_LEN)
		mr = covering_mr(vt, buf, len);
	if (mr) {
		pv->local_kind = VL_DIRECT;
		sge->lkey = mr->lkey;
		return 0;
	}
	if (len <= VERBS_STAGE_LEN && verbs_stage_get(vt, &slot)) {
		void *at = verbs_stage_addr(vt, slot);

		pv->local_kind = VL_STAGE;
		pv->stage = slot;
		if (!to_local)
			memcpy(at, buf, len);
		sge->addr = (uintptr_t)at;
		sge->lkey = vt->stage_mr->lkey;
		return 0;
	}
	/* Read-only memory cannot be registered for local write, so ask only for what is used. */
	pv->dyn = ibv_reg_mr(vt->pd, buf, len, to_local ? IBV_ACCESS_LOCAL_WRITE : 0);
	if (!pv->dyn) {
		int r = errno ? -errno : -ENOMEM;

		DDSS_ERR("verbs: cannot register a %zu-byte buffer: %s", len, strerror(-r));
		return r;
	}
	pv->local_kind = VL_DYN_MR;
	sge->lkey = pv->dyn->lkey;
	return 0;
}

void verbs_mem_finish(struct verbs_tp *vt, struct ddss_tp_req *req, bool ok)
{
	struct verbs_req_priv *pv = verbs_priv(req);

	switch (pv->local_kind) {
	case VL_STAGE:
		if (ok && req->op == DDSS_TP_OP_READ)
			memcpy(req->local, verbs_stage_addr(vt, pv->stage), req->len);
		verbs_stage_put(vt, pv->stage);
		break;
	case VL_DYN_MR:
		ibv_dereg_mr(pv->dyn);
		break;
	default:
		break;
	}
	pv->local_kind = VL_NONE;
}
