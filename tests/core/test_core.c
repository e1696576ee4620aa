/*
 * Unit tests of the pieces that need no network: node lists and the group environment,
 * configuration values, error strings, and the tcp wire format with its request checks
 * (the target's only defence against a peer that lies, so every branch is covered).
 *
 * Failing parsers are also expected to allocate nothing; run under valgrind to see it.
 */
#include "common/test_util.h"
#include "core/config.h"
#include "core/key.h"
#include "core/seg_cache.h"
#include "net/nodes.h"
#include "net/tcp/tcp_wire.h"

#include <CUnit/CUnit.h>
#include <ddss/ddss.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- node lists ---- */

/* A sentinel the parser must leave alone when it fails. */
static struct ddss_tp_node untouched_node;

static void test_nodes_good(void)
{
	struct ddss_tp_node *n = NULL;
	uint32_t count = 0;

	CU_ASSERT_EQUAL(ddss_nodes_parse("127.0.0.1:5000,127.0.0.1:5001", &n, &count), 0);
	CU_ASSERT_EQUAL_FATAL(count, 2);
	CU_ASSERT_STRING_EQUAL(n[0].host, "127.0.0.1");
	CU_ASSERT_EQUAL(n[0].port, 5000);
	CU_ASSERT_STRING_EQUAL(n[1].host, "127.0.0.1");
	CU_ASSERT_EQUAL(n[1].port, 5001);
	free(n);

	/* Any mix of separators, and '#' comments anywhere. */
	n = NULL;
	CU_ASSERT_EQUAL(ddss_nodes_parse("# the group\n  a:1 \n\tb:2,,c:3 # third\r\n"
					 "#d:4\nlocalhost:65535#e:5\n",
					 &n, &count), 0);
	CU_ASSERT_EQUAL_FATAL(count, 4);
	CU_ASSERT_STRING_EQUAL(n[0].host, "a");
	CU_ASSERT_EQUAL(n[0].port, 1);
	CU_ASSERT_STRING_EQUAL(n[1].host, "b");
	CU_ASSERT_EQUAL(n[1].port, 2);
	CU_ASSERT_STRING_EQUAL(n[2].host, "c");
	CU_ASSERT_EQUAL(n[2].port, 3);
	CU_ASSERT_STRING_EQUAL(n[3].host, "localhost");
	CU_ASSERT_EQUAL(n[3].port, 65535);
	free(n);

	/* IPv6 in brackets loses them; a hostname stays as written. */
	n = NULL;
	CU_ASSERT_EQUAL(ddss_nodes_parse("[::1]:7000 localhost:1 [fe80::1:2]:80", &n, &count), 0);
	CU_ASSERT_EQUAL_FATAL(count, 3);
	CU_ASSERT_STRING_EQUAL(n[0].host, "::1");
	CU_ASSERT_EQUAL(n[0].port, 7000);
	CU_ASSERT_STRING_EQUAL(n[1].host, "localhost");
	CU_ASSERT_EQUAL(n[1].port, 1);
	CU_ASSERT_STRING_EQUAL(n[2].host, "fe80::1:2");
	CU_ASSERT_EQUAL(n[2].port, 80);
	free(n);
}

static void test_nodes_many(void)
{
	/* More entries than the first allocation holds. */
	char text[40 * 16];
	struct ddss_tp_node *n = NULL;
	uint32_t count = 0;
	size_t at = 0;

	for (unsigned i = 0; i < 40; i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at, "h%u:%u,", i, 1000 + i);
	CU_ASSERT_EQUAL(ddss_nodes_parse(text, &n, &count), 0);
	CU_ASSERT_EQUAL_FATAL(count, 40);
	CU_ASSERT_STRING_EQUAL(n[39].host, "h39");
	CU_ASSERT_EQUAL(n[39].port, 1039);
	free(n);
}

static void test_nodes_host_length(void)
{
	char host[80], text[100];
	struct ddss_tp_node *n = NULL;
	uint32_t count = 0;

	/* 63 characters fit the 64-byte field with its terminator; 64 do not. */
	memset(host, 'x', 63);
	host[63] = '\0';
	snprintf(text, sizeof(text), "%s:9", host);
	CU_ASSERT_EQUAL(ddss_nodes_parse(text, &n, &count), 0);
	CU_ASSERT_EQUAL_FATAL(count, 1);
	CU_ASSERT_STRING_EQUAL(n[0].host, host);
	free(n);
}

