/*
 * A node's address without waiting on a slow resolver past a deadline (resolve.h).
 *
 * A lookup of a name runs getaddrinfo in a detached thread and is referenced twice: by
 * that thread until it has stored its result, and by whoever waits for it (the caller, or
 * the caller's slot once it gave up). The last one frees it, with any result nobody took.
 */
#include "net/resolve.h"
#include "core/log.h"
#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STOP_SLICE_MS 100 /* how often a waiter asks @stop */

struct ddss_lookup {
	char host[256];
	char port[8];
	struct addrinfo hints;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	bool done;         /* under mu */
	int rc;            /* getaddrinfo's, once done */
	struct addrinfo *res;
	int refs;          /* atomic */
};

static void lookup_unref(struct ddss_lookup *l)
{
	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (l->res)
		freeaddrinfo(l->res);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static void *lookup_main(void *arg)
{
	struct ddss_lookup *l = arg;
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(l->host, l->port, &l->hints, &res);

	pthread_mutex_lock(&l->mu);
	l->rc = rc;
	l->res = rc ? NULL : res;
	l->done = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	lookup_unref(l);
	return NULL;
}

/* A new lookup with its thread running, referenced by it and by the caller; NULL: none. */
static struct ddss_lookup *lookup_start(const char *host, const char *port,
					const struct addrinfo *hints)
{
	struct ddss_lookup *l = calloc(1, sizeof(*l));
	pthread_condattr_t ca;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	if (!l)
		return NULL;
	snprintf(l->host, sizeof(l->host), "%s", host);
	snprintf(l->port, sizeof(l->port), "%s", port);
	l->hints = *hints;
	l->refs = 2;
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&th, &attr, lookup_main, l);
	pthread_attr_destroy(&attr);
	if (r) {
		l->refs = 1;
		lookup_unref(l);
		return NULL;
	}
	return l;
}

/* Wait for @l until @deadline_ns or @stop: 0 (done), -ETIMEDOUT, -EHOSTDOWN. */
static int lookup_wait(struct ddss_lookup *l, int64_t deadline_ns, bool (*stop)(void *),
		       void *arg)
{
	int r = 0;

	pthread_mutex_lock(&l->mu);
	while (!l->done) {
		int64_t now = ddss_now_ns(), until = now + STOP_SLICE_MS * 1000000ll;

		if (stop && stop(arg)) {
			r = -EHOSTDOWN;
			break;
		}
		if (now >= deadline_ns) {
			r = -ETIMEDOUT;
			break;
		}
		if (until > deadline_ns)
			until = deadline_ns;
		/* CLOCK_MONOTONIC: ddss_now_ns()'s, and the condition variable's. */
		struct timespec ts = ddss_time_after(CLOCK_MONOTONIC, until - now);

		pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	pthread_mutex_unlock(&l->mu);
	return r;
}

void ddss_lookup_drop(struct ddss_lookup **slot)
{
	if (slot && *slot) {
		lookup_unref(*slot);
		*slot = NULL;
	}
}

int ddss_resolve(const char *host, uint16_t port, const struct addrinfo *hints,
		 int64_t deadline_ns, bool (*stop)(void *), void *arg, struct ddss_lookup **slot,
		 struct addrinfo **res_p)
{
	struct addrinfo h = *hints;
	struct ddss_lookup *l = NULL;
	char ps[8];
	int r;

	if (!host || !res_p || strlen(host) >= sizeof(l->host))
		return -EINVAL;
	snprintf(ps, sizeof(ps), "%u", (unsigned)port);
	h.ai_flags |= AI_NUMERICSERV;
	/* A numeric address needs no resolver: parsed here, at once. */
	h.ai_flags |= AI_NUMERICHOST;
	r = getaddrinfo(host, ps, &h, res_p);
	if (r != EAI_NONAME)
		return r ? -EHOSTUNREACH : 0;
	h.ai_flags &= ~AI_NUMERICHOST;
	/* A name. The lookup this slot gave up on last time, if it is this one. */
	if (slot && *slot && (strcmp((*slot)->host, host) || strcmp((*slot)->port, ps)))
		ddss_lookup_drop(slot);
	l = slot ? *slot : NULL;
	if (!l) {
		l = lookup_start(host, ps, &h);
		if (!l) /* no thread to spare; a lookup here would be unbounded */
			return -EAGAIN;
		if (slot)
			*slot = l;
	}
	r = lookup_wait(l, deadline_ns, stop, arg);
	if (r) {
		if (!slot)
			lookup_unref(l);
		if (r == -ETIMEDOUT)
			DDSS_WARN("looking up '%s': no answer in time (a slow resolver? "
				  "resolv.conf); given up, the lookup goes on", host);
		return r;
	}
	/* Done: its result is ours (the thread has let go of it). */
	if (slot)
		*slot = NULL;
	r = l->rc;
	*res_p = l->res;
	l->res = NULL;
	lookup_unref(l);
	if (r) {
		DDSS_DBG("looking up '%s': %s", host, gai_strerror(r));
		return -EHOSTUNREACH;
	}
	return 0;
}
