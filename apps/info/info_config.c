/*
 * The configuration a rank would run with: every DDSS_* variable the library (and ddssd)
 * reads, its effective value, and whether it came from the environment or the default.
 *
 * Values are resolved by the library's own readers wherever they are callable: the
 * range-checked readers of core/config.c (with the bounds and defaults of the call that
 * reads the variable: the file named beside each entry), the node list parser, the spin
 * bound, the secret loader, the log level, the provider lookup and the verbs switches. A
 * few words (DDSS_COMPLETION, DDSS_LOCK_SCHEME) are read by static functions of the
 * library; for those the table holds the words they accept. Keep the table in step with
 * the readers: the info_config_complete test fails when the library reads a DDSS_*
 * variable this table does not list.
 */
#include "info.h"

#include "core/config.h"
#include "core/log.h"
#include "daemon/chan.h"
#include "daemon/client.h"
#include "net/auth.h"
#include "net/nodes.h"
#include "net/spin.h"
#include "net/transport.h"
#ifdef DDSS_INFO_VERBS
#include "net/verbs/verbs_int.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* core/ctx.c: DEFAULT_POOL_SIZE, DEFAULT_CACHE_SIZE. */
#define POOL_DEFAULT (64l << 20)
#define CACHE_DEFAULT (16l << 20)

enum verdict {
	V_OK = 0,     /* valid (or unset) */
	V_IGNORED,    /* the library warns and uses the default */
	V_INVALID,    /* ddss_init (or ddssd) refuses to start */
};

struct var;
typedef enum verdict (*resolve_fn)(const struct var *v, char *out, size_t len);

struct var {
	const char *name;
	resolve_fn resolve;
	long min, max, dflt;        /* numbers: the reader's bounds and default */
	const char *words;          /* words: "a|b|c", the first the default */
	const char *dflt_text;      /* how the default reads, when it is not a number */
};

static const char *env_set(const char *name)
{
	const char *s = getenv(name);

	return s && *s ? s : NULL;
}

static enum verdict r_long(const struct var *v, char *out, size_t len)
{
	long x;

	if (ddss_env_long(v->name, v->min, v->max, v->dflt, &x)) {
		snprintf(out, len, "%s: not a whole number in [%ld, %ld]", getenv(v->name), v->min,
			 v->max);
		return V_INVALID;
	}
	if (!env_set(v->name) && v->dflt_text)
		snprintf(out, len, "%s", v->dflt_text);
	else
		snprintf(out, len, "%ld", x);
	return V_OK;
}

static enum verdict r_size(const struct var *v, char *out, size_t len)
{
	long x;

	if (ddss_env_long(v->name, v->min, v->max, v->dflt, &x)) {
		snprintf(out, len, "%s: not a byte count in [%ld, %ld]", getenv(v->name), v->min,
			 v->max);
		return V_INVALID;
	}
	info_bytes((uint64_t)x, out, len);
	return V_OK;
}

/* Two words (core/config.c ddss_env_either): unset or empty means the first. */
static enum verdict r_either(const struct var *v, char *out, size_t len)
{
	const char *bar = strchr(v->words, '|');
	char first[32], second[32];
	bool is_second;

	snprintf(first, sizeof(first), "%.*s", (int)(bar - v->words), v->words);
	snprintf(second, sizeof(second), "%s", bar + 1);
	if (ddss_env_either(v->name, first, second, &is_second)) {
		snprintf(out, len, "%s: expected %s or %s", getenv(v->name), first, second);
		return V_INVALID;
	}
	snprintf(out, len, "%s", is_second ? second : first);
	return V_OK;
}

/* One of several words, read by a static function of the library (see the table). */
static enum verdict r_words(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name), *p = v->words;
	size_t n;

	if (!s) {
		snprintf(out, len, "%.*s", (int)strcspn(v->words, "|"), v->words);
		return V_OK;
	}
	for (; *p; p += n + (p[n] == '|')) {
		n = strcspn(p, "|");
		if (strlen(s) == n && !strncmp(s, p, n)) {
			snprintf(out, len, "%s", s);
			return V_OK;
		}
	}
	snprintf(out, len, "%s: expected one of %s", s, v->words);
	return V_INVALID;
}

