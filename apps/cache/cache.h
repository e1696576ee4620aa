/*
 * ddss-cache: a front-end document cache whose authoritative versions live in DDSS
 * (version coherence), against the same cache kept coherent over TCP request/response
 * (the DDSS paper's Figure 5b). What the parts of the program share.
 */
#ifndef DDSS_APPS_CACHE_H
#define DDSS_APPS_CACHE_H

#include <ddss/ddss.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_MAX_POINTS 16  /* values of --compute */
#define CACHE_MAX_DOCS 4096
#define CACHE_MIN_SIZE 64    /* a document holds a header and a trailer */
#define CACHE_MAX_SIZE (1u << 20)
#define CACHE_HOST_MAX 96

/* The segments, all created by the back-end and homed on its rank. */
#define CACHE_SEG_DOC "cache.doc.%u" /* version coherence: document d */
#define CACHE_SEG_DONE "cache.done"  /* null: uint64 per document, newest finished version */
#define CACHE_SEG_CTL "cache.ctl"    /* null: struct cache_ctl */
#define CACHE_SEG_RESULTS "cache.results" /* null: one slot per front-end */

/* The two ways a front-end keeps its copies coherent. */
enum cache_way { WAY_DDSS, WAY_TCP, WAY_COUNT };

struct cache_opts {
	unsigned docs;      /* --docs */
	size_t size;        /* --size: bytes per document */
	unsigned requests;  /* --requests: per front-end, way and point */
	unsigned block;     /* --block: the ways take turns every this many requests */
	unsigned update_us; /* --update-us: the back-end's pause between two updates */
	double zipf;        /* --zipf s (0: uniform) */
	uint64_t seed;      /* --seed */
	unsigned compute[CACHE_MAX_POINTS]; /* --compute: busy threads on the back-end */
	unsigned npoints;
	const char *tcp_host; /* --tcp-host: where the back-end's TCP server listens */
	bool csv, pin;
	bool no_version_check; /* --no-version-check: the deliberate break (serve local copies) */
};

/* What the back-end publishes for the front-ends (segment CACHE_SEG_CTL). */
struct cache_ctl {
	char host[CACHE_HOST_MAX];
	uint32_t port;
	uint32_t nfront;
};

/* One front-end's counts for one way at one point. */
struct cache_counts {
	uint64_t requests;
	uint64_t hits;      /* served without moving the document (version unchanged) */
	uint64_t stale;     /* served a version older than the back-end had finished before */
	uint64_t backwards; /* served an older version of a document than this front-end had */
	uint64_t label;     /* ddss_get_versioned said a newer version than the data holds */
	uint64_t torn;      /* a get that overlapped an update and was read again */
	uint64_t pad[2];
};

/*
 * One front-end's slot in CACHE_SEG_RESULTS, rewritten at every point: the counts of both
 * ways, then each way's latencies in microseconds (requests doubles each).
 */
static inline size_t cache_slot_size(const struct cache_opts *o)
{
	return WAY_COUNT * sizeof(struct cache_counts) + WAY_COUNT * (size_t)o->requests * 8;
}

/* ---- documents (doc.c) ---- */

/*
 * A document's payload: [doc | version | words... | version]. Every word is a function of
 * (doc, version, index), so a copy mixed from two versions is detected.
 */
void doc_fill(void *buf, size_t size, uint32_t doc, uint64_t version);
/* 0 and the version if @buf holds one whole version of @doc; -1 if it is torn or wrong. */
int doc_check(const void *buf, size_t size, uint32_t doc, uint64_t *version_p);

/* A seeded generator (xorshift64*). */
uint64_t rng_next(uint64_t *state);

/* Document popularity: zipf with exponent s over @n documents (s = 0: uniform). */
struct zipf {
	double *cdf;
	unsigned n;
};
int zipf_init(struct zipf *z, unsigned n, double s);
unsigned zipf_draw(const struct zipf *z, uint64_t *rng);
void zipf_fini(struct zipf *z);

/* Microseconds on CLOCK_MONOTONIC. */
double now_us(void);
/* Pin the calling thread (and the threads it starts later) to @cpu modulo the CPU count. */
void pin_cpu(unsigned cpu);

/* ---- the two-sided baseline (tcp.c) ---- */

/*
 * Request: "document d, if its version differs from v". Reply: the current version and
 * the document's length, then the document, or a length of 0 if v is current.
 * Fields in network byte order.
 */
struct tcp_req {
	uint32_t doc;
	uint32_t pad;
	uint64_t have;
};
struct tcp_rep {
	uint64_t version;
	uint32_t len;
	uint32_t pad;
};

/* The back-end's copy of a document, which the TCP server answers from. */
struct tcp_doc {
	void *data;
	uint64_t version;
};

struct tcp_server;

/*
 * tcp_server_start() - listen on @host (NULL: any address), port chosen by the kernel, and
 * answer requests from @docs, one thread per connection. @lock / @unlock guard one
 * document's copy (the back-end updates it under the same lock). The port goes to *port_p.
 */
int tcp_server_start(const char *host, struct tcp_doc *docs, unsigned ndocs, size_t size,
		     void (*lock)(unsigned doc), void (*unlock)(unsigned doc),
		     struct tcp_server **srv_p, uint16_t *port_p);
/* Stop accepting, wait for every connection to be closed by its client, free. */
void tcp_server_stop(struct tcp_server *srv);

/* tcp_connect() - a connected socket (TCP_NODELAY) to @host:@port, or -errno. */
int tcp_connect(const char *host, uint16_t port);
/*
 * tcp_fetch() - one request on @fd: doc @doc, if it differs from @have. *version_p gets the
 * current version; the document goes to @buf (@size bytes) unless it is unchanged
 * (*changed_p = false). 0 or -errno.
 */
int tcp_fetch(int fd, uint32_t doc, uint64_t have, void *buf, size_t size,
	      uint64_t *version_p, bool *changed_p);

/* ---- the roles ---- */

/* The back-end's state across points (backend.c). */
struct backend;

int backend_setup(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t nfront,
		  struct backend **be_p);
/* Start @compute busy threads and the updater. */
int backend_point_start(struct backend *be, unsigned compute);
/* Stop them; *updates_p gets the updates made during the point. */
int backend_point_stop(struct backend *be, uint64_t *updates_p);
/* Stop the TCP server (after the front-ends closed), release the segments, free. */
int backend_teardown(struct backend *be);

struct frontend;

int frontend_setup(ddss_ctx_t *ctx, const struct cache_opts *o, uint32_t index,
		   struct frontend **fe_p);
/* Request every document once both ways (checked, not timed): the caches start warm. */
int frontend_warmup(struct frontend *fe);
/* One point's request stream, both ways; the results go to this front-end's slot. */
int frontend_point(struct frontend *fe, unsigned point);
/* The violations (stale, backwards, label) seen so far. */
uint64_t frontend_violations(const struct frontend *fe);
void frontend_teardown(struct frontend *fe);

#endif /* DDSS_APPS_CACHE_H */
