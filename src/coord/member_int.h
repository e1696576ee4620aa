/* Inside membership: the state member.c and member_view.c share. */
#ifndef DDSS_COORD_MEMBER_INT_H
#define DDSS_COORD_MEMBER_INT_H

#include "coord/etcd.h"
#include "coord/member.h"

#include <json-c/json.h>
#include <pthread.h>

#define DDSS_MEMBER_SLOTS_MAX 4096
#define DDSS_MEMBER_KEY_MAX 256
/* The deadline gives up TTL/DRIFT_DIV for clock rate drift against etcd's leader (1%,
 * ten times what a crystal drifts) and TTL/MARGIN_DIV for an operation under way. */
#define DDSS_MEMBER_DRIFT_DIV 100
#define DDSS_MEMBER_MARGIN_DIV 5

struct ddss_member {
	struct ddss_etcd *etcd;
	char *prefix;
	char *addr;
	char nonce[17];
	uint32_t max;
	uint32_t slot;
	int64_t incarnation;
	uint32_t generation;   /* our slot's generation (P gen/SSSSS): its members so far */
	int64_t lease;
	int ttl_s;
	int64_t margin_ns;
	int64_t deadline_ns;  /* atomic: stop acting at this monotonic time */
	int64_t granted_ns;   /* when the lease grant went out: the first renewal counts from it */
	int fenced;           /* atomic: why we stopped acting for good, 0 while acting */
	int etcd_err;         /* atomic: the last renewal's error, 0 if it worked */
	ddss_member_view_fn on_view;
	void *arg;

	pthread_mutex_t mu;   /* view, stop */
	pthread_cond_t cv;    /* wakes the renewal thread (stop, fence) */
	bool stop;
	pthread_t renew_thread;
	struct ddss_view view;      /* under mu; changed only by the watch thread */
	int64_t seen_rev;           /* atomic: the last etcd revision the watch delivered (any key) */
	int64_t *view_lease;        /* [slot] under mu: the member's lease (for reports) */
	struct ddss_etcd_watch *watch;
};

int64_t member_now_ns(void);
void member_key(const struct ddss_member *m, const char *kind, uint32_t slot, char *key,
		size_t len);
/* The slot in a key "<prefix><kind>SSSSS", or 0. */
uint32_t member_slot_of(const struct ddss_member *m, const char *key, const char *kind);
/* Stop acting for good (the first reason stays), and say why once. */
void member_fence(struct ddss_member *m, int why, const char *what);

/* member_view.c: read the view and follow it from there. */
int member_view_start(struct ddss_member *m);
void member_view_stop(struct ddss_member *m);

#endif /* DDSS_COORD_MEMBER_INT_H */
