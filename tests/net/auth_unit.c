/*
 * net/auth.c on its own: key loading and its precedence, proofs (right key, wrong key,
 * wrong role, any changed transcript field, truncation), and the authenticator replay
 * cache (accepted once, replays, stale and future stamps, forgetting raises the floor).
 */
#include "common/test_util.h"
#include "net/auth.h"
#include "net/auth_replay.h"
#include "net/exposure.h"
#include "net/net.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct ddss_auth_key key_of(const char *secret)
{
	struct ddss_auth_key k;

	unsetenv("DDSS_SECRET_FILE");
	unsetenv("DDSS_SECRET");
	ddss_auth_env_secret_forget(); /* a DDSS_SECRET read earlier would win */
	CU_ASSERT_EQUAL(ddss_auth_key_load(secret, &k), 0);
	return k;
}

static void test_key_load(void)
{
	struct ddss_auth_key a = key_of("s1"), b = key_of("s2"), c, none;
	char path[] = "/tmp/ddss-auth-XXXXXX";
	int fd;

	CU_ASSERT(a.on && b.on);
	CU_ASSERT(memcmp(a.key, b.key, sizeof(a.key)) != 0);
	none = key_of(NULL);
	CU_ASSERT_FALSE(none.on);
	/* The environment wins over the attribute; the file over the variable. */
	setenv("DDSS_SECRET", "s1", 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load("s2", &c), 0);
	CU_ASSERT(memcmp(c.key, a.key, sizeof(a.key)) == 0);
	fd = mkstemp(path);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "s2\n", 3), 3); /* an editor's newline is not the secret */
	close(fd);
	setenv("DDSS_SECRET_FILE", path, 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), 0);
	CU_ASSERT(memcmp(c.key, b.key, sizeof(b.key)) == 0);
	unlink(path);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), -ENOENT);
	unsetenv("DDSS_SECRET_FILE");
	setenv("DDSS_SECRET", "", 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), -EINVAL);
	CU_ASSERT_FALSE(c.on);
	unsetenv("DDSS_SECRET");
}

/*
 * Hostile (issue 29): a secret lying where others can see it is refused or removed. A
 * secret file the group or others may read or write, a DDSS_SECRET_FILE set but empty (an
 * unset variable in a script: it used to mean "no secret"), and DDSS_SECRET left in the
 * environment for every child to inherit.
 */
static void test_secret_hygiene(void)
{
	struct ddss_auth_key a = key_of("s1"), c;
	static const mode_t open_modes[] = { 0640, 0604, 0620, 0602, 0660, 0644 };
	char path[] = "/tmp/ddss-auth-XXXXXX";
	int fd = mkstemp(path);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "s1", 2), 2);
	close(fd);
	setenv("DDSS_SECRET_FILE", path, 1);
	for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
		CU_ASSERT_EQUAL(chmod(path, open_modes[i]), 0);
		c.on = true;
		CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), -EACCES);
		CU_ASSERT_FALSE(c.on);
	}
	CU_ASSERT_EQUAL(chmod(path, 0400), 0);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), 0);
	CU_ASSERT(c.on && memcmp(c.key, a.key, sizeof(a.key)) == 0);
	unlink(path);
	/* Set but empty is an error, not "no secret", even with a secret elsewhere. */
	setenv("DDSS_SECRET_FILE", "", 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load("s1", &c), -EINVAL);
	CU_ASSERT_FALSE(c.on);
	unsetenv("DDSS_SECRET_FILE");
	/* DDSS_SECRET is read once and leaves the environment; the process remembers it
	 * (a context closed and opened again still has it), over the attribute too. */
	setenv("DDSS_SECRET", "s1", 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), 0);
	CU_ASSERT(c.on && memcmp(c.key, a.key, sizeof(a.key)) == 0);
	CU_ASSERT_PTR_NULL(getenv("DDSS_SECRET"));
	c.on = false;
	CU_ASSERT_EQUAL(ddss_auth_key_load("s2", &c), 0);
	CU_ASSERT(c.on && memcmp(c.key, a.key, sizeof(a.key)) == 0);
	/* ... also when the file wins over it. */
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "s1", 2), 2);
	close(fd);
	setenv("DDSS_SECRET_FILE", path, 1);
	setenv("DDSS_SECRET", "s2", 1);
	CU_ASSERT_EQUAL(ddss_auth_key_load(NULL, &c), 0);
	CU_ASSERT(memcmp(c.key, a.key, sizeof(a.key)) == 0);
	CU_ASSERT_PTR_NULL(getenv("DDSS_SECRET"));
	unlink(path);
	unsetenv("DDSS_SECRET_FILE");
	ddss_auth_env_secret_forget();
}

