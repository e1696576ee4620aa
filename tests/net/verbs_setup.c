/*
 * verbs provider set-up, in one process (run under scripts/rdma-exec, which gives the
 * device's address in DDSS_RDMA_HOST): device selection and its errors, the loopback QP
 * to the rank itself, and a peer of another group being refused.
 */
#include "common/test_util.h"
#include "net/transport.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_LEN 65536

static char host[64];
static uint16_t base_port;

/* A one- or two-rank config on this machine's RDMA address; @nodes has room for two. */
static struct ddss_tp_config config(struct ddss_tp_node *nodes, uint32_t rank, uint32_t size,
				    uint64_t group, const char *device)
{
	for (uint32_t i = 0; i < 2; i++) {
		snprintf(nodes[i].host, sizeof(nodes[i].host), "%s", host);
		nodes[i].port = (uint16_t)(base_port + i);
	}
	return (struct ddss_tp_config){
		.rank = rank, .size = size, .group = group, .nodes = nodes, .listen_fd = -1,
		.completion = DDSS_TP_COMPLETION_EVENT, .op_timeout_ms = 10000,
		.connect_timeout_ms = 2000, .device = device,
	};
}

static const char *device_name(void)
{
	const char *d = getenv("RXE_DEV");

	return d && *d ? d : NULL;
}

static void test_unknown_device_refused(void)
{
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config cfg = config(nodes, 1, 1, 1, "no_such_dev0");
	struct ddss_tp *tp = NULL;

	CU_ASSERT_EQUAL(ddss_tp_open("verbs", &cfg, &tp), -ENODEV);
	CU_ASSERT_PTR_NULL(tp);
}

static void test_loopback_address_refused(void)
{
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config cfg = config(nodes, 1, 1, 1, NULL);
	struct ddss_tp *tp = NULL;

	/* rdma_cm has no device on lo: a clear error, not a hang or a later failure. */
	snprintf(nodes[0].host, sizeof(nodes[0].host), "127.0.0.1");
	CU_ASSERT_EQUAL(ddss_tp_open("verbs", &cfg, &tp), -ENODEV);
	CU_ASSERT_PTR_NULL(tp);
}

static void test_named_device_and_loopback_qp(void)
{
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config cfg = config(nodes, 1, 1, 7, device_name());
	uint64_t *pool = test_alloc_pool(POOL_LEN);
	struct ddss_tp_mr *mr;
	struct ddss_tp *tp;
	uint64_t old = 0, v = 0;

	if (!cfg.device)
		printf("(RXE_DEV not set: automatic device choice)\n");
	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("verbs", &cfg, &tp), 0);
	CU_ASSERT_EQUAL(ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr), 0);
	CU_ASSERT_EQUAL(ddss_tp_start(tp), 0);
	/* The rank's own pool goes through the NIC (loopback QP), never CPU atomics. */
	pool[1] = 40;
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, 1, 8, 2, &old), 0);
	CU_ASSERT_EQUAL(old, 40);
	CU_ASSERT_EQUAL(ddss_tp_cas(tp, 1, 8, 42, 7, &old), 0);
	CU_ASSERT_EQUAL(old, 42);
	CU_ASSERT_EQUAL(ddss_tp_read(tp, 1, 8, &v, 8), 0);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(pool[1], 7);
	CU_ASSERT_EQUAL(ddss_tp_read(tp, 1, POOL_LEN - 4, &v, 8), -ERANGE);
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, 1, 4, 1, &old), -EINVAL);
	ddss_tp_close(tp);
	free(pool);
}

/* Threads of this process other than the caller that can see @fd in their file table. */
static int threads_seeing(int fd)
{
	char path[300];
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");
	int n = 0;

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == (int)gettid())
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/fd/%d", e->d_name, fd);
		n += access(path, F_OK) == 0;
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * The provider's helper threads (rdma_cm, receives) drop their share of the file table
 * (net/thread_files.h): they see no fd opened after them, hold none of ours open (a pipe
 * closed here reaches EOF), and the transport still works. DDSS_THREAD_FILES=shared
 * (cfg.share_files) keeps one table.
 */
static pthread_mutex_t msg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t msg_cv = PTHREAD_COND_INITIALIZER;
static bool msg_seen;

/* Runs on the receive thread: proof that it is past its start-up. */
static void on_msg(void *arg, uint32_t from, uint16_t tag, const void *buf, size_t len)
{
	pthread_mutex_lock(&msg_mu);
	msg_seen = true;
	pthread_cond_broadcast(&msg_cv);
	pthread_mutex_unlock(&msg_mu);
}

static bool wait_msg(void)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&msg_mu);
	while (!msg_seen && pthread_cond_timedwait(&msg_cv, &msg_mu, &until) == 0)
		;
	pthread_mutex_unlock(&msg_mu);
	return msg_seen;
}

