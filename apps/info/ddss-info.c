/*
 * ddss-info - what this build of DDSS and this host can do, and why not.
 *
 *   ddss-info                     version, build options, transports, configuration
 *   ddssrun -n N -- ddss-info --group
 *                                 join the group: which ranks answer, their round trip
 *   ddss-info --daemon [SOCKET]   a running ddssd's counters, summed over its clients
 *
 * Exit status: 0 when it could report (a transport being unusable is part of the report,
 * not a failure); 1 when --group finds a rank that does not answer or cannot join, or
 * --daemon cannot reach the daemon; 2 for a usage error.
 */
#include "info.h"

#include <ddss/ddss.h>

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set by apps/info/CMakeLists.txt from the configuration this build was made with. */
#ifndef DDSS_INFO_SANITIZER
#define DDSS_INFO_SANITIZER "unknown"
#endif
#ifndef DDSS_INFO_BUILD_TYPE
#define DDSS_INFO_BUILD_TYPE "unknown"
#endif
#ifndef DDSS_INFO_VERBS_LIBS
#define DDSS_INFO_VERBS_LIBS ""
#endif

#define KEY_WIDTH 24

void info_line(const char *key, const char *fmt, ...)
{
	va_list ap;

	printf("  %-*s ", KEY_WIDTH - 2, key);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

void info_more(const char *fmt, ...)
{
	va_list ap;

	printf("%*s", KEY_WIDTH + 1, "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

const char *info_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	int u = -1;
	uint64_t v = n;

	while (v >= 1024 && v % 1024 == 0 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu bytes", (unsigned long long)n);
	else
		snprintf(buf, len, "%llu (%llu %s)", (unsigned long long)n, (unsigned long long)v,
			 units[u]);
	return buf;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddss-info [--group | --daemon [SOCKET]]\n"
		"  (no option)       this build (version, options), each transport on this host,\n"
		"                    usable or why not, and the configuration from the environment\n"
		"  --group           run as every rank of a group (ddssrun -n N -- ddss-info --group):\n"
		"                    join it; rank 1 reports which ranks answer and their round trip.\n"
		"                    Bounded by DDSS_CONNECT_TIMEOUT_MS (joining, 10000 here unless\n"
		"                    set) and DDSS_OP_TIMEOUT_MS (each probe, 5000 here unless set)\n"
		"  --daemon [SOCKET] a running ddssd's counters, summed over its clients (SOCKET:\n"
		"                    $DDSS_DAEMON_SOCKET, else $XDG_RUNTIME_DIR/ddss/ddssd.sock,\n"
		"                    for root /run/ddss/ddssd.sock, else /tmp/ddss-UID/ddssd.sock)\n"
		"  -h, --help        this text\n"
		"exit status: 0 reported; 1 a rank did not answer (--group) or no daemon (--daemon);\n"
		"2 usage\n");
}

static void print_build(void)
{
	printf("build\n");
	info_line("verbs provider:", "%s", DDSS_INFO_VERBS_BUILT ?
		  "built (" DDSS_INFO_VERBS_LIBS ")" : "not built");
	info_line("sanitizer:", "%s", DDSS_INFO_SANITIZER);
	info_line("build type:", "%s", DDSS_INFO_BUILD_TYPE);
	info_line("debug log:", "%s", DDSS_INFO_DEBUG_LOG ? "on (debug-level messages compiled in)"
							  : "off (debug-level messages compiled out)");
}

/* The local report: what any rank started here would find. */
static int report(void)
{
	bool tcp, verbs;

	printf("ddss-info: DDSS %s\n", ddss_version_string());
	print_build();
	printf("transports\n");
	tcp = info_tcp_print();
	verbs = info_verbs_print(info_pool_size());
	if (!tcp && !verbs)
		printf("  no transport is usable: no rank can run here\n");
	info_config_print();
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "group", no_argument, NULL, 'g' },
		{ "daemon", optional_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *socket_path = NULL;
	bool group = false, daemon = false;
	int c;

	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (c) {
		case 'g':
			group = true;
			break;
		case 'd':
			daemon = true;
			socket_path = optarg;
			/* "--daemon SOCKET" as well as "--daemon=SOCKET". */
			if (!optarg && optind < argc && argv[optind][0] != '-')
				socket_path = argv[optind++];
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ddss-info: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (group && daemon) {
		fprintf(stderr, "ddss-info: --group and --daemon are separate reports: pick one\n");
		return 2;
	}
	if (group)
		return info_group_run();
	if (daemon)
		return info_daemon_run(socket_path);
	return report();
}
