/*
 * Pair keys (net/auth.h): derived from the group key, or read from a rank's keys file. The
 * row of a keys file is shared by every copy of the key that loaded it (reference counted).
 */
#ifndef DDSS_NET_AUTH_KEYS_H
#define DDSS_NET_AUTH_KEYS_H

#include "net/auth.h"

/** Take / drop a reference (NULL is fine); the last drop wipes and frees the row. */
void ddss_auth_row_get(struct ddss_auth_row *row);
void ddss_auth_row_put(struct ddss_auth_row *row);

#endif /* DDSS_NET_AUTH_KEYS_H */
