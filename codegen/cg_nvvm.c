/* IR builder helpers: one per NVVM/PTX instruction family.  Everything that
 * reaches PTX goes through an intrinsic or s2_nv_inline_asm. */
#include "cg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

LLVMValueRef s2_nv_kernel_new(s2_cg *cg, const char *name, LLVMTypeRef *params, unsigned n,
                              int max_threads, int min_ctas)
{
    LLVMTypeRef fty = LLVMFunctionType(cg->t_void, params, n, 0);
    LLVMValueRef fn = LLVMAddFunction(cg->mod, name, fty);
    LLVMSetFunctionCallConv(fn, LLVMPTXKernelCallConv);
    /* launch bounds: string attributes (nvvm.annotations are ignored by LLVM 22) */
    char num[16];
    if (max_threads > 0) {
        snprintf(num, sizeof num, "%d", max_threads);
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
            LLVMCreateStringAttribute(cg->llctx, "nvvm.maxntid", 12, num, (unsigned)strlen(num)));
    }
    if (min_ctas > 0) {
        snprintf(num, sizeof num, "%d", min_ctas);
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
            LLVMCreateStringAttribute(cg->llctx, "nvvm.minctasm", 13, num, (unsigned)strlen(num)));
    }
    LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(cg->llctx, fn, "entry"));
    return fn;
}

void s2_nv_param_attr(s2_cg *cg, LLVMValueRef fn, unsigned param, const char *attr)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(attr, strlen(attr));
    LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateEnumAttribute(cg->llctx, kind, 0));
}

/* Non-overloaded intrinsics are declared by name; a misspelt name would
 * become an external call that ptxas rejects, so names live only here. */
