/*
 * Direct mode's segment calls (core/segment.c), behind ddss_direct_ops: same arguments
 * and results as ddss_allocate_ss, ddss_lookup_ss, ddss_release_ss and ddss_stat_ss.
 */
#ifndef DDSS_CORE_SEGMENT_H
#define DDSS_CORE_SEGMENT_H

#include "ddss/ddss.h"

int ddss_segment_allocate(ddss_ctx_t *ctx, size_t nbytes, const struct ddss_seg_attr *attr,
			  ddss_key_t *key_p);
int ddss_segment_lookup(ddss_ctx_t *ctx, const char *name, ddss_key_t *key_p);
int ddss_segment_release(ddss_ctx_t *ctx, ddss_key_t key);
int ddss_segment_stat(ddss_ctx_t *ctx, ddss_key_t key, struct ddss_seg_info *info_p);

#endif /* DDSS_CORE_SEGMENT_H */
