/* Holding a transport's progress thread from a test: tp_hold.h. */
#include "common/tp_hold.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned holds, releases; /* handlers that held so far; let-gos so far */
static uint32_t hold_from;
static uint16_t hold_tag;

static struct timespec deadline(void)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += TP_HOLD_MS / 1000;
	return until;
}

void tp_hold_on(uint32_t from, uint16_t tag)
{
	pthread_mutex_lock(&mu);
	hold_from = from;
	hold_tag = tag;
	pthread_mutex_unlock(&mu);
}

void tp_hold_on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len)
{
	struct timespec until = deadline();

	(void)arg, (void)buf, (void)len;
	pthread_mutex_lock(&mu);
	if (from == hold_from && tag == hold_tag) {
		unsigned mine = holds++;

		pthread_cond_broadcast(&cv);
		while (releases <= mine && pthread_cond_timedwait(&cv, &mu, &until) == 0)
			;
	}
	pthread_mutex_unlock(&mu);
}

bool tp_hold_wait_held(void)
{
	struct timespec until = deadline();
	bool r;

	pthread_mutex_lock(&mu);
	while (holds <= releases && pthread_cond_timedwait(&cv, &mu, &until) == 0)
		;
	r = holds > releases;
	pthread_mutex_unlock(&mu);
	return r;
}

void tp_hold_let_go(void)
{
	pthread_mutex_lock(&mu);
	releases++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

int tp_hold_park(struct ddss_tp *from, uint32_t to)
{
	uint16_t tag;
	int r;

	pthread_mutex_lock(&mu);
	tag = hold_tag;
	pthread_mutex_unlock(&mu);
	r = ddss_tp_msg_send(from, to, tag, "h", 1);
	if (r)
		return r;
	return tp_hold_wait_held() ? 0 : -ETIMEDOUT;
}