static enum verdict r_text(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name);

	snprintf(out, len, "%s", s ? s : v->dflt_text);
	return V_OK;
}

static enum verdict r_hex(const struct var *v, char *out, size_t len)
{
	uint64_t x;

	if (ddss_env_hex64(v->name, 0, &x)) {
		snprintf(out, len, "%s: not a hexadecimal number", getenv(v->name));
		return V_INVALID;
	}
	if (env_set(v->name))
		snprintf(out, len, "0x%llx", (unsigned long long)x);
	else
		snprintf(out, len, "%s", v->dflt_text);
	return V_OK;
}

/* A node list (DDSS_NODES, or the file DDSS_NODES_FILE names): its number of ranks, or 0. */
static uint32_t group_size(const char **err_p)
{
	const char *list = env_set("DDSS_NODES"), *file = env_set("DDSS_NODES_FILE");
	struct ddss_tp_node *nodes;
	uint32_t n = 0;
	char *text = NULL;
	FILE *f;

	*err_p = NULL;
	if (!list && file) {
		size_t got = 0, cap = 1 << 16;

		f = fopen(file, "r");
		text = f ? malloc(cap) : NULL;
		if (text) {
			got = fread(text, 1, cap - 1, f);
			text[got] = '\0';
		}
		if (f)
			fclose(f);
		if (!text) {
			*err_p = "cannot read the file";
			return 0;
		}
		list = text;
	}
	if (list && ddss_nodes_parse(list, &nodes, &n) == 0)
		free(nodes);
	else if (list)
		*err_p = "not a list of host:port entries";
	free(text);
	return n;
}

static enum verdict r_nodes(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name), *err;
	uint32_t n;

	if (!s) {
		snprintf(out, len, "%s", v->dflt_text);
		return V_OK;
	}
	if (!strcmp(v->name, "DDSS_NODES_FILE") && env_set("DDSS_NODES")) {
		snprintf(out, len, "%s (DDSS_NODES wins)", s);
		return V_OK;
	}
	n = group_size(&err);
	if (err) {
		snprintf(out, len, "%.60s: %s", s, err);
		return V_INVALID;
	}
	snprintf(out, len, "%u rank%s: %.60s%s", n, n == 1 ? "" : "s", s, strlen(s) > 60 ? "..." : "");
	return V_OK;
}

/* DDSS_SIZE and DDSS_RANK are checked against the node list (net/nodes.c). */
static enum verdict r_size_rank(const struct var *v, char *out, size_t len)
{
	const char *err;
	uint32_t n = group_size(&err);
	bool rank = !strcmp(v->name, "DDSS_RANK");
	long x;

	if (!n) {
		snprintf(out, len, "%s%s", env_set(v->name) ? env_set(v->name) : v->dflt_text,
			 env_set(v->name) ? " (no node list to check it against)" : "");
		return V_OK;
	}
	if (ddss_env_long(v->name, rank ? 0 : 1, rank ? (long)n : 1l << 20, rank ? 0 : (long)n,
			  &x) || (!rank && x != (long)n)) {
		snprintf(out, len, "%s: %s %u", getenv(v->name),
			 rank ? "expected a rank from 1 to" : "the node list has", n);
		return V_INVALID;
	}
	if (rank && x == 0) {
		snprintf(out, len, "%s", v->dflt_text);
		return env_set("DDSS_NODES") || env_set("DDSS_NODES_FILE") ? V_INVALID : V_OK;
	}
	snprintf(out, len, "%ld", x);
	return V_OK;
}

static enum verdict r_transport(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name);

	if (!s || !strcmp(s, "auto")) {
		snprintf(out, len, "auto");
		return V_OK;
	}
	if (!ddss_tp_find(s)) {
		snprintf(out, len, "%s: %s", s, strcmp(s, "verbs") ? "expected tcp, verbs or auto"
								   : "not built");
		return V_INVALID;
	}
	snprintf(out, len, "%s", s);
	return V_OK;
}

