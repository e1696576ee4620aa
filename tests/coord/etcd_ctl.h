/* Tests under with_etcd.sh: ask it to stop or start an etcd member, and wait until done. */
#ifndef DDSS_TESTS_COORD_ETCD_CTL_H
#define DDSS_TESTS_COORD_ETCD_CTL_H

#include <stdbool.h>

/** "stop", "start", "freeze" or "thaw" etcd member @member (1..N); false if not done
 * within 30 s. */
bool etcd_ctl(const char *what, int member);

#endif
