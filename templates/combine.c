/* The combine kernel (s2_combine, ABI in include/s2c/decode.h): merges
 * attention outputs over disjoint key sets, one row of D columns per
 * D / 8 threads, by their LSE.  Built into every decode module
 * (NAME_combine, s2_decode_build) and every forward module
 * (s2_fwd_entry_build). */
#include "decode_internal.h"
#include "template.h"
#include "kbase.h"
#include "params.h"

#include <math.h>

/* Parameters, in ABI order (abi/params.h, S2_ABI_COMBINE). */
#define C_ENUM(e, n, t) C_##e,
enum { S2_ABI_COMBINE_PARAMS(C_ENUM) C_COUNT };
#undef C_ENUM

enum { COMBINE_THREADS = S2_COMBINE_THREADS };

typedef struct comb {
    S2_KB_BASE;          /* cg, b, fn (kbase.h); one row per D / 8 threads: no warp ids */
    s2_dtype out_dt;
    int D;
} comb;


/* The byval pointer table: { u64 o[64]; u64 lse[64] }. */
static LLVMTypeRef ptr_table_type(s2_cg *cg)
{
    LLVMTypeRef a = LLVMArrayType2(cg->t_i64, 2 * S2_COMBINE_MAX_INPUTS);
    return LLVMStructTypeInContext(cg->llctx, &a, 1, 0);
}

/* Input i's base: base + i * part (elements of esize) when base is set, else table[which * 64 + i]. */
static LLVMValueRef input_base(comb *k, int which, LLVMValueRef i, int esize)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef base = param(k, which ? C_LBASE : C_OBASE);
    LLVMValueRef part = param(k, which ? C_LPART : C_OPART);
    LLVMValueRef bi = LLVMBuildPtrToInt(b, base, cg->t_i64, "");
    LLVMValueRef i64v = LLVMBuildZExt(b, i, cg->t_i64, "");
    LLVMValueRef strided = LLVMBuildAdd(b, bi, LLVMBuildMul(b, LLVMBuildMul(b, i64v, part, ""), c64(k, esize), ""), "");
    LLVMValueRef idx[3] = {c32(k, 0), c32(k, 0), LLVMBuildAdd(b, LLVMBuildTrunc(b, i64v, cg->t_i32, ""), c32(k, which * S2_COMBINE_MAX_INPUTS), "")};
    LLVMValueRef tp = LLVMBuildInBoundsGEP2(b, ptr_table_type(cg), param(k, C_PTRS), idx, 3, "");
    LLVMValueRef tv = LLVMBuildLoad2(b, cg->t_i64, tp, "");
    LLVMSetAlignment(tv, 8);
    LLVMValueRef use = LLVMBuildICmp(b, LLVMIntNE, bi, c64(k, 0), "");
    return LLVMBuildIntToPtr(b, LLVMBuildSelect(b, use, strided, tv, ""), cg->t_ptr_global, "");
}

/* 8 consecutive 16-bit input elements as f32 (one 16-byte load). */
static void load8(comb *k, LLVMValueRef base, LLVMValueRef off, LLVMValueRef x[8])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->llctx);
    LLVMTypeRef v8 = LLVMVectorType(i16, 8);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, i16, base, &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(b, v8, p, "");
    LLVMSetAlignment(v, 16);
    for (int j = 0; j < 8; j++)
        x[j] = s2_nv_elt16_to_f32(cg, k->out_dt, LLVMBuildExtractElement(b, v, c32(k, j), ""));
}

static LLVMValueRef load_lse(comb *k, LLVMValueRef i, LLVMValueRef li)
{
    LLVMValueRef p = LLVMBuildInBoundsGEP2(k->b, k->cg->t_f32, input_base(k, 1, i, 4), &li, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_f32, p, "");
    LLVMSetAlignment(v, 4);
    return v;
}

