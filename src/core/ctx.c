/*
 * ddss_init / ddss_finalize: configuration (attr, overridden by the environment), the
 * transport, this rank's pool, and the segment service on top.
 */
#include "coherence/coherence.h"
#include "core/config.h"
#include "core/ctx.h"
#include "core/log.h"
#include "core/rpc.h"
#include "core/key.h"
#include "core/ops.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_POOL_SIZE (64ul << 20)
#define DEFAULT_CACHE_SIZE (16ul << 20)

void ddss_attr_init(struct ddss_attr *attr)
{
	if (attr)
		memset(attr, 0, sizeof(*attr));
}

/* What configure() decides beyond the net's settings. */
struct ctx_conf {
	size_t pool_len;
	size_t cache_len;
	enum ddss_lock_scheme lock_scheme;
	bool lock_fair;
	/* What one rank may hold at this home (DDSS_QUOTA_*; 0: no limit). */
	long quota_segments, quota_bytes, quota_names;
};

static int configure_locks(const struct ddss_attr *attr, struct ctx_conf *conf)
{
	static const char *const names[] = { [DDSS_LOCK_NCOSED] = "ncosed",
					     [DDSS_LOCK_DQNL] = "dqnl",
					     [DDSS_LOCK_SRSL] = "srsl" };
	const char *s = getenv("DDSS_LOCK_SCHEME");
	long fair;
	int r;

	if (attr->lock_scheme > DDSS_LOCK_SRSL || attr->lock_fair < 0 || attr->lock_fair > 1)
		return -EINVAL;
	conf->lock_scheme = attr->lock_scheme ? attr->lock_scheme : DDSS_LOCK_NCOSED;
	if (s && *s) {
		conf->lock_scheme = DDSS_LOCK_SCHEME_DEFAULT;
		for (int i = DDSS_LOCK_NCOSED; i <= DDSS_LOCK_SRSL; i++)
			if (!strcmp(s, names[i]))
				conf->lock_scheme = i;
		if (!conf->lock_scheme) {
			DDSS_ERR("DDSS_LOCK_SCHEME=%s: expected ncosed, dqnl or srsl", s);
			return -EINVAL;
		}
	}
	r = ddss_env_long("DDSS_LOCK_FAIR", 0, 1, attr->lock_fair, &fair);
	conf->lock_fair = fair;
	return r;
}

/*
 * What the started transport cannot do changes what this context runs: without NIC
 * atomics every lock is SRSL (served by the home's CPU), whatever was asked for. The
 * coherence models that need atomics are refused at allocation (segment.c).
 */
static int ctx_check_caps(struct ddss_ctx *ctx, struct ctx_conf *conf)
{
	static const char *const names[] = { [DDSS_LOCK_NCOSED] = "ncosed",
					     [DDSS_LOCK_DQNL] = "dqnl",
					     [DDSS_LOCK_SRSL] = "srsl" };
	const char *dev = ctx->tp->device[0] ? ctx->tp->device : ctx->tp->ops->name;

	if (ctx->tp->atomics || conf->lock_scheme == DDSS_LOCK_SRSL)
		return 0;
	if (getenv("DDSS_LOCK_SCHEME") && *getenv("DDSS_LOCK_SCHEME"))
		DDSS_WARN("DDSS_LOCK_SCHEME=%s needs NIC atomics, which %s lacks: locks use srsl",
			  names[conf->lock_scheme], dev);
	else
		DDSS_INFO("%s has no NIC atomics: locks use srsl instead of %s", dev,
			  names[conf->lock_scheme]);
	conf->lock_scheme = DDSS_LOCK_SRSL;
	return 0;
}

/* The environment wins over @attr; @attr over the defaults ddss_net_env_load put in @env. */
static int configure(const struct ddss_attr *attr, struct ddss_net_env *env,
		     struct ctx_conf *conf)
{
	long v;
	int r;

