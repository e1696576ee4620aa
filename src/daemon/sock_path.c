/* The daemon's default socket path and its private directory (sock_path.h). */
#include "daemon/sock_path.h"
#include "core/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ddss_daemon_socket_default(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (xdg && *xdg)
		n = snprintf(buf, len, "%s/ddss/ddssd.sock", xdg);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/ddss/ddssd.sock");
	else
		n = snprintf(buf, len, "/tmp/ddss-%u/ddssd.sock", (unsigned)geteuid());
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ddss_daemon_socket_dir_prepare(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;

	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int r = -errno;

		DDSS_ERR("daemon: cannot make %s: %s", dir, strerror(-r));
		return r;
	}
	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
		DDSS_ERR("daemon: %s is not a directory of ours closed to others (mode %03o, "
			 "user %u): refusing to serve there", dir, (unsigned)(st.st_mode & 0777),
			 (unsigned)st.st_uid);
		return -EACCES;
	}
	return 0;
}
