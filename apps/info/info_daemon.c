/*
 * --daemon [SOCKET]: the counters of a running ddssd, summed over its clients (struct
 * ddss_stats). Waits for the daemon side's reader, ddss_daemon_stats_read
 * (daemon/client_api.h), which is not in the tree yet.
 */
#include "info.h"

#include <stdio.h>

int info_daemon_run(const char *socket_path)
{
	(void)socket_path;
	fprintf(stderr, "ddss-info: --daemon is not implemented yet\n");
	return 2;
}