LLVMValueRef s2_nv_intrinsic(s2_cg *cg, const char *name, LLVMTypeRef ret, LLVMTypeRef *args,
                             unsigned nargs, LLVMValueRef *vals)
{
    LLVMTypeRef fty = LLVMFunctionType(ret, args, nargs, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(cg->mod, name);
    if (!fn)
        fn = LLVMAddFunction(cg->mod, name, fty);
    return LLVMBuildCall2(cg->b, fty, fn, vals, nargs, "");
}

/* Overloaded intrinsics (llvm.maxnum.f32, ...) by ID and overload type. */
static LLVMValueRef overloaded(s2_cg *cg, const char *name, LLVMTypeRef over, LLVMValueRef *vals,
                               unsigned nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(cg->mod, id, &over, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, &over, 1);
    return LLVMBuildCall2(cg->b, fty, fn, vals, nargs, "");
}

static LLVMValueRef sreg(s2_cg *cg, const char *name)
{
    return s2_nv_intrinsic(cg, name, cg->t_i32, NULL, 0, NULL);
}

LLVMValueRef s2_nv_tid_x(s2_cg *cg) { return sreg(cg, "llvm.nvvm.read.ptx.sreg.tid.x"); }
LLVMValueRef s2_nv_laneid(s2_cg *cg) { return sreg(cg, "llvm.nvvm.read.ptx.sreg.laneid"); }

LLVMValueRef s2_nv_ctaid(s2_cg *cg, char dim)
{
    switch (dim) {
    case 'y': return sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.y");
    case 'z': return sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.z");
    default: return sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.x");
    }
}

/* vote.ballot.sync over the full warp: bit l set where lane l's pred holds */
LLVMValueRef s2_nv_ballot(s2_cg *cg, LLVMValueRef pred)
{
    LLVMTypeRef args[2] = {cg->t_i32, LLVMInt1TypeInContext(cg->llctx)};
    LLVMValueRef vals[2] = {LLVMConstInt(cg->t_i32, 0xffffffffu, 0), pred};
    return s2_nv_intrinsic(cg, "llvm.nvvm.vote.ballot.sync", cg->t_i32, args, 2, vals);
}

/* %lanemask_lt: the bits of the lanes below this one */
LLVMValueRef s2_nv_lanemask_lt(s2_cg *cg)
{
    return s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.lanemask.lt", cg->t_i32, NULL, 0, NULL);
}

/* population count of an i32 */
LLVMValueRef s2_nv_popc(s2_cg *cg, LLVMValueRef v)
{
    return s2_nv_intrinsic(cg, "llvm.ctpop.i32", cg->t_i32, &cg->t_i32, 1, &v);
}

/* v of lane `lane` for the whole warp (shfl.sync.idx): a broadcast ptxas
 * knows to be warp-uniform, so values derived from it (wgmma descriptors,
 * barrier addresses) can stay in uniform registers, as CUTLASS's
 * canonical_warp_group_idx does for the warpgroup index. */
LLVMValueRef s2_nv_shfl_idx_i32(s2_cg *cg, LLVMValueRef v, int lane)
{
    LLVMTypeRef args[4] = {cg->t_i32, cg->t_i32, cg->t_i32, cg->t_i32};
    LLVMValueRef vals[4] = {
        LLVMConstInt(cg->t_i32, 0xffffffffu, 0), v,
        LLVMConstInt(cg->t_i32, (unsigned)lane, 0),
        LLVMConstInt(cg->t_i32, 31, 0),
    };
    return s2_nv_intrinsic(cg, "llvm.nvvm.shfl.sync.idx.i32", cg->t_i32, args, 4, vals);
}

LLVMValueRef s2_nv_shfl_bfly_f32(s2_cg *cg, LLVMValueRef v, int lane_mask)
{
    LLVMTypeRef args[4] = {cg->t_i32, cg->t_f32, cg->t_i32, cg->t_i32};
    LLVMValueRef vals[4] = {
        LLVMConstInt(cg->t_i32, 0xffffffffu, 0), v,
        LLVMConstInt(cg->t_i32, (unsigned)lane_mask, 0),
        LLVMConstInt(cg->t_i32, 31, 0), /* clamp: whole warp */
    };
    return s2_nv_intrinsic(cg, "llvm.nvvm.shfl.sync.bfly.f32", cg->t_f32, args, 4, vals);
}

LLVMValueRef s2_nv_vote_any(s2_cg *cg, LLVMValueRef pred)
{
    LLVMTypeRef i1 = LLVMInt1TypeInContext(cg->llctx);
    LLVMTypeRef args[2] = {cg->t_i32, i1};
    LLVMValueRef vals[2] = {LLVMConstInt(cg->t_i32, 0xffffffffu, 0), pred};
    return s2_nv_intrinsic(cg, "llvm.nvvm.vote.any.sync", i1, args, 2, vals);
}

LLVMValueRef s2_nv_warp_max_f32(s2_cg *cg, LLVMValueRef v)
{
    for (int m = 16; m >= 1; m /= 2)
        v = s2_nv_fmax(cg, v, s2_nv_shfl_bfly_f32(cg, v, m));
    return v;
}

LLVMValueRef s2_nv_warp_sum_f32(s2_cg *cg, LLVMValueRef v)
{
    for (int m = 16; m >= 1; m /= 2)
        v = LLVMBuildFAdd(cg->b, v, s2_nv_shfl_bfly_f32(cg, v, m), "");
    return v;
}

LLVMValueRef s2_nv_ex2_approx(s2_cg *cg, LLVMValueRef x)
{
    return overloaded(cg, "llvm.nvvm.ex2.approx.ftz", cg->t_f32, &x, 1);
}

LLVMValueRef s2_nv_fmax(s2_cg *cg, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef v[2] = {a, b};
    return overloaded(cg, "llvm.maxnum", cg->t_f32, v, 2);
}

LLVMValueRef s2_nv_fma(s2_cg *cg, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMValueRef v[3] = {a, b, c};
    return overloaded(cg, "llvm.fma", cg->t_f32, v, 3);
}

LLVMValueRef s2_nv_smax_i32(s2_cg *cg, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef v[2] = {a, b};
    return overloaded(cg, "llvm.smax", cg->t_i32, v, 2);
}

void s2_nv_barrier_cta(s2_cg *cg)
{
    /* barrier0 is gone in LLVM 22; this is bar.sync 0 for the whole CTA */
    s2_nv_intrinsic(cg, "llvm.nvvm.barrier.cta.sync.aligned.all", cg->t_void,
                    (LLVMTypeRef[]){cg->t_i32}, 1, (LLVMValueRef[]){LLVMConstInt(cg->t_i32, 0, 0)});
}

void s2_nv_barrier_warp(s2_cg *cg)
{
    s2_nv_intrinsic(cg, "llvm.nvvm.bar.warp.sync", cg->t_void, (LLVMTypeRef[]){cg->t_i32}, 1,
                    (LLVMValueRef[]){LLVMConstInt(cg->t_i32, 0xffffffffu, 0)});
}

LLVMValueRef s2_nv_gep_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index)
{
    return LLVMBuildInBoundsGEP2(cg->b, cg->t_f32, base, &index, 1, "");
}

LLVMValueRef s2_nv_load_global_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index, unsigned align)
{
    LLVMValueRef ld = LLVMBuildLoad2(cg->b, cg->t_f32, s2_nv_gep_f32(cg, base, index), "");
    LLVMSetAlignment(ld, align);
    return ld;
}

void s2_nv_store_global_f32(s2_cg *cg, LLVMValueRef base, LLVMValueRef index, LLVMValueRef v,
                            unsigned align)
{
    LLVMValueRef st = LLVMBuildStore(cg->b, v, s2_nv_gep_f32(cg, base, index));
    LLVMSetAlignment(st, align);
}

