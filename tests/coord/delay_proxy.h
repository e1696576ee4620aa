/*
 * Tests: a TCP proxy on loopback in front of one etcd endpoint that answers some requests
 * late, as a slow or overloaded member would. A request that contains the given text
 * (e.g. "POST /v3/kv/txn", or a key's base64) reaches etcd at once, and its answer comes
 * back delay_ms later; every other request passes straight through.
 */
#ifndef DDSS_TESTS_COORD_DELAY_PROXY_H
#define DDSS_TESTS_COORD_DELAY_PROXY_H

struct delay_proxy;

/** Start one in front of @upstream ("host:port"); its own "127.0.0.1:port" in @self
 * (room for 32). 0 or -errno. */
int delay_proxy_start(const char *upstream, const char *text, int delay_ms,
		      struct delay_proxy **p_p, char *self);
/** From now on hold back the answers to requests that contain @text ("": none). */
void delay_proxy_hold(struct delay_proxy *p, const char *text);
/** How many answers it held back so far. */
unsigned delay_proxy_delayed(struct delay_proxy *p);
/** Stop accepting (connections under way finish on their own). */
void delay_proxy_stop(struct delay_proxy *p);

#endif
