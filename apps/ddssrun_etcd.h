/* ddssrun --coordinator: the run's private etcd (ddssrun_etcd.c). */
#ifndef DDSSRUN_ETCD_H
#define DDSSRUN_ETCD_H

#include <stdbool.h>
#include <sys/types.h>

struct ddssrun_etcd {
    char dir[64];      /* its temporary directory ("" when none) */
    int client_port;
    pid_t pid;         /* -1 when not running */
    char url[128];     /* DDSS_COORDINATOR for the ranks: etcd://127.0.0.1:PORT/GROUP */
};

/** Start it and wait (bounded) until it serves; false (said why on stderr) if not. */
bool ddssrun_etcd_start(struct ddssrun_etcd *e, const char *group);
/** Write a random group secret into its directory (0600); the file's path, or NULL. */
const char *ddssrun_etcd_secret(struct ddssrun_etcd *e);
/** Kill it and remove its directory (safe to call twice, or after a failed start). */
void ddssrun_etcd_stop(struct ddssrun_etcd *e);

#endif