LLVMValueRef s2_nv_const_table_i32(s2_cg *cg, const char *name, const int32_t *vals, unsigned n)
{
    LLVMValueRef elems[64];
    LLVMValueRef *e = n <= 64 ? elems : malloc(n * sizeof *e);
    if (!e)
        return NULL;
    for (unsigned i = 0; i < n; i++)
        e[i] = LLVMConstInt(cg->t_i32, (unsigned long long)(int64_t)vals[i], 1);
    LLVMTypeRef aty = LLVMArrayType2(cg->t_i32, n);
    LLVMValueRef g = LLVMAddGlobalInAddressSpace(cg->mod, aty, name, S2_AS_CONST);
    LLVMSetInitializer(g, LLVMConstArray2(cg->t_i32, e, n));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMInternalLinkage);
    LLVMSetAlignment(g, 4);
    if (e != elems)
        free(e);
    return g;
}

LLVMValueRef s2_nv_load_table_i32(s2_cg *cg, LLVMValueRef table, unsigned n, LLVMValueRef index)
{
    LLVMValueRef idx[2] = {LLVMConstInt(cg->t_i64, 0, 0), LLVMBuildZExt(cg->b, index, cg->t_i64, "")};
    LLVMValueRef p = LLVMBuildInBoundsGEP2(cg->b, LLVMArrayType2(cg->t_i32, n), table, idx, 2, "");
    LLVMValueRef ld = LLVMBuildLoad2(cg->b, cg->t_i32, p, "");
    LLVMSetAlignment(ld, 4);
    return ld;
}

LLVMValueRef s2_nv_inline_asm(s2_cg *cg, LLVMTypeRef ret, const char *text, const char *constraints,
                              LLVMValueRef *args, unsigned nargs)
{
    LLVMTypeRef tys[16];
    if (nargs > 16)
        return NULL;
    for (unsigned i = 0; i < nargs; i++)
        tys[i] = LLVMTypeOf(args[i]);
    char cons[512];
    int w = snprintf(cons, sizeof cons, "%s%s~{memory}", constraints, constraints[0] ? "," : "");
    if (w < 0 || (size_t)w >= sizeof cons)
        return NULL;
    LLVMTypeRef fty = LLVMFunctionType(ret, tys, nargs, 0);
    LLVMValueRef fn = LLVMGetInlineAsm(fty, text, strlen(text), cons, strlen(cons),
                                       /*side effects*/ 1, /*align stack*/ 0, LLVMInlineAsmDialectATT,
                                       /*can throw*/ 0);
    return LLVMBuildCall2(cg->b, fty, fn, args, nargs, "");
}

void s2_nv_loop_begin(s2_cg *cg, s2_nv_loop *loop, const char *name, LLVMValueRef start, LLVMValueRef end,
                      LLVMValueRef step, LLVMValueRef *init, unsigned ncarried)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(cg->b));
    char label[64];
    loop->ncarried = ncarried;
    loop->start = start;
    loop->end = end;
    loop->step = step;
    for (unsigned i = 0; i < ncarried; i++)
        loop->init[i] = init[i];
    loop->preheader = LLVMGetInsertBlock(cg->b);
    snprintf(label, sizeof label, "%s.head", name);
    loop->header = LLVMAppendBasicBlockInContext(cg->llctx, fn, label);
    snprintf(label, sizeof label, "%s.body", name);
    loop->body = LLVMAppendBasicBlockInContext(cg->llctx, fn, label);
    snprintf(label, sizeof label, "%s.exit", name);
    loop->exit = LLVMAppendBasicBlockInContext(cg->llctx, fn, label);
    LLVMBuildBr(cg->b, loop->header);

    LLVMPositionBuilderAtEnd(cg->b, loop->header);
    loop->iv = LLVMBuildPhi(cg->b, LLVMTypeOf(start), "");
    for (unsigned i = 0; i < ncarried; i++)
        loop->carried[i] = LLVMBuildPhi(cg->b, LLVMTypeOf(init[i]), "");
    LLVMValueRef more = LLVMBuildICmp(cg->b, LLVMIntSLT, loop->iv, end, "");
    LLVMBuildCondBr(cg->b, more, loop->body, loop->exit);
    LLVMPositionBuilderAtEnd(cg->b, loop->body);
}

void s2_nv_loop_end(s2_cg *cg, s2_nv_loop *loop, LLVMValueRef *next)
{
    LLVMValueRef iv_next = LLVMBuildNSWAdd(cg->b, loop->iv, loop->step, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
    LLVMBuildBr(cg->b, loop->header);
    LLVMBasicBlockRef from[2] = {loop->preheader, latch};
    LLVMValueRef ivs[2] = {loop->start, iv_next};
    LLVMAddIncoming(loop->iv, ivs, from, 2);
    for (unsigned i = 0; i < loop->ncarried; i++) {
        LLVMValueRef v[2] = {loop->init[i], next[i]};
        LLVMAddIncoming(loop->carried[i], v, from, 2);
        loop->result[i] = loop->carried[i];
    }
    LLVMPositionBuilderAtEnd(cg->b, loop->exit);
}
