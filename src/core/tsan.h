/*
 * Pool bytes are shared memory that a NIC reads and writes; who may touch them when is the
 * application's choice (the coherence models), not a bug in the library. Where a provider
 * copies them with the CPU (tcp), ThreadSanitizer would report every application-level
 * overlap as a race in our code, burying real ones. The copies are wrapped in these
 * markers, which make TSan ignore just those accesses; elsewhere they compile to nothing.
 */
#ifndef DDSS_CORE_TSAN_H
#define DDSS_CORE_TSAN_H

#if defined(__SANITIZE_THREAD__)
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define DDSS_POOL_ACCESS_BEGIN()                                \
	do {                                                    \
		AnnotateIgnoreReadsBegin(__FILE__, __LINE__);   \
		AnnotateIgnoreWritesBegin(__FILE__, __LINE__);  \
	} while (0)
#define DDSS_POOL_ACCESS_END()                                  \
	do {                                                    \
		AnnotateIgnoreWritesEnd(__FILE__, __LINE__);    \
		AnnotateIgnoreReadsEnd(__FILE__, __LINE__);     \
	} while (0)
#else
#define DDSS_POOL_ACCESS_BEGIN() do { } while (0)
#define DDSS_POOL_ACCESS_END() do { } while (0)
#endif

#endif /* DDSS_CORE_TSAN_H */
