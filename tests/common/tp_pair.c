/* In-process tcp transports on loopback for tests: tp_pair.h. */
#include "common/tp_pair.h"
#include "common/test_util.h"

#include <stdio.h>
#include <stdlib.h>

void tp_pair_listen(struct ddss_tp_node *nodes, int *lfd, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned port;

		lfd[i] = test_listen_loopback(&port);
		if (lfd[i] < 0) {
			printf("FAIL: loopback listener\n");
			exit(1);
		}
		snprintf(nodes[i].host, sizeof(nodes[i].host), "127.0.0.1");
		nodes[i].port = (uint16_t)port;
	}
}

void tp_proc_open(struct tp_proc *p, const struct ddss_tp_config *cfg)
{
	struct ddss_tp_mr *mr;

	p->pool = test_alloc_pool(TP_PAIR_POOL_LEN);
	if (ddss_tp_open("tcp", cfg, &p->tp) ||
	    ddss_tp_mem_register(p->tp, p->pool, TP_PAIR_POOL_LEN, true, &mr) ||
	    ddss_tp_start(p->tp)) {
		printf("FAIL: cannot start the transport of rank %u\n", cfg->rank);
		exit(1);
	}
}

void tp_proc_close(struct tp_proc *p)
{
	ddss_tp_close(p->tp);
	free(p->pool);
}
