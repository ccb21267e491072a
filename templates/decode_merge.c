/* The end of the decode kernel (decode.c): the warps' (m, l, O) merged
 * through shared memory, O and LSE stored, and with several splits the
 * last CTA of a (sequence, kv head) merging the splits' partials. */
#include "decode_internal.h"

#include <math.h>

static LLVMValueRef smem_f32(dec *k, LLVMValueRef byte_off)
{
    return s2_nv_smem_at(k->cg, byte_off);
}

/* Each warp's (m·scale_log2, l) and unnormalised O go to shared memory;
 * then thread groups of threads/16 merge one row each. */
void s2_dec_spill_warp_state(dec *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int D = k->s.D;
    /* fp8 pages: n-tile dn's column 2·t4 + e is dim 16(dn / 2) + 4·t4 + 2e + dn % 2 (decode.c, accumulate_pv8) */
    bool kv8 = k->s.kv8;
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, kv8 ? 2 : 1), "");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = LLVMBuildAdd(b, k->g, c32(k, 8 * hr), "");
        LLVMValueRef wr = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), r, "wrow");
        LLVMValueRef l = s2_nv_quad_sum_f32(cg, LLVMBuildLoad2(b, cg->t_f32, k->acc.l[hr], ""));
        LLVMValueRef m = LLVMBuildLoad2(b, cg->t_f32, k->acc.m[hr], "");
        LLVMValueRef ms = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, m, cf(k, -INFINITY), ""), cf(k, -INFINITY),
                                          LLVMBuildFMul(b, m, k->scale_log2, ""), "");
        s2_nv_if w0;
        s2_nv_if_begin(cg, &w0, LLVMBuildICmp(b, LLVMIntEQ, k->t4, c32(k, 0), ""), "ml");
        LLVMValueRef mo = LLVMBuildAdd(b, c32(k, k->s.merge_ml_off), LLVMBuildShl(b, wr, c32(k, 3), ""), "");
        LLVMSetAlignment(LLVMBuildStore(b, ms, smem_f32(k, mo)), 4);
        LLVMSetAlignment(LLVMBuildStore(b, l, smem_f32(k, LLVMBuildAdd(b, mo, c32(k, 4), ""))), 4);
        s2_nv_if_end(cg, &w0);
        LLVMValueRef rowoff = LLVMBuildAdd(b, c32(k, k->s.merge_o_off), LLVMBuildMul(b, wr, c32(k, D * 4), ""), "");
        for (int dn = 0; dn < D / 8; dn++)
            for (int e = 0; e < 2; e++) {
                LLVMValueRef c = LLVMBuildAdd(b, col0, c32(k, kv8 ? dn / 2 * 16 + 2 * e + dn % 2 : dn * 8 + e), "");
                LLVMValueRef off = LLVMBuildAdd(b, rowoff, LLVMBuildShl(b, c, c32(k, 2), ""), "");
                LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildLoad2(b, cg->t_f32, k->acc.o[dn][2 * hr + e], ""), smem_f32(k, off)), 4);
            }
    }
}

static LLVMValueRef load_smem_f32(dec *k, LLVMValueRef off)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_f32, smem_f32(k, off), "");
    LLVMSetAlignment(v, 4);
    return v;
}

static void store_global_f32(dec *k, LLVMValueRef base, LLVMValueRef idx, LLVMValueRef v)
{
    LLVMValueRef p = LLVMBuildInBoundsGEP2(k->b, k->cg->t_f32, base, &idx, 1, "");
    LLVMSetAlignment(LLVMBuildStore(k->b, v, p), 4);
}

