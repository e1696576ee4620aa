/*
 * What the device can do, decided once at open, and the test switch that takes
 * capabilities away: DDSS_VERBS_DISABLE=atomics,srq (comma separated) makes the provider
 * behave as if the device lacked them, so that the fallback paths run in CI on rxe.
 */
#include "net/verbs/verbs_int.h"

#include <stdlib.h>
#include <string.h>

bool verbs_simulate_lack(const char *cap)
{
	const char *list = getenv("DDSS_VERBS_DISABLE");
	size_t n = strlen(cap);

	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && strncmp(p, cap, n) == 0)
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}
