/*
 * The verbs transport: built or not, and on this host, each RDMA device with its ports,
 * whether a rank could run on it, and if not, why: no device at all, a port down, no IP
 * interface or no IPv4 address for rdma_cm, a memlock limit below what registering the
 * pool takes, or the provider refusing to start. Then whether rdma_cm works on loopback
 * (ddssrun's default address), and what the automatic transport choice would take.
 */
#include "info.h"

#ifdef DDSS_INFO_VERBS
#include "info_verbs.h"
#include "net/verbs/verbs.h"
#include "net/verbs/verbs_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The probe's connect and the loopback check: a healthy device answers in milliseconds. */
#define PROBE_MS 3000
#define CAP_IPC_LOCK_BIT 14

struct dev_report {
	char name[64];
	bool usable;
	char verdict[320];   /* "usable (...)" or "unusable: ..." */
	char ports[4][200];  /* one line per port */
	int nports;
	bool probed;
	struct info_verbs_caps caps;
};

/* Why ibv_get_device_list found nothing, from what the kernel shows; @hint_p: what to do. */
static const char *why_no_device(const char **hint_p)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *e;
	bool any = false;

	*hint_p = NULL;
	if (!d) {
		*hint_p = "Soft-RoCE on an Ethernet interface: modprobe rdma_rxe; "
			  "rdma link add rxe0 type rxe netdev IFACE";
		return "no RDMA device: /sys/class/infiniband is absent (no RDMA driver in the "
		       "kernel)";
	}
	while ((e = readdir(d)))
		any |= e->d_name[0] != '.';
	closedir(d);
	if (any)
		*hint_p = "install the provider library (Debian: ibverbs-providers)";
	return any ? "no RDMA device libibverbs can use: the kernel has some, but no provider "
		     "library for them"
		   : "no RDMA device: /sys/class/infiniband is empty (the driver has no device)";
}

/* First line of a sysfs file into @buf, newline dropped: 0 or -errno. */
static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	int r = -ENOENT;

	if (!f)
		return -errno;
	if (fgets(buf, (int)len, f)) {
		buf[strcspn(buf, "\n")] = '\0';
		r = buf[0] ? 0 : -ENOENT;
	}
	fclose(f);
	return r;
}

/*
 * The IP interface rdma_cm resolves @dev's @port through: the RoCE netdev of its GIDs, or
 * for InfiniBand the IPoIB interface of the device (dev_port = port - 1).
 */
static int port_netdev(const char *dev, unsigned port, char *buf, size_t len)
{
	char path[512], val[32];
	struct dirent *e;
	DIR *d;
	int r = -ENOENT;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/0", dev,
		 port);
	if (!read_line(path, buf, len))
		return 0;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", dev);
	d = opendir(path);
	if (!d)
		return -ENOENT;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/net/%s/dev_port", e->d_name);
		if (r && (read_line(path, val, sizeof(val)) || strtoul(val, NULL, 0) == port - 1)) {
			snprintf(buf, len, "%.63s", e->d_name);
			r = 0;
		}
	}
	closedir(d);
	return r;
}

static const char *link_layer_str(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND:
		return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET:
		return "Ethernet (RoCE)";
	default:
		return "link layer unknown";
	}
}

/* Whether this process may lock memory beyond RLIMIT_MEMLOCK (root usually may). */
static bool has_cap_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long eff = 0;
	char line[256];

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return eff & (1ull << CAP_IPC_LOCK_BIT);
}

/*
 * Registering pins memory, which RLIMIT_MEMLOCK bounds: the pool and the provider's own
 * buffers (staging slots, receive buffers; net/verbs/verbs_int.h). True if they fit, with
 * the line to print in @line either way.
 */
