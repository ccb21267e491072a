/* The online-softmax row state shared by the attention templates, the
 * forwards' token mask and output rows (flash.h). */
#include "flash.h"

#include <math.h>

void s2_flash_rows_alloca(s2_cg *cg, s2_flash_rows *r, int D, LLVMBasicBlockRef entry_bb)
{
    LLVMBuilderRef b = cg->b;
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMValueRef first = LLVMGetFirstInstruction(entry_bb);
    if (first)
        LLVMPositionBuilderBefore(b, first);
    else
        LLVMPositionBuilderAtEnd(b, entry_bb);
    r->D = D;
    for (int dn = 0; dn < D / 8; dn++)
        for (int i = 0; i < 4; i++)
            r->o[dn][i] = LLVMBuildAlloca(b, cg->t_f32, "o");
    for (int h = 0; h < 2; h++) {
        r->m[h] = LLVMBuildAlloca(b, cg->t_f32, "m");
        r->l[h] = LLVMBuildAlloca(b, cg->t_f32, "l");
    }
    LLVMPositionBuilderAtEnd(b, cur);
}

void s2_flash_rows_zero(s2_cg *cg, const s2_flash_rows *r)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef zero = LLVMConstReal(cg->t_f32, 0.0);
    for (int dn = 0; dn < r->D / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(b, zero, r->o[dn][i]);
    for (int h = 0; h < 2; h++) {
        LLVMBuildStore(b, LLVMConstReal(cg->t_f32, -INFINITY), r->m[h]);
        LLVMBuildStore(b, zero, r->l[h]);
    }
}

void s2_flash_row_final(s2_cg *cg, const s2_flash_rows *r, int hr, LLVMValueRef scale_log2, LLVMValueRef *inv,
                        LLVMValueRef *lse)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef zero = LLVMConstReal(cg->t_f32, 0.0);
    LLVMValueRef l = s2_nv_quad_sum_f32(cg, LLVMBuildLoad2(b, cg->t_f32, r->l[hr], ""));
    LLVMValueRef m = LLVMBuildLoad2(b, cg->t_f32, r->m[hr], "");
    LLVMValueRef pos_l = LLVMBuildFCmp(b, LLVMRealOGT, l, zero, "");
    *inv = LLVMBuildSelect(b, pos_l, LLVMBuildFDiv(b, LLVMConstReal(cg->t_f32, 1.0), l, ""), zero, "inv");
    LLVMValueRef ms = LLVMBuildFMul(b, m, scale_log2, "");
    LLVMValueRef v = LLVMBuildFMul(b, LLVMBuildFAdd(b, ms, s2_nv_lg2_approx(cg, l), ""),
                                   LLVMConstReal(cg->t_f32, M_LN2), "");
    *lse = LLVMBuildSelect(b, pos_l, v, LLVMConstReal(cg->t_f32, -INFINITY), "lse");
}

