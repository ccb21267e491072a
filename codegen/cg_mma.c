/* Builder helpers for the Ampere tensor-core path (sm_80 instruction set,
 * also valid on sm_90): ldmatrix, mma.sync m16n8k16, cp.async, bf16x2/f16x2
 * packing, quad reductions, ex2/lg2, dynamic shared memory.  Fragment maps
 * are those of the PTX ISA (9.7.14.5.8 mma.m16n8k16 fragments, 9.7.14.5.15
 * ldmatrix, 9.7.9.25.3 cp.async), as CuTe's SM80 MMA and SM75 LDSM traits. */
#include "cg_internal.h"

#include <string.h>

/* Overloaded intrinsic declared through its ID (ldmatrix is overloaded on the
 * pointer type, so its name carries a .p3 suffix). */
static LLVMValueRef call_overloaded(s2_cg *cg, const char *name, LLVMTypeRef *over, unsigned nover,
                                    LLVMValueRef *vals, unsigned nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(cg->mod, id, over, nover);
    LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, over, nover);
    return LLVMBuildCall2(cg->b, fty, fn, vals, nargs, "");
}

LLVMValueRef s2_nv_dynamic_smem(s2_cg *cg)
{
    LLVMValueRef g = LLVMGetNamedGlobal(cg->mod, "s2_dyn_smem");
    if (g)
        return g;
    /* extern __shared__ of unknown size: the launch gives the bytes */
    LLVMTypeRef ty = LLVMArrayType2(LLVMInt8TypeInContext(cg->llctx), 0);
    g = LLVMAddGlobalInAddressSpace(cg->mod, ty, "s2_dyn_smem", S2_AS_SHARED);
    LLVMSetLinkage(g, LLVMExternalLinkage);
    LLVMSetAlignment(g, 1024);
    return g;
}

LLVMValueRef s2_nv_smem_at(s2_cg *cg, LLVMValueRef byte_off)
{
    LLVMValueRef off = LLVMBuildZExt(cg->b, byte_off, cg->t_i64, "");
    return LLVMBuildInBoundsGEP2(cg->b, LLVMInt8TypeInContext(cg->llctx), s2_nv_dynamic_smem(cg), &off, 1, "");
}

void s2_nv_ldmatrix_x4(s2_cg *cg, LLVMValueRef smem_ptr, bool trans, LLVMValueRef out[4])
{
    LLVMTypeRef p3 = LLVMPointerTypeInContext(cg->llctx, S2_AS_SHARED);
    LLVMValueRef r = call_overloaded(cg, trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16"
                                               : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
                                     &p3, 1, &smem_ptr, 1);
    for (unsigned i = 0; i < 4; i++)
        out[i] = LLVMBuildExtractValue(cg->b, r, i, "");
}

void s2_nv_stmatrix_x4(s2_cg *cg, LLVMValueRef smem_ptr, bool trans, LLVMValueRef v[4])
{
    LLVMTypeRef p3 = LLVMPointerTypeInContext(cg->llctx, S2_AS_SHARED);
    LLVMValueRef args[5] = {smem_ptr, v[0], v[1], v[2], v[3]};
    call_overloaded(cg, trans ? "llvm.nvvm.stmatrix.sync.aligned.m8n8.x4.trans.b16"
                              : "llvm.nvvm.stmatrix.sync.aligned.m8n8.x4.b16",
                    &p3, 1, args, 5);
}

