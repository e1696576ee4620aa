#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <stdlib.h>

int ddss_env_long(const char *name, long min, long max, long dflt, long *out_p)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s) {
		*out_p = dflt;
		return 0;
	}
	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || *end || v < min || v > max) {
		DDSS_ERR("%s=%s: expected a whole number in [%ld, %ld]", name, s, min, max);
		return -EINVAL;
	}
	*out_p = v;
	return 0;
}

int ddss_env_hex64(const char *name, uint64_t dflt, uint64_t *out_p)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s) {
		*out_p = dflt;
		return 0;
	}
	errno = 0;
	v = strtoull(s, &end, 16);
	if (errno || *end || *s == '-') {
		DDSS_ERR("%s=%s: expected a hexadecimal number", name, s);
		return -EINVAL;
	}
	*out_p = v;
	return 0;
}
