/*
 * The messages of lock recovery (tag DDSS_MSG_LOCK): lock_recover.c (a closer's drain that
 * only dead shared holders owe) and lock_agent.c (a lock whose queue runs through a dead or
 * failed request). docs/failure.md tells the protocol.
 */
#ifndef DDSS_LOCK_LOCK_RECOVER_H
#define DDSS_LOCK_LOCK_RECOVER_H

#include "lock/lock_int.h"

enum rc_type {
	/* lock_recover.c */
	RC_CHECK = 1, /* closer -> home: id = check id; hdr, pred = the epoch */
	RC_SURVEY,    /* home -> every member: id = survey id; hdr, pred */
	RC_FLUSH,     /* p's rank -> every member: id = survey id, arg = the home */
	RC_REPORT,    /* member -> home: id = survey id, arg = busy */
	RC_ANSWER,    /* home -> closer: id = check id, arg = clear */
	/* lock_agent.c */
	RC_AGENT_FIRST = 16,
	RC_RECOVER = RC_AGENT_FIRST, /* asker -> home: id = ask id, hdr = the segment's key */
	RC_RECOVERED, /* home -> asker: id = ask id, arg = -status */
	RC_XSURVEY,   /* home -> every member: id = survey id, hdr */
	RC_XREPORT,   /* member -> home: id = survey id, arg = busy, pred = n; then n ids */
};

struct rc_msg {
	uint32_t type;
	uint32_t id;
	uint64_t hdr;
	uint32_t pred;
	uint32_t arg;
};

int lock_rc_send(struct ddss_lock *lk, uint32_t to, uint32_t type, uint32_t id, uint64_t hdr,
		 uint32_t pred, uint32_t arg);
/* Whether this rank sees @rank down (its connection closed, or declared dead). */
bool lock_rc_down(struct ddss_lock *lk, uint32_t rank);

#endif /* DDSS_LOCK_LOCK_RECOVER_H */
