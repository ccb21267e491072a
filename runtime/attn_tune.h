/* Internal to s2c (bench and tests): the runtime's entry points with the
 * choices the public API makes by itself, and helpers for launching by hand. */
#ifndef S2C_ATTN_TUNE_H
#define S2C_ATTN_TUNE_H

#include "kernel_abi.h"
#include "s2c/attn_runtime.h"

/* not exported from libs2rt.so: the in-tree programs link the static library */
#define S2_TUNE_HIDDEN __attribute__((visibility("hidden")))

/* The forward's tensor maps for a resolved spec (k/v boxes of block_n / kv_gather rows). */
S2_TUNE_HIDDEN s2_status s2_rt_fwd_tensor_maps(s2_ctx *ctx, const s2_device *dev, const s2_kspec *spec, const s2_attn_fwd_args *a,
                                               s2_tensor_map maps[3]);

/* The backward's strategy, which s2_attn_backward chooses by itself. */
typedef struct s2_attn_bwd_options {
    /* the dS path in this many chunks of kv heads (a divisor of kv_heads; the
     * workspace must hold s2_attn_backward_workspace_chunked()'s size for
     * it); 0: the runtime chooses */
    int ds_chunks;
    /* on the dS path, dQ for two query tiles per CTA (NAME_dqds2) where the
     * module has it and the lists allow: 0 yes, -1 no (NAME_dqds) */
    int dq_pair;
} s2_attn_bwd_options;

/* s2_attn_backward with the strategy given (NULL: the runtime's choice). */
S2_TUNE_HIDDEN s2_status s2_attn_backward_opts(s2_ctx *ctx, s2_attn_kernel *k, void *stream, const s2_attn_bwd_args *a,
                                               const s2_attn_bwd_options *opts);

#endif
