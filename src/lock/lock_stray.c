/*
 * A stray id: a lost request of ours whose id may stand in a lock's tail.
 *
 * An exclusive request whose atomic on the lock word failed with its outcome unknown (it
 * timed out, or its connection went, and may have landed all the same: lock_queue.c,
 * acq_cas; a release's compare&swap likewise) loses its slot: it never hands over. A
 * request that queues behind its id is failed and asks the home for a recovery agent,
 * which takes the lock past the id (lock_agent.c). A try-lock never queues: where only
 * try-locks were made on the lock, every one found it taken for as long as this process
 * lived. So this rank asks the home itself.
 *
 * On a thread of its own: the home may be the one whose silence failed the request, and an
 * ask reconnects and waits for the answer up to the operation timeout. Up to STRAY_ASKS
 * asks, while the home is not gone and has not answered; its connects are bounded as the
 * reconnect thread's are (a refusal of the home on the heartbeat thread waits for them).
 * Once answered, the agent is in the queue; it takes the lock and releases it. An agent
 * for an id that never landed costs one acquire and release at the home.
 *
 * The thread is counted in lk->janitors (lock_janitor_spawn): ddss_lock_stop waits for it.
 */
#include "core/log.h"
#include "lock/lock_int.h"

#include <errno.h>
#include <stdlib.h>

#define STRAY_ASKS 5
#define STRAY_PAUSE_NS (100 * 1000000ll)
#define STRAY_CONNECT_MS 2000

struct stray_job {
	struct ddss_lock *lk;
	uint32_t home;
	uint64_t key;
};

/* Whether the home did not answer @r, so that asking again may help (a refusal is an answer). */
static bool unanswered(int r)
{
	return r == -ETIMEDOUT || r == -EAGAIN || r == -EHOSTDOWN || r == -ECONNRESET ||
	       r == -ENOTCONN || r == -ECONNREFUSED || r == -EPIPE;
}

static void *stray_main(void *arg)
{
	struct stray_job *job = arg;
	struct ddss_lock *lk = job->lk;
	int r = -EHOSTDOWN;

	ddss_tp_set_thread_connect_bound(STRAY_CONNECT_MS);
	for (int i = 0; i < STRAY_ASKS; i++) {
		if (__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE) ||
		    lock_peer_gone(lk, job->home))
			break;
		r = lock_agent_ask(lk, job->home, job->key, INT64_MAX);
		if (!unanswered(r))
			break;
		pthread_mutex_lock(&lk->mu);
		if (!__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
			lock_cond_wait_until(&lk->cv, &lk->mu, ddss_now_ns() + STRAY_PAUSE_NS);
		pthread_mutex_unlock(&lk->mu);
	}
	if (!r)
		DDSS_INFO("lock %#llx: rank %u takes the lock past a request lost here",
			  (unsigned long long)job->key, job->home);
	else if (!__atomic_load_n(&lk->stopping, __ATOMIC_ACQUIRE))
		DDSS_WARN("lock %#llx: a request lost here may stand in the lock's queue, and rank "
			  "%u could not be asked to take the lock past it (%s); a request that "
			  "queues there will", (unsigned long long)job->key, job->home,
			  ddss_strerror(r));
	lock_janitor_done(lk);
	free(job);
	return NULL;
}

void lock_stray_ask(struct ddss_lock *lk, uint32_t home, uint64_t key)
{
	struct stray_job *job;
	int r = -ENOMEM;

	if (!key)
		return; /* an agent's own request, or a reset: the home's own business */
	job = malloc(sizeof(*job));
	if (job) {
		*job = (struct stray_job){ .lk = lk, .home = home, .key = key };
		r = lock_janitor_spawn(lk, stray_main, job);
		if (!r)
			return;
		free(job);
	}
	if (r != -ESHUTDOWN)
		DDSS_WARN("lock %#llx: cannot ask rank %u to take the lock past a request lost "
			  "here: %s", (unsigned long long)key, home, ddss_strerror(r));
}