static void test_nodes_bad(void)
{
	static const char *const bad[] = {
		"127.0.0.1",             /* no port */
		"127.0.0.1:0",           /* port 0 */
		"127.0.0.1:65536",       /* port too big */
		"127.0.0.1:99999999999999999999999", /* port overflows */
		"127.0.0.1:-1",
		"127.0.0.1:80x",
		"127.0.0.1:0x50",
		"host:",
		":5",
		"[::1",
		"[::1]",
		"[]:5",
		"[::1]x:5",
		"",
		" \n,, \t",
		"# only a comment\n",
		"a:1,b,c:3",             /* one bad entry spoils the list */
		"a:1 b:0",
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:1", /* 64 chars */
		"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
		"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy:1", /* 128 */
	};
	struct ddss_tp_node *n = &untouched_node;
	uint32_t count = 12345;

	for (unsigned i = 0; i < ARRAY_LEN(bad); i++) {
		int r = ddss_nodes_parse(bad[i], &n, &count);

		if (r != -EINVAL)
			fprintf(stderr, "  '%s': %d, expected -EINVAL\n", bad[i], r);
		CU_ASSERT_EQUAL(r, -EINVAL);
		/* Outputs untouched: nothing was handed out (valgrind sees no leak). */
		CU_ASSERT_PTR_EQUAL(n, &untouched_node);
		CU_ASSERT_EQUAL(count, 12345);
	}
	CU_ASSERT_EQUAL(ddss_nodes_parse(NULL, &n, &count), -EINVAL);
	CU_ASSERT_PTR_EQUAL(n, &untouched_node);
}

/* ---- the group environment ---- */

static const char *const env_vars[] = {
	"DDSS_RANK", "DDSS_NODES", "DDSS_NODES_FILE", "DDSS_SIZE", "DDSS_LISTEN_FD",
	"DDSS_GROUP", "DDSS_TRANSPORT", "DDSS_DEVICE", "DDSS_COMPLETION",
	"DDSS_OP_TIMEOUT_MS", "DDSS_CONNECT_TIMEOUT_MS", "DDSS_TEST_VALUE", "DDSS_THREAD_FILES",
};

/* Each test starts and ends with none of our variables set. */
static void clear_env(void)
{
	for (unsigned i = 0; i < ARRAY_LEN(env_vars); i++)
		unsetenv(env_vars[i]);
}

static void set_group(const char *nodes, const char *rank)
{
	setenv("DDSS_NODES", nodes, 1);
	if (rank)
		setenv("DDSS_RANK", rank, 1);
}

/* ddss_net_env_load's status; on success also frees what it loaded. */
static int load_status(void)
{
	struct ddss_net_env env;
	int r = ddss_net_env_load(&env);

	if (r == 0)
		ddss_net_env_free(&env);
	return r;
}

static void test_env_defaults(void)
{
	struct ddss_net_env env;

	set_group("127.0.0.1:5000,127.0.0.1:5001", "2");
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.rank, 2);
	CU_ASSERT_EQUAL(env.size, 2);
	CU_ASSERT_EQUAL(env.nodes[1].port, 5001);
	CU_ASSERT_EQUAL(env.listen_fd, -1);
	CU_ASSERT_EQUAL(env.group, 0);
	CU_ASSERT_STRING_EQUAL(env.transport, "auto");
	CU_ASSERT_STRING_EQUAL(env.device, "");
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_ADAPTIVE);
	CU_ASSERT_EQUAL(env.op_timeout_ms, 30000);
	CU_ASSERT_EQUAL(env.connect_timeout_ms, 30000);
	ddss_net_env_free(&env);
	CU_ASSERT_PTR_NULL(env.nodes);
}

static void test_env_all_set(void)
{
	struct ddss_net_env env;
	struct ddss_tp_config cfg;

	set_group("a:1 b:2 c:3", "3");
	setenv("DDSS_SIZE", "3", 1);
	setenv("DDSS_LISTEN_FD", "7", 1);
	setenv("DDSS_GROUP", "0xDeadBeefCafeF00d", 1);
	setenv("DDSS_TRANSPORT", "tcp", 1);
	setenv("DDSS_DEVICE", "mlx5_0", 1);
	setenv("DDSS_COMPLETION", "poll", 1);
	setenv("DDSS_OP_TIMEOUT_MS", "0", 1);
	setenv("DDSS_CONNECT_TIMEOUT_MS", "1500", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.rank, 3);
	CU_ASSERT_EQUAL(env.size, 3);
	CU_ASSERT_EQUAL(env.listen_fd, 7);
	CU_ASSERT_EQUAL(env.group, 0xDEADBEEFCAFEF00Dull);
	CU_ASSERT_STRING_EQUAL(env.transport, "tcp");
	CU_ASSERT_STRING_EQUAL(env.device, "mlx5_0");
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_POLL);
	CU_ASSERT_EQUAL(env.op_timeout_ms, 0);
	CU_ASSERT_EQUAL(env.connect_timeout_ms, 1500);

	/* The configuration points into env and carries every field over. */
	ddss_net_env_to_config(&env, NULL, &cfg);
	CU_ASSERT_EQUAL(cfg.rank, 3);
	CU_ASSERT_EQUAL(cfg.size, 3);
	CU_ASSERT_EQUAL(cfg.group, 0xDEADBEEFCAFEF00Dull);
	CU_ASSERT_PTR_EQUAL(cfg.nodes, env.nodes);
	CU_ASSERT_EQUAL(cfg.listen_fd, 7);
	CU_ASSERT_EQUAL(cfg.completion, DDSS_TP_COMPLETION_POLL);
	CU_ASSERT_EQUAL(cfg.op_timeout_ms, 0);
	CU_ASSERT_EQUAL(cfg.connect_timeout_ms, 1500);
	CU_ASSERT_STRING_EQUAL(cfg.device, "mlx5_0");
	ddss_net_env_free(&env);
}

