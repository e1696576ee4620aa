/* with_etcd.sh's control file: one request per line, one "done" line per request served. */
#include "etcd_ctl.h"
#include "common/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CTL_WAIT_MS 30000

static unsigned count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned lines = 0;
	int c;

	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		lines += c == '\n';
	fclose(f);
	return lines;
}

bool etcd_ctl(const char *what, int member)
{
	const char *ctl = getenv("DDSS_TEST_ETCD_CTL");
	char ack[512];
	unsigned want;
	double t0 = test_now_ms();
	FILE *f;

	if (!ctl)
		return false;
	snprintf(ack, sizeof(ack), "%s.ack", ctl);
	want = count_lines(ctl) + 1; /* ours is the next request: wait for its answer */
	f = fopen(ctl, "a");
	if (!f)
		return false;
	fprintf(f, "%s %d\n", what, member);
	fclose(f);
	while (count_lines(ack) < want) { /* a bounded poll: the script answers in a file */
		if (test_now_ms() - t0 > CTL_WAIT_MS)
			return false;
		usleep(20000);
	}
	return true;
}
