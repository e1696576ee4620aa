#include "core/config.h"
#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ddss_env_long(const char *name, long min, long max, long dflt, long *out_p)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s) {
		*out_p = dflt;
		return 0;
	}
	/* Decimal, or hex with 0x; a leading zero does not mean octal here. strtol would also
	 * skip white space and accept signs after 0x: only digits (and one leading '-') pass. */
	const char *digits = s;
	int base = 10;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		digits = s + 2;
		base = 16;
	}
	errno = 0;
	v = strtol(digits, &end, base);
	if (errno || *end || end == digits || isspace((unsigned char)digits[0]) ||
	    digits[0] == '+' ||
	    (base == 16 && (!isxdigit((unsigned char)digits[0]) ||
			    (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')))) ||
	    v < min || v > max) {
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
	/* strtoull would skip white space and accept a sign: allow only hex digits (and 0x). */
	if (errno || *end || !isxdigit((unsigned char)s[0])) {
		DDSS_ERR("%s=%s: expected a hexadecimal number", name, s);
		return -EINVAL;
	}
	*out_p = v;
	return 0;
}

int ddss_env_either(const char *name, const char *first, const char *second, bool *second_p)
{
	const char *s = getenv(name);

	if (!s || !*s || !strcmp(s, first)) {
		*second_p = false;
		return 0;
	}
	if (!strcmp(s, second)) {
		*second_p = true;
		return 0;
	}
	DDSS_ERR("%s=%s: expected %s or %s", name, s, first, second);
	return -EINVAL;
}