void s2_dec_merge_and_store(dec *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int D = k->s.D, W = k->s.warps, TPR = k->s.threads / DEC_ROWS, CPT = D / TPR;
    LLVMValueRef r = LLVMBuildUDiv(b, k->tid, c32(k, TPR), "mrow");
    LLVMValueRef c0 = LLVMBuildMul(b, LLVMBuildURem(b, k->tid, c32(k, TPR), ""), c32(k, CPT), "mcol");
    LLVMValueRef ms[16], ls[16], a[16];
    LLVMValueRef M = cf(k, -INFINITY);
    for (int w = 0; w < W; w++) {
        LLVMValueRef mo = LLVMBuildAdd(b, c32(k, k->s.merge_ml_off + w * DEC_ROWS * 8), LLVMBuildShl(b, r, c32(k, 3), ""), "");
        ms[w] = load_smem_f32(k, mo);
        ls[w] = load_smem_f32(k, LLVMBuildAdd(b, mo, c32(k, 4), ""));
        M = s2_nv_fmax(cg, M, ms[w]);
    }
    LLVMValueRef L = cf(k, 0.0);
    for (int w = 0; w < W; w++) {
        LLVMValueRef ex = s2_nv_ex2_approx(cg, LLVMBuildFSub(b, ms[w], M, ""));
        a[w] = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, ms[w], cf(k, -INFINITY), ""), cf(k, 0.0), ex, "");
        L = s2_nv_fma(cg, a[w], ls[w], L);
    }
    /* unordered compares here and in the merges below: a NaN sum (NaN keys or
     * values) must come out as NaN, not as an empty partial that a merge skips */
    LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealUGT, L, cf(k, 0.0), "");
    LLVMValueRef inv = LLVMBuildSelect(b, pos, LLVMBuildFDiv(b, cf(k, 1.0), L, ""), cf(k, 0.0), "");
    /* fp8 pages: V's scale once per row (the splits' merge is linear in O) */
    if (k->s.kv8)
        inv = LLVMBuildFMul(b, inv, k->v_scale, "inv_v");
    for (int w = 0; w < W; w++)
        a[w] = LLVMBuildFMul(b, a[w], inv, "");
    LLVMValueRef lse = LLVMBuildFMul(b, LLVMBuildFAdd(b, M, s2_nv_lg2_approx(cg, L), ""), cf(k, M_LN2), "");
    lse = LLVMBuildSelect(b, pos, lse, cf(k, -INFINITY), "lse");

    LLVMValueRef t, i;
    row_token_head(k, r, &t, &i);
    s2_nv_if real;
    s2_nv_if_begin(cg, &real, LLVMBuildICmp(b, LLVMIntULT, t, k->n, ""), "real_row");
    LLVMValueRef h = LLVMBuildAdd(b, LLVMBuildMul(b, k->kvh, c32(k, k->s.group), ""), i, "h");
    LLVMValueRef out[MAX_D];
    for (int c = 0; c < CPT; c++) {
        LLVMValueRef col = LLVMBuildAdd(b, c0, c32(k, c), "");
        LLVMValueRef acc = cf(k, 0.0);
        for (int w = 0; w < W; w++) {
            LLVMValueRef off = LLVMBuildAdd(b, c32(k, k->s.merge_o_off + w * DEC_ROWS * D * 4),
                                            LLVMBuildShl(b, LLVMBuildAdd(b, LLVMBuildMul(b, r, c32(k, D), ""), col, ""), c32(k, 2), ""), "");
            acc = s2_nv_fma(cg, a[w], load_smem_f32(k, off), acc);
        }
        out[c] = acc;
    }
    LLVMValueRef t64 = LLVMBuildZExt(b, t, cg->t_i64, ""), h64 = LLVMBuildZExt(b, h, cg->t_i64, "");
    LLVMValueRef b64 = LLVMBuildZExt(b, k->batch, cg->t_i64, ""), n64 = LLVMBuildZExt(b, k->n, cg->t_i64, "");
    LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildURem(b, k->tid, c32(k, TPR), ""), c32(k, 0), "");
    LLVMValueRef one = LLVMBuildICmp(b, LLVMIntEQ, param(k, P_SPLITS), c32(k, 1), "");
    s2_nv_if direct;
    s2_nv_if_begin(cg, &direct, one, "direct");
    {
        LLVMValueRef off = LLVMBuildMul(b, b64, param(k, P_OS), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, t64, param(k, P_OS + 1), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, h64, param(k, P_OS + 2), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildZExt(b, c0, cg->t_i64, ""), "");
        for (int c = 0; c < CPT; c += 2) {
            LLVMValueRef p = s2_kb_gep16(&k->kb, param(k, P_O), LLVMBuildAdd(b, off, c64(k, c), ""));
            LLVMSetAlignment(LLVMBuildStore(b, s2_nv_pack2(cg, k->s.dt, out[c], out[c + 1]), p), 4);
        }
        LLVMValueRef lp = param(k, P_LSE);
        LLVMValueRef want = LLVMBuildAnd(b, first, LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, lp, cg->t_i64, ""), c64(k, 0), ""), "");
        s2_nv_if wl;
        s2_nv_if_begin(cg, &wl, want, "lse");
        LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, b64, c64(k, k->s.heads), ""), h64, ""), n64, ""), t64, "");
        store_global_f32(k, lp, li, lse);
        s2_nv_if_end(cg, &wl);
    }
    s2_nv_if_end(cg, &direct);
    s2_nv_if part;
    s2_nv_if_begin(cg, &part, LLVMBuildNot(b, one, ""), "partial");
    {
        LLVMValueRef nb = LLVMBuildZExt(b, s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.z", cg->t_i32, NULL, 0, NULL), cg->t_i64, "");
        LLVMValueRef sb = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildZExt(b, k->split, cg->t_i64, ""), nb, ""), b64, "sb");
        LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, sb, n64, ""), t64, ""), c64(k, k->s.heads), ""), h64, "");
        LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, row, c64(k, D), ""), LLVMBuildZExt(b, c0, cg->t_i64, ""), "");
        for (int c = 0; c < CPT; c++)
            store_global_f32(k, param(k, P_WS_O), LLVMBuildAdd(b, off, c64(k, c), ""), out[c]);
        s2_nv_if wl;
        s2_nv_if_begin(cg, &wl, first, "ws_lse");
        LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, sb, c64(k, k->s.heads), ""), h64, ""), n64, ""), t64, "");
        store_global_f32(k, param(k, P_WS_LSE), li, lse);
        s2_nv_if_end(cg, &wl);
    }
    s2_nv_if_end(cg, &part);
    s2_nv_if_end(cg, &real);
}

