/* The kernel-builder base of every template (templates/kbase.c): the warp
 * geometry, the builder state each template's struct starts with and the
 * short value builders on it, the thread-setup prologue, the pipeline
 * ring's stage / phase arithmetic and the mbarrier addresses. */
#ifndef S2C_TEMPLATES_KBASE_H
#define S2C_TEMPLATES_KBASE_H

#include "cg_internal.h"
#include "kernel_abi.h"

/* A warp of 32 lanes; the mma.sync / wgmma fragment quad of 4 lanes (row g
 * = lane / 4, column pair t4 = lane % 4); a warpgroup of 4 warps (wgmma). */
enum { S2_WARP = 32, S2_WARP_LOG2 = 5, S2_QUAD = 4, S2_WARPGROUP = 128, S2_WARPGROUP_LOG2 = 7 };

/* The builder state: the codegen context, its builder, the kernel being
 * built, and the thread's ids (s2_kb_thread, s2_kb_lanes; i32). */
#define S2_KB_FIELDS                   \
    s2_cg *cg;                         \
    LLVMBuilderRef b;                  \
    LLVMValueRef fn;                   \
    LLVMValueRef tid, warp, lane, g, t4;
typedef struct s2_kb {
    S2_KB_FIELDS
} s2_kb;
/* The first member of a template's struct: the fields by name (k->cg,
 * k->tid) and, as one s2_kb, k->kb (the same storage). */
#define S2_KB_BASE     \
    union {            \
        s2_kb kb;      \
        struct {       \
            S2_KB_FIELDS \
        };             \
    }

static inline LLVMValueRef s2_kb_i32(const s2_kb *kb, long long v)
{
    return LLVMConstInt(kb->cg->t_i32, (unsigned long long)v, 1);
}
static inline LLVMValueRef s2_kb_i64(const s2_kb *kb, long long v)
{
    return LLVMConstInt(kb->cg->t_i64, (unsigned long long)v, 1);
}
static inline LLVMValueRef s2_kb_f32(const s2_kb *kb, double v) { return LLVMConstReal(kb->cg->t_f32, v); }
static inline LLVMValueRef s2_kb_param(const s2_kb *kb, int i) { return LLVMGetParam(kb->fn, (unsigned)i); }
static inline LLVMValueRef s2_kb_sext64(const s2_kb *kb, LLVMValueRef v)
{
    return LLVMBuildSExt(kb->b, v, kb->cg->t_i64, "");
}
static inline LLVMValueRef s2_kb_add(const s2_kb *kb, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildAdd(kb->b, a, b, "");
}
static inline LLVMValueRef s2_kb_mul(const s2_kb *kb, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildMul(kb->b, a, b, "");
}
/* Element pointer base + off of a 16-bit global tensor. */
static inline LLVMValueRef s2_kb_gep16(const s2_kb *kb, LLVMValueRef base, LLVMValueRef off)
{
    return LLVMBuildInBoundsGEP2(kb->b, LLVMInt16TypeInContext(kb->cg->llctx), base, &off, 1, "");
}
/* Element idx64 of a global i32 array (a 4-byte aligned load). */
LLVMValueRef s2_kb_load_i32(s2_kb *kb, LLVMValueRef base, LLVMValueRef idx64, const char *name);

/* The short names the templates use, on any struct that starts with
 * S2_KB_BASE: constants (i32, i64, f32), kernel parameter i, sign
 * extension to i64, add and mul. */
#define c32(k, v) s2_kb_i32(&(k)->kb, (v))
#define c64(k, v) s2_kb_i64(&(k)->kb, (v))
#define cf(k, v) s2_kb_f32(&(k)->kb, (v))
#define param(k, i) s2_kb_param(&(k)->kb, (i))
#define sext64(k, v) s2_kb_sext64(&(k)->kb, (v))
#define add(k, a, b) s2_kb_add(&(k)->kb, (a), (b))
#define mul(k, a, b) s2_kb_mul(&(k)->kb, (a), (b))

/* The thread-setup prologue: tid = threadIdx.x, then s2_kb_lanes(tid). */
void s2_kb_thread(s2_kb *kb);
/* warp = t / 32, lane = t % 32, g = lane / 4, t4 = lane % 4 of thread index
 * t (threadIdx.x, or the thread's index in its warpgroup). */
void s2_kb_lanes(s2_kb *kb, LLVMValueRef t);

/* Position the builder where allocas go, before the first instruction of
 * entry_bb (at its end when empty); returns the block to come back to
 * with s2_kb_entry_end.  SROA makes such allocas SSA values. */
LLVMBasicBlockRef s2_kb_entry_begin(s2_kb *kb, LLVMBasicBlockRef entry_bb);
void s2_kb_entry_end(s2_kb *kb, LLVMBasicBlockRef back);

/* Pass `it` of spreading items [0, total) over T threads (for it = 0 while
 * it * T < total): returns the thread's item tid + it * T; on the partial last
 * pass the code up to s2_kb_spread_end runs under *guard (item < total). */
LLVMValueRef s2_kb_spread(s2_kb *kb, int it, int T, int total, s2_nv_if *guard, const char *name);
void s2_kb_spread_end(s2_kb *kb, s2_nv_if *guard);

/* Ring position i of an S-stage ring: its stage i % S, and the parity of
 * its round (i / S) & 1, the mbarrier phase its consumer waits for (the
 * producer waits for the other one: the first round finds every stage
 * free, parity 1 being the phase before phase 0). */
LLVMValueRef s2_kb_ring_stage(s2_kb *kb, LLVMValueRef i, int S, const char *name);
LLVMValueRef s2_kb_ring_parity(s2_kb *kb, LLVMValueRef i, int S, const char *name);

/* Shared (32-bit) address of an 8-byte mbarrier: smem + off, plus 8·stage
 * when stage is given (one mbarrier per ring stage). */
LLVMValueRef s2_kb_mbar(s2_kb *kb, LLVMValueRef smem, int off, LLVMValueRef stage);

/* The LLVM types of ABI abi's parameters (abi/params.h) into out[], in
 * order: PTR a global pointer, I32, I64, F32, and TMAP / BYTES a generic
 * pointer (by-value structs: the template adds byval and grid_constant).
 * Returns their count. */
int s2_kb_abi_params(s2_cg *cg, s2_abi_id abi, LLVMTypeRef *out);

#endif