/*
 * Secure by default (issue 29): a rank that would listen where other machines reach it
 * needs a secret, unless DDSS_INSECURE=1. Nothing here binds or sends: the check comes
 * before the transport exists.
 */
static struct ddss_net_env env_at(const char *host, bool secret, int listen_fd)
{
	static struct ddss_tp_node node;
	struct ddss_net_env env = { .rank = 1, .size = 1, .nodes = &node, .listen_fd = listen_fd };

	snprintf(node.host, sizeof(node.host), "%s", host);
	node.port = 7000;
	env.auth.on = secret;
	return env;
}

static int fd_bound_to(uint32_t addr)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(addr) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void test_secure_by_default(void)
{
	struct ddss_net_env e;
	struct ddss_net *net = NULL;
	int fd;

	unsetenv("DDSS_INSECURE");
	e = env_at("192.0.2.1", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), -EACCES);
	e = env_at("192.0.2.1", true, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	e = env_at("127.0.0.1", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	e = env_at("127.3.4.5", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	e = env_at("::1", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	e = env_at("::ffff:192.0.2.1", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), -EACCES);
	e = env_at("no-such-host.invalid", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), -EACCES); /* cannot tell: closed */
	/* An inherited socket listens where it is bound, whatever the node list says. */
	fd = fd_bound_to(INADDR_LOOPBACK);
	CU_ASSERT_FATAL(fd >= 0);
	e = env_at("192.0.2.1", false, fd);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	close(fd);
	fd = fd_bound_to(INADDR_ANY);
	CU_ASSERT_FATAL(fd >= 0);
	e = env_at("127.0.0.1", false, fd);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), -EACCES);
	close(fd);
	/* The opt-out is exactly "1". */
	setenv("DDSS_INSECURE", "yes", 1);
	e = env_at("192.0.2.1", false, -1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), -EACCES);
	setenv("DDSS_INSECURE", "1", 1);
	CU_ASSERT_EQUAL(ddss_net_check_exposure(&e), 0);
	unsetenv("DDSS_INSECURE");
	/* End to end: joining a group on a routable address without a secret is refused
	 * before anything listens. */
	setenv("DDSS_RANK", "1", 1);
	setenv("DDSS_NODES", "192.0.2.1:7000", 1);
	setenv("DDSS_TRANSPORT", "tcp", 1);
	unsetenv("DDSS_NODES_FILE");
	unsetenv("DDSS_LISTEN_FD");
	unsetenv("DDSS_SIZE");
	CU_ASSERT_EQUAL(ddss_net_open(NULL, &net), -EACCES);
	if (net)
		ddss_net_close(net);
}

static void test_proofs(void)
{
	struct ddss_auth_key k = key_of("group secret"), other = key_of("other secret");
	struct ddss_auth_transcript t = { .group = 0x1234, .initiator = 1, .target = 2, .size = 4 };
	unsigned char p[DDSS_AUTH_PROOF_LEN];

	ddss_auth_nonce(t.nonce_i);
	ddss_auth_nonce(t.nonce_t);
	ddss_auth_prove(&k, DDSS_AUTH_INITIATOR, &t, p);
	CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_INITIATOR, &t, p, sizeof(p)), 0);
	CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_INITIATOR, &t, p, 16), 0);
	CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_INITIATOR, &t, p, 15), -EACCES);
	CU_ASSERT_EQUAL(ddss_auth_check(&other, DDSS_AUTH_INITIATOR, &t, p, sizeof(p)), -EACCES);
	/* One side's answer is not the other's. */
	CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_TARGET, &t, p, sizeof(p)), -EACCES);
	/* Every field of the transcript counts. */
	struct ddss_auth_transcript m[6];

	for (int i = 0; i < 6; i++)
		m[i] = t;
	m[0].group++;
	m[1].initiator = 3;
	m[2].target = 3;
	m[3].size = 5;
	m[4].nonce_i[15] ^= 1;
	m[5].nonce_t[0] ^= 0x80;
	for (int i = 0; i < 6; i++)
		CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_INITIATOR, &m[i], p, sizeof(p)), -EACCES);
	p[31] ^= 1;
	CU_ASSERT_EQUAL(ddss_auth_check(&k, DDSS_AUTH_INITIATOR, &t, p, sizeof(p)), -EACCES);
	/* No key: nothing verifies. */
	struct ddss_auth_key none = { 0 };

	p[31] ^= 1;
	CU_ASSERT_EQUAL(ddss_auth_check(&none, DDSS_AUTH_INITIATOR, &t, p, sizeof(p)), -EACCES);
}