static enum verdict r_spin(const struct var *v, char *out, size_t len)
{
	long us;

	if (ddss_spin_env(&us)) {
		snprintf(out, len, "%s: not a whole number in [0, %d]", getenv(v->name),
			 DDSS_SPIN_US_MAX);
		return V_INVALID;
	}
	if (us >= 0)
		snprintf(out, len, "%ld", us);
	else /* measured here as a rank would, once per process */
		snprintf(out, len, "measured: %.1f us here", (double)ddss_spin_ns() / 1000.0);
	return V_OK;
}

/* A keys file is checked as the rank named by DDSS_RANK and DDSS_SIZE would load it. */
static enum verdict r_keys(const struct var *v, char *out, size_t len)
{
	const char *s = getenv(v->name), *rank = getenv("DDSS_RANK"), *size = getenv("DDSS_SIZE");
	struct ddss_auth_key key = { 0 };
	int r;

	if (!s) {
		snprintf(out, len, "%s", v->dflt_text);
		return V_OK;
	}
	if (*s && (!rank || !size)) {
		snprintf(out, len, "%s (not checked: DDSS_RANK and DDSS_SIZE unset)", s);
		return V_OK;
	}
	r = ddss_auth_keys_load(rank ? (uint32_t)atoi(rank) : 0, size ? (uint32_t)atoi(size) : 0,
				&key);
	ddss_auth_key_clear(&key);
	snprintf(out, len, "%s%s%s", s, r ? ": " : "", r ? strerror(-r) : "");
	return r ? V_INVALID : V_OK;
}

/* The secret itself is never printed: only where it comes from, and whether it loads. */
static enum verdict r_secret(const struct var *v, char *out, size_t len)
{
	bool is_file = !strcmp(v->name, "DDSS_SECRET_FILE");
	const char *s = getenv(v->name);
	struct ddss_auth_key key;
	char *saved;
	int r;

	if (!s) {
		snprintf(out, len, "%s", v->dflt_text);
		return V_OK;
	}
	if (!is_file && getenv("DDSS_SECRET_FILE") && *getenv("DDSS_SECRET_FILE")) {
		snprintf(out, len, "(set, not shown; DDSS_SECRET_FILE wins)");
		return V_OK;
	}
	/* Loading takes DDSS_SECRET out of the environment; --group still needs it. */
	saved = getenv("DDSS_SECRET") ? strdup(getenv("DDSS_SECRET")) : NULL;
	r = ddss_auth_key_load(NULL, &key);
	ddss_auth_key_clear(&key);
	if (saved) {
		setenv("DDSS_SECRET", saved, 1);
		explicit_bzero(saved, strlen(saved));
		free(saved);
	}
	if (is_file)
		snprintf(out, len, "%s%s%s", s, r ? ": " : "", r ? strerror(-r) : "");
	else
		snprintf(out, len, "(set, not shown)%s%s", r ? ": " : "", r ? strerror(-r) : "");
	return r ? V_INVALID : V_OK;
}

/* net/exposure.c: exactly "1" opts out of "no secret, no listening beyond loopback". */
static enum verdict r_insecure(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name);

	if (!s) {
		snprintf(out, len, "%s", v->dflt_text);
		return V_OK;
	}
	if (strcmp(s, "1")) {
		snprintf(out, len, "%s: only 1 opts out; ignored", s);
		return V_INVALID;
	}
	snprintf(out, len, "1: a rank without a secret may listen anywhere (warned)");
	return V_OK;
}

/* core/log.c: unknown words mean warn, silently; say so here. */
static enum verdict r_log(const struct var *v, char *out, size_t len)
{
	static const char *const names[] = { "none", "error", "warn", "info", "debug" };
	enum ddss_log_level lvl = ddss_log_level();
	const char *s = env_set(v->name);

