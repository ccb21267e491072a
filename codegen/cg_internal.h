/* Internal to codegen/: the LLVM compilation context, NVVM/PTX builder
 * helpers (one per instruction family), and the assembler back ends. */
#ifndef S2C_CG_INTERNAL_H
#define S2C_CG_INTERNAL_H

#include "arch.h"
#include "dtype.h"
#include "s2c/codegen.h"
#include "util.h"

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include <stdbool.h>

/* NVPTX address spaces (llvm/Support/NVPTXAddrSpace.h). */
enum { S2_AS_GENERIC = 0, S2_AS_GLOBAL = 1, S2_AS_SHARED = 3, S2_AS_CONST = 4, S2_AS_LOCAL = 5 };

/* One compilation: owns every LLVM object it creates. */
typedef struct s2_cg {
    LLVMContextRef llctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTargetMachineRef tm;
    LLVMTargetDataRef dl;
    s2_target target;
    LLVMTypeRef t_void, t_i1, t_i32, t_i64, t_f32, t_ptr_global, t_ptr_const;
} s2_cg;

/* ---- context (cg_ctx.c) ---- */
s2_status s2_cg_init(s2_ctx *ctx, s2_cg *cg, const s2_target *target, const char *module_name);
void s2_cg_destroy(s2_cg *cg);             /* tolerates a zeroed or partially set up cg */
s2_status s2_cg_verify(s2_ctx *ctx, s2_cg *cg);
s2_status s2_cg_optimize(s2_ctx *ctx, s2_cg *cg);
s2_status s2_cg_print_ir(s2_ctx *ctx, s2_cg *cg, char **text);           /* malloc'd */
/* Replace the module by IR text (an override NAME.ll); verifies it. */
s2_status s2_cg_replace_module(s2_ctx *ctx, s2_cg *cg, const char *text, size_t len);
s2_status s2_cg_emit_ptx(s2_ctx *ctx, s2_cg *cg, char **ptx, size_t *len); /* malloc'd */
/* The LLVM type of one element of dt (its dtype table row's llvm); the only
 * place a dtype becomes an LLVMTypeRef. */
LLVMTypeRef s2_cg_elt_type(s2_cg *cg, s2_dtype dt);

/* Smallest r with 2^r >= v (v >= 1): shift amounts of power-of-two tile sizes. */
static inline int s2_log2i(int v)
{
    int r = 0;
    while ((1 << r) < v)
        r++;
    return r;
}

/* ---- builder helpers (cg_nvvm.c) ---- */
LLVMValueRef s2_nv_kernel_new(s2_cg *cg, const char *name, LLVMTypeRef *params, unsigned n,
                              int max_threads, int min_ctas);
void s2_nv_param_attr(s2_cg *cg, LLVMValueRef fn, unsigned param, const char *attr);
LLVMValueRef s2_nv_intrinsic(s2_cg *cg, const char *name, LLVMTypeRef ret, LLVMTypeRef *args,
                             unsigned nargs, LLVMValueRef *vals);
/* special registers */
LLVMValueRef s2_nv_tid_x(s2_cg *cg);
LLVMValueRef s2_nv_ctaid(s2_cg *cg, char dim);   /* 'x', 'y', 'z' */
LLVMValueRef s2_nv_laneid(s2_cg *cg);
/* warp shuffles and reductions across all 32 lanes (full mask) */
LLVMValueRef s2_nv_shfl_bfly_f32(s2_cg *cg, LLVMValueRef v, int lane_mask);
LLVMValueRef s2_nv_shfl_idx_i32(s2_cg *cg, LLVMValueRef v, int lane);
LLVMValueRef s2_nv_ballot(s2_cg *cg, LLVMValueRef pred);   /* vote.ballot.sync, full warp */
LLVMValueRef s2_nv_lanemask_lt(s2_cg *cg);
LLVMValueRef s2_nv_popc(s2_cg *cg, LLVMValueRef v);
LLVMValueRef s2_nv_warp_max_f32(s2_cg *cg, LLVMValueRef v);
LLVMValueRef s2_nv_warp_sum_f32(s2_cg *cg, LLVMValueRef v);
/* vote.sync.any over the whole warp: pred (i1) of any lane */
LLVMValueRef s2_nv_vote_any(s2_cg *cg, LLVMValueRef pred);
/* math */
LLVMValueRef s2_nv_ex2_approx(s2_cg *cg, LLVMValueRef x);         /* ex2.approx.ftz.f32 */
LLVMValueRef s2_nv_fmax(s2_cg *cg, LLVMValueRef a, LLVMValueRef b); /* llvm.maxnum */
LLVMValueRef s2_nv_fma(s2_cg *cg, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c);
LLVMValueRef s2_nv_smax_i32(s2_cg *cg, LLVMValueRef a, LLVMValueRef b);
/* barriers */
void s2_nv_barrier_cta(s2_cg *cg);   /* bar.sync 0 (barrier.cta.sync.aligned.all) */
/* bar.warp.sync over the full warp: orders the warp's shared-memory writes before its reads */
void s2_nv_barrier_warp(s2_cg *cg);
/* global memory: element `index` (i64) of a float array in addrspace(1) */
LLVMValueRef s2_nv_gep_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index);
LLVMValueRef s2_nv_load_global_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index, unsigned align);
void s2_nv_store_global_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index, LLVMValueRef v,
                            unsigned align);
