/*
 * Rank identity (issue 29, docs/security.md "Rank identity"). A member of the group must not
 * be able to speak as another rank: every lock, barrier, recovery, heartbeat and segment
 * message is taken as coming from the rank its connection authenticated (the transports
 * hand handlers that rank, never one read from the message), so it is enough that no
 * member can authenticate as another.
 *
 * Three in-process tcp transports of a group of 3 on loopback, with keys files as ddssrun
 * writes them (random key per pair; rank r's file holds only r's pairs):
 *  1. the real rank 1, the target;
 *  2. a forger: rank 3's keys relabelled as a file of rank 2 (everything a member could
 *     put together), claiming rank 2. It cannot connect to rank 1 (-EACCES), its message
 *     and write never arrive, rank 1 never sees rank 2 up, and rank 1 cannot be fooled into
 *     talking to it either;
 *  3. the honest rank 3 with its own file: it connects, and its message arrives as rank 3's
 *     (the harness works, and members still speak as themselves).
 * Then the same forgery against a group secret (DDSS_SECRET): there it succeeds, which is
 * what a group secret means (it authenticates the group, not the rank) and what the test
 * would find of the code before per-rank keys.
 */
#include "common/test_util.h"
#include "net/auth.h"
#include "net/tcp/tcp_wire.h"
#include "net/transport.h"

#include <CUnit/CUnit.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 3u
#define GROUP 0x1d3u
#define POOL_LEN 65536u
#define TAG 40
#define WAIT_MS 5000
#define KEY_LEN DDSS_AUTH_KEY_LEN

static char dir[] = "/tmp/ddss-identity.XXXXXX";
static unsigned char pair[N + 1][N + 1][KEY_LEN]; /* pair[a][b] == pair[b][a] */

/* What rank 1's handlers saw (progress thread), read here. */
static unsigned msgs_from[N + 1], ups[N + 1];

static void on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len)
{
	(void)arg, (void)tag, (void)buf, (void)len;
	if (from <= N)
		__atomic_fetch_add(&msgs_from[from], 1, __ATOMIC_RELEASE);
}

static void on_peer(void *arg, uint32_t rank, enum ddss_tp_peer_state state)
{
	(void)arg;
	if (rank <= N && state == DDSS_TP_PEER_UP)
		__atomic_fetch_add(&ups[rank], 1, __ATOMIC_RELEASE);
}

/* A keys file (net/auth.h format) claiming @rank, whose entries are rank @source's keys. */
static bool write_keys(const char *name, uint32_t rank, uint32_t source)
{
	unsigned char hdr[DDSS_AUTH_KEYS_HDR_LEN];
	char path[128];
	uint32_t v;
	bool ok;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	memcpy(hdr, DDSS_AUTH_KEYS_MAGIC, 8);
	v = htole32(rank);
	memcpy(hdr + 8, &v, 4);
	v = htole32(N);
	memcpy(hdr + 12, &v, 4);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return false;
	ok = write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr);
	for (uint32_t other = 1; ok && other <= N; other++)
		ok = write(fd, pair[source][other], KEY_LEN) == KEY_LEN;
	return close(fd) == 0 && ok;
}

static void load_keys(const char *name, uint32_t rank, struct ddss_auth_key *key)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	setenv("DDSS_KEYS_FILE", path, 1);
	memset(key, 0, sizeof(*key));
	CU_ASSERT_EQUAL_FATAL(ddss_auth_keys_load(rank, N, key), 0);
	unsetenv("DDSS_KEYS_FILE");
}

/* A listening socket on a free loopback port for rank @i's node entry; -1 on failure. */
static int listener(struct ddss_tp_node *node)
{
	unsigned port;
	int fd = test_listen_loopback(&port);

	node->port = (uint16_t)port;
	return fd;
}

struct rank {
	struct ddss_tp *tp;
	uint64_t *pool;
};

/* Rank @me of the group at @nodes, listening on @lfd (consumed), authenticated by @key. */
static void open_rank(struct rank *r, uint32_t me, const struct ddss_tp_node *nodes, int lfd,
		      const struct ddss_auth_key *key, bool handlers)
{
	struct ddss_tp_config cfg = {
		.rank = me, .size = N, .group = GROUP, .nodes = nodes, .listen_fd = lfd,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = WAIT_MS,
		.connect_timeout_ms = 1000, .auth = key,
	};
	struct ddss_tp_mr *mr;

	if (handlers)
		cfg.handlers = (struct ddss_tp_handlers){ .on_msg = on_msg, .on_peer = on_peer };
	r->pool = test_alloc_pool(POOL_LEN);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("tcp", &cfg, &r->tp), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_mem_register(r->tp, r->pool, POOL_LEN, true, &mr), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_start(r->tp), 0);
}

