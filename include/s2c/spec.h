/* s2c — what a kernel is generated for: the target arch, the kernel kind
 * and the spec (dtype, head dim and the Triton-style tunables).  Shared by
 * the generator (compile.h), the manifest (manifest.h) and the runtime. */
#ifndef S2C_SPEC_H
#define S2C_SPEC_H

#include "s2c/common.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s2_arch {
    S2_ARCH_SM80 = 0,
    S2_ARCH_SM90,
    S2_ARCH_SM90A,
    S2_ARCH_COUNT_
} s2_arch;

/* "sm_80", "sm_90", "sm_90a" (also "80", "90", "90a"). */
S2_API s2_status s2_arch_parse(const char *text, s2_arch *out);
S2_API const char *s2_arch_name(s2_arch arch); /* "sm_90a"; "?" when invalid */
/* The arch to compile for a device of compute capability major.minor:
 * 9.x -> sm_90a, 8.x -> sm_80, others S2_ERR_UNSUPPORTED. */
S2_API s2_status s2_arch_for_device(int major, int minor, s2_arch *out);

typedef enum s2_kernel_kind {
    S2_KERNEL_FWD = 0,   /* forward with LSE */
    S2_KERNEL_BWD = 1,   /* backward: NAME_pre, NAME_dq, NAME_dkdv in one module */
    S2_KERNEL_DECODE = 2, /* paged decode: NAME, NAME_combine (s2c/decode.h) */
    S2_KERNEL_KIND_COUNT_
} s2_kernel_kind;

/* What to generate: what a Triton user knows.  Zero fields take the
 * per-architecture heuristic (s2_kernel_spec_resolve); every resolved value
 * is recorded in the manifest.  Each template makes its own further choices
 * (a persistent grid, gathered key tiles, ...), recorded in the manifest's
 * kernel records; they are not part of this API. */
typedef struct s2_kernel_spec {
    s2_kernel_kind kind;
    s2_dtype dtype;        /* S2_DTYPE_BF16 or S2_DTYPE_F16 */
    int head_dim;          /* 32, 64, 96, 128, 256 */
    int arch;              /* an s2_arch: sm_80, sm_90, sm_90a */
    /* Triton-style tunables (0 = heuristic) */
    int block_m;           /* query rows per CTA tile */
    int block_n;           /* key rows per tile */
    int num_warps;
    int num_stages;        /* K/V shared-memory pipeline depth */
    /* Decode only: the dtype of the K/V pages when it is not dtype's, S2_DTYPE_E4M3 (fp8 pages with
     * per-kv-head scales, s2_attn_decode_args; sm_90 and up); 0 (f32, which no decode reads) = dtype. */
    s2_dtype kv_dtype;
} s2_kernel_spec;


#ifdef __cplusplus
}
#endif
#endif
