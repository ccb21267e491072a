/* s2c — sparse attention kernels: what is generated, what an artifact
 * carries, and how it is launched.
 *
 * Generation (needs LLVM; libs2c):   s2_compile_attention()  -> s2_artifact
 * Loading and launching (no LLVM; libs2rt): s2_attn_load() -> s2_attn_forward()
 * JIT (libs2c, with an on-disk cache):  s2_jit_compile()
 *
 * Tensors follow the S2 Triton library: q [B, Sq, H, D], k/v [B, Sk, Hkv, D],
 * o like q, any strides in elements for (batch, seq, head) with the head
 * dimension contiguous — (B,S,H,D) and (B,H,S,D) are both just strides.
 * Queries are the last Sq of the Sk positions.  The softmax scale defaults to
 * 1/sqrt(D).  LSE is fp32, natural log, contiguous [B][H][Sq]; a row with
 * nothing to attend gives o = 0 and lse = -inf.
 */
#ifndef S2C_ATTENTION_H
#define S2C_ATTENTION_H

#include "s2c/common.h"
#include "s2c/pattern.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_kernel_kind {
    S2_KERNEL_FWD = 0,   /* forward with LSE */
    S2_KERNEL_KIND_COUNT_
} s2_kernel_kind;

/* What to generate.  Zero fields take the per-architecture heuristic
 * (s2_kernel_spec_resolve); every resolved value is recorded in the manifest. */
typedef struct s2_kernel_spec {
    s2_kernel_kind kind;
    s2_dtype dtype;        /* S2_DTYPE_BF16 or S2_DTYPE_F16 */
    int head_dim;          /* 32, 64, 96, 128, 256 */
    int arch;              /* an s2_arch (codegen.h): sm_80, sm_90, sm_90a */
    /* Triton-style tunables (0 = heuristic) */
    int block_m;           /* query rows per CTA tile */
    int block_n;           /* key rows per tile */
    int num_warps;
    int num_stages;        /* K/V shared-memory pipeline depth */
} s2_kernel_spec;

/* ---- the manifest: what a cubin says about itself ------------------------------
 * Every generated module holds a NUL-terminated text global `s2c_manifest`
 * (see s2_manifest_format): the generator version, the arch, and per kernel
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
} s2_manifest_kernel;

typedef struct s2_manifest s2_manifest;

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

/* ---- forward launch arguments ------------------------------------------------ */
typedef struct s2_attn_fwd_args {
    int batch;
    int64_t q_len, kv_len;       /* Sq <= Sk */
    int heads, kv_heads, head_dim;
    s2_dtype dtype;
    uint64_t q, k, v, o;         /* device pointers (s2_devptr), 16-byte aligned */
    uint64_t lse;                /* fp32 [B][H][Sq]; 0 = not written */
    int64_t q_stride[3];         /* (batch, seq, head) strides in elements, multiples of 8 */
    int64_t k_stride[3];
    int64_t v_stride[3];
    int64_t o_stride[3];
    float scale;                 /* 0 = 1/sqrt(head_dim) */
} s2_attn_fwd_args;

/* Fill strides for contiguous (B,S,H,D) tensors. */
void s2_attn_fwd_args_bshd(s2_attn_fwd_args *a);

#ifdef __cplusplus
}
#endif
#endif
