/*
 * One logger for the library, its daemon and its tools.
 *
 * The level comes from DDSS_LOG_LEVEL (error, warn, info, debug, or 0-4) read once; the
 * default is warn. Messages go to stderr prefixed with the rank (once known), level and
 * func:line. Logging keeps errno intact. DDSS_DBG compiles away unless the build sets
 * DDSS_DEBUG_LOG, so it may sit on the data path.
 */
#ifndef DDSS_CORE_LOG_H
#define DDSS_CORE_LOG_H

#include <stdint.h>

enum ddss_log_level {
	DDSS_LOG_NONE = 0,
	DDSS_LOG_ERROR = 1,
	DDSS_LOG_WARN = 2,
	DDSS_LOG_INFO = 3,
	DDSS_LOG_DEBUG = 4,
};

/** The level in force (reads DDSS_LOG_LEVEL on first use). Thread-safe. */
enum ddss_log_level ddss_log_level(void);

/** Set the rank shown in the prefix (0 = unknown). Thread-safe. */
void ddss_log_set_rank(uint32_t rank);

/** Write one message if @level is enabled. Keeps errno. Thread-safe. */
void ddss_log_write(enum ddss_log_level level, const char *func, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define DDSS_LOG_AT(lvl, ...)                                                       \
	do {                                                                        \
		if ((lvl) <= ddss_log_level())                                      \
			ddss_log_write((lvl), __func__, __LINE__, __VA_ARGS__);     \
	} while (0)

#define DDSS_ERR(...) DDSS_LOG_AT(DDSS_LOG_ERROR, __VA_ARGS__)
#define DDSS_WARN(...) DDSS_LOG_AT(DDSS_LOG_WARN, __VA_ARGS__)
#define DDSS_INFO(...) DDSS_LOG_AT(DDSS_LOG_INFO, __VA_ARGS__)
#ifdef DDSS_DEBUG_LOG
#define DDSS_DBG(...) DDSS_LOG_AT(DDSS_LOG_DEBUG, __VA_ARGS__)
#else
#define DDSS_DBG(...) do { } while (0)
#endif

#endif /* DDSS_CORE_LOG_H */
