/*
 * Daemon mode, local reads (docs/daemon.md "Local reads"): a client maps its daemon's pool
 * read-only and copies null-model segments homed on its node straight out of it, without
 * a call to the daemon. Safe because such a get promises no more than one RDMA read would
 * (no lock, no version), and because a segment's memory is only reused after its release
 * began, which bumps the pool's release epoch: a copy made while the epoch stood still
 * came from the live segment.
 */
#ifndef DDSS_DAEMON_LOCAL_H
#define DDSS_DAEMON_LOCAL_H

#include <stddef.h>
#include <stdint.h>

struct ddss_local;

/* Map @len bytes of the daemon's pool memfd @fd (the caller keeps @fd). */
int ddss_local_open(int fd, uint64_t len, uint64_t epoch_off, struct ddss_local **lv_p);
void ddss_local_close(struct ddss_local *lv);

/* The release epoch now: read before asking the daemon for a descriptor to learn. */
uint64_t ddss_local_epoch(const struct ddss_local *lv);

/* Whether a descriptor of @key is known (still to be checked against the epoch). */
int ddss_local_known(struct ddss_local *lv, uint64_t key);

/*
 * Remember where null segment @key lies in the pool ([data_off, data_off + size)), as the
 * daemon said after a get that started at epoch @epoch. Ignored if out of the mapping.
 */
void ddss_local_learn(struct ddss_local *lv, uint64_t key, uint64_t epoch, uint64_t data_off,
		      uint64_t size);

/*
 * Copy [@offset, @offset + @len) of @key into @buf from the pool. 1 if done; 0 if it cannot
 * be served here (unknown key, released since, range past the end: the daemon then gives
 * the answer, errors included).
 */
int ddss_local_get(struct ddss_local *lv, uint64_t key, size_t offset, void *buf, size_t len);

/* Gets served from the pool so far (tests, benchmarks). */
uint64_t ddss_local_reads(const struct ddss_local *lv);

#endif /* DDSS_DAEMON_LOCAL_H */