static bool memlock_ok(size_t pool_len, char *line, size_t len)
{
	size_t need = pool_len + (size_t)VERBS_STAGE_COUNT * VERBS_STAGE_LEN +
		      (size_t)VERBS_RECV_COUNT * VERBS_RECV_LEN;
	char have_s[48], need_s[48], pool_s[48];
	struct rlimit rl;

	info_bytes(need, need_s, sizeof(need_s));
	info_bytes(pool_len, pool_s, sizeof(pool_s));
	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		snprintf(line, len, "unknown (%s)", strerror(errno));
		return true;
	}
	if (rl.rlim_cur == RLIM_INFINITY) {
		snprintf(line, len, "unlimited (a rank pins %s: the %s pool and the provider's "
			 "buffers)", need_s, pool_s);
		return true;
	}
	info_bytes(rl.rlim_cur, have_s, sizeof(have_s));
	if (rl.rlim_cur >= need) {
		snprintf(line, len, "%s, enough for %s (the %s pool and the provider's buffers)",
			 have_s, need_s, pool_s);
		return true;
	}
	if (has_cap_ipc_lock()) {
		snprintf(line, len, "%s, below the %s a rank pins, but this process has "
			 "CAP_IPC_LOCK, which lifts the limit", have_s, need_s);
		return true;
	}
	snprintf(line, len, "too low: %s, but a rank pins %s (the %s pool, DDSS_POOL_SIZE, and "
		 "the provider's buffers); raise it (ulimit -l, memlock in limits.conf, "
		 "LimitMEMLOCK= in a systemd unit) or use a smaller pool", have_s, need_s, pool_s);
	return false;
}

/* Ports, verdict and (when it starts) the provider's decisions for one device. */
static void report_device(struct ibv_device *dev, bool memlock, struct dev_report *d)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;
	const char *no_port = "no port is active";
	char ip[64] = "", ndev[64] = "", why[256];
	unsigned use = 0;

	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(dev));
	if (!ctx || ibv_query_device(ctx, &da)) {
		snprintf(d->verdict, sizeof(d->verdict), "unusable: cannot open it: %s",
			 strerror(errno));
		if (ctx)
			ibv_close_device(ctx);
		return;
	}
	for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		char nd[64], addr[64] = "";
		bool has_nd, has_ip;

		if (ibv_query_port(ctx, (uint8_t)p, &pa))
			continue;
		has_nd = !port_netdev(d->name, p, nd, sizeof(nd));
		has_ip = has_nd && !info_ipv4_of(nd, addr, sizeof(addr));
		if (d->nports < 4)
			snprintf(d->ports[d->nports++], sizeof(d->ports[0]),
				 "port %u: %s, %s, %s%s%s%s", p, ibv_port_state_str(pa.state),
				 link_layer_str(pa.link_layer), has_nd ? "netdev " : "no netdev",
				 has_nd ? nd : "", has_nd ? (has_ip ? ", IPv4 " : ", no IPv4 address")
							  : "",
				 has_ip ? addr : "");
		if (pa.state != IBV_PORT_ACTIVE || use)
			continue;
		if (!has_nd)
			no_port = "its active port has no IP interface (rdma_cm needs one: IPoIB "
				  "or the RoCE netdev)";
		else if (!has_ip)
			no_port = "its active port's interface has no IPv4 address (rdma_cm finds "
				  "the device by the address a rank listens on)";
		else {
			use = p;
			snprintf(ip, sizeof(ip), "%s", addr);
			snprintf(ndev, sizeof(ndev), "%s", nd);
		}
	}
	ibv_close_device(ctx);
	if (!use) {
		snprintf(d->verdict, sizeof(d->verdict), "unusable: %s", no_port);
		return;
	}
	if (info_verbs_probe(d->name, ip, PROBE_MS, &d->caps, why, sizeof(why))) {
		snprintf(d->verdict, sizeof(d->verdict), "unusable: %s", why);
		return;
	}
	d->probed = true;
	if (!memlock) {
		snprintf(d->verdict, sizeof(d->verdict),
			 "unusable: ulimit -l is too low for the pool (below); the provider starts "
			 "on port %u, %s %s", use, ndev, ip);
		return;
	}
	d->usable = true;
	snprintf(d->verdict, sizeof(d->verdict), "usable (port %u, %s %s: the provider started "
		 "on it and connected to itself)", use, ndev, ip);
}