void s2_nv_mma_m16n8k16(s2_cg *cg, s2_dtype dt, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef acc[4])
{
    const s2_dtype_info *r = s2_dtype_info_of(dt);
    LLVMValueRef v[10];
    LLVMTypeRef t[10];
    /* an intrinsic that types its operands (f16) takes <2 x elt>, not i32 */
    LLVMTypeRef in_ty = r->mma_vec ? LLVMVectorType(s2_cg_elt_type(cg, dt), 2) : cg->t_i32;
    for (int i = 0; i < 4; i++) {
        v[i] = r->mma_vec ? LLVMBuildBitCast(cg->b, a[i], in_ty, "") : a[i];
        t[i] = in_ty;
    }
    for (int i = 0; i < 2; i++) {
        v[4 + i] = r->mma_vec ? LLVMBuildBitCast(cg->b, b[i], in_ty, "") : b[i];
        t[4 + i] = in_ty;
    }
    for (int i = 0; i < 4; i++) {
        v[6 + i] = acc[i];
        t[6 + i] = cg->t_f32;
    }
    LLVMTypeRef f4[4] = {cg->t_f32, cg->t_f32, cg->t_f32, cg->t_f32};
    LLVMTypeRef ret = LLVMStructTypeInContext(cg->llctx, f4, 4, 0);
    LLVMValueRef m = s2_nv_intrinsic(cg, r->llvm_mma, ret, t, 10, v);
    for (unsigned i = 0; i < 4; i++)
        acc[i] = LLVMBuildExtractValue(cg->b, m, i, "");
}

void s2_nv_cp_async_16(s2_cg *cg, LLVMValueRef dst_smem, LLVMValueRef src_global, LLVMValueRef src_size)
{
    LLVMTypeRef t[3] = {LLVMPointerTypeInContext(cg->llctx, S2_AS_SHARED), cg->t_ptr_global, cg->t_i32};
    LLVMValueRef v[3] = {dst_smem, src_global, src_size};
    s2_nv_intrinsic(cg, "llvm.nvvm.cp.async.cg.shared.global.16.s", cg->t_void, t, 3, v);
}

void s2_nv_cp_async_4(s2_cg *cg, LLVMValueRef dst_smem, LLVMValueRef src_global, LLVMValueRef src_size)
{
    LLVMTypeRef t[3] = {LLVMPointerTypeInContext(cg->llctx, S2_AS_SHARED), cg->t_ptr_global, cg->t_i32};
    LLVMValueRef v[3] = {dst_smem, src_global, src_size};
    s2_nv_intrinsic(cg, "llvm.nvvm.cp.async.ca.shared.global.4.s", cg->t_void, t, 3, v);
}

void s2_nv_cp_async_commit(s2_cg *cg)
{
    s2_nv_intrinsic(cg, "llvm.nvvm.cp.async.commit.group", cg->t_void, NULL, 0, NULL);
}

void s2_nv_cp_async_wait(s2_cg *cg, int pending)
{
    LLVMValueRef n = LLVMConstInt(cg->t_i32, (unsigned)pending, 0);
    s2_nv_intrinsic(cg, "llvm.nvvm.cp.async.wait.group", cg->t_void, &cg->t_i32, 1, &n);
}

LLVMValueRef s2_nv_pack2(s2_cg *cg, s2_dtype dt, LLVMValueRef lo, LLVMValueRef hi)
{
    /* cvt.rn.{bf16x2,f16x2}.f32 d, a, b puts a in the upper half */
    LLVMTypeRef t[2] = {cg->t_f32, cg->t_f32};
    LLVMValueRef v[2] = {hi, lo};
    LLVMValueRef r = s2_nv_intrinsic(cg, s2_dtype_info_of(dt)->llvm_cvt_x2, LLVMVectorType(s2_cg_elt_type(cg, dt), 2),
                                     t, 2, v);
    return LLVMBuildBitCast(cg->b, r, cg->t_i32, "");
}

LLVMValueRef s2_nv_f8x2_to_f16x2(s2_cg *cg, s2_dtype dt, LLVMValueRef x)
{
    /* cvt.rn.f16x2.e4m3x2 d, a: a's upper byte to d's upper half */
    LLVMTypeRef t = LLVMInt16TypeInContext(cg->llctx);
    return s2_nv_intrinsic(cg, s2_dtype_info_of(dt)->llvm_to_f16x2, LLVMVectorType(s2_cg_elt_type(cg, S2_DTYPE_F16), 2),
                           &t, 1, &x);
}