static void test_env_rank(void)
{
	set_group("a:1,b:2", NULL);
	CU_ASSERT_EQUAL(load_status(), -EINVAL); /* DDSS_RANK missing */
	setenv("DDSS_RANK", "", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_RANK", "0", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_RANK", "3", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_RANK", "-1", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_RANK", "one", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_RANK", "1", 1);
	CU_ASSERT_EQUAL(load_status(), 0);
}

static void test_env_no_nodes(void)
{
	setenv("DDSS_RANK", "1", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_NODES", "", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_NODES", "a:1,b", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	unsetenv("DDSS_NODES");
	setenv("DDSS_NODES_FILE", "/nonexistent/ddss-nodes", 1);
	CU_ASSERT_EQUAL(load_status(), -ENOENT);
}

static void test_env_size(void)
{
	set_group("a:1,b:2", "1");
	setenv("DDSS_SIZE", "3", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_SIZE", "1", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_SIZE", "two", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_SIZE", "2", 1);
	CU_ASSERT_EQUAL(load_status(), 0);
}

static void test_env_nodes_file(void)
{
	static const char text[] = "# ranks of the test group\n"
				   "10.0.0.1:4000   # first\n"
				   "\n"
				   "[::1]:4001\n"
				   "#10.0.0.9:4009\n"
				   "host-c:4002";
	char path[] = "/tmp/ddss-nodes-XXXXXX";
	struct ddss_net_env env;
	int fd = mkstemp(path);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
	close(fd);
	setenv("DDSS_NODES_FILE", path, 1);
	setenv("DDSS_RANK", "2", 1);
	CU_ASSERT_EQUAL(ddss_net_env_load(&env), 0);
	if (env.nodes) {
		CU_ASSERT_EQUAL(env.size, 3);
		CU_ASSERT_EQUAL(env.rank, 2);
		CU_ASSERT_STRING_EQUAL(env.nodes[0].host, "10.0.0.1");
		CU_ASSERT_EQUAL(env.nodes[0].port, 4000);
		CU_ASSERT_STRING_EQUAL(env.nodes[1].host, "::1");
		CU_ASSERT_EQUAL(env.nodes[1].port, 4001);
		CU_ASSERT_STRING_EQUAL(env.nodes[2].host, "host-c");
		CU_ASSERT_EQUAL(env.nodes[2].port, 4002);
		ddss_net_env_free(&env);
	}
	/* DDSS_NODES wins over the file. */
	set_group("x:1,y:2", "2");
	CU_ASSERT_EQUAL(ddss_net_env_load(&env), 0);
	if (env.nodes) {
		CU_ASSERT_EQUAL(env.size, 2);
		CU_ASSERT_STRING_EQUAL(env.nodes[0].host, "x");
		ddss_net_env_free(&env);
	}
	unlink(path);
}

static void test_env_completion(void)
{
	struct ddss_net_env env;

	set_group("a:1", "1");
	setenv("DDSS_COMPLETION", "poll", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_POLL);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "event", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_EVENT);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.completion, DDSS_TP_COMPLETION_ADAPTIVE);
	ddss_net_env_free(&env);
	setenv("DDSS_COMPLETION", "bogus", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_COMPLETION", "POLL", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
}

static void test_env_thread_files(void)
{
	struct ddss_net_env env;

	set_group("a:1", "1");
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_FALSE(env.share_files); /* default: private */
	ddss_net_env_free(&env);
	setenv("DDSS_THREAD_FILES", "shared", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_TRUE(env.share_files);
	ddss_net_env_free(&env);
	setenv("DDSS_THREAD_FILES", "private", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_FALSE(env.share_files);
	ddss_net_env_free(&env);
	setenv("DDSS_THREAD_FILES", "share", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
}

static void test_env_group_and_timeouts(void)
{
	struct ddss_net_env env;

	set_group("a:1", "1");
	setenv("DDSS_GROUP", "1234", 1); /* hex even without 0x */
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.group, 0x1234);
	ddss_net_env_free(&env);
	setenv("DDSS_GROUP", "0x1234zz", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_GROUP", "1", 1);

	setenv("DDSS_OP_TIMEOUT_MS", "soon", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_OP_TIMEOUT_MS", "-1", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_OP_TIMEOUT_MS", "2000000000", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_OP_TIMEOUT_MS", "250", 1);
	CU_ASSERT_EQUAL_FATAL(ddss_net_env_load(&env), 0);
	CU_ASSERT_EQUAL(env.op_timeout_ms, 250);
	ddss_net_env_free(&env);

	setenv("DDSS_CONNECT_TIMEOUT_MS", "0", 1); /* must be at least 1 */
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	unsetenv("DDSS_CONNECT_TIMEOUT_MS");
	setenv("DDSS_LISTEN_FD", "-2", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
	setenv("DDSS_LISTEN_FD", "fd", 1);
	CU_ASSERT_EQUAL(load_status(), -EINVAL);
}

/* ---- configuration values ---- */

#define VAR "DDSS_TEST_VALUE"

/* ddss_env_long on @text; *out_p is preset to 999 to show whether it was written. */
static int env_long(const char *text, long min, long max, long dflt, long *out_p)
{
	if (text)
		setenv(VAR, text, 1);
	else
		unsetenv(VAR);
	*out_p = 999;
	return ddss_env_long(VAR, min, max, dflt, out_p);
}

static int env_hex(const char *text, uint64_t dflt, uint64_t *out_p)
{
	if (text)
		setenv(VAR, text, 1);
	else
		unsetenv(VAR);
	*out_p = 999;
	return ddss_env_hex64(VAR, dflt, out_p);
}

static void test_env_long(void)
{
	long v;

	CU_ASSERT_EQUAL(env_long(NULL, 0, 10, 7, &v), 0);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(env_long("", 0, 10, 7, &v), 0);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(env_long("10", 0, 10, 7, &v), 0); /* bounds are inclusive */
	CU_ASSERT_EQUAL(v, 10);
	CU_ASSERT_EQUAL(env_long("-5", -5, 10, 7, &v), 0);
	CU_ASSERT_EQUAL(v, -5);
	CU_ASSERT_EQUAL(env_long("0x1F", 0, 100, 7, &v), 0);
	CU_ASSERT_EQUAL(v, 31);
	CU_ASSERT_EQUAL(env_long("9223372036854775807", LONG_MIN, LONG_MAX, 0, &v), 0);
	CU_ASSERT_EQUAL(v, LONG_MAX);
	CU_ASSERT_EQUAL(env_long("-9223372036854775808", LONG_MIN, LONG_MAX, 0, &v), 0);
	CU_ASSERT_EQUAL(v, LONG_MIN);

	/* Refused, and the output left alone. */
	CU_ASSERT_EQUAL(env_long("11", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(v, 999);
	CU_ASSERT_EQUAL(env_long("-6", -5, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("5x", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("5 ", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("x", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("-", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("1.5", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("0x", 0, 10, 7, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("9223372036854775808", LONG_MIN, LONG_MAX, 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_long("-9223372036854775809", LONG_MIN, LONG_MAX, 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(v, 999);
}

/*
 * config.h promises "decimal or 0x-prefixed hex", so a leading zero is still decimal.
 *
 * A leading zero is decimal, not octal: "010" is 10 and "09" is 9.
 */
static void test_env_long_leading_zero(void)
{
	long v;

	CU_ASSERT_EQUAL(env_long("010", 0, 100, 7, &v), 0);
	CU_ASSERT_EQUAL(v, 10);
	CU_ASSERT_EQUAL(env_long("09", 0, 100, 7, &v), 0);
	CU_ASSERT_EQUAL(v, 9);
}

static void test_env_hex64(void)
{
	uint64_t v;

	CU_ASSERT_EQUAL(env_hex(NULL, 42, &v), 0);
	CU_ASSERT_EQUAL(v, 42);
	CU_ASSERT_EQUAL(env_hex("", 42, &v), 0);
	CU_ASSERT_EQUAL(v, 42);
	CU_ASSERT_EQUAL(env_hex("1234", 0, &v), 0);
	CU_ASSERT_EQUAL(v, 0x1234);
	CU_ASSERT_EQUAL(env_hex("0x1234", 0, &v), 0);
	CU_ASSERT_EQUAL(v, 0x1234);
	CU_ASSERT_EQUAL(env_hex("0XaBcD", 0, &v), 0);
	CU_ASSERT_EQUAL(v, 0xABCD);
	CU_ASSERT_EQUAL(env_hex("ffffffffffffffff", 0, &v), 0);
	CU_ASSERT_EQUAL(v, UINT64_MAX);
	CU_ASSERT_EQUAL(env_hex("0", 5, &v), 0);
	CU_ASSERT_EQUAL(v, 0);

	CU_ASSERT_EQUAL(env_hex("10000000000000000", 0, &v), -EINVAL); /* 65 bits */
	CU_ASSERT_EQUAL(v, 999);
	CU_ASSERT_EQUAL(env_hex("-1", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_hex("0x", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_hex("12g", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_hex("g", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(env_hex("12 ", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(v, 999);
}

/*
 * A negative value is malformed however it is spaced.
 *
 * strtoull skips white space before a sign: " -1" must still be refused, not read as
 * 0xffffffffffffffff.
 */
static void test_env_hex64_spaced_negative(void)
{
	uint64_t v;

	CU_ASSERT_EQUAL(env_hex(" -1", 0, &v), -EINVAL);
	CU_ASSERT_EQUAL(v, 999);
}

/* ---- error strings and version ---- */

static void test_strerror(void)
{
	char pos[128], neg[128];
	const char *s;

	CU_ASSERT_STRING_EQUAL(ddss_strerror(0), "success");
	CU_ASSERT_STRING_EQUAL(ddss_strerror(-ESTALE), "stale key: the segment was released");
	CU_ASSERT_STRING_EQUAL(ddss_strerror(-ERANGE),
			       "access outside the target's registered memory");
	CU_ASSERT_STRING_EQUAL(ddss_strerror(-EACCES), "peer rejected the handshake");
	CU_ASSERT_STRING_EQUAL(ddss_strerror(-ECANCELED), "operation canceled (transport closing)");

	/* The sign does not matter, for our own texts and the C library's alike. */
	CU_ASSERT_STRING_EQUAL(ddss_strerror(ESTALE), ddss_strerror(-ESTALE));
	snprintf(pos, sizeof(pos), "%s", ddss_strerror(ENOENT));
	snprintf(neg, sizeof(neg), "%s", ddss_strerror(-ENOENT));
	CU_ASSERT_STRING_EQUAL(pos, neg);
	CU_ASSERT_STRING_EQUAL(pos, strerror(ENOENT));

	/* Unknown codes still get some text. */
	s = ddss_strerror(-99999);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_NOT_EQUAL(s[0], '\0');
	/* -INT_MIN would overflow: a UBSan build checks it is handled. */
	s = ddss_strerror(INT_MIN);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_NOT_EQUAL(s[0], '\0');
}

static void test_version(void)
{
	CU_ASSERT_STRING_EQUAL(ddss_version_string(), "0.1.0");
}

/* ---- tcp wire format ---- */

static void test_wire_hdr_round_trip(void)
{
	static const struct tcp_wire_hdr cases[] = {
		{ .kind = TCP_K_REPLY, .tag = 0xBEEF, .len = 0xFFFFFFFFu, .status = -ERANGE,
		  .seq = 0x0102030405060708ull, .off = UINT64_MAX, .a = 1, .b = 0x8000000000000000ull },
		{ .kind = TCP_K_READ },
		{ .kind = TCP_K_HELLO_ACK, .status = INT32_MIN, .tag = UINT16_MAX },
		{ .kind = TCP_K_MSG, .status = INT32_MAX, .seq = UINT64_MAX, .a = UINT64_MAX,
		  .b = UINT64_MAX },
	};

	for (unsigned i = 0; i < ARRAY_LEN(cases); i++) {
		unsigned char buf[TCP_WIRE_HDR_LEN];
		struct tcp_wire_hdr out;

		memset(&out, 0x77, sizeof(out));
		tcp_wire_encode_hdr(&cases[i], buf);
		CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), 0);
		CU_ASSERT_EQUAL(out.kind, cases[i].kind);
		CU_ASSERT_EQUAL(out.tag, cases[i].tag);
		CU_ASSERT_EQUAL(out.len, cases[i].len);
		CU_ASSERT_EQUAL(out.status, cases[i].status);
		CU_ASSERT_EQUAL(out.seq, cases[i].seq);
		CU_ASSERT_EQUAL(out.off, cases[i].off);
		CU_ASSERT_EQUAL(out.a, cases[i].a);
		CU_ASSERT_EQUAL(out.b, cases[i].b);
	}
}

/* The byte layout is the protocol: pin it, little-endian, whatever the host. */
static void test_wire_hdr_layout(void)
{
	static const unsigned char want[TCP_WIRE_HDR_LEN] = {
		TCP_K_WRITE, 0, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 0xFE, 0xFF, 0xFF, 0xFF,
		0, 0, 0, 0,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x11, 0, 0, 0, 0, 0, 0, 0,
		0x22, 0, 0, 0, 0, 0, 0, 0x80,
		0x33, 0, 0, 0, 0, 0, 0, 0,
	};
	struct tcp_wire_hdr h = { .kind = TCP_K_WRITE, .tag = 0x1234, .len = 0x12345678,
				  .status = -2, .seq = 0x0102030405060708ull, .off = 0x11,
				  .a = 0x8000000000000022ull, .b = 0x33 };
	unsigned char buf[TCP_WIRE_HDR_LEN];

	memset(buf, 0xEE, sizeof(buf));
	tcp_wire_encode_hdr(&h, buf);
	CU_ASSERT_EQUAL(memcmp(buf, want, sizeof(want)), 0);
}

static void test_wire_hdr_rejects(void)
{
	struct tcp_wire_hdr good = { .kind = TCP_K_READ, .a = 8 }, out;
	unsigned char buf[TCP_WIRE_HDR_LEN];

	tcp_wire_encode_hdr(&good, buf);
	buf[0] = 0;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[0] = TCP_K_MAX_;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[0] = 0xFF;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[0] = TCP_K_MAX_ - 1; /* the last valid kind */
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), 0);

	/* The flags byte: the fence and bound bits only, and only on a one-sided request. */
	tcp_wire_encode_hdr(&good, buf);
	buf[1] = TCP_WIRE_F_FENCE;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), 0);
	CU_ASSERT_EQUAL(out.flags, TCP_WIRE_F_FENCE);
	buf[1] = TCP_WIRE_F_FENCE | TCP_WIRE_F_BOUND;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), 0);
	CU_ASSERT_EQUAL(out.flags, TCP_WIRE_F_FENCE | TCP_WIRE_F_BOUND);
	buf[1] = 0x80;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[1] = 0x04;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[0] = TCP_K_NOTIFY;
	buf[1] = TCP_WIRE_F_FENCE;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	buf[1] = TCP_WIRE_F_BOUND;
	CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);

	/* Each reserved byte on its own. */
	for (unsigned at = 12; at < 16; at++) {
		tcp_wire_encode_hdr(&good, buf);
		buf[at] = 0x01;
		if (tcp_wire_decode_hdr(buf, &out) != -EPROTO)
			fprintf(stderr, "  reserved byte %u not checked\n", at);
		CU_ASSERT_EQUAL(tcp_wire_decode_hdr(buf, &out), -EPROTO);
	}
}

static void test_wire_hello(void)
{
	struct tcp_wire_hello h = { .magic = TCP_WIRE_MAGIC, .version = TCP_WIRE_VERSION,
				    .from_rank = 3, .to_rank = 0xFFFFFFFFu, .size = 70000,
				    .group = 0xFEDCBA9876543210ull, .pool_len = 1ull << 40 };
	struct tcp_wire_hello out;
	unsigned char buf[TCP_WIRE_HELLO_LEN];

	memset(&out, 0, sizeof(out));
	tcp_wire_encode_hello(&h, buf);
	CU_ASSERT_EQUAL(buf[0], 0x44); /* "DDSS" on the wire */
	CU_ASSERT_EQUAL(buf[3], 0x53);
	CU_ASSERT_EQUAL(tcp_wire_decode_hello(buf, &out), 0);
	CU_ASSERT_EQUAL(out.magic, h.magic);
	CU_ASSERT_EQUAL(out.version, h.version);
	CU_ASSERT_EQUAL(out.from_rank, h.from_rank);
	CU_ASSERT_EQUAL(out.to_rank, h.to_rank);
	CU_ASSERT_EQUAL(out.size, h.size);
	CU_ASSERT_EQUAL(out.group, h.group);
	CU_ASSERT_EQUAL(out.pool_len, h.pool_len);

	h.magic = 0x53534445u;
	tcp_wire_encode_hello(&h, buf);
	CU_ASSERT_EQUAL(tcp_wire_decode_hello(buf, &out), -EPROTO);
	h.magic = TCP_WIRE_MAGIC;
	h.version = TCP_WIRE_VERSION + 1;
	tcp_wire_encode_hello(&h, buf);
	CU_ASSERT_EQUAL(tcp_wire_decode_hello(buf, &out), -EPROTONOSUPPORT);
	h.version = 0;
	tcp_wire_encode_hello(&h, buf);
	CU_ASSERT_EQUAL(tcp_wire_decode_hello(buf, &out), -EPROTONOSUPPORT);
}

#define POOL 4096u

static void test_wire_check_request(void)
{
	static const struct {
		const char *name;
		struct tcp_wire_hdr h;
		int want;
	} cases[] = {
		{ "read whole pool", { .kind = TCP_K_READ, .off = 0, .a = POOL }, 0 },
		{ "read last byte", { .kind = TCP_K_READ, .off = POOL - 1, .a = 1 }, 0 },
		{ "read across end", { .kind = TCP_K_READ, .off = POOL - 1, .a = 2 }, -ERANGE },
		{ "read past end", { .kind = TCP_K_READ, .off = POOL, .a = 1 }, -ERANGE },
		{ "read at ~0", { .kind = TCP_K_READ, .off = UINT64_MAX, .a = 2 }, -ERANGE },
		{ "read length wraps", { .kind = TCP_K_READ, .off = 8, .a = UINT64_MAX - 7 }, -ERANGE },
		{ "read len 0", { .kind = TCP_K_READ, .off = 0, .a = 0 }, -EINVAL },
		{ "read with payload", { .kind = TCP_K_READ, .a = 8, .len = 8 }, -EPROTO },
		{ "write whole pool", { .kind = TCP_K_WRITE, .off = 0, .len = POOL }, 0 },
		{ "write len 0", { .kind = TCP_K_WRITE, .off = 0, .len = 0 }, -EINVAL },
		{ "write > pool", { .kind = TCP_K_WRITE, .off = 0, .len = POOL + 1 }, -EPROTO },
		{ "write across end", { .kind = TCP_K_WRITE, .off = POOL - 1, .len = 2 }, -ERANGE },
		{ "write at ~0", { .kind = TCP_K_WRITE, .off = UINT64_MAX - 3, .len = 8 }, -ERANGE },
		{ "cas last word", { .kind = TCP_K_CAS, .off = POOL - 8 }, 0 },
		{ "cas misaligned", { .kind = TCP_K_CAS, .off = 4 }, -EINVAL },
		{ "cas at end", { .kind = TCP_K_CAS, .off = POOL }, -ERANGE },
		{ "cas at ~0", { .kind = TCP_K_CAS, .off = UINT64_MAX - 7 }, -ERANGE },
		{ "cas with payload", { .kind = TCP_K_CAS, .off = 0, .len = 8 }, -EPROTO },
		{ "fadd first word", { .kind = TCP_K_FADD, .off = 0 }, 0 },
		{ "fadd misaligned", { .kind = TCP_K_FADD, .off = POOL - 4 }, -EINVAL },
		{ "fadd misaligned past end", { .kind = TCP_K_FADD, .off = POOL + 1 }, -EINVAL },
		{ "fadd at end", { .kind = TCP_K_FADD, .off = POOL }, -ERANGE },
		{ "fadd with payload", { .kind = TCP_K_FADD, .len = 1 }, -EPROTO },
		{ "notify", { .kind = TCP_K_NOTIFY, .a = UINT32_MAX }, 0 },
		{ "notify value > 32 bits", { .kind = TCP_K_NOTIFY, .a = 1ull << 32 }, -EPROTO },
		{ "notify with payload", { .kind = TCP_K_NOTIFY, .len = 1 }, -EPROTO },
		{ "msg empty", { .kind = TCP_K_MSG, .len = 0 }, 0 },
		{ "msg max", { .kind = TCP_K_MSG, .len = DDSS_TP_MSG_MAX }, 0 },
		{ "msg too long", { .kind = TCP_K_MSG, .len = DDSS_TP_MSG_MAX + 1 }, -EPROTO },
		{ "reply as request", { .kind = TCP_K_REPLY }, -EPROTO },
		{ "hello as request", { .kind = TCP_K_HELLO, .len = TCP_WIRE_HELLO_LEN }, -EPROTO },
		{ "hello ack as request", { .kind = TCP_K_HELLO_ACK }, -EPROTO },
		{ "kind 0", { .kind = 0 }, -EPROTO },
		{ "kind max", { .kind = TCP_K_MAX_ }, -EPROTO },
	};
	struct tcp_wire_hdr r1 = { .kind = TCP_K_READ, .off = 0, .a = 1 };
	struct tcp_wire_hdr f0 = { .kind = TCP_K_FADD, .off = 0 };

	for (unsigned i = 0; i < ARRAY_LEN(cases); i++) {
		int r = tcp_wire_check_request(&cases[i].h, POOL);

		if (r != cases[i].want)
			fprintf(stderr, "  %s: %d, expected %d\n", cases[i].name, r, cases[i].want);
		CU_ASSERT_EQUAL(r, cases[i].want);
	}
	/* An empty pool serves nothing, without wrapping around. */
	CU_ASSERT_EQUAL(tcp_wire_check_request(&r1, 0), -ERANGE);
	CU_ASSERT_EQUAL(tcp_wire_check_request(&f0, 0), -ERANGE);
}

static void test_wire_in_range(void)
{
	CU_ASSERT_EQUAL(tcp_wire_in_range(0, 0, 0), 1);
	CU_ASSERT_EQUAL(tcp_wire_in_range(0, 1, 0), 0);
	CU_ASSERT_EQUAL(tcp_wire_in_range(100, 0, 100), 1);
	CU_ASSERT_EQUAL(tcp_wire_in_range(101, 0, 100), 0);
	CU_ASSERT_EQUAL(tcp_wire_in_range(99, 1, 100), 1);
	CU_ASSERT_EQUAL(tcp_wire_in_range(99, 2, 100), 0);
	/* off + len would wrap to a small number. */
	CU_ASSERT_EQUAL(tcp_wire_in_range(UINT64_MAX, 2, 100), 0);
	CU_ASSERT_EQUAL(tcp_wire_in_range(2, UINT64_MAX - 1, 100), 0);
	CU_ASSERT_EQUAL(tcp_wire_in_range(1, UINT64_MAX, UINT64_MAX), 0);
	CU_ASSERT_EQUAL(tcp_wire_in_range(0, UINT64_MAX, UINT64_MAX), 1);
	CU_ASSERT_EQUAL(tcp_wire_in_range(UINT64_MAX, 0, UINT64_MAX), 1);
	CU_ASSERT_EQUAL(tcp_wire_in_range(UINT64_MAX, 1, UINT64_MAX), 0);
}

/* ---- registration ---- */

static void env_setup(void)
{
	clear_env();
}

/* ---- descriptor cache epoch (the lock layer's memo relies on it) ---- */

static unsigned acks;

static void count_ack(void *arg, uint32_t to, uint32_t id)
{
	(void)arg;
	(void)to;
	(void)id;
	acks++;
}

static void test_cache_epoch(void)
{
	struct ddss_seg_cache *a, *b;
	struct ddss_seg_loc loc = { .key = 0x1234500ull, .data_off = 4096, .size = 64 };
	const struct ddss_seg_desc *d;
	uint64_t e0;

	CU_ASSERT_EQUAL_FATAL(ddss_seg_cache_create(count_ack, NULL, &a), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_seg_cache_create(count_ack, NULL, &b), 0);
	CU_ASSERT_NOT_EQUAL(ddss_seg_cache_id(a), ddss_seg_cache_id(b));
	e0 = ddss_seg_cache_epoch(a);
	CU_ASSERT_EQUAL(e0, 0);
	CU_ASSERT_EQUAL_FATAL(ddss_seg_cache_end(a, NULL, &loc, 2, &d), 0);
	ddss_seg_cache_put(d);
	/* Lookups and inserts leave the epoch alone. */
	d = ddss_seg_cache_get(a, loc.key);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	ddss_seg_cache_put(d);
	CU_ASSERT_EQUAL(ddss_seg_cache_epoch(a), e0);
	/* An invalidation moves it, and by then the key is no longer found. */
	acks = 0;
	ddss_seg_cache_invalidate(a, loc.key, 2, 7);
	CU_ASSERT_EQUAL(ddss_seg_cache_epoch(a), e0 + 1);
	CU_ASSERT_PTR_NULL(ddss_seg_cache_get(a, loc.key));
	CU_ASSERT_EQUAL(acks, 1);
	/* So does one for a key it never had (a racing lookup may have been told it). */
	ddss_seg_cache_invalidate(a, 0x999900ull, 3, 8);
	CU_ASSERT_EQUAL(ddss_seg_cache_epoch(a), e0 + 2);
	CU_ASSERT_EQUAL(ddss_seg_cache_epoch(b), 0);
	ddss_seg_cache_destroy(a);
	ddss_seg_cache_destroy(b);
}

/* ---- keys ---- */

/*
 * A thread's first few segments, all generation 1, fall in different entries of an
 * n-entry cache indexed by ddss_key_spread (the lock layer's word memo, WORD_MEMOS in
 * lock_api.c, which asserts it is one of the sizes checked here): neighbouring slots at
 * one home, or one slot at neighbouring homes. Indexed by the generation, as before, all
 * shared one entry and a thread alternating two keys missed every time.
 */
static void test_key_spread(void)
{
	for (uint32_t n = 2; n <= 8; n *= 2) {
		unsigned seen_slot = 0, seen_rank = 0;

		for (uint32_t i = 0; i < n; i++) {
			uint64_t by_slot = ddss_key_make(2, 16 + i, 1);
			uint64_t by_rank = ddss_key_make(1 + i, 0, 1);

			seen_slot |= 1u << (ddss_key_spread(by_slot) % n);
			seen_rank |= 1u << (ddss_key_spread(by_rank) % n);
		}
		CU_ASSERT_EQUAL(seen_slot, (1u << n) - 1);
		CU_ASSERT_EQUAL(seen_rank, (1u << n) - 1);
		/* A slot's next segment takes its predecessor's entry, whatever the generation. */
		CU_ASSERT_EQUAL(ddss_key_spread(ddss_key_make(2, 17, 1)) % n,
				ddss_key_spread(ddss_key_make(2, 17, 0x5a5a5)) % n);
	}
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;

	s = CU_add_suite("node lists", NULL, NULL);
	CU_add_test(s, "good lists", test_nodes_good);
	CU_add_test(s, "many entries", test_nodes_many);
	CU_add_test(s, "longest host", test_nodes_host_length);
	CU_add_test(s, "bad lists", test_nodes_bad);

	s = CU_add_suite_with_setup_and_teardown("group environment", NULL, NULL, env_setup,
						 env_setup);
	CU_add_test(s, "defaults", test_env_defaults);
	CU_add_test(s, "every variable set", test_env_all_set);
	CU_add_test(s, "DDSS_RANK", test_env_rank);
	CU_add_test(s, "no node list", test_env_no_nodes);
	CU_add_test(s, "DDSS_SIZE", test_env_size);
	CU_add_test(s, "DDSS_NODES_FILE", test_env_nodes_file);
	CU_add_test(s, "DDSS_COMPLETION", test_env_completion);
	CU_add_test(s, "DDSS_THREAD_FILES", test_env_thread_files);
	CU_add_test(s, "DDSS_GROUP and timeouts", test_env_group_and_timeouts);

	s = CU_add_suite_with_setup_and_teardown("config values", NULL, NULL, env_setup,
						 env_setup);
	CU_add_test(s, "ddss_env_long", test_env_long);
	CU_add_test(s, "ddss_env_long leading zero is decimal", test_env_long_leading_zero);
	CU_add_test(s, "ddss_env_hex64", test_env_hex64);
	CU_add_test(s, "ddss_env_hex64 spaced negative", test_env_hex64_spaced_negative);

	s = CU_add_suite("errors and version", NULL, NULL);
	CU_add_test(s, "ddss_strerror", test_strerror);
	CU_add_test(s, "ddss_version_string", test_version);

	s = CU_add_suite("tcp wire", NULL, NULL);
	CU_add_test(s, "header round trip", test_wire_hdr_round_trip);
	CU_add_test(s, "header layout", test_wire_hdr_layout);
	CU_add_test(s, "header rejects", test_wire_hdr_rejects);
	CU_add_test(s, "hello", test_wire_hello);
	CU_add_test(s, "request checks", test_wire_check_request);
	CU_add_test(s, "range overflow", test_wire_in_range);

	s = CU_add_suite("keys", NULL, NULL);
	CU_add_test(s, "ddss_key_spread: fresh keys apart", test_key_spread);

	s = CU_add_suite("descriptor cache", NULL, NULL);
	CU_add_test(s, "epoch and id", test_cache_epoch);

	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
