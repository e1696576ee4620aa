/*
 * ddss-info: what this host and this build of DDSS can do, and why not (like ibv_devinfo,
 * fi_info, ucx_info). One file per section; each prints its own part of the report.
 */
#ifndef DDSS_APPS_INFO_H
#define DDSS_APPS_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One line of a section: "  key   value", the values aligned in one column. */
void info_line(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A continuation under the previous line's value. */
void info_more(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "67108864 (64 MiB)": bytes with a readable unit, into @buf. */
const char *info_bytes(uint64_t n, char *buf, size_t len);

/* info_addr.c: the first IPv4 address of network interface @ifname into @buf (0), or
 * -ENOENT when it has none. */
int info_ipv4_of(const char *ifname, char *buf, size_t len);
/* The IPv4 addresses of every interface but loopback, "10.0.0.5 (eth0), ...", into @buf;
 * their number. */
int info_ipv4_others(char *buf, size_t len);

/* info_config.c: the configuration section; -EINVAL if some variable is invalid (what
 * ddss_init would refuse), else 0. */
int info_config_print(void);
/* The pool size ddss_init would use (DDSS_POOL_SIZE or its default); its default on an
 * invalid value (the configuration section reports that). */
size_t info_pool_size(void);

/* info_tcp.c: the tcp transport's line; true if usable. */
bool info_tcp_print(void);

/* info_verbs.c: the verbs transport's lines and its devices'; true if some device is
 * usable. @pool_len: the pool the memlock limit must allow. */
bool info_verbs_print(size_t pool_len);

/* info_group.c: --group: join the group, report which ranks answer and their round trip
 * (rank 1 reports). Exit status: 0 every rank answered, 1 some did not or the group did
 * not form. */
int info_group_run(void);

/* info_daemon.c: --daemon: the totals of a running ddssd's clients. Exit status. */
int info_daemon_run(const char *socket_path);

#endif /* DDSS_APPS_INFO_H */
