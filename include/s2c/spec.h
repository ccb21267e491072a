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
s2_status s2_arch_parse(const char *text, s2_arch *out);
const char *s2_arch_name(s2_arch arch); /* "sm_90a"; "?" when invalid */
/* The arch to compile for a device of compute capability major.minor:
 * 9.x -> sm_90a, 8.x -> sm_80, others S2_ERR_UNSUPPORTED. */
s2_status s2_arch_for_device(int major, int minor, s2_arch *out);

typedef enum s2_kernel_kind {
    S2_KERNEL_FWD = 0,   /* forward with LSE */
    S2_KERNEL_BWD = 1,   /* backward: NAME_pre, NAME_dq, NAME_dkdv in one module */
    S2_KERNEL_DECODE = 2, /* paged decode: NAME, NAME_combine (s2c/decode.h) */
    S2_KERNEL_KIND_COUNT_
} s2_kernel_kind;

/* What to generate.  Zero fields take the per-architecture heuristic
 * (s2_kernel_spec_resolve); every resolved value is recorded in the manifest. */
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
    /* sm_90a forward only: 1 persistent grid over a longest-first work list
     * (S2_FWD_ABI_TMA_PERSISTENT), -1 one CTA per (q tile, head, batch);
     * 0 = heuristic (resolved to -1 there, the faster measured, and 0 on the other paths) */
    int persistent;
    /* sm_90a backward, head_dim 64 or 128: 1 the wgmma dK/dV and dQ bodies
     * (templates/bwd_sm90.c), -1 the mma.sync ones; 0 = heuristic (resolved
     * to 1 there when num_warps is 4, else -1; 0 on the other paths).  Same
     * kernels, parameters and launch either way. */
    int bwd_wgmma;
    /* Key tiles gathered from kv_gather pattern blocks (block_n = kv_gather *
     * block_size, not necessarily adjacent; manifest `kernel.kv_gather`).
     * sm_90a forward: 2..4 blocks, the packed schedule is
     * s2_schedule_pack_gathered's, the k and v tensor maps have boxes of
     * block_size rows; 0 = heuristic: 4 for block-16 patterns (block_n 64).
     * sm_90a wgmma backward: 4 blocks of 16 tokens, block_m = block_n = 64:
     * the dQ kernel's key tiles as the forward's, the dK/dV kernel's resident
     * key tile from s2_schedule_pack_gathered_kv (see the backward ABI);
     * 0 = heuristic: 4 for block-16 patterns.  1 = one key tile per entry.
     * Resolved to 1 or more on the sm_90a forward, 0 or 4 on the backward,
     * 0 elsewhere. */
    int kv_gather;
    /* sm_90a wgmma backward: 1 the dK/dV kernel copies its Q and dO tiles by
     * TMA, from two tensor maps the backward kernels take as parameters 51
     * and 52 (see the backward ABI); -1 by cp.async (parameters 0..50 only);
     * 0 = heuristic (resolved to 1 there, 0 on the other paths). */
    int bwd_tma;
} s2_kernel_spec;


#ifdef __cplusplus
}
#endif
#endif