static void close_rank(struct rank *r)
{
	ddss_tp_close(r->tp);
	free(r->pool);
}

/* Wait (bounded) until *@counter reaches @n; whether it did. */
static bool wait_count(unsigned *counter, unsigned n)
{
	int64_t give_up = ddss_now_ns() + (int64_t)WAIT_MS * 1000000;

	while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < n)
		if (ddss_now_ns() > give_up)
			return false;
	return true;
}

/* The forger, claiming rank 2, against rank 1; @expect_in: whether it gets in. */
static void forge(const struct ddss_auth_key *target_key, const struct ddss_auth_key *forger_key,
		  bool expect_in)
{
	struct ddss_tp_node nodes[N] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	int lfd[N];
	struct rank target, forger;
	uint64_t word = 0x5eed, marker = 0xbad;
	unsigned failed0;
	int r;

	for (unsigned i = 0; i < N; i++) {
		lfd[i] = listener(&nodes[i]);
		CU_ASSERT_FATAL(lfd[i] >= 0);
	}
	close(lfd[2]); /* rank 3 plays no part here */
	memset(msgs_from, 0, sizeof(msgs_from));
	memset(ups, 0, sizeof(ups));
	open_rank(&target, 1, nodes, lfd[0], target_key, true);
	open_rank(&forger, 2, nodes, lfd[1], forger_key, false);
	target.pool[0] = word;
	failed0 = ddss_tp_handshakes_failed(target.tp);

	r = ddss_tp_peer_connect(forger.tp, 1);
	if (expect_in) {
		CU_ASSERT_EQUAL(r, 0);
		CU_ASSERT_EQUAL(ddss_tp_msg_send(forger.tp, 1, TAG, "hb", 2), 0);
		CU_ASSERT_TRUE(wait_count(&msgs_from[2], 1)); /* taken as rank 2's */
		CU_ASSERT_EQUAL(ddss_tp_write(forger.tp, 1, 0, &marker, 8), 0);
		CU_ASSERT_EQUAL(__atomic_load_n(&target.pool[0], __ATOMIC_ACQUIRE), marker);
	} else {
		CU_ASSERT_EQUAL(r, -EACCES);
		CU_ASSERT_NOT_EQUAL(ddss_tp_msg_send(forger.tp, 1, TAG, "hb", 2), 0);
		CU_ASSERT_NOT_EQUAL(ddss_tp_write(forger.tp, 1, 0, &marker, 8), 0);
		CU_ASSERT_TRUE(ddss_tp_handshakes_failed(target.tp) > failed0);
		/* Rank 1 cannot be fooled the other way round either. */
		CU_ASSERT_EQUAL(ddss_tp_peer_connect(target.tp, 2), -EACCES);
		CU_ASSERT_EQUAL(__atomic_load_n(&msgs_from[2], __ATOMIC_ACQUIRE), 0);
		CU_ASSERT_EQUAL(__atomic_load_n(&ups[2], __ATOMIC_ACQUIRE), 0);
		CU_ASSERT_EQUAL(__atomic_load_n(&target.pool[0], __ATOMIC_ACQUIRE), word);
	}
	close_rank(&forger);
	close_rank(&target);
}

static void test_member_cannot_pass_for_another(void)
{
	struct ddss_auth_key k1, forged;

	load_keys("rank-1.keys", 1, &k1);
	load_keys("forged-2.keys", 2, &forged);
	forge(&k1, &forged, false);
	ddss_auth_key_clear(&k1);
	ddss_auth_key_clear(&forged);
}