/* a read-only constant table in addrspace(4) */
LLVMValueRef s2_nv_const_table_i32(s2_cg *cg, const char *name, const int32_t *vals, unsigned n);
LLVMValueRef s2_nv_load_table_i32(s2_cg *cg, LLVMValueRef table, unsigned n, LLVMValueRef index);
/* Inline PTX.  Always marked as having side effects and clobbering memory,
 * so LLVM never deletes or moves it.  `constraints` lists outputs then
 * inputs ("=r,r"); "~{memory}" is appended here. */
LLVMValueRef s2_nv_inline_asm(s2_cg *cg, LLVMTypeRef ret, const char *text, const char *constraints,
                              LLVMValueRef *args, unsigned nargs);

/* A counted loop: for (iv = start; iv < end; iv += step), with loop-carried
 * values.  Between begin and end, emit the body using loop->iv and
 * loop->carried[i]; pass the next values to s2_nv_loop_end; afterwards
 * loop->result[i] holds the final values. */
#define S2_NV_LOOP_MAX_CARRIED 4
typedef struct s2_nv_loop {
    LLVMValueRef iv;
    LLVMValueRef carried[S2_NV_LOOP_MAX_CARRIED];
    LLVMValueRef result[S2_NV_LOOP_MAX_CARRIED];
    unsigned ncarried;
    LLVMValueRef step, end;
    LLVMBasicBlockRef header, body, exit, preheader;
    LLVMValueRef init[S2_NV_LOOP_MAX_CARRIED];
    LLVMValueRef start;
} s2_nv_loop;
void s2_nv_loop_begin(s2_cg *cg, s2_nv_loop *loop, const char *name, LLVMValueRef start, LLVMValueRef end,
                      LLVMValueRef step, LLVMValueRef *init, unsigned ncarried);
void s2_nv_loop_end(s2_cg *cg, s2_nv_loop *loop, LLVMValueRef *next);

/* ---- tensor-core path helpers (cg_mma.c) ---- */
/* The module's dynamic shared memory (extern [0 x i8] addrspace(3), 1024-aligned)
 * and a byte address inside it (i32 offset). */
LLVMValueRef s2_nv_dynamic_smem(s2_cg *cg);
LLVMValueRef s2_nv_smem_at(s2_cg *cg, LLVMValueRef byte_off);
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: out[j] = matrix j (lanes 8j..8j+7 address it) */
void s2_nv_ldmatrix_x4(s2_cg *cg, LLVMValueRef smem_ptr, bool trans, LLVMValueRef out[4]);
/* stmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (sm_90): v[j] (packed i32) = matrix j,
 * lanes 8j..8j+7 give the addresses of its 8 rows (16 bytes each); .trans stores
 * each matrix transposed (a thread's pair (row g, cols 2t, 2t+1) lands in rows 2t, 2t+1) */
void s2_nv_stmatrix_x4(s2_cg *cg, LLVMValueRef smem_ptr, bool trans, LLVMValueRef v[4]);
/* acc += A·B, mma.sync row.col, f32 accumulators; a, b packed i32 of dt: the dtype row's mma, m16n8k16 for an
 * S2_MMA_F16 dtype, m16n8k8 for f32 (tf32: one element per register) */
