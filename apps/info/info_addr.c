/* The host's IPv4 addresses: what other hosts (tcp) and rdma_cm (RoCE) can use. */
#include "info.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int info_ipv4_of(const char *ifname, char *buf, size_t len)
{
	struct ifaddrs *all, *a;
	int r = -ENOENT;

	if (getifaddrs(&all))
		return -errno;
	for (a = all; a && r; a = a->ifa_next) {
		if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || strcmp(a->ifa_name, ifname))
			continue;
		if (inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, buf,
			      (socklen_t)len))
			r = 0;
	}
	freeifaddrs(all);
	return r;
}

int info_ipv4_others(char *buf, size_t len)
{
	struct ifaddrs *all, *a;
	size_t at = 0;
	int n = 0;

	buf[0] = '\0';
	if (getifaddrs(&all))
		return 0;
	for (a = all; a; a = a->ifa_next) {
		char ip[INET_ADDRSTRLEN];

		if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET ||
		    (a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP) ||
		    !inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, ip,
			       sizeof(ip)))
			continue;
		if (at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%s (%s)", n ? ", " : "", ip,
					       a->ifa_name);
		n++;
	}
	freeifaddrs(all);
	return n;
}