	if (attr->completion > DDSS_COMPLETION_ADAPTIVE || attr->op_timeout_ms < 0 ||
	    attr->connect_timeout_ms < 0 || attr->peer_timeout_ms < -1)
		return -EINVAL;
	r = configure_locks(attr, conf);
	if (r)
		return r;
	if (attr->transport && !getenv("DDSS_TRANSPORT")) {
		if (strlen(attr->transport) >= sizeof(env->transport))
			return -EINVAL;
		strcpy(env->transport, attr->transport);
	}
	if (attr->completion != DDSS_COMPLETION_DEFAULT && !getenv("DDSS_COMPLETION"))
		env->completion = attr->completion == DDSS_COMPLETION_POLL ? DDSS_TP_COMPLETION_POLL :
				  attr->completion == DDSS_COMPLETION_EVENT ? DDSS_TP_COMPLETION_EVENT :
									      DDSS_TP_COMPLETION_ADAPTIVE;
	if (attr->op_timeout_ms && !getenv("DDSS_OP_TIMEOUT_MS"))
		env->op_timeout_ms = attr->op_timeout_ms;
	if (attr->connect_timeout_ms && !getenv("DDSS_CONNECT_TIMEOUT_MS"))
		env->connect_timeout_ms = attr->connect_timeout_ms;
	if (attr->peer_timeout_ms && !getenv("DDSS_PEER_TIMEOUT_MS"))
		env->peer_timeout_ms = attr->peer_timeout_ms < 0 ? 0 : attr->peer_timeout_ms;
	if (attr->secret && !env->auth.on) { /* the environment's secret wins */
		r = ddss_auth_key_load(attr->secret, &env->auth);
		if (r)
			return r;
	}
	r = ddss_env_long("DDSS_POOL_SIZE", 1l << 20, 1l << 40,
			  attr->pool_size ? (long)attr->pool_size : (long)DEFAULT_POOL_SIZE, &v);
	if (r)
		return r;
	if (attr->pool_size && attr->pool_size < (1ul << 20) && !getenv("DDSS_POOL_SIZE"))
		return -EINVAL;
	conf->pool_len = (size_t)v;
	r = ddss_env_long("DDSS_CACHE_SIZE", 0, 1l << 40,
			  attr->cache_size ? (long)attr->cache_size : (long)DEFAULT_CACHE_SIZE, &v);
	if (r)
		return r;
	conf->cache_len = (size_t)v;
	r = ddss_env_long("DDSS_QUOTA_SEGMENTS", 0, UINT32_MAX, 0, &conf->quota_segments);
	if (!r)
		r = ddss_env_long("DDSS_QUOTA_BYTES", 0, 1l << 40, 0, &conf->quota_bytes);
	if (!r)
		r = ddss_env_long("DDSS_QUOTA_NAMES", 0, UINT32_MAX, 0, &conf->quota_names);
	return r;
}

static void ctx_free(struct ddss_ctx *ctx)
{
	/* From now on invalidation answers (sent by the last user of an entry) are dropped. */
	pthread_mutex_lock(&ctx->ack_mu);
	ctx->closing = true;
	pthread_mutex_unlock(&ctx->ack_mu);
	ddss_lock_stop(ctx->lock); /* background lock work uses the net */
	if (ctx->net)
		ddss_net_close(ctx->net); /* no handler runs after this */
	ddss_lock_destroy(ctx->lock);
	ddss_seg_cache_destroy(ctx->cache);
	ddss_coh_destroy(ctx->coh);
	ddss_rpc_close(ctx->rpc);
	ddss_names_destroy(ctx->names);
	ddss_segtab_destroy(ctx->segtab);
	ddss_pool_destroy(ctx->pool);
	pthread_mutex_destroy(&ctx->ack_mu);
	free(ctx);
}

bool ddss_ctx_share_pool;

const struct ddss_segtab_hooks ddss_segtab_hooks = {
	.data_len = ddss_coh_data_len,
	.words_idle = ddss_lock_words_idle,
};

size_t ddss_ctx_epoch_off(void)
{
	return ddss_lock_area_len();
}

int ddss_ctx_check_attr(const struct ddss_attr *attr)
{
	struct ddss_net_env unused = { 0 };
	struct ctx_conf conf = { 0 };

	return configure(attr, &unused, &conf);
}

/* Heartbeat thread (net/readmit.c): @rank's slot has a new process, not let in yet. Keys
 * of segments the old one homed must not reach the new one's memory through offsets cached
 * here; puts the old one left unfinished on segments homed here are over. */
static int ctx_on_readmit(void *arg, uint32_t rank)
{
	struct ddss_ctx *ctx = arg;
	int r;

	ddss_seg_cache_drop_home(ctx->cache, rank);
	/* -EBUSY (not cut off yet): the readmission waits for the next round. Other errors
	 * leave some marks unsettled (logged): the new process is let in all the same. */
	r = ddss_coh_settle_readmitted(ctx, rank);
	return r == -EBUSY ? r : 0;
}

