/*
 * DDSS: distributed data-sharing substrate.
 *
 * The whole public API. Every call returns 0 or a negative errno value; output arguments
 * come last, are named *_p and are written only on success. Handles are opaque.
 */
#ifndef DDSS_DDSS_H
#define DDSS_DDSS_H

#ifdef __cplusplus
extern "C" {
#endif

#define DDSS_VERSION_MAJOR 0
#define DDSS_VERSION_MINOR 1
#define DDSS_VERSION_PATCH 0

#if defined(DDSS_BUILDING_LIBRARY)
#define DDSS_API __attribute__((visibility("default")))
#else
#define DDSS_API
#endif

/**
 * ddss_strerror() - describe a DDSS return value.
 * @err: a value returned by a DDSS call (0 or -errno; a positive errno is accepted too).
 *
 * Returns a static, thread-safe string; never NULL.
 */
DDSS_API const char *ddss_strerror(int err);

/** ddss_version_string() - the library's version as "major.minor.patch". */
DDSS_API const char *ddss_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* DDSS_DDSS_H */
