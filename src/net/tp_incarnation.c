/*
 * Incarnations in the transport (coordinator mode, docs/membership.md "Replacement"): the
 * group id each pair's handshakes carry, and taking a declared-dead rank back as a new
 * process. A static group has no incarnations and keeps its one group id.
 */
#include "net/transport.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <sodium.h>
#include <string.h>

static uint64_t incarnation_of(const struct ddss_tp *tp, uint32_t rank)
{
	return __atomic_load_n(&tp->incarnation[rank], __ATOMIC_ACQUIRE);
}

uint64_t ddss_tp_pair_group(const struct ddss_tp *tp, uint32_t peer)
{
	uint32_t lo, hi;
	uint64_t in[3], out;

	if (!tp->incarnation || !ddss_tp_valid_rank(tp, peer))
		return tp->cfg.group;
	/* The same for both sides: the lower rank's incarnation first. */
	lo = peer < tp->cfg.rank ? peer : tp->cfg.rank;
	hi = peer < tp->cfg.rank ? tp->cfg.rank : peer;
	in[0] = tp->cfg.group;
	in[1] = incarnation_of(tp, lo);
	in[2] = incarnation_of(tp, hi);
	for (int i = 0; i < 3; i++)
		in[i] = htole64(in[i]);
	crypto_generichash((unsigned char *)&out, sizeof(out), (const unsigned char *)in,
			   sizeof(in), NULL, 0);
	return le64toh(out);
}

int ddss_tp_peer_readmit(struct ddss_tp *tp, uint32_t rank, const struct ddss_tp_node *node,
			 uint64_t incarnation, uint32_t generation)
{
	int r;

	if (!tp->incarnation)
		return -EOPNOTSUPP;
	if (!ddss_tp_valid_rank(tp, rank) || rank == tp->cfg.rank || !node || !incarnation ||
	    !ddss_tp_peer_refused(tp, rank))
		return -EINVAL;
	/* The old process must be cut off first: the new one may take over what the old one
	 * left half done, as its own (a write put's mark names only the rank, coh_slots.c).
	 * A cut that failed (a QP that would not go to the error state) is tried once more. */
	if (!ddss_tp_peer_cut(tp, rank)) {
		ddss_tp_peer_refuse(tp, rank);
		if (!ddss_tp_peer_cut(tp, rank))
			return -EBUSY;
	}
	/* The new incarnation first: a handshake accepted after the door opens is checked
	 * against it, never against the old one's. */
	__atomic_store_n(&tp->incarnation[rank], incarnation, __ATOMIC_RELEASE);
	__atomic_store_n(&tp->generation[rank], generation, __ATOMIC_RELEASE);
	r = tp->ops->peer_readmit(tp, rank, node);
	if (r)
		return r;
	__atomic_store_n(&tp->refused[rank], 0, __ATOMIC_SEQ_CST);
	DDSS_INFO("rank %u readmitted: incarnation %llu (generation %u) at %s:%u", rank,
		  (unsigned long long)incarnation, generation, node->host, node->port);
	return 0;
}
