/*
 * The segment service's requests (core/rpc.h carries them). Bodies are fixed layouts of
 * little-endian fields (core/wire.h); names travel as DDSS_NAME_MAX bytes, NUL-padded.
 * Every handler checks the length and the fields before it acts.
 */
#ifndef DDSS_CORE_PROTO_H
#define DDSS_CORE_PROTO_H

#include "ddss/ddss.h"

enum ddss_seg_op {
	/* to the home rank */
	SEG_OP_ALLOC = 1,     /* [size 64][model 32][param 32][name 64] -> descriptor */
	SEG_OP_LOOKUP,        /* [key 64] -> descriptor */
	SEG_OP_RELEASE_BEGIN, /* [key 64] -> [name 64][cachers: bitmap, bit r-1 = rank r] */
	SEG_OP_RELEASE_END,   /* [key 64] -> () */
	/* to a rank that may cache the segment */
	SEG_OP_INVALIDATE,    /* [key 64] -> () once its operations in flight are done */
	/* to the name's directory rank */
	SEG_OP_NAME_ACQUIRE,  /* [create 32][name] -> [key 64] (0), or 1: "you create it" */
	SEG_OP_NAME_BIND,     /* [key 64][name] -> () */
	SEG_OP_NAME_ABANDON,  /* [name] -> () : the creator could not allocate */
	SEG_OP_NAME_UNBIND,   /* [key 64][name] -> () : the segment was released */
};

/*
 * Descriptor replies: what a rank needs to reach a segment's bytes,
 * [key 64][data_off 64][size 64][model 32][param 32].
 */
#define SEG_DESC_LEN 32
#define SEG_ALLOC_LEN (16 + DDSS_NAME_MAX)

/* SEG_OP_NAME_ACQUIRE's status when the caller is to create the segment. */
#define SEG_NAME_CREATE 1

#endif /* DDSS_CORE_PROTO_H */
