/* s2c — the generator's compile API (libs2c): resolve a spec for a pattern
 * and compile attention kernels into a module (an s2_artifact, codegen.h)
 * whose manifest (manifest.h) records every kernel it holds. */
#ifndef S2C_COMPILE_H
#define S2C_COMPILE_H

#include "s2c/codegen.h"
#include "s2c/common.h"
#include "s2c/pattern.h"
#include "s2c/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill the zero tunables of *spec for pattern p and check the result:
 * block_m = 16 * num_warps (each warp owns a 16-row slab; default 64 rows,
 * 4 warps), block_n 64 (16 for patterns of block size 16), num_stages 2;
 * the tile must hold at most 64
 * sub-blocks of the pattern's block size and its shared memory must fit the
 * arch.  dtype (bf16/f16) and head_dim (32, 64, 96, 128) must be given.
 * S2_ERR_UNSUPPORTED names what does not fit. */
S2_API s2_status s2_kernel_spec_resolve(s2_ctx *ctx, s2_kernel_spec *spec, const s2_pattern *p);

/* Block-sparse masked row softmax for a pattern.
 *
 * Kernel (name in art->kernels[0].name) parameters, in order:
 *   const float *in, float *out         (global memory)
 *   int64 Sq, int64 Sk                  (queries are the last Sq of Sk positions)
 *   int64 in_stride[4], int64 out_stride[4]   (elements; B, H, Sq, Sk order)
 *   float scale                         (softmax of scale * score)
 * For each (b, h, query row i) with absolute position p = Sk - Sq + i, key k
 * is kept when the pattern keeps block (p / block, k / block) for head h and,
 * when causal, k <= p.  out = softmax over the kept keys, 0 for masked keys,
 * and all 0 for a row with no kept key.  The head count is baked: the launch
 * must use gridDim.y == pattern->heads.
 * Patterns with explicit masks or context-range rules give S2_ERR_UNSUPPORTED. */
S2_API s2_status s2_compile_row_softmax(s2_ctx *ctx, const s2_pattern *pattern, const s2_target *target,
                                 s2_cubin_backend backend, s2_artifact **out);

/* Block-sparse attention for a pattern (kernel ABI in s2c/launch.h).
 * The spec is resolved with s2_kernel_spec_resolve (the artifact keeps the
 * result in art->spec); the module holds one kernel, art->kernels[0].name =
 * s2_fwd_<pattern>_<dtype>_d<D>, and the manifest global.  Launch with
 * art->threads_per_block threads and art->smem_bytes of dynamic shared memory. */
S2_API s2_status s2_compile_attention(s2_ctx *ctx, const s2_pattern *pattern, const s2_kernel_spec *spec,
                               s2_cubin_backend backend, s2_artifact **out);

/* Several patterns in one module: one forward kernel per pattern, the same
 * spec request resolved for each pattern (so zero tunables may differ per
 * kernel), and one manifest listing every kernel and pattern (art->manifest).
 * Kernel symbols must differ (pattern names that differ only in characters
 * that are not identifier characters are an error).  module_name names the
 * dump and override files (NULL: the kernel's name when n == 1, else
 * "s2_attention_set").  s2_compile_attention is the n = 1 case. */
S2_API s2_status s2_compile_attention_set(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                                   const s2_kernel_spec *spec, s2_cubin_backend backend, s2_artifact **out);

#ifdef __cplusplus
}
#endif
#endif