LLVMValueRef s2_flash_softmax_row(s2_cg *cg, const s2_flash_rows *r, int hr, LLVMValueRef sc[][4], int NT,
                                  LLVMValueRef scale, bool rescale_o, LLVMValueRef *grew)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef ninf = LLVMConstReal(cg->t_f32, -INFINITY);
    /* sequential chains: pairwise max and sum trees were slower (run 50) */
    LLVMValueRef mx = ninf;
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 2; e++)
            mx = s2_nv_fmax(cg, mx, sc[n][2 * hr + e]);
    mx = s2_nv_quad_max_f32(cg, mx);
    LLVMValueRef m_old = LLVMBuildLoad2(b, cg->t_f32, r->m[hr], "");
    LLVMValueRef m_new = s2_nv_fmax(cg, m_old, mx);
    LLVMValueRef keep = NULL;
    if (grew) {
        /* the old maximum stays while the new one exceeds it by at most
         * S2_FLASH_LAZY_LOG2 in exponent units (probabilities up to
         * 2^S2_FLASH_LAZY_LOG2, far inside f32 and the 16-bit P types):
         * alpha is 1 and O need not be rescaled.  A first finite maximum
         * (m_old = -inf) always replaces it; -inf - -inf is NaN: kept. */
        LLVMValueRef d = LLVMBuildFMul(b, LLVMBuildFSub(b, m_new, m_old, ""), scale, "");
        LLVMValueRef big = LLVMBuildFCmp(b, LLVMRealOGT, d, LLVMConstReal(cg->t_f32, S2_FLASH_LAZY_LOG2), "grew");
        keep = LLVMBuildNot(b, big, "");
        m_new = LLVMBuildSelect(b, big, m_new, m_old, "m_new");
        *grew = big;
    }
    LLVMValueRef m_use = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, m_new, ninf, ""),
                                         LLVMConstReal(cg->t_f32, 0.0), LLVMBuildFMul(b, m_new, scale, ""), "m_use");
    LLVMValueRef neg_m = LLVMBuildFNeg(b, m_use, "");
    LLVMValueRef alpha = s2_nv_ex2_approx(cg, s2_nv_fma(cg, m_old, scale, neg_m));
    if (keep)
        alpha = LLVMBuildSelect(b, keep, LLVMConstReal(cg->t_f32, 1.0), alpha, "alpha");
    LLVMValueRef sum = LLVMConstReal(cg->t_f32, 0.0);
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 2; e++) {
            int i = 2 * hr + e;
            sc[n][i] = s2_nv_ex2_approx(cg, s2_nv_fma(cg, sc[n][i], scale, neg_m));
            sum = LLVMBuildFAdd(b, sum, sc[n][i], "");
        }
    LLVMValueRef l_old = LLVMBuildLoad2(b, cg->t_f32, r->l[hr], "");
    LLVMBuildStore(b, s2_nv_fma(cg, l_old, alpha, sum), r->l[hr]);
    LLVMBuildStore(b, m_new, r->m[hr]);
    if (rescale_o)
        for (int dn = 0; dn < r->D / 8; dn++)
            for (int e = 0; e < 2; e++) {
                LLVMValueRef p = r->o[dn][2 * hr + e];
                LLVMBuildStore(b, LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, p, ""), alpha, ""), p);
            }
    return alpha;
}

LLVMValueRef s2_flash_online_softmax(s2_cg *cg, const s2_flash_rows *r, LLVMValueRef sc[][4], int NT,
                                     LLVMValueRef scale, bool lazy, LLVMValueRef alpha[2])
{
    LLVMValueRef grew[2];
    for (int hr = 0; hr < 2; hr++)
        alpha[hr] = s2_flash_softmax_row(cg, r, hr, sc, NT, scale, false, lazy ? &grew[hr] : NULL);
    return lazy ? s2_nv_vote_any(cg, LLVMBuildOr(cg->b, grew[0], grew[1], "")) : NULL;
}

void s2_flash_rescale_o(s2_cg *cg, const s2_flash_rows *r, int D, LLVMValueRef alpha[2], LLVMValueRef grow)
{
    s2_nv_if any;
    if (grow)
        s2_nv_if_begin(cg, &any, grow, "rescale");
    for (int dn = 0; dn < D / 8; dn++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef p = r->o[dn][i];
            LLVMBuildStore(cg->b, LLVMBuildFMul(cg->b, LLVMBuildLoad2(cg->b, cg->t_f32, p, ""), alpha[i >> 1], ""), p);
        }
    if (grow)
        s2_nv_if_end(cg, &any);
}

