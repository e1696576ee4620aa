/* Waiting threads, each on a futex word of its own (see sleepers.h). */
#include "net/sleepers.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void ddss_sleeper_link(struct ddss_sleeper **list, struct ddss_sleeper *me)
{
	me->woken = 0;
	me->next = *list;
	*list = me;
}

/* Take the sleeper *@link points at off the list and mark it claimed; NULL at the end. */
static struct ddss_sleeper *claim(struct ddss_sleeper **link)
{
	struct ddss_sleeper *s = *link;

	if (s) {
		*link = s->next;
		__atomic_store_n(&s->woken, 1, __ATOMIC_RELEASE);
	}
	return s;
}

struct ddss_sleeper *ddss_sleepers_claim_req(struct ddss_sleeper **list,
					     const struct ddss_tp_req *req)
{
	struct ddss_sleeper **link = list;

	while (*link && (*link)->req != req)
		link = &(*link)->next;
	return claim(link);
}

struct ddss_sleeper *ddss_sleepers_claim_pending(struct ddss_sleeper **list)
{
	struct ddss_sleeper **link = list;

	/* A sleeper with no request waits for any completion: always pending. */
	while (*link && (*link)->req && ddss_tp_req_done((*link)->req))
		link = &(*link)->next;
	return claim(link);
}

void ddss_sleepers_wake_all(struct ddss_sleeper **list)
{
	while (*list)
		ddss_sleeper_wake(claim(list));
}

void ddss_sleeper_unlink(struct ddss_sleeper **list, struct ddss_sleeper *me)
{
	struct ddss_sleeper **link = list;

	while (*link && *link != me)
		link = &(*link)->next;
	if (*link)
		*link = me->next;
}

bool ddss_sleeper_wait(struct ddss_sleeper *me, int64_t deadline_ns)
{
	while (!ddss_sleeper_claimed(me)) {
		struct timespec ts, *tsp = NULL;

		if (deadline_ns != INT64_MAX) {
			int64_t left = deadline_ns - ddss_now_ns();

			if (left <= 0)
				return false;
			ts = (struct timespec){ left / 1000000000, left % 1000000000 };
			tsp = &ts;
		}
		syscall(SYS_futex, &me->woken, FUTEX_WAIT_PRIVATE, 0, tsp, NULL, 0);
	}
	return true;
}

/*
 * The sleeper may have seen its mark and left already: the wake only names the address
 * (a stack word, still mapped while its thread lives; EFAULT after), and a futex waiter
 * that word's next user may have treats a wake it did not expect as spurious.
 */
void ddss_sleeper_wake(struct ddss_sleeper *s)
{
	syscall(SYS_futex, &s->woken, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
