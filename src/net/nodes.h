/*
 * Who the ranks of a group are and where they listen, from the environment:
 *
 *   DDSS_RANK                this process's rank, 1..N (required)
 *   DDSS_NODES               "host:port,host:port,..." (entry r is rank r; IPv6 as [addr]:port;
 *                            commas, spaces or newlines separate entries)
 *   DDSS_NODES_FILE          the same list in a file, one entry per line, '#' comments
 *   DDSS_SIZE                optional; must equal the number of entries
 *   DDSS_LISTEN_FD           an inherited listening socket to serve on (set by ddssrun)
 *   DDSS_GROUP               group id in hex (ddssrun sets a random one); peers must match
 *   DDSS_TRANSPORT           tcp | verbs | auto (default auto: verbs if a device is usable)
 *   DDSS_DEVICE              verbs device name (default: automatic)
 *   DDSS_COMPLETION          adaptive (default: poll, then sleep; net/spin.h) | event | poll
 *   DDSS_SPIN_US             adaptive: poll this long before sleeping (0..10000; default
 *                            measured, net/spin.h)
 *   DDSS_OP_TIMEOUT_MS       an operation outstanding this long fails its peer (30000; 0 = never)
 *   DDSS_CONNECT_TIMEOUT_MS  how long to retry a peer that has not started yet (30000)
 *   DDSS_PEER_TIMEOUT_MS     a connected peer silent this long is declared dead for good
 *                            (10000; 0 = never; net/heartbeat.c)
 *   DDSS_SECRET_FILE         group secret in a file; DDSS_SECRET the secret itself (net/auth.h)
 *   DDSS_TCP_PROTECT         off (default) | integrity | encrypt: tcp frames authenticated
 *                            (and encrypted) after the handshake; needs a secret or keys file
 *   DDSS_THREAD_FILES        private (default) | shared: whether helper threads drop their
 *                            share of the process's fd table where the provider allows it
 *                            (net/thread_files.h)
 *   DDSS_COORDINATOR         etcd://HOST:PORT[,...]/NAME: the group forms through etcd
 *                            instead of DDSS_RANK and DDSS_NODES (net/coordinator.h)
 */
#ifndef DDSS_NET_NODES_H
#define DDSS_NET_NODES_H

#include "net/auth.h"
#include "net/transport.h"

struct ddss_net_env {
	uint32_t rank;
	uint32_t size;
	struct ddss_tp_node *nodes; /* size entries, malloc'd */
	int listen_fd;
	uint64_t group;
	char transport[16];
	char device[64];
	enum ddss_tp_completion completion;
	int op_timeout_ms;
	int connect_timeout_ms;
	int peer_timeout_ms;
	bool share_files;          /* DDSS_THREAD_FILES=shared */
	enum ddss_tp_protect tcp_protect; /* DDSS_TCP_PROTECT */
	struct ddss_auth_key auth; /* group key, if a secret is configured */
	bool coordinated;          /* DDSS_COORDINATOR is set (net/coordinator.h) */
	struct ddss_coord *coord;  /* once joined: a reference */
	uint64_t *incarnations;    /* once joined: [rank] 1..size, the start view's (malloc'd) */
	uint32_t *generations;     /* once joined: [rank] 1..size, the same (malloc'd) */
	bool running;              /* once joined: the group was serving already (we replace
				    * a rank): no start barrier with the others */
};

/** Parse a node list; *nodes_p is malloc'd. -EINVAL (logged) on a malformed entry. */
int ddss_nodes_parse(const char *text, struct ddss_tp_node **nodes_p, uint32_t *count_p);

/** Fill @env from the environment (see above). Free with ddss_net_env_free. In
 * coordinator mode rank, size and nodes stay unset until ddss_net_env_join. */
int ddss_net_env_load(struct ddss_net_env *env);
/** Coordinator mode: join the group and wait for it to form (fills rank, size, nodes).
 * Nothing to do otherwise. Call once every setting is final (the peer timeout is the
 * lease's TTL). */
int ddss_net_env_join(struct ddss_net_env *env);
void ddss_net_env_free(struct ddss_net_env *env);

/** A transport configuration pointing into @env (which must outlive its use). */
void ddss_net_env_to_config(const struct ddss_net_env *env, const struct ddss_tp_handlers *h,
			    struct ddss_tp_config *cfg);

#endif /* DDSS_NET_NODES_H */