LLVMValueRef s2_flash_swizzle(s2_cg *cg, LLVMValueRef row, LLVMValueRef chunk, int chunks)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef sw = chunk;
    if (chunks >= 8) {
        LLVMValueRef x = LLVMBuildXor(b, chunk, LLVMBuildAnd(b, row, LLVMConstInt(cg->t_i32, 7, 0), ""), "");
        int full = chunks & ~7;
        sw = full == chunks ? x
                            : LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, chunk, LLVMConstInt(cg->t_i32, (unsigned)full, 0), ""),
                                              x, chunk, "");
    } else if (chunks == 4) {
        LLVMValueRef r2 = LLVMBuildLShr(b, row, LLVMConstInt(cg->t_i32, 1, 0), "");
        sw = LLVMBuildXor(b, chunk, LLVMBuildAnd(b, r2, LLVMConstInt(cg->t_i32, 3, 0), ""), "");
    }
    LLVMValueRef off = LLVMBuildMul(b, row, LLVMConstInt(cg->t_i32, (unsigned)(chunks * 16), 0), "");
    return LLVMBuildAdd(b, off, LLVMBuildShl(b, sw, LLVMConstInt(cg->t_i32, 4, 0), ""), "");
}

/* ---- 8-byte row stores after one lane exchange ---- */

void s2_flash_pairs_init(s2_cg *cg, s2_flash_pairs *p, LLVMValueRef t4, int D)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef one = LLVMConstInt(cg->t_i32, 1, 0);
    p->ng = D / 8;
    p->col = LLVMBuildShl(b, t4, one, "");
    p->odd = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, t4, one, ""), LLVMConstInt(cg->t_i32, 0, 0), "odd_lane");
    /* the paired column: 2 t4 + 6 (t4 & 1), in group 2c */
    p->pcol = LLVMBuildAdd(b, p->col,
                           LLVMBuildSelect(b, p->odd, LLVMConstInt(cg->t_i32, 6, 0), LLVMConstInt(cg->t_i32, 0, 0), ""),
                           "");
}

void s2_flash_pairs_pack(s2_cg *cg, s2_flash_pairs *p, s2_dtype dt, LLVMValueRef (*acc)[4], int hr, LLVMValueRef mul)
{
    LLVMBuilderRef b = cg->b;
    for (int dn = 0; dn < p->ng; dn++) {
        LLVMValueRef v0 = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[dn][2 * hr], ""), mul, "");
        LLVMValueRef v1 = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[dn][2 * hr + 1], ""), mul, "");
        p->w[dn] = s2_nv_pack2(cg, dt, v0, v1);
    }
}

void s2_flash_pairs_exchange(s2_cg *cg, s2_flash_pairs *p)
{
    LLVMBuilderRef b = cg->b;
    for (int c = 0; c < p->ng / 2; c++) {
        LLVMValueRef send = LLVMBuildSelect(b, p->odd, p->w[2 * c], p->w[2 * c + 1], "");
        LLVMValueRef got = LLVMBuildBitCast(
            b, s2_nv_shfl_bfly_f32(cg, LLVMBuildBitCast(b, send, cg->t_f32, ""), 1), cg->t_i32, "");
        p->pair[c][0] = LLVMBuildSelect(b, p->odd, got, p->w[2 * c], "");
        p->pair[c][1] = LLVMBuildSelect(b, p->odd, p->w[2 * c + 1], got, "");
    }
}