void s2_nv_mma_m16n8k16(s2_cg *cg, s2_dtype dt, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef acc[4]);
/* cp.async.cg.shared.global 16 bytes, src_size (i32) bytes read, the rest zero-filled */
void s2_nv_cp_async_16(s2_cg *cg, LLVMValueRef dst_smem, LLVMValueRef src_global, LLVMValueRef src_size);
/* cp.async.ca.shared.global 4 bytes (src_size 4 or 0: zero-filled) */
void s2_nv_cp_async_4(s2_cg *cg, LLVMValueRef dst_smem, LLVMValueRef src_global, LLVMValueRef src_size);
void s2_nv_cp_async_commit(s2_cg *cg);
void s2_nv_cp_async_wait(s2_cg *cg, int pending);
/* two f32 rounded to dt (a 16-bit dtype), lo in bits 0..15, as i32 */
LLVMValueRef s2_nv_pack2(s2_cg *cg, s2_dtype dt, LLVMValueRef lo, LLVMValueRef hi);
/* a packed pair of fp8 dt (i16, low byte first) as <2 x half>, exact (the dtype row's llvm_to_f16x2, sm_89+) */
LLVMValueRef s2_nv_f8x2_to_f16x2(s2_cg *cg, s2_dtype dt, LLVMValueRef x);
/* Four f32 rounded to nearest (saturated to the largest finite) into one
 * i32 of 8-bit dt (e4m3, e5m2): x0 in byte 0 ... x3 in byte 3. */
LLVMValueRef s2_nv_pack4_fp8(s2_cg *cg, s2_dtype dt, LLVMValueRef x0, LLVMValueRef x1, LLVMValueRef x2,
                             LLVMValueRef x3);
/* prmt.b32: byte i of the result is byte (sel >> 4i) & 7 of {b, a} (a bytes 0-3, b bytes 4-7). */
LLVMValueRef s2_nv_prmt(s2_cg *cg, LLVMValueRef a, LLVMValueRef b, unsigned sel);
/* one i16 element of dt (a 16-bit dtype) as f32 */
LLVMValueRef s2_nv_elt16_to_f32(s2_cg *cg, s2_dtype dt, LLVMValueRef x);
/* reductions over the 4 lanes of a quad (lanes with equal lane/4) */
LLVMValueRef s2_nv_quad_max_f32(s2_cg *cg, LLVMValueRef v);
LLVMValueRef s2_nv_quad_sum_f32(s2_cg *cg, LLVMValueRef v);
LLVMValueRef s2_nv_lg2_approx(s2_cg *cg, LLVMValueRef x);   /* lg2.approx.ftz.f32 */
/* if (cond) { ... }: code between begin and end runs when cond holds */
typedef struct s2_nv_if {
    LLVMBasicBlockRef then, join;
} s2_nv_if;
void s2_nv_if_begin(s2_cg *cg, s2_nv_if *blk, LLVMValueRef cond, const char *name);
void s2_nv_if_end(s2_cg *cg, s2_nv_if *blk);


/* ---- Hopper helpers (cg_wgmma.c, sm_90a) ---- */
/* 32-bit .shared address of the dynamic shared memory's start */
LLVMValueRef s2_nv_smem_base32(s2_cg *cg);
/* wgmma matrix descriptor, 128-byte swizzle (PTX ISA, "Matrix Descriptor Format"): smem_addr an i32 .shared address */
LLVMValueRef s2_nv_wgmma_desc(s2_cg *cg, LLVMValueRef smem_addr, int lbo, int sbo);
/* One asm block: wgmma.fence; `ksteps` wgmma.mma_async m64n{n}k16 (f32 accumulators
 * acc[n/2], tied in and out); wgmma.commit_group.  Step j adds a_step[j] / b_step[j]
 * (descriptor units, bytes >> 4) to the descriptors.  SS: A and B from shared memory
 * (A K-major; B K-major, or N-major when trans_b); !accumulate: the first step
 * ignores acc (scale-d false).
 * RS: A from registers a[j][0..3] per step, B transposed when trans_b (N-major V). */
void s2_nv_wgmma_ss(s2_cg *cg, s2_dtype dt, int n, int ksteps, LLVMValueRef desc_a, const int *a_step,
                    LLVMValueRef desc_b, const int *b_step, bool trans_b, bool accumulate, LLVMValueRef *acc);
void s2_nv_wgmma_rs(s2_cg *cg, s2_dtype dt, int n, int ksteps, LLVMValueRef (*a)[4], LLVMValueRef desc_b,
                    const int *b_step, bool trans_b, LLVMValueRef *acc);