static LLVMValueRef load_volatile_f32(dec *k, LLVMValueRef base, LLVMValueRef idx)
{
    LLVMValueRef p = LLVMBuildInBoundsGEP2(k->b, k->cg->t_f32, base, &idx, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_f32, p, "");
    LLVMSetAlignment(v, 4);
    LLVMSetVolatile(v, 1);   /* other CTAs wrote it: read L2, not a stale L1 line */
    return v;
}

/* Split-KV without a second launch: every CTA of (b, kv head) counts itself
 * done on counters[b * kv_heads + kv head] after its partial is visible
 * (fence, barrier, one atomic); the last one merges the splits' partials of
 * its 16 rows into o / lse and puts the counter back to 0 for the next
 * launch.  Same row / column split as merge_and_store. */
void s2_dec_last_cta_combine(dec *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int D = k->s.D, TPR = k->s.threads / DEC_ROWS, CPT = D / TPR;
    LLVMValueRef splits = param(k, P_SPLITS);
    s2_nv_if many;
    s2_nv_if_begin(cg, &many, LLVMBuildICmp(b, LLVMIntNE, splits, c32(k, 1), ""), "split_kv");
    s2_nv_inline_asm(cg, cg->t_void, "fence.acq_rel.gpu;", "", NULL, 0);
    s2_nv_barrier_cta(cg);
    LLVMValueRef flag_p = s2_nv_smem_at(cg, c32(k, k->s.flag_off));
    s2_nv_if t0;
    s2_nv_if_begin(cg, &t0, LLVMBuildICmp(b, LLVMIntEQ, k->tid, c32(k, 0), ""), "count");
    {
        LLVMValueRef nkv = LLVMBuildZExt(b, s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.y", cg->t_i32, NULL, 0, NULL), cg->t_i64, "");
        LLVMValueRef ci = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildZExt(b, k->batch, cg->t_i64, ""), nkv, ""),
                                       LLVMBuildZExt(b, k->kvh, cg->t_i64, ""), "");
        LLVMValueRef cp = LLVMBuildInBoundsGEP2(b, cg->t_i32, param(k, P_COUNTERS), &ci, 1, "");
        LLVMValueRef old = LLVMBuildAtomicRMW(b, LLVMAtomicRMWBinOpAdd, cp, c32(k, 1), LLVMAtomicOrderingAcquireRelease, 0);
        LLVMValueRef last = LLVMBuildICmp(b, LLVMIntEQ, old, LLVMBuildSub(b, splits, c32(k, 1), ""), "last");
        LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildZExt(b, last, cg->t_i32, ""), flag_p), 4);
        s2_nv_if rs;
        s2_nv_if_begin(cg, &rs, last, "reset");
        LLVMValueRef st = LLVMBuildStore(b, c32(k, 0), cp);
        LLVMSetAlignment(st, 4);
        LLVMSetVolatile(st, 1);
        s2_nv_if_end(cg, &rs);
    }
    s2_nv_if_end(cg, &t0);
    s2_nv_barrier_cta(cg);
    LLVMValueRef flag = LLVMBuildLoad2(b, cg->t_i32, flag_p, "");
    LLVMSetAlignment(flag, 4);
    s2_nv_if lastb;
    s2_nv_if_begin(cg, &lastb, LLVMBuildICmp(b, LLVMIntNE, flag, c32(k, 0), ""), "last_cta");
    s2_nv_inline_asm(cg, cg->t_void, "fence.acq_rel.gpu;", "", NULL, 0);
    LLVMValueRef r = LLVMBuildUDiv(b, k->tid, c32(k, TPR), "");
    LLVMValueRef c0 = LLVMBuildMul(b, LLVMBuildURem(b, k->tid, c32(k, TPR), ""), c32(k, CPT), "");
    LLVMValueRef t, i;
    row_token_head(k, r, &t, &i);
    s2_nv_if real;
    s2_nv_if_begin(cg, &real, LLVMBuildICmp(b, LLVMIntULT, t, k->n, ""), "real");
    {
        LLVMValueRef h64 = LLVMBuildZExt(b, LLVMBuildAdd(b, LLVMBuildMul(b, k->kvh, c32(k, k->s.group), ""), i, ""), cg->t_i64, "");
        LLVMValueRef t64 = LLVMBuildZExt(b, t, cg->t_i64, ""), b64 = LLVMBuildZExt(b, k->batch, cg->t_i64, "");
        LLVMValueRef n64 = LLVMBuildZExt(b, k->n, cg->t_i64, "");
        LLVMValueRef nb = LLVMBuildZExt(b, s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.z", cg->t_i32, NULL, 0, NULL), cg->t_i64, "");
        LLVMValueRef H = c64(k, k->s.heads);
        /* allocas (entry block) for the two passes */
        LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
        LLVMValueRef fi = LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(k->fn));
        LLVMPositionBuilderBefore(b, fi);
        LLVMValueRef mx_p = LLVMBuildAlloca(b, cg->t_f32, "cmx"), sum_p = LLVMBuildAlloca(b, cg->t_f32, "csum");
        LLVMValueRef acc[MAX_D];
        for (int c = 0; c < CPT; c++)
            acc[c] = LLVMBuildAlloca(b, cg->t_f32, "cacc");
        LLVMPositionBuilderAtEnd(b, cur);
        LLVMBuildStore(b, cf(k, -INFINITY), mx_p);
        LLVMBuildStore(b, cf(k, 0.0), sum_p);
        for (int c = 0; c < CPT; c++)
            LLVMBuildStore(b, cf(k, 0.0), acc[c]);
        /* ws_lse[((s * B + b) * H + h) * n + t], ws_o[(((s * B + b) * n + t) * H + h) * D + c] */
        s2_nv_loop l1;
        s2_nv_loop_begin(cg, &l1, "cmax", c32(k, 0), splits, c32(k, 1), NULL, 0);
        {
            LLVMValueRef sb = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildZExt(b, l1.iv, cg->t_i64, ""), nb, ""), b64, "");
            LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, sb, H, ""), h64, ""), n64, ""), t64, "");
            LLVMValueRef lv = load_volatile_f32(k, param(k, P_WS_LSE), li);
            LLVMBuildStore(b, s2_nv_fmax(cg, LLVMBuildLoad2(b, cg->t_f32, mx_p, ""), lv), mx_p);
        }
        s2_nv_loop_end(cg, &l1, NULL);
        LLVMValueRef mx = LLVMBuildLoad2(b, cg->t_f32, mx_p, "");
        LLVMValueRef mx_use = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, mx, cf(k, -INFINITY), ""), cf(k, 0.0), mx, "");
        s2_nv_loop l2;
        s2_nv_loop_begin(cg, &l2, "csum", c32(k, 0), splits, c32(k, 1), NULL, 0);
        {
            LLVMValueRef sb = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildZExt(b, l2.iv, cg->t_i64, ""), nb, ""), b64, "");
            LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, sb, H, ""), h64, ""), n64, ""), t64, "");
            LLVMValueRef lv = load_volatile_f32(k, param(k, P_WS_LSE), li);
            s2_nv_if has;
            s2_nv_if_begin(cg, &has, LLVMBuildFCmp(b, LLVMRealUNE, lv, cf(k, -INFINITY), ""), "has");
            LLVMValueRef w = s2_nv_ex2_approx(cg, LLVMBuildFMul(b, LLVMBuildFSub(b, lv, mx_use, ""), cf(k, M_LOG2E), ""));
            LLVMBuildStore(b, LLVMBuildFAdd(b, LLVMBuildLoad2(b, cg->t_f32, sum_p, ""), w, ""), sum_p);
            LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, sb, n64, ""), t64, ""), H, ""), h64, "");
            LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, row, c64(k, D), ""), LLVMBuildZExt(b, c0, cg->t_i64, ""), "");
            for (int c = 0; c < CPT; c++) {
                LLVMValueRef x = load_volatile_f32(k, param(k, P_WS_O), LLVMBuildAdd(b, off, c64(k, c), ""));
                LLVMBuildStore(b, s2_nv_fma(cg, w, x, LLVMBuildLoad2(b, cg->t_f32, acc[c], "")), acc[c]);
            }
            s2_nv_if_end(cg, &has);
        }
        s2_nv_loop_end(cg, &l2, NULL);
        LLVMValueRef sum = LLVMBuildLoad2(b, cg->t_f32, sum_p, "");
        LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealUGT, sum, cf(k, 0.0), "");
        LLVMValueRef inv = LLVMBuildSelect(b, pos, LLVMBuildFDiv(b, cf(k, 1.0), sum, ""), cf(k, 0.0), "");
        LLVMValueRef off = LLVMBuildMul(b, b64, param(k, P_OS), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, t64, param(k, P_OS + 1), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, h64, param(k, P_OS + 2), ""), "");
        off = LLVMBuildAdd(b, off, LLVMBuildZExt(b, c0, cg->t_i64, ""), "");
        for (int c = 0; c < CPT; c += 2) {
            LLVMValueRef lo = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[c], ""), inv, "");
            LLVMValueRef hi = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[c + 1], ""), inv, "");
            LLVMValueRef pp = s2_kb_gep16(&k->kb, param(k, P_O), LLVMBuildAdd(b, off, c64(k, c), ""));
            LLVMSetAlignment(LLVMBuildStore(b, s2_nv_pack2(cg, k->s.dt, lo, hi), pp), 4);
        }
        LLVMValueRef lp = param(k, P_LSE);
        LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildURem(b, k->tid, c32(k, TPR), ""), c32(k, 0), "");
        LLVMValueRef want = LLVMBuildAnd(b, first, LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, lp, cg->t_i64, ""), c64(k, 0), ""), "");
        s2_nv_if wl;
        s2_nv_if_begin(cg, &wl, want, "lse");
        LLVMValueRef lse = LLVMBuildFAdd(b, mx, LLVMBuildFMul(b, s2_nv_lg2_approx(cg, sum), cf(k, M_LN2), ""), "");
        lse = LLVMBuildSelect(b, pos, lse, cf(k, -INFINITY), "");
        LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, b64, H, ""), h64, ""), n64, ""), t64, "");
        store_global_f32(k, lp, li, lse);
        s2_nv_if_end(cg, &wl);
    }
    s2_nv_if_end(cg, &real);
    s2_nv_if_end(cg, &lastb);
    s2_nv_if_end(cg, &many);
}