static void check_helper_files(bool share)
{
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config cfg = config(nodes, 1, 1, 9, NULL);
	uint64_t *pool = test_alloc_pool(POOL_LEN);
	struct ddss_tp_mr *mr;
	struct ddss_tp *tp;
	uint64_t old = 0;
	int p[2], later;
	char c;

	cfg.share_files = share;
	cfg.handlers.on_msg = on_msg;
	msg_seen = false;
	CU_ASSERT_EQUAL_FATAL(pipe2(p, O_NONBLOCK), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("verbs", &cfg, &tp), 0);
	CU_ASSERT_EQUAL(ddss_tp_mem_register(tp, pool, POOL_LEN, true, &mr), 0);
	CU_ASSERT_EQUAL(ddss_tp_start(tp), 0);
	pool[0] = 1;
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, 1, 0, 1, &old), 0); /* the cm thread connected us */
	CU_ASSERT_EQUAL(old, 1);
	CU_ASSERT_EQUAL(ddss_tp_msg_send(tp, 1, 1, "m", 1), 0);
	CU_ASSERT_TRUE_FATAL(wait_msg()); /* the receive thread is running too */
	later = open("/dev/null", O_RDONLY);
	CU_ASSERT_TRUE_FATAL(later >= 0);
	CU_ASSERT_EQUAL(threads_seeing(later), share ? 2 : 0);
	close(p[1]);
	CU_ASSERT_EQUAL(read(p[0], &c, 1), 0); /* EOF: no helper kept the write end open */
	CU_ASSERT_EQUAL(ddss_tp_fadd(tp, 1, 0, 1, &old), 0);
	CU_ASSERT_EQUAL(old, 2);
	ddss_tp_close(tp);
	close(later);
	close(p[0]);
	free(pool);
}

static void test_helper_files_private(void)
{
	check_helper_files(false);
}

static void test_helper_files_shared(void)
{
	check_helper_files(true);
}

static void test_other_group_refused(void)
{
	struct ddss_tp_node nodes[2];
	struct ddss_tp_config c1 = config(nodes, 1, 2, 0x1111, NULL);
	struct ddss_tp_config c2 = config(nodes, 2, 2, 0x2222, NULL);
	uint64_t *p1 = test_alloc_pool(POOL_LEN), *p2 = test_alloc_pool(POOL_LEN);
	struct ddss_tp *t1, *t2;
	struct ddss_tp_mr *m1, *m2;
	struct ddss_tp_peer_info info;
	uint64_t old;

	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("verbs", &c1, &t1), 0);
	CU_ASSERT_EQUAL_FATAL(ddss_tp_open("verbs", &c2, &t2), 0);
	CU_ASSERT_EQUAL(ddss_tp_mem_register(t1, p1, POOL_LEN, true, &m1), 0);
	CU_ASSERT_EQUAL(ddss_tp_mem_register(t2, p2, POOL_LEN, true, &m2), 0);
	CU_ASSERT_EQUAL(ddss_tp_start(t1), 0);
	CU_ASSERT_EQUAL(ddss_tp_start(t2), 0);
	p2[0] = 5;
	/* Rank 2 belongs to another group: refused with a reason, and nothing changes. */
	CU_ASSERT_EQUAL(ddss_tp_fadd(t1, 2, 0, 1, &old), -EPERM);
	CU_ASSERT_EQUAL(p2[0], 5);
	CU_ASSERT_EQUAL(ddss_tp_peer_info(t1, 2, &info), 0);
	CU_ASSERT_NOT_EQUAL(info.state, DDSS_TP_PEER_UP);
	/* Each still works on its own. */
	CU_ASSERT_EQUAL(ddss_tp_fadd(t2, 2, 0, 1, &old), 0);
	CU_ASSERT_EQUAL(old, 5);
	ddss_tp_close(t1);
	ddss_tp_close(t2);
	free(p1);
	free(p2);
}

int main(void)
{
	CU_pSuite suite;
	unsigned failed;

	test_rdma_host_or_skip(host, sizeof(host));
	/* rdma_cm ports are their own space; one per process id keeps parallel runs apart. */
	base_port = (uint16_t)(30000 + (getpid() % 10000) * 2);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("verbs set-up", NULL, NULL);
	CU_add_test(suite, "unknown DDSS_DEVICE refused", test_unknown_device_refused);
	CU_add_test(suite, "address on lo refused", test_loopback_address_refused);
	CU_add_test(suite, "named device, loopback QP to itself", test_named_device_and_loopback_qp);
	CU_add_test(suite, "peer of another group refused", test_other_group_refused);
	CU_add_test(suite, "helper threads: a file table of their own", test_helper_files_private);
	CU_add_test(suite, "helper threads: DDSS_THREAD_FILES=shared", test_helper_files_shared);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
