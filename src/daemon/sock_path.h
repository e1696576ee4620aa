/*
 * Where a node's ddssd listens by default: a directory only its user can enter, so no
 * other local user can bind the path first (docs/security.md, "Daemon mode").
 */
#ifndef DDSS_DAEMON_SOCK_PATH_H
#define DDSS_DAEMON_SOCK_PATH_H

#include <stddef.h>

/*
 * The default socket path into @buf: $XDG_RUNTIME_DIR/ddss/ddssd.sock, else for root
 * /run/ddss/ddssd.sock, else /tmp/ddss-UID/ddssd.sock. 0, or -ENAMETOOLONG.
 */
int ddss_daemon_socket_default(char *buf, size_t len);

/*
 * ddssd, before listening at the default @path: make its directory (mode 0700), or check
 * that the one there is a directory (not a link) of ours with no access for anyone else.
 * 0, or -EACCES (logged: someone else's, or open to others), -errno.
 */
int ddss_daemon_socket_dir_prepare(const char *path);

#endif /* DDSS_DAEMON_SOCK_PATH_H */