/* The control: rank 3 with its own keys gets in, and speaks as rank 3. */
static void test_member_speaks_as_itself(void)
{
	struct ddss_tp_node nodes[N] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_auth_key k1, k3;
	struct rank target, honest;
	uint64_t v = 0x3333;
	int lfd[N];

	for (unsigned i = 0; i < N; i++) {
		lfd[i] = listener(&nodes[i]);
		CU_ASSERT_FATAL(lfd[i] >= 0);
	}
	close(lfd[1]);
	memset(msgs_from, 0, sizeof(msgs_from));
	load_keys("rank-1.keys", 1, &k1);
	load_keys("rank-3.keys", 3, &k3);
	open_rank(&target, 1, nodes, lfd[0], &k1, true);
	open_rank(&honest, 3, nodes, lfd[2], &k3, false);
	CU_ASSERT_EQUAL(ddss_tp_peer_connect(honest.tp, 1), 0);
	CU_ASSERT_EQUAL(ddss_tp_msg_send(honest.tp, 1, TAG, "hb", 2), 0);
	CU_ASSERT_TRUE(wait_count(&msgs_from[3], 1));
	CU_ASSERT_EQUAL(__atomic_load_n(&msgs_from[2], __ATOMIC_ACQUIRE), 0);
	CU_ASSERT_EQUAL(ddss_tp_write(honest.tp, 1, 8, &v, 8), 0);
	CU_ASSERT_EQUAL(__atomic_load_n(&target.pool[1], __ATOMIC_ACQUIRE), v);
	CU_ASSERT_EQUAL(ddss_tp_peer_connect(target.tp, 3), 0); /* and the other way */
	close_rank(&honest);
	close_rank(&target);
	ddss_auth_key_clear(&k1);
	ddss_auth_key_clear(&k3);
}

/*
 * A peer that knows the group id and sends a well-formed HELLO, then stalls before its
 * AUTH (it cannot prove anything), holds nobody up: the acceptor waits for AUTH frames in
 * its poll loop. Five such peers, then the honest rank 3 joins within STALL_BOUND_MS. (The
 * acceptor used to wait for each AUTH in turn, up to 1 s from its accept.)
 */
#define STALLERS 5
#define STALL_BOUND_MS 500

static int stall_after_hello(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct tcp_wire_hello h = { .magic = TCP_WIRE_MAGIC, .version = TCP_WIRE_VERSION,
				    .from_rank = 2, .to_rank = 1, .size = N, .group = GROUP,
				    .flags = TCP_WIRE_HELLO_AUTH };
	struct tcp_wire_hdr hdr = { .kind = TCP_K_HELLO, .len = TCP_WIRE_HELLO_LEN };
	unsigned char buf[TCP_WIRE_HDR_LEN + TCP_WIRE_HELLO_LEN];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	randombytes_buf(h.nonce, sizeof(h.nonce));
	tcp_wire_encode_hdr(&hdr, buf);
	tcp_wire_encode_hello(&h, buf + TCP_WIRE_HDR_LEN);
	if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf)) {
		close(fd);
		return -1;
	}
	return fd; /* and says nothing more */
}

static void test_stall_before_auth(void)
{
	struct ddss_tp_node nodes[N] = { { "127.0.0.1", 0 }, { "127.0.0.1", 0 }, { "127.0.0.1", 0 } };
	struct ddss_auth_key k1, k3;
	struct rank target, honest;
	int lfd[N], stall[STALLERS];
	int64_t t0, ms;

	for (unsigned i = 0; i < N; i++) {
		lfd[i] = listener(&nodes[i]);
		CU_ASSERT_FATAL(lfd[i] >= 0);
	}
	close(lfd[1]);
	load_keys("rank-1.keys", 1, &k1);
	load_keys("rank-3.keys", 3, &k3);
	open_rank(&target, 1, nodes, lfd[0], &k1, false);
	open_rank(&honest, 3, nodes, lfd[2], &k3, false);
	for (unsigned i = 0; i < STALLERS; i++) {
		stall[i] = stall_after_hello(nodes[0].port);
		CU_ASSERT(stall[i] >= 0);
	}
	t0 = ddss_now_ns();
	CU_ASSERT_EQUAL(ddss_tp_peer_connect(honest.tp, 1), 0);
	ms = (ddss_now_ns() - t0) / 1000000;
	printf("  rank 3 joined in %lld ms behind %d peers stalled before AUTH ", (long long)ms,
	       STALLERS);
	CU_ASSERT(ms < STALL_BOUND_MS);
	for (unsigned i = 0; i < STALLERS; i++)
		if (stall[i] >= 0)
			close(stall[i]);
	close_rank(&honest);
	close_rank(&target);
	ddss_auth_key_clear(&k1);
	ddss_auth_key_clear(&k3);
}

/* A group secret authenticates the group only: a member holding it passes for anyone. */
static void test_group_secret_is_not_identity(void)
{
	struct ddss_auth_key group;

	unsetenv("DDSS_SECRET_FILE");
	ddss_auth_env_secret_forget();
	unsetenv("DDSS_SECRET");
	CU_ASSERT_EQUAL_FATAL(ddss_auth_key_load("one secret for all", &group), 0);
	forge(&group, &group, true);
	ddss_auth_key_clear(&group);
}