	snprintf(out, len, "%s", names[lvl]);
	if (s && lvl == DDSS_LOG_WARN && strcasecmp(s, "warn") && strcmp(s, "2")) {
		snprintf(out, len, "warn (%s is not a level: error, warn, info, debug or 0-4)", s);
		return V_IGNORED;
	}
	return V_OK;
}

/* alloc/pool.c: set, non-empty and not "0" means on. */
static enum verdict r_hugepages(const struct var *v, char *out, size_t len)
{
	const char *s = env_set(v->name);

	snprintf(out, len, "%s", s && strcmp(s, "0") ? "on" : "off");
	return V_OK;
}

#ifdef DDSS_INFO_VERBS
/* net/verbs/verbs_caps.c verbs_env_choice: auto|a|b; anything else is warned about. */
static enum verdict r_verbs_choice(const struct var *v, char *out, size_t len)
{
	const char *bar = strchr(v->words, '|');
	char a[16];
	int c;

	snprintf(a, sizeof(a), "%.*s", (int)(bar - v->words), v->words);
	c = verbs_env_choice(v->name, a, bar + 1);
	snprintf(out, len, "%s", c == 1 ? a : c == 2 ? bar + 1 : v->dflt_text);
	if (!c && env_set(v->name) && strcmp(env_set(v->name), "auto")) {
		snprintf(out, len, "%s (%s is not auto, %s)", v->dflt_text, env_set(v->name),
			 v->words);
		return V_IGNORED;
	}
	return V_OK;
}

/* net/verbs/verbs_caps.c verbs_simulate_lack: which capabilities are taken away. */
static enum verdict r_verbs_disable(const struct var *v, char *out, size_t len)
{
	static const char *const caps[] = { "atomics", "srq", "start" };
	size_t at = 0;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		if (verbs_simulate_lack(caps[i]) && at < len)
			at += (size_t)snprintf(out + at, len - at, "%s%s", at ? "," : "", caps[i]);
	if (!at)
		snprintf(out, len, "%s", v->dflt_text);
	return V_OK;
}

/* net/verbs/verbs_caps.c verbs_ack_timeout_decide: 1..31, else the provider refuses. */
static enum verdict r_ack_timeout(const struct var *v, char *out, size_t len)
{
	long x;

	if (ddss_env_long(v->name, 1, 31, 0, &x)) {
		snprintf(out, len, "%s: expected an IB timeout code from 1 to 31", getenv(v->name));
		return V_INVALID;
	}
	if (x)
		snprintf(out, len, "%ld (%.1f ms)", x, 4.096e-3 * (double)(1l << x));
	else
		snprintf(out, len, "%d (%.0f ms), %d (%.0f ms) on Soft-RoCE", VERBS_ACK_TIMEOUT,
			 4.096e-3 * (double)(1l << VERBS_ACK_TIMEOUT), VERBS_ACK_TIMEOUT_RXE,
			 4.096e-3 * (double)(1l << VERBS_ACK_TIMEOUT_RXE));
	return V_OK;
}
#else
static enum verdict r_not_built(const struct var *v, char *out, size_t len)
{
	snprintf(out, len, "%s (verbs not built: not read)", env_set(v->name) ?
		 env_set(v->name) : v->dflt_text);
	return V_OK;
}
#define r_verbs_choice r_not_built
#define r_verbs_disable r_not_built
#define r_ack_timeout r_not_built
#endif

/* Table rows: a number (bounds, default, how an unset one reads), words, or any other. */
#define NUM(n, fn, lo, hi, d, text) \
	{ .name = n, .resolve = fn, .min = lo, .max = hi, .dflt = d, .dflt_text = text }
#define WORDS(n, fn, w, text) { .name = n, .resolve = fn, .words = w, .dflt_text = text }
#define OTHER(n, fn, text) { .name = n, .resolve = fn, .dflt_text = text }

