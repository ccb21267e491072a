/* s2c — code generation: LLVM IR -> PTX (NVPTX) -> cubin (ptxas or nvJitLink).
 *
 * Kernels are built through the LLVM-C API for one target (sm_80, sm_90,
 * sm_90a), optimised with the O3 pipeline, printed as PTX and assembled into
 * a cubin either by the ptxas program (a subprocess) or by nvJitLink loaded
 * at run time with dlopen (nothing from CUDA is linked).
 *
 * Debug hooks come from the s2_ctx: with a dump directory every stage writes
 * NAME.pre.ll, NAME.ll, NAME.ptx and NAME.cubin there; with an override
 * directory a file NAME.ll / NAME.ptx / NAME.cubin found there replaces the
 * output of that stage (so PTX can be edited by hand and reassembled).
 */
#ifndef S2C_CODEGEN_H
#define S2C_CODEGEN_H

#include "s2c/attention.h"
#include "s2c/common.h"
#include "s2c/pattern.h"

#include <stddef.h>
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

typedef struct s2_target {
    s2_arch arch;
    int ptx_version;   /* 0 = default for the arch (7.8 for sm_80, 8.3 for sm_90*); e.g. 83 = PTX 8.3 */
    int opt_level;     /* 0..3 for the LLVM pipeline (ptxas always gets -O3) */
} s2_target;

void s2_target_default(s2_target *t, s2_arch arch);

typedef enum s2_cubin_backend {
    S2_CUBIN_AUTO = 0,   /* ptxas if it can be found, else nvJitLink */
    S2_CUBIN_PTXAS,      /* only ptxas ($S2C_PTXAS, $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin) */
    S2_CUBIN_NVJITLINK,  /* only nvJitLink (libnvJitLink.so.13, loaded at run time) */
} s2_cubin_backend;

const char *s2_cubin_backend_name(s2_cubin_backend b);

/* Resources of one kernel as reported by the assembler (-1 when unknown). */
typedef struct s2_kernel_info {
    char name[128];
    int registers;
    int spill_stores;      /* bytes */
    int spill_loads;       /* bytes */
    int stack_frame;       /* bytes */
    int shared_static;     /* bytes */
    int max_threads;       /* launch bound given to the kernel (.maxntid) */
    int elf_registers;     /* EIATTR_REGCOUNT from the cubin's .nv.info.NAME, -1 if not found */
} s2_kernel_info;

/* Everything one compilation produced.  Owned by the caller. */
typedef struct s2_artifact {
    char *name;            /* base name used for dumps and the kernel symbol */
    s2_target target;
    s2_cubin_backend backend_used;  /* PTXAS or NVJITLINK */
    char *ir_pre;          /* IR before optimisation (NUL-terminated) */
    char *ir;              /* IR after O3 */
    char *ptx;
    size_t ptx_len;
    uint8_t *cubin;
    size_t cubin_size;
    char *log;             /* assembler log (ptxas -v output or nvJitLink info log) */
    s2_kernel_info *kernels;
    int num_kernels;
    /* launch shape */
    int threads_per_block; /* blockDim.x */
    int rows_per_block;    /* row softmax: gridDim.x = ceil(Sq / rows_per_block), gridDim.y = H, gridDim.z = B;
                            * attention: the query tile, block_m */
    /* attention kernels only (zero for the row softmax) */
    s2_kernel_spec spec;   /* the resolved spec (of the first pattern's kernel for a set) */
    int smem_bytes;        /* dynamic shared memory per CTA (likewise) */
    char *manifest;        /* the manifest text embedded in the module (NULL for the row softmax):
                            * every kernel's spec and launch shape, see s2_manifest_parse */
} s2_artifact;

void s2_artifact_free(s2_artifact *a);

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
s2_status s2_compile_row_softmax(s2_ctx *ctx, const s2_pattern *pattern, const s2_target *target,
                                 s2_cubin_backend backend, s2_artifact **out);

/* Block-sparse attention for a pattern (kernel ABI in s2c/attention.h).
 * The spec is resolved with s2_kernel_spec_resolve (the artifact keeps the
 * result in art->spec); the module holds one kernel, art->kernels[0].name =
 * s2_fwd_<pattern>_<dtype>_d<D>, and the manifest global.  Launch with
 * art->threads_per_block threads and art->smem_bytes of dynamic shared memory. */
s2_status s2_compile_attention(s2_ctx *ctx, const s2_pattern *pattern, const s2_kernel_spec *spec,
                               s2_cubin_backend backend, s2_artifact **out);

/* Several patterns in one module: one forward kernel per pattern, the same
 * spec request resolved for each pattern (so zero tunables may differ per
 * kernel), and one manifest listing every kernel and pattern (art->manifest).
 * Kernel symbols must differ (pattern names that differ only in characters
 * that are not identifier characters are an error).  module_name names the
 * dump and override files (NULL: the kernel's name when n == 1, else
 * "s2_attention_set").  s2_compile_attention is the n = 1 case. */
s2_status s2_compile_attention_set(s2_ctx *ctx, const char *module_name, const s2_pattern *const *patterns, int n,
                                   const s2_kernel_spec *spec, s2_cubin_backend backend, s2_artifact **out);

/* Assemble PTX text into a cubin.  *cubin and *log are malloc'd (free());
 * info may be NULL; otherwise *info (malloc'd array, *num_info entries) gets
 * the per-kernel resources.  On an assembler error S2_ERR_TOOLCHAIN is
 * returned, the log is still handed back in *log, and ctx's message
 * contains its start. */
s2_status s2_ptx_to_cubin(s2_ctx *ctx, const char *ptx, size_t len, s2_arch arch,
                          s2_cubin_backend backend, uint8_t **cubin, size_t *size, char **log,
                          s2_kernel_info **info, int *num_info, s2_cubin_backend *used);

/* EIATTR_REGCOUNT of kernel `name` in a cubin's .nv.info sections (what
 * the driver launches with), -1 when not found.  Needs no GPU. */
int s2_cubin_regcount(const uint8_t *cubin, size_t size, const char *name);

#ifdef __cplusplus
}
#endif
#endif
