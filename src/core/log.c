#include "core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* -1 = not read yet; reading twice from racing threads is harmless (same result). */
static int log_level_cached = -1;
static uint32_t log_rank;

static int parse_level(const char *s)
{
	static const char *const names[] = { "none", "error", "warn", "info", "debug" };

	if (!s || !*s)
		return DDSS_LOG_WARN;
	for (int i = 0; i < 5; i++)
		if (!strcasecmp(s, names[i]))
			return i;
	if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
		return s[0] - '0';
	return DDSS_LOG_WARN;
}

enum ddss_log_level ddss_log_level(void)
{
	int lvl = __atomic_load_n(&log_level_cached, __ATOMIC_RELAXED);

	if (lvl < 0) {
		lvl = parse_level(getenv("DDSS_LOG_LEVEL"));
		__atomic_store_n(&log_level_cached, lvl, __ATOMIC_RELAXED);
	}
	return (enum ddss_log_level)lvl;
}

void ddss_log_set_rank(uint32_t rank)
{
	__atomic_store_n(&log_rank, rank, __ATOMIC_RELAXED);
}

void ddss_log_write(enum ddss_log_level level, const char *func, int line, const char *fmt, ...)
{
	static const char *const tags[] = { "", "ERROR", "WARN", "INFO", "DEBUG" };
	int saved_errno = errno;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* One fprintf per message so lines from different threads do not interleave. */
	fprintf(stderr, "ddss[%u] %s %s:%d: %s\n", __atomic_load_n(&log_rank, __ATOMIC_RELAXED),
		tags[level], func, line, msg);
	errno = saved_errno;
}