void s2_flash_pairs_store(s2_cg *cg, const s2_flash_pairs *p, LLVMValueRef base, LLVMValueRef row_off,
                          LLVMValueRef aligned)
{
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->llctx), v2 = LLVMVectorType(cg->t_i32, 2);
    s2_nv_if wide, narrow;
    s2_nv_if_begin(cg, &wide, aligned, "st_v2");
    for (int c = 0; c < p->ng / 2; c++) {
        LLVMValueRef col = c ? LLVMBuildAdd(b, p->pcol, LLVMConstInt(cg->t_i32, (unsigned)(16 * c), 0), "") : p->pcol;
        LLVMValueRef off = LLVMBuildAdd(b, row_off, LLVMBuildZExt(b, col, cg->t_i64, ""), "");
        LLVMValueRef v = LLVMGetUndef(v2);
        v = LLVMBuildInsertElement(b, v, p->pair[c][0], LLVMConstInt(cg->t_i32, 0, 0), "");
        v = LLVMBuildInsertElement(b, v, p->pair[c][1], LLVMConstInt(cg->t_i32, 1, 0), "");
        LLVMSetAlignment(LLVMBuildStore(b, v, LLVMBuildInBoundsGEP2(b, i16, base, &off, 1, "")), 8);
    }
    s2_nv_if_end(cg, &wide);
    s2_nv_if_begin(cg, &narrow, LLVMBuildNot(b, aligned, ""), "st_b32");
    for (int dn = 0; dn < p->ng; dn++) {
        LLVMValueRef col = dn ? LLVMBuildAdd(b, p->col, LLVMConstInt(cg->t_i32, (unsigned)(8 * dn), 0), "") : p->col;
        LLVMValueRef off = LLVMBuildAdd(b, row_off, LLVMBuildZExt(b, col, cg->t_i64, ""), "");
        LLVMSetAlignment(LLVMBuildStore(b, p->w[dn], LLVMBuildInBoundsGEP2(b, i16, base, &off, 1, "")), 4);
    }
    s2_nv_if_end(cg, &narrow);
}

LLVMValueRef s2_flash_aligned8(s2_cg *cg, LLVMValueRef ptr, const LLVMValueRef *vals, int n)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef bits = LLVMBuildPtrToInt(b, ptr, cg->t_i64, "");
    for (int i = 0; i < n; i++)
        bits = LLVMBuildOr(b, bits, LLVMBuildShl(b, vals[i], LLVMConstInt(cg->t_i64, 1, 0), ""), "");
    return LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, bits, LLVMConstInt(cg->t_i64, 7, 0), ""),
                         LLVMConstInt(cg->t_i64, 0, 0), "aligned8");
}

void s2_flash_seqinfo(s2_cg *cg, LLVMValueRef info, LLVMValueRef idx, LLVMValueRef dflt[4], LLVMValueRef out[4])
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef given = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, info, cg->t_i64, ""),
                                       LLVMConstInt(cg->t_i64, 0, 0), "varlen");
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    s2_nv_if blk;
    s2_nv_if_begin(cg, &blk, given, "seqinfo");
    LLVMValueRef got[4];
    LLVMValueRef base = LLVMBuildMul(b, LLVMBuildSExt(b, idx, cg->t_i64, ""), LLVMConstInt(cg->t_i64, 4, 0), "");
    for (int f = 0; f < 4; f++) {
        LLVMValueRef off = LLVMBuildAdd(b, base, LLVMConstInt(cg->t_i64, (unsigned long long)f, 0), "");
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, cg->t_i32, info, &off, 1, "");
        got[f] = LLVMBuildLoad2(b, cg->t_i32, p, "seq");
        LLVMSetAlignment(got[f], f == 0 ? 16 : 4);
    }
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b);
    s2_nv_if_end(cg, &blk);
    for (int f = 0; f < 4; f++) {
        LLVMValueRef phi = LLVMBuildPhi(b, cg->t_i32, "");
        LLVMValueRef v[2] = {dflt[f], got[f]};
        LLVMBasicBlockRef bb[2] = {from, then_end};
        LLVMAddIncoming(phi, v, bb, 2);
        out[f] = phi;
    }
}

void s2_flash_join_scores(s2_cg *cg, LLVMBasicBlockRef from, LLVMBasicBlockRef join, int ntiles,
                       LLVMValueRef sc[][4], LLVMValueRef masked[][4])
{
    LLVMBuilderRef b = cg->b;
    LLVMBasicBlockRef mask_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, join);
    LLVMPositionBuilderAtEnd(b, join);
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef phi = LLVMBuildPhi(b, cg->t_f32, "");
            LLVMValueRef v[2] = {sc[n][i], masked[n][i]};
            LLVMBasicBlockRef bb[2] = {from, mask_end};
            LLVMAddIncoming(phi, v, bb, 2);
            sc[n][i] = phi;
        }
}

