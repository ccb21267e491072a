/* s2c — the manifest: what a generated module says about itself (every
 * kernel's spec and launch shape, every pattern's resolved rules), so that
 * the runtime, `s2c info` and the AOT emitter need no pattern file. */
#ifndef S2C_MANIFEST_H
#define S2C_MANIFEST_H

#include "s2c/common.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_fwd_abi {
    S2_FWD_ABI_PTRS = 0,   /* parameters 0..24, seqinfo */
    S2_FWD_ABI_TMA = 1,    /* 0..24 + three tensor maps, seqinfo */
    S2_FWD_ABI_TMA_PERSISTENT = 2 /* 0..27 + work list, n_work, batch, counter, seqinfo */
} s2_fwd_abi;

/* ---- the manifest: what a cubin says about itself ------------------------------
 * Every generated module holds a NUL-terminated text global `s2c_manifest`
 * (see s2_manifest_format): the generator identity (s2_generator_id), the arch, and per kernel
 * its name, kind, pattern, resolved spec, launch shape and shared memory,
 * plus each pattern's resolved rules, so that the runtime can rebuild the
 * schedules without the pattern file. */
#define S2_MANIFEST_SYMBOL "s2c_manifest"
#define S2_MANIFEST_VERSION 1

typedef struct s2_manifest_kernel {
    char *name;            /* kernel symbol */
    char *pattern;         /* pattern name */
    s2_kernel_spec spec;   /* resolved */
    int threads;           /* blockDim.x */
    int smem_bytes;        /* dynamic shared memory per CTA */
    s2_fwd_abi abi;        /* kernel.abi (absent: S2_FWD_ABI_PTRS) */
    /* kernel.seqinfo 1: the forward takes the trailing seqinfo parameter.
     * Cubins made before it lack the key: the runtime refuses variable-length
     * batches for them (a uniform launch is unchanged). */
    bool seqinfo;
    /* kernel.wide BM BN WARPS STAGES GATHER THREADS SMEM: the module also
     * holds NAME_w, the same forward (same ABI and parameters) on wider tiles,
     * which the runtime launches where the schedule's lists are long
     * (s2_attn_forward).  Written for sm_90a forwards of 64-token blocks at
     * d128 built with the default spec: 128 x 128 tiles whose key tiles
     * gather two live blocks, 3 stages, one CTA per SM (bench/RESULTS.md,
     * run 39).  kernel.wide_persistent: the same on the persistent grid
     * (wide_spec.persistent 1, the S2_FWD_ABI_TMA_PERSISTENT parameters;
     * run 51), written instead for patterns that are not dense. */
    bool has_wide;
    s2_kernel_spec wide_spec;
    int wide_threads, wide_smem_bytes;
} s2_manifest_kernel;

/* Symbol suffix of a forward's wide variant (kernel.wide). */
#define S2_WIDE_SUFFIX "_w"

typedef struct s2_manifest s2_manifest;

/* Text format (one `key value` per line; the value is the rest of the line):
 *   s2c-manifest 1            first line, the format version
 *   generator VERSION+HASH+llvmX.Y.Z / arch sm_XX
 *   kernel NAME               starts a kernel; then kernel.kind (fwd|bwd), kernel.pattern,
 *                             kernel.dtype, kernel.head_dim, kernel.block_m, kernel.block_n,
 *                             kernel.num_warps, kernel.num_stages, kernel.threads, kernel.smem,
 *                             kernel.abi (ptrs|tma|tma_persistent; written only for the latter two),
 *                             kernel.seqinfo 1 (forward kernels with the seqinfo parameter),
 *                             kernel.bwd_wgmma (1|-1; backward on sm_90a only, absent: 0),
 *                             kernel.bwd_tma 1 (backward kernels with the tensor-map parameters 51, 52),
 *                             kernel.kv_gather G (above 1 only),
 *                             kernel.wide BM BN WARPS STAGES GATHER THREADS SMEM (the NAME_w variant),
 *                             or kernel.wide_persistent (the same fields; NAME_w on the persistent grid)
 *   pattern NAME              starts a pattern; then pattern.heads, .kv_heads, .block_size,
 *                             .causal, .max_seq_len, .vert_position (absolute|relative),
 *                             .local L R, .vert_stride, .head_sliding STEP AUTO OFFSET,
 *                             .homo_head, .num_dense_heads,
 *                             .mask I H M N HEXBITS     (explicit mask I, 4 bits per digit, low bit first)
 *                             .rule Q DENSE LEFT RIGHT STRIDE SHIFT MASK MASK_HEAD  (one per head)
 *                             .range ACTION KEY_LO KEY_HI DIST_LO DIST_HI STRIDE HEADS_HEXBITS
 *   end
 * Unknown keys are skipped (later versions may add some).
 * Writer (libs2c): *text malloc'd, NUL-terminated. */
s2_status s2_manifest_format(s2_ctx *ctx, int arch, const s2_manifest_kernel *kernels, int num_kernels,
                             const s2_pattern *const *patterns, int num_patterns, char **text);

s2_status s2_manifest_parse(s2_ctx *ctx, const char *text, size_t len, s2_manifest **out);
void s2_manifest_free(s2_manifest *m);
const char *s2_manifest_generator(const s2_manifest *m);
int s2_manifest_arch(const s2_manifest *m);
int s2_manifest_num_kernels(const s2_manifest *m);
const s2_manifest_kernel *s2_manifest_kernel_at(const s2_manifest *m, int i);
int s2_manifest_num_patterns(const s2_manifest *m);
const s2_pattern *s2_manifest_pattern_at(const s2_manifest *m, int i);
const s2_pattern *s2_manifest_find_pattern(const s2_manifest *m, const char *name);

/* Find the manifest text inside a cubin (ELF) image without a GPU: the
 * bytes of the symbol S2_MANIFEST_SYMBOL.  *text points into image. */
s2_status s2_cubin_find_manifest(s2_ctx *ctx, const void *image, size_t size, const char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
