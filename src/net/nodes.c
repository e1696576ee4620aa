#include "net/nodes.h"
#include "core/config.h"
#include "core/log.h"
#include "net/coordinator.h"
#include "net/spin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_entry(const char *s, size_t len, struct ddss_tp_node *node)
{
	char buf[128], *colon, *end, *host;
	unsigned long port;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	colon = strrchr(buf, ':');
	if (!colon || colon == buf)
		return -EINVAL;
	*colon = '\0';
	host = buf;
	if (host[0] == '[') {
		size_t hl = strlen(host);

		if (hl < 3 || host[hl - 1] != ']')
			return -EINVAL;
		host[hl - 1] = '\0';
		host++;
	}
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || colon[1] == '\0' || port == 0 || port > 65535)
		return -EINVAL;
	if (strlen(host) >= sizeof(node->host))
		return -EINVAL;
	strcpy(node->host, host);
	node->port = (uint16_t)port;
	return 0;
}

int ddss_nodes_parse(const char *text, struct ddss_tp_node **nodes_p, uint32_t *count_p)
{
	struct ddss_tp_node *nodes = NULL;
	uint32_t count = 0, cap = 0;
	const char *p = text;

	if (!text)
		return -EINVAL;
	while (*p) {
		size_t len;

		p += strspn(p, ", \t\r\n");
		if (*p == '#') { /* comment to end of line */
			p += strcspn(p, "\n");
			continue;
		}
		len = strcspn(p, ", \t\r\n#");
		if (len == 0)
			continue;
		if (count == cap) {
			struct ddss_tp_node *n;

			cap = cap ? cap * 2 : 16;
			n = realloc(nodes, cap * sizeof(*nodes));
			if (!n) {
				free(nodes);
				return -ENOMEM;
			}
			nodes = n;
		}
		if (parse_entry(p, len, &nodes[count])) {
			DDSS_ERR("malformed node entry '%.*s' (expected host:port)", (int)len, p);
			free(nodes);
			return -EINVAL;
		}
		count++;
		p += len;
	}
	if (count == 0) {
		free(nodes);
		DDSS_ERR("empty node list");
		return -EINVAL;
	}
	*nodes_p = nodes;
	*count_p = count;
	return 0;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return NULL;
	do {
		if (cap - len < 4096) {
			char *b = realloc(buf, cap + 65536);

			if (!b) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = b;
			cap += 65536;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
	} while (n > 0);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/*
 * DDSS_COMPLETION: event | poll | adaptive (default). Adaptive fixes the spin bound here,
 * once per process (net/spin.h: DDSS_SPIN_US or a measured wake-up), so no wait pays for
 * the measurement; a bad DDSS_SPIN_US fails the load whatever the mode.
 */
static int completion_load(enum ddss_tp_completion *out_p)
{
	static const struct {
		const char *name;
		enum ddss_tp_completion mode;
	} modes[] = {
		{ "event", DDSS_TP_COMPLETION_EVENT },
		{ "poll", DDSS_TP_COMPLETION_POLL },
		{ "adaptive", DDSS_TP_COMPLETION_ADAPTIVE },
	};
	const char *s = getenv("DDSS_COMPLETION");
	enum ddss_tp_completion mode = DDSS_TP_COMPLETION_ADAPTIVE;
	long us;
	int r;

	if (s && *s) {
		size_t i = 0;

		while (i < sizeof(modes) / sizeof(modes[0]) && strcmp(s, modes[i].name))
			i++;
		if (i == sizeof(modes) / sizeof(modes[0])) {
			DDSS_ERR("DDSS_COMPLETION=%s: expected event, poll or adaptive", s);
			return -EINVAL;
		}
		mode = modes[i].mode;
	}
	r = ddss_spin_env(&us);
	if (r)
		return r;
	if (mode == DDSS_TP_COMPLETION_ADAPTIVE)
		ddss_spin_init();
	*out_p = mode;
	return 0;
}

/* DDSS_TCP_PROTECT: off (default) | integrity | encrypt (net/tcp/tcp_protect.h). */
static int protect_load(enum ddss_tp_protect *out_p)
{
	const char *s = getenv("DDSS_TCP_PROTECT");

	if (!s || !*s || !strcmp(s, "off"))
		*out_p = DDSS_TP_PROTECT_OFF;
	else if (!strcmp(s, "integrity"))
		*out_p = DDSS_TP_PROTECT_INTEGRITY;
	else if (!strcmp(s, "encrypt"))
		*out_p = DDSS_TP_PROTECT_ENCRYPT;
	else {
		DDSS_ERR("DDSS_TCP_PROTECT=%s: expected off, integrity or encrypt", s);
		return -EINVAL;
	}
	return 0;
}

int ddss_net_env_load(struct ddss_net_env *env)
{
	const char *list = getenv("DDSS_NODES"), *file = getenv("DDSS_NODES_FILE");
	const char *s;
	char *text = NULL;
	long rank, size, v;
	bool coord;
	int r;

	memset(env, 0, sizeof(*env));
	env->listen_fd = -1;
	coord = ddss_coord_wanted();
	if (coord) {
		r = 0; /* rank, size and nodes come from the group's view, last */
	} else if (list && *list) {
		r = ddss_nodes_parse(list, &env->nodes, &env->size);
	} else if (file && *file) {
		text = read_file(file);
		if (!text) {
			DDSS_ERR("cannot read DDSS_NODES_FILE=%s", file);
			return -ENOENT;
		}
		r = ddss_nodes_parse(text, &env->nodes, &env->size);
		free(text);
	} else {
		DDSS_ERR("no group configured: set DDSS_NODES or DDSS_NODES_FILE (ddssrun does), "
			 "or DDSS_COORDINATOR");
		return -EINVAL;
	}
	if (r)
		return r;
	if (!coord) {
		r = ddss_env_long("DDSS_SIZE", 1, 1 << 20, env->size, &size);
		if (!r && (uint32_t)size != env->size) {
			DDSS_ERR("DDSS_SIZE=%ld but the node list has %u entries", size, env->size);
			r = -EINVAL;
		}
	}
	if (!r && !coord) {
		r = ddss_env_long("DDSS_RANK", 0, env->size, 0, &rank);
		if (!r && rank == 0) {
			DDSS_ERR("DDSS_RANK must be set to 1..%u", env->size);
			r = -EINVAL;
		}
		env->rank = (uint32_t)rank;
	}
	if (!r && !(r = ddss_env_long("DDSS_LISTEN_FD", -1, 1 << 20, -1, &v)))
		env->listen_fd = (int)v;
	if (!r)
		r = ddss_env_hex64("DDSS_GROUP", 0, &env->group);
	if (!r && !(r = ddss_env_long("DDSS_OP_TIMEOUT_MS", 0, 1L << 30, 30000, &v)))
		env->op_timeout_ms = (int)v;
	if (!r && !(r = ddss_env_long("DDSS_CONNECT_TIMEOUT_MS", 1, 1L << 30, 30000, &v)))
		env->connect_timeout_ms = (int)v;
	if (!r && !(r = ddss_env_long("DDSS_PEER_TIMEOUT_MS", 0, 1L << 30, 10000, &v)))
		env->peer_timeout_ms = (int)v;
	if (!r)
		r = completion_load(&env->completion);
	if (!r)
		r = ddss_env_either("DDSS_THREAD_FILES", "private", "shared", &env->share_files);
	if (!r)
		r = protect_load(&env->tcp_protect);
	if (!r)
		r = ddss_auth_key_load(NULL, &env->auth);
	/* Coordinator mode: the rank is known once ddss_net_env_join has joined. */
	if (!r && !coord)
		r = ddss_auth_keys_load(env->rank, env->size, &env->auth);
	env->coordinated = coord;
	if (!r) {
		s = getenv("DDSS_TRANSPORT");
		snprintf(env->transport, sizeof(env->transport), "%s", s && *s ? s : "auto");
		s = getenv("DDSS_DEVICE");
		snprintf(env->device, sizeof(env->device), "%s", s ? s : "");
	}
	if (r)
		ddss_net_env_free(env);
	return r;
}

int ddss_net_env_join(struct ddss_net_env *env)
{
	int r;

	if (!env->coordinated || env->coord)
		return 0;
	/* Waits for the group to form: after every other setting is final (ddss_attr too). */
	r = ddss_coord_env_load(env);
	if (!r)
		r = ddss_auth_keys_load(env->rank, env->size, &env->auth);
	return r;
}

void ddss_net_env_free(struct ddss_net_env *env)
{
	free(env->nodes);
	env->nodes = NULL;
	free(env->incarnations);
	env->incarnations = NULL;
	free(env->generations);
	env->generations = NULL;
	ddss_coord_unref(env->coord);
	env->coord = NULL;
	ddss_auth_key_clear(&env->auth);
}

void ddss_net_env_to_config(const struct ddss_net_env *env, const struct ddss_tp_handlers *h,
			    struct ddss_tp_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->rank = env->rank;
	cfg->size = env->size;
	cfg->group = env->group;
	cfg->nodes = env->nodes;
	cfg->listen_fd = env->listen_fd;
	cfg->completion = env->completion;
	cfg->op_timeout_ms = env->op_timeout_ms;
	cfg->connect_timeout_ms = env->connect_timeout_ms;
	cfg->device = env->device[0] ? env->device : NULL;
	cfg->auth = env->auth.on ? &env->auth : NULL;
	cfg->share_files = env->share_files;
	cfg->tcp_protect = env->tcp_protect;
	cfg->incarnations = env->incarnations;
	cfg->generations = env->generations;
	if (h)
		cfg->handlers = *h;
}