LLVMBasicBlockRef s2_flash_mask_begin(s2_cg *cg, LLVMValueRef fn, LLVMValueRef full, LLVMBasicBlockRef *join)
{
    LLVMBuilderRef b = cg->b;
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef mask_bb = LLVMAppendBasicBlockInContext(cg->llctx, fn, "mask");
    *join = LLVMAppendBasicBlockInContext(cg->llctx, fn, "masked");
    LLVMBuildCondBr(b, full, *join, mask_bb);
    LLVMPositionBuilderAtEnd(b, mask_bb);
    return from;
}

LLVMValueRef s2_flash_row_live(s2_cg *cg, LLVMValueRef live, LLVMValueRef r, int sub_m_log2, int sub_n)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef isub = LLVMBuildLShr(b, r, LLVMConstInt(cg->t_i32, (unsigned)sub_m_log2, 1), "");
    LLVMValueRef shift = LLVMBuildZExt(b, LLVMBuildMul(b, isub, LLVMConstInt(cg->t_i32, (unsigned)sub_n, 1), ""),
                                       cg->t_i64, "");
    return LLVMBuildTrunc(b, LLVMBuildLShr(b, live, shift, ""), cg->t_i32, "row_live");
}

LLVMValueRef s2_flash_key_limit(s2_cg *cg, LLVMValueRef kv_len, LLVMValueRef kpos0, LLVMValueRef tile_pos0,
                                LLVMValueRef r, LLVMValueRef col0)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef limit = LLVMBuildSub(b, LLVMBuildSub(b, kv_len, LLVMConstInt(cg->t_i32, 1, 1), ""), kpos0, "");
    if (tile_pos0) {
        LLVMValueRef d = LLVMBuildSub(b, LLVMBuildAdd(b, tile_pos0, r, ""), kpos0, "");
        limit = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, d, limit, ""), d, limit, "limit");
    }
    return LLVMBuildSub(b, limit, col0, "");   /* compare c - col0 <= limit - col0 */
}

void s2_flash_mask_row(s2_cg *cg, int hr, int ntiles, int sub_n_size, int slot_cols, LLVMValueRef bits,
                       const LLVMValueRef *lim, LLVMValueRef sc[][4], LLVMValueRef masked[][4])
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef zero = LLVMConstInt(cg->t_i32, 0, 1), ninf = LLVMConstReal(cg->t_f32, -INFINITY);
    for (int n = 0; n < ntiles; n++) {
        int jsub = n * 8 / sub_n_size;
        LLVMValueRef live_bit = LLVMBuildICmp(
            b, LLVMIntNE, LLVMBuildAnd(b, bits, LLVMConstInt(cg->t_i32, 1u << jsub, 1), ""), zero, "");
        for (int e = 0; e < 2; e++) {
            int i = 2 * hr + e;
            LLVMValueRef inside = LLVMBuildICmp(b, LLVMIntSLE, LLVMConstInt(cg->t_i32, (unsigned)(n * 8 + e), 1),
                                                lim[n * 8 / slot_cols], "");
            masked[n][i] = LLVMBuildSelect(b, LLVMBuildAnd(b, inside, live_bit, ""), sc[n][i], ninf, "");
        }
    }
}

LLVMValueRef s2_flash_row_store_begin(s2_cg *cg, const s2_flash_out *out, LLVMValueRef ok, LLVMValueRef qrow,
                                      s2_nv_if *store)
{
    LLVMBuilderRef b = cg->b;
    s2_nv_if_begin(cg, store, ok, "store");
    return LLVMBuildAdd(b, out->obase, LLVMBuildMul(b, LLVMBuildSExt(b, qrow, cg->t_i64, ""), out->row_stride, ""),
                        "");
}