static const struct var vars[] = {
	/* The group (net/nodes.c ddss_net_env_load; ddssrun sets these). */
	OTHER("DDSS_NODES", r_nodes, "(unset: ddssrun sets it)"),
	OTHER("DDSS_NODES_FILE", r_nodes, "(unset)"),
	OTHER("DDSS_SIZE", r_size_rank, "(the node list's length)"),
	OTHER("DDSS_RANK", r_size_rank, "(unset: required to join)"),
	OTHER("DDSS_GROUP", r_hex, "0"),
	/* Coordinator mode (net/coordinator.c; docs/membership.md). */
	OTHER("DDSS_COORDINATOR", r_text, "(unset: the static node list)"),
	OTHER("DDSS_LISTEN", r_text, "(unset; coordinator mode needs it)"),
	NUM("DDSS_MAX_SIZE", r_long, 1, 4096, 0, "(DDSS_SIZE: coordinator mode's slots)"),
	NUM("DDSS_LISTEN_FD", r_long, -1, 1 << 20, -1, "(none)"),
	OTHER("DDSS_SECRET_FILE", r_secret, "(unset)"),
	OTHER("DDSS_SECRET", r_secret, "(unset: connections not authenticated)"),
	OTHER("DDSS_KEYS_FILE", r_keys, "(unset; ddssrun gives each rank its own)"),
	OTHER("DDSS_INSECURE", r_insecure,
	      "(unset: without a secret, a rank listens on loopback only)"),
	/* The transport (net/nodes.c, net/transport.c, net/spin.c, net/tcp/tcp_provider.c). */
	OTHER("DDSS_TRANSPORT", r_transport, NULL),
	OTHER("DDSS_DEVICE", r_text, "(the device that owns the rank's address)"),
	WORDS("DDSS_COMPLETION", r_words, "adaptive|event|poll", NULL),
	OTHER("DDSS_SPIN_US", r_spin, NULL),
	NUM("DDSS_OP_TIMEOUT_MS", r_long, 0, 1l << 30, 30000, NULL),
	NUM("DDSS_CONNECT_TIMEOUT_MS", r_long, 1, 1l << 30, 30000, NULL),
	NUM("DDSS_PEER_TIMEOUT_MS", r_long, 0, 1l << 30, 10000, NULL),
	WORDS("DDSS_THREAD_FILES", r_either, "private|shared", NULL),
	WORDS("DDSS_TCP_ORDER", r_either, "strong|weak", NULL),
	WORDS("DDSS_TCP_PROTECT", r_words, "off|integrity|encrypt", NULL),
	/* The verbs provider (net/verbs/verbs_caps.c, verbs_guard.c, verbs_conn.c). */
	NUM("DDSS_TRAFFIC_CLASS", r_long, 0, 255, -1, "(the fabric's default)"),
	WORDS("DDSS_VERBS_FENCE", r_verbs_choice, "wait|nic", "auto"),
	WORDS("DDSS_VERBS_READ_GUARD", r_verbs_choice, "on|off", "auto"),
	WORDS("DDSS_VERBS_LIVENESS", r_verbs_choice, "on|off", "on"),
	OTHER("DDSS_VERBS_ACK_TIMEOUT", r_ack_timeout, "(provider default)"),
	OTHER("DDSS_VERBS_DISABLE", r_verbs_disable, "(nothing)"),
	NUM("DDSS_VERBS_SLOW_TEARDOWN_MS", r_long, 0, 60000, 0, "0 (a test switch: no pause)"),
	NUM("DDSS_VERBS_MAX_MSG", r_long, 64, UINT32_MAX, 0,
	    "(the port's largest message; a test switch)"),
	/* Memory, locks, coherence (core/ctx.c, alloc/pool.c). */
	NUM("DDSS_POOL_SIZE", r_size, 1l << 20, 1l << 40, POOL_DEFAULT, NULL),
	OTHER("DDSS_HUGEPAGES", r_hugepages, NULL),
	NUM("DDSS_CACHE_SIZE", r_size, 0, 1l << 40, CACHE_DEFAULT, NULL),
	/* What one rank may hold at this home (core/ctx.c, alloc/segtab.c, alloc/names.c). */
	NUM("DDSS_QUOTA_SEGMENTS", r_long, 0, UINT32_MAX, 0, "0 (no limit)"),
	NUM("DDSS_QUOTA_BYTES", r_size, 0, 1l << 40, 0, "0 (no limit)"),
	NUM("DDSS_QUOTA_NAMES", r_long, 0, UINT32_MAX, 0, "0 (no limit)"),
	WORDS("DDSS_LOCK_SCHEME", r_words, "ncosed|dqnl|srsl", NULL),
	NUM("DDSS_LOCK_FAIR", r_long, 0, 1, 0, NULL),
	/* Daemon mode (core/ctx.c, daemon/ddssd.c, daemon/chan.c, daemon/server.c). */
	WORDS("DDSS_MODE", r_either, "direct|daemon", NULL),
	OTHER("DDSS_DAEMON_SOCKET", r_text,
	      "(a private directory: $XDG_RUNTIME_DIR/ddss/, /run/ddss/ for root, /tmp/ddss-UID/)"),
	NUM("DDSS_DAEMON_CLIENTS", r_long, 0, 1000000, 0, "(those that attach)"),
	NUM("DDSS_CHAN_SPIN_NS", r_long, 0, 1000000000l, DDSS_CHAN_SPIN_NS, NULL),
	NUM("DDSS_DAEMON_STALL_MS", r_long, 0, 3600000, DDSS_DAEMON_STALL_MS_DEFAULT,
	    "10000 (0: wait for a frozen daemon for ever)"),
	NUM("DDSS_DAEMON_LANE", r_long, 0, 1, 1, "1 (the fast lane serves plain gets and puts)"),
	NUM("DDSS_HOME_SPIN_US", r_long, 0, DDSS_SPIN_US_MAX, 0,
	    "50 (poll), 2 x the spin bound, >= 50 (adaptive), 0 (event)"),
	/* Logging (core/log.c). */
	OTHER("DDSS_LOG_LEVEL", r_log, NULL),
};