static void stamp_at(unsigned char n[DDSS_AUTH_NONCE_LEN], int64_t delta_s)
{
	uint64_t t;

	ddss_auth_stamp(n);
	memcpy(&t, n, 8);
	t = htole64((uint64_t)((int64_t)le64toh(t) + delta_s));
	memcpy(n, &t, 8);
}

static void test_replay(void)
{
	static struct ddss_auth_replay rp;
	unsigned char n[DDSS_AUTH_NONCE_LEN], old[DDSS_AUTH_NONCE_LEN];

	ddss_auth_replay_init(&rp);
	ddss_auth_stamp(n);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), 0);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), -EACCES); /* replayed */
	stamp_at(n, -DDSS_AUTH_SKEW_S - 5);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), -EACCES); /* too old */
	stamp_at(n, DDSS_AUTH_SKEW_S + 5);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), -EACCES); /* from the future */
	/* Fill the cache with older stamps, then one more: what was forgotten, and anything
	 * not newer, is refused from then on instead of becoming replayable. */
	stamp_at(old, -30);
	memcpy(n, old, sizeof(n));
	for (unsigned i = 1; i < DDSS_AUTH_REPLAY_SLOTS; i++) {
		stamp_at(n, -30);
		CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), 0);
	}
	stamp_at(n, -30);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), 0); /* forgets the first (now-ish) */
	stamp_at(n, -30);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), -EACCES); /* not newer than the floor */
	stamp_at(n, 1);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&rp, n), 0);
	ddss_auth_replay_destroy(&rp);
}

/*
 * A member floods a target's replay cache (the one of its own rank: verbs keeps one per
 * initiator) with valid stamps from the future, more than the cache holds: the floor must
 * not rise into the future, so a request stamped now still gets in. Stamps far ahead are
 * refused outright, and another rank's cache is untouched by the flood.
 */
static void test_replay_flood(void)
{
	static struct ddss_auth_replay mine, other;
	unsigned char n[DDSS_AUTH_NONCE_LEN];
	unsigned taken = 0;

	ddss_auth_replay_init(&mine);
	ddss_auth_replay_init(&other);
	for (unsigned i = 0; i < DDSS_AUTH_REPLAY_SLOTS + 8; i++) {
		stamp_at(n, DDSS_AUTH_SKEW_S - 1);
		taken += ddss_auth_replay_check(&mine, n) == 0;
	}
	CU_ASSERT_EQUAL(taken, 0); /* 119 s ahead: refused, the cache keeps no such stamp */
	stamp_at(n, 60);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&mine, n), -EACCES);
	stamp_at(n, 0);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&mine, n), 0); /* nobody locked out */
	stamp_at(n, -1);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&mine, n), 0);
	stamp_at(n, 0);
	CU_ASSERT_EQUAL(ddss_auth_replay_check(&other, n), 0);
	ddss_auth_replay_destroy(&mine);
	ddss_auth_replay_destroy(&other);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("auth", NULL, NULL);
	CU_add_test(s, "group key from secret, env, file", test_key_load);
	CU_add_test(s, "secret hygiene: open files refused, empty file variable, env consumed",
		    test_secret_hygiene);
	CU_add_test(s, "secure by default: no secret, no listening beyond loopback",
		    test_secure_by_default);
	CU_add_test(s, "proofs bind key, role and transcript", test_proofs);
	CU_add_test(s, "authenticators: once, in their window", test_replay);
	CU_add_test(s, "a replay-cache flood with future stamps locks nobody out",
		    test_replay_flood);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