void s2_flash_row_store_end(s2_cg *cg, const s2_flash_out *out, s2_nv_if *store, LLVMValueRef qrow, LLVMValueRef lse)
{
    s2_flash_store_lse(cg, out->t4, out->lse, out->lse_base, qrow, lse);
    s2_nv_if_end(cg, store);
}

void s2_flash_store_rows16(s2_cg *cg, const s2_flash_out *out, s2_flash_rows *acc, s2_dtype dt,
                           LLVMValueRef scale_log2, const LLVMValueRef *vals, int n, s2_flash_row_fn row, void *k)
{
    s2_flash_pairs pr;
    s2_flash_pairs_init(cg, &pr, out->t4, out->D);
    LLVMValueRef row_bits = vals ? NULL : LLVMBuildOr(cg->b, out->obase, out->row_stride, "");
    LLVMValueRef aligned = s2_flash_aligned8(cg, out->o, vals ? vals : &row_bits, vals ? n : 1);
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef inv, lse;
        s2_flash_row_final(cg, acc, hr, scale_log2, &inv, &lse);
        if (out->o_mul)
            inv = LLVMBuildFMul(cg->b, inv, out->o_mul, "");
        s2_flash_pairs_pack(cg, &pr, dt, acc->o, hr, inv);
        s2_flash_pairs_exchange(cg, &pr);   /* in every lane (outside the row guard) */
        s2_nv_if store;
        LLVMValueRef qrow;
        LLVMValueRef ok = row(k, hr, &qrow);
        LLVMValueRef row_off = s2_flash_row_store_begin(cg, out, ok, qrow, &store);
        s2_flash_pairs_store(cg, &pr, out->o, row_off, aligned);
        s2_flash_row_store_end(cg, out, &store, qrow, lse);
    }
}

void s2_flash_store_lse(s2_cg *cg, LLVMValueRef t4, LLVMValueRef lse_ptr, LLVMValueRef lse_base, LLVMValueRef row,
                        LLVMValueRef lse)
{
    LLVMBuilderRef b = cg->b;
    LLVMValueRef want = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, t4, LLVMConstInt(cg->t_i32, 0, 1), ""),
        LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, lse_ptr, cg->t_i64, ""), LLVMConstInt(cg->t_i64, 0, 1), ""), "");
    s2_nv_if wl;
    s2_nv_if_begin(cg, &wl, want, "lse");
    LLVMValueRef idx = LLVMBuildAdd(b, lse_base, LLVMBuildSExt(b, row, cg->t_i64, ""), "");
    LLVMValueRef lp = LLVMBuildInBoundsGEP2(b, cg->t_f32, lse_ptr, &idx, 1, "");
    LLVMSetAlignment(LLVMBuildStore(b, lse, lp), 4);
    s2_nv_if_end(cg, &wl);
}

void s2_flash_a_from_c(s2_cg *cg, s2_dtype dt, LLVMValueRef c[2][4], LLVMValueRef a[4])
{
    LLVMValueRef v[4] = {
        s2_nv_pack2(cg, dt, c[0][0], c[0][1]),
        s2_nv_pack2(cg, dt, c[0][2], c[0][3]),
        s2_nv_pack2(cg, dt, c[1][0], c[1][1]),
        s2_nv_pack2(cg, dt, c[1][2], c[1][3]),
    };
    for (int i = 0; i < 4; i++)
        a[i] = v[i];
}

void s2_flash_mma_into(s2_cg *cg, s2_dtype dt, LLVMValueRef a[4], LLVMValueRef b[2], LLVMValueRef o[4])
{
    LLVMValueRef acc[4];
    for (int i = 0; i < 4; i++)
        acc[i] = LLVMBuildLoad2(cg->b, cg->t_f32, o[i], "");
    s2_nv_mma_m16n8k16(cg, dt, a, b, acc);
    for (int i = 0; i < 4; i++)
        LLVMBuildStore(cg->b, acc[i], o[i]);
}