/* Set by the tools around the library, not read by it: not reported as unknown. */
static bool tooling_var(const char *name, size_t n)
{
	static const char *const known[] = { "DDSS_RDMA_HOST", "DDSS_RDMA_MODE",
					      "DDSS_RDMA_IN_GUEST", "DDSS_CLIENT", "DDSS_CLIENTS" };

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strlen(known[i]) == n && !strncmp(name, known[i], n))
			return true;
	return n > 9 && !strncmp(name, "DDSS_RXE_", 9);
}

static bool listed(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (strlen(vars[i].name) == n && !strncmp(name, vars[i].name, n))
			return true;
	return false;
}

size_t info_pool_size(void)
{
	long x;

	if (ddss_env_long("DDSS_POOL_SIZE", 1l << 20, 1l << 40, POOL_DEFAULT, &x))
		x = POOL_DEFAULT;
	return (size_t)x;
}

int info_config_print(void)
{
	extern char **environ;
	int bad = 0;

	printf("configuration (as ddss_init resolves it with no struct ddss_attr; a field a "
	       "program sets replaces a default, never the environment)\n");
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const struct var *v = &vars[i];
		const char *s = getenv(v->name);
		bool from_env = s && (*s || !strcmp(v->name, "DDSS_SECRET"));
		char val[256];
		enum verdict vd = v->resolve(v, val, sizeof(val));

		printf("  %-24s %-44s %s%s\n", v->name, val, from_env ? "environment" : "default",
		       vd == V_INVALID ? ": INVALID, a rank would not start" :
		       vd == V_IGNORED ? ": not understood, the default is used" : "");
		bad |= vd == V_INVALID;
	}
	for (char **e = environ; *e; e++) {
		size_t n = strcspn(*e, "=");

		if (!strncmp(*e, "DDSS_", 5) && !listed(*e, n) && !tooling_var(*e, n))
			printf("  %-24.*s %-44s environment: not read by DDSS (a typo?)\n", (int)n,
			       *e, (*e)[n] ? *e + n + 1 : "");
	}
	return bad ? -EINVAL : 0;
}
