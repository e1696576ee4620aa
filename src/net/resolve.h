/*
 * A node's address, looked up without letting a slow resolver hold the caller.
 *
 * getaddrinfo(3) of a name asks DNS, and a resolver that does not answer holds the call
 * for its timeouts times its attempts (resolv.conf; 5 s x 2 per server by default), with
 * no way to cut it short. The transports resolve a peer's host while they hold the lock
 * that the rank's refusal (the heartbeat thread) needs too, so a slow resolver would hold
 * up failure detection. A numeric address is parsed at once; a name is looked up in a
 * thread of its own, which the caller waits for until its deadline or until @stop says
 * the peer is refused, and then leaves behind.
 */
#ifndef DDSS_NET_RESOLVE_H
#define DDSS_NET_RESOLVE_H

#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>

/* A lookup under way; the caller's slot keeps one for its next attempt (see below). */
struct ddss_lookup;

/**
 * ddss_resolve() - getaddrinfo(@host, @port) bounded by @deadline_ns (ddss_now_ns()).
 * @hints: as for getaddrinfo; AI_NUMERICSERV is added.
 * @stop: asked about every 100 ms while a name is looked up; true ends the wait. May be NULL.
 * @slot: where a lookup the caller gave up on stays, so that its next call with the same
 *   host and port waits for that one instead of starting another: at most one thread per
 *   slot. The caller serialises calls on a slot and frees it with ddss_lookup_drop(). NULL:
 *   a lookup given up on ends on its own.
 *
 * Returns 0 with *@res_p to freeaddrinfo(), -EHOSTUNREACH (no such host), -ETIMEDOUT (the
 * deadline came first), -EHOSTDOWN (@stop), -EAGAIN (no thread for a name's lookup),
 * -EINVAL.
 */
int ddss_resolve(const char *host, uint16_t port, const struct addrinfo *hints,
		 int64_t deadline_ns, bool (*stop)(void *), void *arg, struct ddss_lookup **slot,
		 struct addrinfo **res_p);

/** ddss_lookup_drop() - forget the lookup in *@slot (it ends on its own); NULL it. */
void ddss_lookup_drop(struct ddss_lookup **slot);

#endif /* DDSS_NET_RESOLVE_H */