static void print_caps(const struct info_verbs_caps *c)
{
	info_more("atomics %s%s; SRQ %s; inline %u bytes; %u reads/atomics in flight per QP",
		  c->atomics_why, c->atomic_be ? ", results big-endian (converted)" : "",
		  c->srq ? "yes" : "no (a receive queue per served QP)", c->inline_max,
		  c->rd_atom);
	info_more("fences: %s; reads/atomics alone on the QP: %s; ACK timeout %.1f ms (code %u)",
		  c->fence, c->guard, 4.096e-3 * (double)(1ul << c->ack_timeout), c->ack_timeout);
}

bool info_verbs_print(size_t pool_len)
{
	struct dev_report *devs;
	struct ibv_device **list;
	char mem_line[400], why[256], names[256] = "";
	bool memlock, any = false;
	int n = 0, usable = 0;

	memlock = memlock_ok(pool_len, mem_line, sizeof(mem_line));
	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		const char *hint, *why_none = why_no_device(&hint);

		info_line("verbs:", "unusable: %s", why_none);
		if (hint)
			info_more("%s", hint);
		if (list)
			ibv_free_device_list(list);
		info_line("ulimit -l:", "%s", mem_line);
		info_line("automatic choice:", "tcp (no RDMA device)");
		return false;
	}
	devs = calloc((size_t)n, sizeof(*devs));
	if (!devs) {
		ibv_free_device_list(list);
		info_line("verbs:", "unknown: out of memory");
		return false;
	}
	for (int i = 0; i < n; i++) {
		report_device(list[i], memlock, &devs[i]);
		if (devs[i].usable) {
			size_t at = strlen(names);

			snprintf(names + at, sizeof(names) - at, "%s%s", usable ? ", " : "",
				 devs[i].name);
			usable++;
		}
	}
	ibv_free_device_list(list);
	if (usable)
		info_line("verbs:", "usable: %s", names);
	else if (!memlock)
		info_line("verbs:", "unusable: ulimit -l is too low for the pool (below)");
	else if (n == 1)
		info_line("verbs:", "%s", devs[0].verdict);
	else
		info_line("verbs:", "unusable: none of the %d RDMA devices is (each below)", n);
	for (int i = 0; i < n; i++) {
		char key[80];

		snprintf(key, sizeof(key), "%s:", devs[i].name);
		info_line(key, "%s", devs[i].verdict);
		for (int p = 0; p < devs[i].nports; p++)
			info_more("%s", devs[i].ports[p]);
		if (devs[i].probed)
			print_caps(&devs[i].caps);
	}
	free(devs);
	info_line("ulimit -l:", "%s", mem_line);
	if (info_verbs_cm_loopback(PROBE_MS, why, sizeof(why)))
		info_line("rdma_cm on 127.0.0.1:", "usable");
	else
		info_line("rdma_cm on 127.0.0.1:", "unusable: %s; ranks must listen on a device's "
			  "address (ddssrun --host ADDR, or DDSS_RDMA_HOST)", why);
	any = ddss_verbs_usable();
	info_line("automatic choice:", "%s", any ? "verbs (a device has an active port); a rank "
		  "whose address no device owns falls back to tcp" : "tcp (no device has an active port)");
	return usable > 0;
}

#else /* !DDSS_INFO_VERBS */

bool info_verbs_print(size_t pool_len)
{
	(void)pool_len;
	info_line("verbs:", "unusable: not built (configured with DDSS_WITH_VERBS=OFF, or "
		  "libibverbs/librdmacm were not found at build time)");
	info_line("automatic choice:", "tcp (the only transport built)");
	return false;
}

#endif