s2_status s2_combine_kernel_build(s2_ctx *ctx, s2_cg *cg, s2_dtype out_dt, int D, const char *name)
{
    (void)ctx;
    comb k = {.kb = {.cg = cg, .b = cg->b}, .out_dt = out_dt, .D = D};
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef params[C_COUNT];
    int np = s2_kb_abi_params(cg, S2_ABI_COMBINE, params);
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, COMBINE_THREADS, 0);
    unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5);
    unsigned align = LLVMGetEnumAttributeKindForName("align", 5);
    LLVMAddAttributeAtIndex(k.fn, C_PTRS + 1, LLVMCreateTypeAttribute(cg->llctx, byval, ptr_table_type(cg)));
    LLVMAddAttributeAtIndex(k.fn, C_PTRS + 1, LLVMCreateEnumAttribute(cg->llctx, align, 8));
    LLVMAddAttributeAtIndex(k.fn, C_PTRS + 1, LLVMCreateStringAttribute(cg->llctx, "nvvm.grid_constant", 18, "", 0));
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(b);

    int TPR = D / 8, RPC = COMBINE_THREADS / TPR;
    LLVMValueRef tid = k.tid = s2_nv_tid_x(cg);
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildMul(b, s2_nv_ctaid(cg, 'x'), c32(&k, RPC), ""), LLVMBuildUDiv(b, tid, c32(&k, TPR), ""), "row");
    LLVMValueRef c0 = LLVMBuildMul(b, LLVMBuildURem(b, tid, c32(&k, TPR), ""), c32(&k, 8), "c0");
    /* allocas for the accumulators, promoted by SROA */
    LLVMValueRef acc[8], mx_p, sum_p;
    LLVMBasicBlockRef cur = s2_kb_entry_begin(&k.kb, entry_bb);
    for (int j = 0; j < 8; j++)
        acc[j] = LLVMBuildAlloca(b, cg->t_f32, "acc");
    mx_p = LLVMBuildAlloca(b, cg->t_f32, "mx");
    sum_p = LLVMBuildAlloca(b, cg->t_f32, "sum");
    LLVMValueRef sink_p = LLVMBuildAlloca(b, cg->t_f32, "sink");
    s2_kb_entry_end(&k.kb, cur);
    s2_nv_if live;
    s2_nv_if_begin(cg, &live, LLVMBuildICmp(b, LLVMIntULT, row, param(&k, C_ROWS), ""), "live");
    LLVMValueRef H = param(&k, C_H), S = param(&k, C_S);
    LLVMValueRef h = LLVMBuildURem(b, row, H, "h");
    LLVMValueRef bs = LLVMBuildUDiv(b, row, H, "");
    LLVMValueRef s = LLVMBuildURem(b, bs, S, "s");
    LLVMValueRef bb = LLVMBuildUDiv(b, bs, S, "b");
    LLVMValueRef b64 = LLVMBuildZExt(b, bb, cg->t_i64, ""), s64 = LLVMBuildZExt(b, s, cg->t_i64, ""), h64 = LLVMBuildZExt(b, h, cg->t_i64, "");
    LLVMValueRef li = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, b64, LLVMBuildZExt(b, H, cg->t_i64, ""), ""), h64, ""),
                                                   LLVMBuildZExt(b, S, cg->t_i64, ""), ""), s64, "li");
    LLVMValueRef ioff = LLVMBuildAdd(b, LLVMBuildAdd(b, LLVMBuildMul(b, b64, param(&k, C_IS), ""), LLVMBuildMul(b, s64, param(&k, C_IS + 1), ""), ""),
                                     LLVMBuildAdd(b, LLVMBuildMul(b, h64, param(&k, C_IS + 2), ""), LLVMBuildZExt(b, c0, cg->t_i64, ""), ""), "ioff");
    /* head h's sink (sinks null: none, -inf) joins the merge as an input of
     * lse sinks[h] whose output is zero: it counts once in the row's softmax */
    LLVMValueRef sinks = param(&k, C_SINKS);
    LLVMBuildStore(b, LLVMConstReal(cg->t_f32, -INFINITY), sink_p);
    s2_nv_if hs;
    s2_nv_if_begin(cg, &hs, LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, sinks, cg->t_i64, ""), c64(&k, 0), ""),
                   "has_sinks");
    LLVMValueRef sv = LLVMBuildLoad2(b, cg->t_f32, LLVMBuildInBoundsGEP2(b, cg->t_f32, sinks, &h64, 1, ""), "");
    LLVMSetAlignment(sv, 4);
    LLVMBuildStore(b, sv, sink_p);
    s2_nv_if_end(cg, &hs);
    LLVMValueRef sink = LLVMBuildLoad2(b, cg->t_f32, sink_p, "sinkv");
    LLVMBuildStore(b, sink, mx_p);
    for (int j = 0; j < 8; j++)
        LLVMBuildStore(b, LLVMConstReal(cg->t_f32, 0.0), acc[j]);
    s2_nv_loop l1;
    s2_nv_loop_begin(cg, &l1, "max", c32(&k, 0), param(&k, C_N), c32(&k, 1), NULL, 0);
    LLVMBuildStore(b, s2_nv_fmax(cg, LLVMBuildLoad2(b, cg->t_f32, mx_p, ""), load_lse(&k, l1.iv, li)), mx_p);
    s2_nv_loop_end(cg, &l1, NULL);
    LLVMValueRef mx = LLVMBuildLoad2(b, cg->t_f32, mx_p, "mxv");
    LLVMValueRef finite = LLVMBuildFCmp(b, LLVMRealONE, mx, LLVMConstReal(cg->t_f32, -INFINITY), "");
    LLVMValueRef mx_use = LLVMBuildSelect(b, finite, mx, LLVMConstReal(cg->t_f32, 0.0), "");
    LLVMValueRef sw = s2_nv_ex2_approx(cg, LLVMBuildFMul(b, LLVMBuildFSub(b, sink, mx_use, ""), LLVMConstReal(cg->t_f32, M_LOG2E), ""));
    LLVMValueRef has_sink = LLVMBuildFCmp(b, LLVMRealUNE, sink, LLVMConstReal(cg->t_f32, -INFINITY), "");
    LLVMBuildStore(b, LLVMBuildSelect(b, has_sink, sw, LLVMConstReal(cg->t_f32, 0.0), ""), sum_p);
    s2_nv_loop l2;
    s2_nv_loop_begin(cg, &l2, "sum", c32(&k, 0), param(&k, C_N), c32(&k, 1), NULL, 0);
    {
        LLVMValueRef lv = load_lse(&k, l2.iv, li);
        LLVMValueRef w = s2_nv_ex2_approx(cg, LLVMBuildFMul(b, LLVMBuildFSub(b, lv, mx_use, ""), LLVMConstReal(cg->t_f32, M_LOG2E), ""));
        LLVMValueRef has = LLVMBuildFCmp(b, LLVMRealUNE, lv, LLVMConstReal(cg->t_f32, -INFINITY), "");
        s2_nv_if hb;
        s2_nv_if_begin(cg, &hb, has, "contrib");
        LLVMBuildStore(b, LLVMBuildFAdd(b, LLVMBuildLoad2(b, cg->t_f32, sum_p, ""), w, ""), sum_p);
        LLVMValueRef x[8];
        load8(&k, input_base(&k, 0, l2.iv, 2), ioff, x);
        for (int j = 0; j < 8; j++)
            LLVMBuildStore(b, s2_nv_fma(cg, w, x[j], LLVMBuildLoad2(b, cg->t_f32, acc[j], "")), acc[j]);
        s2_nv_if_end(cg, &hb);
    }
    s2_nv_loop_end(cg, &l2, NULL);
    LLVMValueRef sum = LLVMBuildLoad2(b, cg->t_f32, sum_p, "");
    LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealUGT, sum, LLVMConstReal(cg->t_f32, 0.0), "");
    LLVMValueRef inv = LLVMBuildSelect(b, pos, LLVMBuildFDiv(b, LLVMConstReal(cg->t_f32, 1.0), sum, ""), LLVMConstReal(cg->t_f32, 0.0), "");
    LLVMValueRef packed = LLVMGetUndef(LLVMVectorType(cg->t_i32, 4));
    for (int j = 0; j < 4; j++) {
        LLVMValueRef lo = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[2 * j], ""), inv, "");
        LLVMValueRef hi = LLVMBuildFMul(b, LLVMBuildLoad2(b, cg->t_f32, acc[2 * j + 1], ""), inv, "");
        packed = LLVMBuildInsertElement(b, packed, s2_nv_pack2(cg, out_dt, lo, hi), c32(&k, j), "");
    }
    LLVMValueRef ooff = LLVMBuildAdd(b, LLVMBuildAdd(b, LLVMBuildMul(b, b64, param(&k, C_OS), ""), LLVMBuildMul(b, s64, param(&k, C_OS + 1), ""), ""),
                                     LLVMBuildAdd(b, LLVMBuildMul(b, h64, param(&k, C_OS + 2), ""), LLVMBuildZExt(b, c0, cg->t_i64, ""), ""), "");
    LLVMValueRef op = LLVMBuildInBoundsGEP2(b, LLVMInt16TypeInContext(cg->llctx), param(&k, C_OUT), &ooff, 1, "");
    LLVMSetAlignment(LLVMBuildStore(b, packed, op), 16);
    LLVMValueRef lp = param(&k, C_LSE_OUT);
    LLVMValueRef want = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, c0, c32(&k, 0), ""),
                                     LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, lp, cg->t_i64, ""), c64(&k, 0), ""), "");
    s2_nv_if wl;
    s2_nv_if_begin(cg, &wl, want, "lse_out");
    LLVMValueRef lse = LLVMBuildFAdd(b, mx, LLVMBuildFMul(b, s2_nv_lg2_approx(cg, sum), LLVMConstReal(cg->t_f32, M_LN2), ""), "");
    lse = LLVMBuildSelect(b, pos, lse, LLVMConstReal(cg->t_f32, -INFINITY), "");
    LLVMValueRef lpp = LLVMBuildInBoundsGEP2(b, cg->t_f32, lp, &li, 1, "");
    LLVMSetAlignment(LLVMBuildStore(b, lse, lpp), 4);
    s2_nv_if_end(cg, &wl);
    s2_nv_if_end(cg, &live);
    LLVMBuildRetVoid(b);
    return S2_OK;
}
