/*
 * Secure by default (docs/security.md, issue 29): a rank that others can reach over a
 * network must have a group secret. Without one, the group id is all that keeps a
 * stranger out, and the group id is no secret. Loopback is exempt (every rank is on this
 * machine), and DDSS_INSECURE=1 opts out, loudly.
 */
#include "net/exposure.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static bool addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

bool ddss_listen_is_loopback(const struct ddss_net_env *env)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	bool loop = true;

	if (env->listen_fd >= 0) /* an inherited socket listens where it was bound */
		return !getsockname(env->listen_fd, (struct sockaddr *)&ss, &len) &&
		       addr_is_loopback((struct sockaddr *)&ss);
	if (env->rank < 1 || env->rank > env->size ||
	    getaddrinfo(env->nodes[env->rank - 1].host, NULL, &hints, &res))
		return false; /* cannot tell: assume the network can reach it */
	for (ai = res; ai; ai = ai->ai_next)
		loop = loop && addr_is_loopback(ai->ai_addr);
	freeaddrinfo(res);
	return loop;
}

int ddss_net_check_exposure(const struct ddss_net_env *env)
{
	const char *insecure = getenv("DDSS_INSECURE");

	if (env->auth.on || ddss_listen_is_loopback(env))
		return 0;
	if (insecure && !strcmp(insecure, "1")) {
		DDSS_WARN("rank %u listens on %s without a group secret (DDSS_INSECURE=1): anyone "
			  "who reaches it and knows the group id can join and read or write every "
			  "pool", env->rank, env->nodes[env->rank - 1].host);
		return 0;
	}
	DDSS_ERR("rank %u would listen on %s, which other machines can reach, without a group "
		 "secret: set DDSS_SECRET_FILE (a file, mode 0600; docs/security.md), or "
		 "DDSS_INSECURE=1 to run open anyway", env->rank, env->nodes[env->rank - 1].host);
	return -EACCES;
}