int ddss_ctx_open(const struct ddss_attr *attr, ddss_ctx_t **ctx_p)
{
	struct ddss_net_env env;
	struct ddss_ctx *ctx;
	struct ctx_conf conf = { 0 };
	int r;

	r = ddss_net_env_load(&env);
	if (r)
		return r;
	r = configure(attr, &env, &conf);
	if (!r) /* coordinator mode: join now that the peer timeout (the lease TTL) is final */
		r = ddss_net_env_join(&env);
	if (r) {
		ddss_net_env_free(&env);
		return r;
	}
	/* Keys hold 16-bit ranks, and a release names its cachers in one message. */
	if (env.size > DDSS_KEY_MAX_RANK ||
	    DDSS_NAME_MAX + (env.size + 7) / 8 > DDSS_RPC_BODY_MAX) {
		DDSS_ERR("a group of %u ranks is larger than DDSS supports", env.size);
		ddss_net_env_free(&env);
		return -EINVAL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		ddss_net_env_free(&env);
		return -ENOMEM;
	}
	pthread_mutex_init(&ctx->ack_mu, NULL);
	ctx->ops = &ddss_direct_ops;
	ctx->rank = env.rank;
	ctx->size = env.size;
	ctx->next_home = env.rank; /* ranks start their round robin at different places */
	ctx->connect_timeout_ms = env.connect_timeout_ms;
	r = ddss_net_open(&env, &ctx->net);
	ddss_net_env_free(&env);
	if (r)
		goto fail;
	r = (ddss_ctx_share_pool ? ddss_pool_create_shared : ddss_pool_create)(
		conf.pool_len, ddss_ctx_epoch_off() + sizeof(uint64_t), &ctx->pool);
	/*
	 * Start before anything keeps the transport: an automatic choice that cannot start
	 * falls back to tcp, another transport object. No peer sends this rank anything but
	 * barrier messages (handled by the net) before the barrier below.
	 */
	if (!r)
		r = ddss_net_start(ctx->net, ddss_pool_base(ctx->pool), ddss_pool_len(ctx->pool));
	if (r)
		goto fail;
	ctx->tp = ddss_net_tp(ctx->net);
	r = ctx_check_caps(ctx, &conf);
	if (!r)
		r = ddss_segtab_create(ctx->pool, ctx->rank, ctx->size, &ddss_segtab_hooks,
				       &ctx->segtab);
	if (!r)
		ddss_segtab_watch_releases(ctx->segtab, (uint64_t *)(
			(uint8_t *)ddss_pool_base(ctx->pool) + ddss_ctx_epoch_off()));
	if (!r)
		r = ddss_names_create(&ctx->names);
	if (!r) {
		ddss_segtab_set_quota(ctx->segtab, (uint32_t)conf.quota_segments,
				      (uint64_t)conf.quota_bytes);
		ddss_names_set_quota(ctx->names, (uint32_t)conf.quota_names);
	}
	if (!r && ddss_net_coordinated(ctx->net))
		ddss_segtab_set_first_generation(ctx->segtab, randombytes_uniform(DDSS_KEY_GEN_MASK));
	if (!r)
		r = ddss_seg_cache_create(ddss_seg_ack, ctx, &ctx->cache);
	if (!r)
		r = ddss_coh_create(conf.cache_len, &ctx->coh);
	/* A rank's new process: what we cached of the old one's segments goes, and the puts
	 * it left unfinished here are settled (both set up by now: the heartbeat thread
	 * reads them). */
	if (!r)
		ddss_net_on_readmit(ctx->net, ctx_on_readmit, ctx);
	if (!r)
		r = ddss_rpc_open(ctx->net, ddss_seg_serve, ctx, &ctx->rpc);
	if (!r)
		r = ddss_lock_create(ctx, conf.lock_scheme, conf.lock_fair, &ctx->lock);
	if (!r) /* the start barrier (a replacement waits to be let in instead) */
		r = ddss_net_begin(ctx->net);
	if (r)
		goto fail;
	*ctx_p = ctx;
	return 0;
fail:
	DDSS_ERR("ddss_init: %s", ddss_strerror(r));
	ctx_free(ctx);
	return r;
}

int ddss_ctx_close(ddss_ctx_t *ctx)
{
	int r = ddss_net_barrier(ctx->net, -1);

	if (!r)
		ddss_net_set_leaving(ctx->net);
	/*
	 * Rank 1 coordinates the barrier: it leaves last. A rank still waiting for the
	 * barrier's release could otherwise see rank 1's connection close before the release
	 * message (verbs reports the disconnect on another thread) and fail its finalize.
	 */
	if (!r && ctx->rank == 1 &&
	    ddss_net_wait_others_gone(ctx->net, ctx->connect_timeout_ms) == -ETIMEDOUT)
		DDSS_WARN("finalize: some ranks still connected after %d ms; leaving anyway",
			  ctx->connect_timeout_ms);
	ctx_free(ctx);
	return r;
}

int ddss_ctx_barrier(ddss_ctx_t *ctx)
{
	/* Releases that returned before they landed at their home (a posted CAS, an SRSL
	 * message): land them first, so every rank finds those locks free after the barrier
	 * (another rank's try would say -EBUSY). */
	ddss_lock_flush_releases(ctx->lock);
	return ddss_net_barrier(ctx->net, -1);
}
