/*
 * Where segment names live, the one place the two directories part ways: in static mode
 * at the rank the name hashes to (alloc/names.c, through core/seg_service.c), in
 * coordinator mode in etcd (coord/member_names.c), where they survive any rank's death.
 */
#ifndef DDSS_CORE_NAME_DIR_H
#define DDSS_CORE_NAME_DIR_H

#include <stdbool.h>
#include <stdint.h>

struct ddss_ctx;

/**
 * @name's key in *@key_p (0), or SEG_NAME_CREATE (absent and @create: the caller creates
 * it, then binds or abandons it), -ENOENT, -EHOSTDOWN (coordinator mode: bound to a
 * segment whose home left the group), or -errno. Asks again while another creator is at
 * work, up to the connect timeout.
 */
int ddss_name_dir_acquire(struct ddss_ctx *ctx, const char *name, bool create, uint64_t *key_p);
int ddss_name_dir_bind(struct ddss_ctx *ctx, const char *name, uint64_t key);
int ddss_name_dir_abandon(struct ddss_ctx *ctx, const char *name);
int ddss_name_dir_unbind(struct ddss_ctx *ctx, const char *name, uint64_t key);
/** The rank that keeps @name in static mode, 0 in coordinator mode (for messages). */
uint32_t ddss_name_dir_rank(struct ddss_ctx *ctx, const char *name);

#endif /* DDSS_CORE_NAME_DIR_H */
