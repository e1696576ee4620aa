/* Whether a rank may listen where it is about to (net/exposure.c). */
#ifndef DDSS_NET_EXPOSURE_H
#define DDSS_NET_EXPOSURE_H

#include "net/nodes.h"

#include <stdbool.h>

/** Whether @env's rank listens on loopback only (its node's host, or its inherited fd). */
bool ddss_listen_is_loopback(const struct ddss_net_env *env);

/**
 * 0 if @env's rank may listen: it has a group secret, or listens on loopback only, or
 * DDSS_INSECURE=1 (logged as a warning). Else -EACCES, logged with what to do.
 */
int ddss_net_check_exposure(const struct ddss_net_env *env);

#endif /* DDSS_NET_EXPOSURE_H */
