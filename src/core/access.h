/*
 * Direct mode's get, put and async requests (core/access.c), behind ddss_direct_ops.
 * Same arguments and results as the public calls of core/ops.h.
 */
#ifndef DDSS_CORE_ACCESS_H
#define DDSS_CORE_ACCESS_H

#include "ddss/ddss.h"

#include <stdbool.h>

int ddss_access_get(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		    unsigned back, uint64_t *version_p);
int ddss_access_put(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, const void *buf,
		    size_t len);
int ddss_access_start(ddss_ctx_t *ctx, ddss_key_t key, size_t offset, void *buf, size_t len,
		      bool is_put, ddss_req_t **req_p);
/* A request that finished at the call with @status (daemon mode runs async calls at once). */
int ddss_req_completed(int status, ddss_req_t **req_p);
/* Wait for / test a request of either kind; frees it unless in progress. */
int ddss_req_wait(ddss_ctx_t *ctx, ddss_req_t *req);
int ddss_req_test(ddss_ctx_t *ctx, ddss_req_t *req);

#endif /* DDSS_CORE_ACCESS_H */
