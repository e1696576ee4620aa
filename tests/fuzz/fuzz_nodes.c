/*
 * The node list (src/net/nodes.c, ddss_nodes_parse): the text of DDSS_NODES or of
 * DDSS_NODES_FILE, "host:port" entries separated by commas, spaces or newlines, '#' comments,
 * IPv6 hosts as [addr]:port.
 *
 * Input: the text (a NUL is appended).
 * Invariants: an accepted list has at least one entry; every host is a non-empty C string
 * that fits its field and holds no separator; every port is 1..65535; printing the list back
 * (hosts with a ':' or a leading '[' in brackets) and parsing it again gives the same list.
 */
#include "fuzz_common.h"
#include "net/coordinator.h"
#include "net/nodes.h"

#include <errno.h>
#include <stdlib.h>

/* nodes.c's environment loader (not fuzzed here) reads the spin bound and may join a
 * coordinator (net/coordinator.c): never reached. */
int ddss_spin_env(long *us_p) { abort(); }
int ddss_spin_init(void) { abort(); }
bool ddss_coord_wanted(void) { abort(); }
int ddss_coord_env_load(struct ddss_net_env *env) { abort(); }
void ddss_coord_unref(struct ddss_coord *c) { if (c) abort(); }

static void reprint(const struct ddss_tp_node *nodes, uint32_t count, char *out, size_t cap,
		    int *fits_p)
{
	size_t at = 0;

	*fits_p = 1;
	out[0] = '\0';
	for (uint32_t i = 0; i < count; i++) {
		const char *h = nodes[i].host;
		int wrap = strchr(h, ':') || h[0] == '[';
		char entry[160];
		int n = snprintf(entry, sizeof(entry), "%s%s%s:%u", wrap ? "[" : "", h,
				 wrap ? "]" : "", nodes[i].port);

		/* An entry longer than the parser's 127-byte buffer would be refused. */
		if (n >= 128 || at + (size_t)n + 2 > cap) {
			*fits_p = 0;
			return;
		}
		at += (size_t)sprintf(out + at, "%s%s", i ? "," : "", entry);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ddss_tp_node *nodes = NULL, *again = NULL;
	uint32_t count = 0, count2 = 0;
	char *text, *round;
	size_t cap;
	int r, fits;

	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	r = ddss_nodes_parse(text, &nodes, &count);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
	if (r) {
		free(text);
		return 0;
	}
	FUZZ_CHECK(count >= 1 && nodes);
	for (uint32_t i = 0; i < count; i++) {
		const char *h = nodes[i].host;

		FUZZ_CHECK(fuzz_has_nul(h, sizeof(nodes[i].host)) && h[0] != '\0');
		FUZZ_CHECK(strcspn(h, ", \t\r\n#") == strlen(h));
		FUZZ_CHECK(nodes[i].port >= 1);
	}
	cap = (size_t)count * 160 + 1;
	round = malloc(cap);
	if (round) {
		reprint(nodes, count, round, cap, &fits);
		if (fits) {
			r = ddss_nodes_parse(round, &again, &count2);
			FUZZ_CHECK(r == 0 && count2 == count);
			for (uint32_t i = 0; i < count; i++)
				FUZZ_CHECK(strcmp(again[i].host, nodes[i].host) == 0 &&
					   again[i].port == nodes[i].port);
			free(again);
		}
		free(round);
	}
	free(nodes);
	free(text);
	return 0;
}