/* Loading: what a rank refuses (each a clear -errno, the key left off). */
static void expect_load(const char *path, uint32_t rank, int want)
{
	struct ddss_auth_key k = { 0 };

	setenv("DDSS_KEYS_FILE", path, 1);
	CU_ASSERT_EQUAL(ddss_auth_keys_load(rank, N, &k), want);
	CU_ASSERT_EQUAL(k.on, want == 0);
	ddss_auth_key_clear(&k);
	unsetenv("DDSS_KEYS_FILE");
}

static void test_keys_file_checks(void)
{
	struct ddss_auth_key k = { 0 }, secret = { 0 };
	unsigned char a[KEY_LEN], b[KEY_LEN];
	char path[128], bad[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/rank-1.keys", dir);
	expect_load(path, 1, 0);
	expect_load(path, 2, -EINVAL);             /* another rank's file */
	expect_load("", 1, -EINVAL);               /* set but empty */
	expect_load("/nonexistent/keys", 1, -ENOENT);
	CU_ASSERT_EQUAL(chmod(path, 0640), 0);     /* the group may read it */
	expect_load(path, 1, -EACCES);
	CU_ASSERT_EQUAL(chmod(path, 0600), 0);
	snprintf(bad, sizeof(bad), "%s/short.keys", dir);
	f = fopen(bad, "w");
	CU_ASSERT_FATAL(f != NULL);
	fputs("DDSSKEY1", f);
	fclose(f);
	CU_ASSERT_EQUAL(chmod(bad, 0600), 0);
	expect_load(bad, 1, -EINVAL);              /* truncated */
	unlink(bad);
	/* One or the other: a keys file and a group secret together are refused. */
	CU_ASSERT_EQUAL(ddss_auth_key_load("s", &secret), 0);
	setenv("DDSS_KEYS_FILE", path, 1);
	CU_ASSERT_EQUAL(ddss_auth_keys_load(1, N, &secret), -EINVAL);
	unsetenv("DDSS_KEYS_FILE");
	/* A file knows its own pairs only; a group key derives every pair, symmetrically. */
	load_keys("rank-1.keys", 1, &k);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&k, 1, 3, a), 0);
	CU_ASSERT_EQUAL(memcmp(a, pair[1][3], KEY_LEN), 0);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&k, 3, 1, b), 0);
	CU_ASSERT_EQUAL(memcmp(a, b, KEY_LEN), 0);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&k, 2, 3, a), -EACCES);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&k, 1, N + 1, a), -EACCES);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&secret, 2, 3, a), 0);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&secret, 3, 2, b), 0);
	CU_ASSERT_EQUAL(memcmp(a, b, KEY_LEN), 0);
	CU_ASSERT_EQUAL(ddss_auth_pair_key(&secret, 1, 3, b), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, KEY_LEN), 0);
	ddss_auth_key_clear(&k);
	ddss_auth_key_clear(&secret);
}

static int suite_init(void)
{
	if (sodium_init() < 0 || !mkdtemp(dir))
		return 1;
	for (uint32_t a = 1; a <= N; a++)
		for (uint32_t b = a; b <= N; b++) {
			randombytes_buf(pair[a][b], KEY_LEN);
			memcpy(pair[b][a], pair[a][b], KEY_LEN);
		}
	return write_keys("rank-1.keys", 1, 1) && write_keys("rank-3.keys", 3, 3) &&
			       write_keys("forged-2.keys", 2, 3) /* all a member (rank 3) has */
		       ? 0 : 1;
}

static int suite_cleanup(void)
{
	static const char *const files[] = { "rank-1.keys", "rank-3.keys", "forged-2.keys" };
	char path[128];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
	return 0;
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	unsetenv("DDSS_KEYS_FILE");
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("rank identity (keys files)", suite_init, suite_cleanup);
	CU_add_test(suite, "keys files: checks on load, own pairs only", test_keys_file_checks);
	CU_add_test(suite, "a member cannot pass for another rank", test_member_cannot_pass_for_another);
	CU_add_test(suite, "a member speaks as itself", test_member_speaks_as_itself);
	CU_add_test(suite, "peers stalled before AUTH hold up no join", test_stall_before_auth);
	CU_add_test(suite, "a group secret authenticates the group only",
		    test_group_secret_is_not_identity);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
