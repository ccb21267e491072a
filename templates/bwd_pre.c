/* NAME_pre: delta = rowsum(dO ∘ O) - dLSE and lse2 = LSE·log2 e (bwd.c). */
#include "bwd_internal.h"

#include <math.h>


/* 8 elements of a 16-bit tensor at element `off` (16-byte aligned) as f32. */
static void load8(bwd *k, LLVMValueRef base, LLVMValueRef off, LLVMValueRef out[8])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->llctx);
    LLVMValueRef v = LLVMBuildLoad2(b, LLVMVectorType(i16, 8), s2_kb_gep16(&k->kb, base, off), "");
    LLVMSetAlignment(v, 16);
    for (int j = 0; j < 8; j++)
        out[j] = s2_nv_elt16_to_f32(cg, k->s.dt, LLVMBuildExtractElement(b, v, c32(k, j), ""));
}

/* f32 element idx of ptr, or 0 when ptr is null. */
static LLVMValueRef load_f32_or_zero(bwd *k, LLVMValueRef ptr, LLVMValueRef idx)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    s2_nv_if blk;
    s2_nv_if_begin(cg, &blk, LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, ptr, cg->t_i64, ""), c64(k, 0), ""), "opt");
    LLVMValueRef v = s2_nv_load_global_f32(cg, ptr, idx, 4);
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b);
    s2_nv_if_end(cg, &blk);
    LLVMValueRef phi = LLVMBuildPhi(b, cg->t_f32, "");
    LLVMValueRef vals[2] = {cf(k, 0.0), v};
    LLVMBasicBlockRef bbs[2] = {from, then_end};
    LLVMAddIncoming(phi, vals, bbs, 2);
    return phi;
}

/* Grid (cdiv(q_len, threads / (D/8)), H, B): a group of G lanes per row (G
 * = D/8 when a power of two, else the largest power of two below it; lanes
 * of groups past the CTA's rows idle), 16-byte chunks j, j + G, ... each,
 * summed with butterflies inside the group. */
void s2_bwd_build_pre(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, rows = k->s.threads / C, G = 1;
    while (2 * G <= C && 2 * G <= S2_WARP)
        G *= 2;
    LLVMValueRef h64 = LLVMBuildZExt(b, s2_nv_ctaid(cg, 'y'), cg->t_i64, "head");
    LLVMValueRef rloc = LLVMBuildLShr(b, k->tid, c32(k, s2_log2i(G)), "");
    LLVMValueRef ch = LLVMBuildAnd(b, k->tid, c32(k, G - 1), "");
    LLVMValueRef i = add(k, mul(k, s2_nv_ctaid(cg, 'x'), c32(k, rows)), rloc);
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntSLT, i, k->q_len, "");
    if (G != C)   /* only the grid rule's rows per CTA */
        valid = LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntULT, rloc, c32(k, rows), ""), "");
    /* a packed batch's rows are one batch entry: z > 0 has none */
    valid = LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntEQ, k->bidx, k->batch, ""), "");
    LLVMValueRef ic = sext64(k, LLVMBuildSelect(b, valid, i, c32(k, 0), ""));
    LLVMValueRef dot = cf(k, 0.0);
    for (int j0 = 0; j0 < C; j0 += G) {
        /* chunk j0 + ch; past the row (C not a multiple of G): read chunk 0, count 0 */
        LLVMValueRef cj = ch, in = NULL;
        if (j0 > 0) {
            cj = add(k, ch, c32(k, j0));
            if (j0 + G > C) {
                in = LLVMBuildICmp(b, LLVMIntULT, cj, c32(k, C), "");
                cj = LLVMBuildSelect(b, in, cj, c32(k, 0), "");
            }
        }
        LLVMValueRef cofs = LLVMBuildZExt(b, LLVMBuildShl(b, cj, c32(k, 3), ""), cg->t_i64, "");
        LLVMValueRef o[8], d[8];
        load8(k, param(k, P_O), add(k, add(k, s2_bwd_slice(k, P_OS, h64), mul(k, ic, param(k, P_OS + 1))), cofs), o);
        load8(k, param(k, P_DO), add(k, add(k, s2_bwd_slice(k, P_DOS, h64), mul(k, ic, param(k, P_DOS + 1))), cofs), d);
        LLVMValueRef part = j0 == 0 ? dot : cf(k, 0.0);
        for (int j = 0; j < 8; j++)
            part = s2_nv_fma(cg, o[j], d[j], part);
        dot = j0 == 0 ? part : LLVMBuildFAdd(b, dot, in ? LLVMBuildSelect(b, in, part, cf(k, 0.0), "") : part, "");
    }
    for (int m = G / 2; m >= 1; m /= 2)
        dot = LLVMBuildFAdd(b, dot, s2_nv_shfl_bfly_f32(cg, dot, m), "");
    s2_nv_if wr;
    s2_nv_if_begin(cg, &wr, LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntEQ, ch, c32(k, 0), ""), ""), "write");
    LLVMValueRef idx = add(k, s2_bwd_stats_base(k, h64), sext64(k, i));
    LLVMValueRef dl = load_f32_or_zero(k, param(k, P_DLSE), idx);
    s2_nv_store_global_f32(cg, param(k, P_DELTA), idx, LLVMBuildFSub(b, dot, dl, ""), 4);
    LLVMValueRef lse = s2_nv_load_global_f32(cg, param(k, P_LSE), idx, 4);
    LLVMValueRef empty = LLVMBuildFCmp(b, LLVMRealOEQ, lse, cf(k, -INFINITY), "");
    s2_nv_store_global_f32(cg, param(k, P_LSE2), idx,
                           LLVMBuildSelect(b, empty, cf(k, INFINITY), LLVMBuildFMul(b, lse, cf(k, M_LOG2E), ""), ""), 4);
    s2_nv_if_end(cg, &wr);
    LLVMBuildRetVoid(b);
}