LLVMValueRef s2_nv_pack4_fp8(s2_cg *cg, s2_dtype dt, LLVMValueRef x0, LLVMValueRef x1, LLVMValueRef x2,
                             LLVMValueRef x3)
{
    /* cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b puts a in the upper byte */
    LLVMTypeRef t[2] = {cg->t_f32, cg->t_f32};
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->llctx);
    LLVMValueRef v0[2] = {x1, x0}, v1[2] = {x3, x2};
    const char *name = s2_dtype_info_of(dt)->llvm_cvt_x2;
    LLVMValueRef lo = LLVMBuildZExt(cg->b, s2_nv_intrinsic(cg, name, i16, t, 2, v0), cg->t_i32, "");
    LLVMValueRef hi = LLVMBuildZExt(cg->b, s2_nv_intrinsic(cg, name, i16, t, 2, v1), cg->t_i32, "");
    return LLVMBuildOr(cg->b, lo, LLVMBuildShl(cg->b, hi, LLVMConstInt(cg->t_i32, 16, 0), ""), "fp8x4");
}

LLVMValueRef s2_nv_prmt(s2_cg *cg, LLVMValueRef a, LLVMValueRef b, unsigned sel)
{
    LLVMTypeRef t[3] = {cg->t_i32, cg->t_i32, cg->t_i32};
    LLVMValueRef v[3] = {a, b, LLVMConstInt(cg->t_i32, sel, 0)};
    return s2_nv_intrinsic(cg, "llvm.nvvm.prmt", cg->t_i32, t, 3, v);
}

LLVMValueRef s2_nv_elt16_to_f32(s2_cg *cg, s2_dtype dt, LLVMValueRef x)
{
    LLVMBuilderRef b = cg->b;
    /* bf16 is f32's upper half: a shift, no conversion */
    if (s2_dtype_info_of(dt)->llvm == S2_LLVM_BFLOAT)
        return LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildZExt(b, x, cg->t_i32, ""), LLVMConstInt(cg->t_i32, 16, 0), ""),
                                cg->t_f32, "");
    return LLVMBuildFPExt(b, LLVMBuildBitCast(b, x, s2_cg_elt_type(cg, dt), ""), cg->t_f32, "");
}

LLVMValueRef s2_nv_quad_max_f32(s2_cg *cg, LLVMValueRef v)
{
    v = s2_nv_fmax(cg, v, s2_nv_shfl_bfly_f32(cg, v, 2));
    return s2_nv_fmax(cg, v, s2_nv_shfl_bfly_f32(cg, v, 1));
}

LLVMValueRef s2_nv_quad_sum_f32(s2_cg *cg, LLVMValueRef v)
{
    v = LLVMBuildFAdd(cg->b, v, s2_nv_shfl_bfly_f32(cg, v, 2), "");
    return LLVMBuildFAdd(cg->b, v, s2_nv_shfl_bfly_f32(cg, v, 1), "");
}

LLVMValueRef s2_nv_lg2_approx(s2_cg *cg, LLVMValueRef x)
{
    return s2_nv_intrinsic(cg, "llvm.nvvm.lg2.approx.ftz.f", cg->t_f32, &cg->t_f32, 1, &x);
}

void s2_nv_if_begin(s2_cg *cg, s2_nv_if *blk, LLVMValueRef cond, const char *name)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(cg->b));
    blk->then = LLVMAppendBasicBlockInContext(cg->llctx, fn, name);
    blk->join = LLVMAppendBasicBlockInContext(cg->llctx, fn, "join");
    LLVMBuildCondBr(cg->b, cond, blk->then, blk->join);
    LLVMPositionBuilderAtEnd(cg->b, blk->then);
}

void s2_nv_if_end(s2_cg *cg, s2_nv_if *blk)
{
    LLVMBuildBr(cg->b, blk->join);
    LLVMPositionBuilderAtEnd(cg->b, blk->join);
}

