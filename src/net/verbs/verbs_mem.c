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
#include <sys/mman.h>
#include <unistd.h>

int verbs_dontfork(void *addr, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)addr & ~(page - 1);
	uintptr_t hi = ((uintptr_t)addr + len + page - 1) & ~(page - 1);

	if (madvise((void *)lo, hi - lo, MADV_DONTFORK)) {
		int r = -errno;

		DDSS_WARN("verbs: cannot mark %zu registered bytes MADV_DONTFORK: %s", len,
			  strerror(-r));
		return r;
	}
	return 0;
}

int verbs_mem_open(struct verbs_tp *vt)
{
	size_t len = (size_t)VERBS_STAGE_COUNT * VERBS_STAGE_LEN;

	pthread_mutex_init(&vt->mr_mu, NULL);
	if (posix_memalign((void **)&vt->stage_buf, 4096, len))
		return -ENOMEM;
	vt->stage_next = calloc(VERBS_STAGE_COUNT, sizeof(*vt->stage_next));
	if (!vt->stage_next)
		return -ENOMEM;
	/*
	 * Local access only: staging slots are the local side of transfers (read data and
	 * atomic results land here: local write). No peer and no loopback request targets
	 * them; the byte-order probe has a page of its own (verbs_provider.c).
	 */
	verbs_dontfork(vt->stage_buf, len);
	vt->stage_mr = ibv_reg_mr(vt->pd, vt->stage_buf, len, IBV_ACCESS_LOCAL_WRITE);
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

int verbs_mem_prepare_slow(struct verbs_tp *vt, struct ddss_tp_req *req, void *buf, size_t len,
			   bool to_local, struct ibv_sge *sge)
{
	struct verbs_req_priv *pv = verbs_priv(req);
	struct ibv_mr *mr = NULL;

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

void verbs_mem_unregister(struct ddss_tp_req *req)
{
	ibv_dereg_mr(verbs_priv(req)->dyn);
	verbs_priv(req)->dyn = NULL;
}