void s2_nv_wgmma_ss_rs(s2_cg *cg, s2_dtype dt, int n1, int k1, LLVMValueRef desc_a, const int *a_step,
                       LLVMValueRef desc_b, const int *b_step, LLVMValueRef *acc1, int n2, int k2,
                       LLVMValueRef (*a2)[4], LLVMValueRef desc_v, const int *v_step, LLVMValueRef *acc2);
/* as s2_nv_wgmma_ss_rs with S's A operand from registers (a1[k1][4]); n2 = 0: S only */
void s2_nv_wgmma_rs_rs(s2_cg *cg, s2_dtype dt, int n1, int k1, LLVMValueRef (*a1)[4], LLVMValueRef desc_b,
                       const int *b_step, LLVMValueRef *acc1, int n2, int k2, LLVMValueRef (*a2)[4],
                       LLVMValueRef desc_v, const int *v_step, LLVMValueRef *acc2);
/* wgmma.wait_group pending, routing the n accumulators through it (tied) so no
 * use of them is scheduled before the wait */
void s2_nv_wgmma_wait(s2_cg *cg, int pending, LLVMValueRef *acc, int n);
/* mbarriers at i32 .shared addresses */
void s2_nv_mbar_init(s2_cg *cg, LLVMValueRef bar, int count);
void s2_nv_fence_mbar_init(s2_cg *cg);
void s2_nv_mbar_arrive_expect_tx(s2_cg *cg, LLVMValueRef bar, int bytes);
void s2_nv_mbar_arrive(s2_cg *cg, LLVMValueRef bar);
void s2_nv_mbar_wait(s2_cg *cg, LLVMValueRef bar, LLVMValueRef parity);   /* try_wait loop */
/* cp.async.bulk.tensor.4d tile load into dst (i32 .shared) completing on bar;
 * tmap: the generic address of a grid-constant tensor-map parameter */
void s2_nv_tma_load_4d(s2_cg *cg, LLVMValueRef dst, LLVMValueRef bar, LLVMValueRef tmap, LLVMValueRef c[4]);
/* The same two, issued only where `pred` (i1) holds: predicated, no branch
 * (so no divergent path while a wgmma is in flight) */
void s2_nv_mbar_arrive_expect_tx_if(s2_cg *cg, LLVMValueRef pred, LLVMValueRef bar, int bytes);
void s2_nv_tma_load_4d_if(s2_cg *cg, LLVMValueRef pred, LLVMValueRef dst, LLVMValueRef bar, LLVMValueRef tmap,
                          LLVMValueRef c[4]);
void s2_nv_prefetch_tensormap(s2_cg *cg, LLVMValueRef tmap);
void s2_nv_setmaxnreg(s2_cg *cg, bool inc, int regs);
void s2_nv_named_barrier(s2_cg *cg, int id, int threads, bool arrive_only);
/* a `ptr byval([16 x i64]) align 64 "nvvm.grid_constant"` kernel parameter (a CUtensorMap by value, NVVM IR spec, grid_constant) */
void s2_nv_param_tensormap(s2_cg *cg, LLVMValueRef fn, unsigned param);
LLVMTypeRef s2_nv_tensormap_type(s2_cg *cg);
/* fence.proxy.async.shared::cta: generic shared writes -> wgmma reads */
void s2_nv_fence_proxy_async(s2_cg *cg);

/* Add NUL-terminated text as a visible, initialised byte-array global
 * `name` (so ptxas keeps it in the cubin): the module's manifest. */
s2_status s2_cg_add_text_global(s2_ctx *ctx, s2_cg *cg, const char *name, const char *text);

/* ---- the stage driver (compile.c) ---- */
/* Take a built module through verify -> NAME.pre.ll -> O3 -> NAME.ll ->
 * NAME.ptx -> NAME.cubin, honouring the ctx's dump and override directories,
 * and fill art (name, IR, PTX, cubin, log, kernels).  art->name must be set. */
s2_status s2_cg_finish(s2_ctx *ctx, s2_cg *cg, s2_cubin_backend backend, s2_artifact *art);
s2_artifact *s2_artifact_new(const s2_target *target, const char *name);

/* ---- assemblers (cubin.c) ---- */
/* Parse "Used N registers", spills, stack and smem lines (ptxas -v and the
 * nvJitLink info log share the format). */
int s2_parse_resources(const char *log, s2_kernel_info *info, int max_info);
/* s2_cubin_regcount (codegen.h) reads EIATTR_REGCOUNT from a cubin. */

#endif
