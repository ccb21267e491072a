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

#include "s2c/common.h"
#include "s2c/spec.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s2_target {
    s2_arch arch;
    int ptx_version;   /* 0 = default for the arch (7.8 for sm_80, 8.3 for sm_90*); e.g. 83 = PTX 8.3 */
    int opt_level;     /* 0..3 for the LLVM pipeline (ptxas always gets -O3) */
} s2_target;

S2_API void s2_target_default(s2_target *t, s2_arch arch);

typedef enum s2_cubin_backend {
    S2_CUBIN_AUTO = 0,   /* ptxas if it can be found, else nvJitLink */
    S2_CUBIN_PTXAS,      /* only ptxas ($S2C_PTXAS, $PATH, $CUDA_HOME/bin, /usr/local/cuda/bin) */
    S2_CUBIN_NVJITLINK,  /* only nvJitLink (libnvJitLink.so.13, loaded at run time) */
} s2_cubin_backend;

S2_API const char *s2_cubin_backend_name(s2_cubin_backend b);

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

S2_API void s2_artifact_free(s2_artifact *a);

/* Assemble PTX text into a cubin.  *cubin and *log are malloc'd (free());
 * info may be NULL; otherwise *info (malloc'd array, *num_info entries) gets
 * the per-kernel resources.  On an assembler error S2_ERR_TOOLCHAIN is
 * returned, the log is still handed back in *log, and ctx's message
 * contains its start. */
S2_API s2_status s2_ptx_to_cubin(s2_ctx *ctx, const char *ptx, size_t len, s2_arch arch,
                          s2_cubin_backend backend, uint8_t **cubin, size_t *size, char **log,
                          s2_kernel_info **info, int *num_info, s2_cubin_backend *used);

/* EIATTR_REGCOUNT of kernel `name` in a cubin's .nv.info sections (what
 * the driver launches with), -1 when not found.  Needs no GPU. */
S2_API int s2_cubin_regcount(const uint8_t *cubin, size_t size, const char *name);

#ifdef __cplusplus
}
#endif
#endif
