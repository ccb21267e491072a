/* NAME_rows (ABI rows, s2_rows in s2c/decode.h): rows of D 16-bit elements
 * moved by a table of runs, one CTA per run, D / 8 threads per row.  A run
 * {dst row, rows, src row 0..n_src-1} writes rows dst..dst+rows-1 as the sum
 * of its present sources (src row >= 0) in table order, accumulated in fp32
 * and rounded once; with one source the bits are copied.  A run outside the
 * extents (src_rows, dst_rows) or without source 0 is skipped.  Built into
 * every 16-bit forward and backward module (the context-parallel executor's
 * packing and its fixed-order dK/dV sum). */
#include "template.h"
#include "kbase.h"
#include "params.h"

/* Parameters, in ABI order (abi/params.h, S2_ABI_ROWS). */
#define R_ENUM(e, n, t) R_##e,
enum { S2_ABI_ROWS_PARAMS(R_ENUM) R_COUNT };
#undef R_ENUM

typedef struct rowk {
    S2_KB_BASE;
} rowk;

/* Table entry j of the run at e (i64). */
static LLVMValueRef entry(rowk *k, LLVMValueRef e, LLVMValueRef j)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i64, LLVMBuildInBoundsGEP2(k->b, k->cg->t_i64, e, &j, 1, ""), "");
    LLVMSetAlignment(v, 8);
    return v;
}

/* Whether a run of `rows` from `first` leaves 0..extent (first < 0: absent, fine unless required). */
static LLVMValueRef outside(rowk *k, LLVMValueRef first, LLVMValueRef rows, LLVMValueRef extent, bool required)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef absent = LLVMBuildICmp(b, LLVMIntSLT, first, c64(k, 0), "");
    LLVMValueRef over = LLVMBuildICmp(b, LLVMIntSGT, rows, LLVMBuildSub(b, extent, first, ""), "");
    return required ? LLVMBuildOr(b, absent, over, "") : LLVMBuildAnd(b, LLVMBuildNot(b, absent, ""), over, "");
}

static LLVMValueRef load_row8(rowk *k, LLVMValueRef src_row, LLVMValueRef r, LLVMValueRef c, int D)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, src_row, r, ""), c64(k, D), ""), c, "");
    LLVMValueRef v = LLVMBuildLoad2(b, LLVMVectorType(k->cg->t_i32, 4), s2_kb_gep16(&k->kb, param(k, R_SRC), off), "");
    LLVMSetAlignment(v, 16);
    return v;
}

s2_status s2_rows_kernel_build(s2_ctx *ctx, s2_cg *cg, s2_dtype dt, int D, const char *name)
{
    (void)ctx;
    rowk k = {.kb = {.cg = cg, .b = cg->b}};
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef params[R_COUNT], v4 = LLVMVectorType(cg->t_i32, 4), i16 = LLVMInt16TypeInContext(cg->llctx);
    int np = s2_kb_abi_params(cg, S2_ABI_ROWS, params);
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, S2_ROWS_THREADS, 0);
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef cur = s2_kb_entry_begin(&k.kb, entry_bb);
    LLVMValueRef acc[8], out_p = LLVMBuildAlloca(b, v4, "out"), bad_p = LLVMBuildAlloca(b, cg->t_i1, "bad");
    for (int j = 0; j < 8; j++)
        acc[j] = LLVMBuildAlloca(b, cg->t_f32, "acc");
    s2_kb_entry_end(&k.kb, cur);

    int TPR = D / 8, RPC = S2_ROWS_THREADS / TPR;
    LLVMValueRef tid = s2_nv_tid_x(cg), run = s2_nv_ctaid(cg, 'x');
    s2_nv_if live;
    s2_nv_if_begin(cg, &live, LLVMBuildICmp(b, LLVMIntULT, run, param(&k, R_N_RUNS), ""), "live");
    LLVMValueRef n_src = param(&k, R_N_SRC);
    LLVMValueRef width = LLVMBuildZExt(b, LLVMBuildAdd(b, n_src, c32(&k, 2), ""), cg->t_i64, "");
    LLVMValueRef at = LLVMBuildMul(b, LLVMBuildZExt(b, run, cg->t_i64, ""), width, "");
    LLVMValueRef e = LLVMBuildInBoundsGEP2(b, cg->t_i64, param(&k, R_TABLE), &at, 1, "run");
    LLVMValueRef dst_row = entry(&k, e, c64(&k, 0)), rows = entry(&k, e, c64(&k, 1));
    LLVMValueRef src0 = entry(&k, e, c64(&k, 2));
    /* every end of the run inside its extent, source 0 present */
    LLVMValueRef bad0 = LLVMBuildOr(b, outside(&k, dst_row, rows, param(&k, R_DST_ROWS), true),
                                    LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntSLT, rows, c64(&k, 0), ""),
                                                outside(&k, src0, rows, param(&k, R_SRC_ROWS), true), ""), "");
    LLVMBuildStore(b, bad0, bad_p);
    s2_nv_loop ls;
    s2_nv_loop_begin(cg, &ls, "check", c32(&k, 1), n_src, c32(&k, 1), NULL, 0);
    {
        LLVMValueRef sv = entry(&k, e, LLVMBuildZExt(b, LLVMBuildAdd(b, ls.iv, c32(&k, 2), ""), cg->t_i64, ""));
        LLVMBuildStore(b, LLVMBuildOr(b, LLVMBuildLoad2(b, cg->t_i1, bad_p, ""),
                                      outside(&k, sv, rows, param(&k, R_SRC_ROWS), false), ""), bad_p);
    }
    s2_nv_loop_end(cg, &ls, NULL);
    s2_nv_if ok;
    s2_nv_if_begin(cg, &ok, LLVMBuildNot(b, LLVMBuildLoad2(b, cg->t_i1, bad_p, ""), ""), "ok");
    LLVMValueRef c = LLVMBuildZExt(b, LLVMBuildMul(b, LLVMBuildURem(b, tid, c32(&k, TPR), ""), c32(&k, 8), ""),
                                   cg->t_i64, "c");
    LLVMValueRef r0 = LLVMBuildZExt(b, LLVMBuildUDiv(b, tid, c32(&k, TPR), ""), cg->t_i64, "");
    LLVMValueRef T = param(&k, R_DST_T), H = param(&k, R_DST_H);
    s2_nv_loop lr;
    s2_nv_loop_begin(cg, &lr, "row", r0, rows, c64(&k, RPC), NULL, 0);
    {
        LLVMValueRef r = lr.iv;
        LLVMBuildStore(b, load_row8(&k, src0, r, c, D), out_p);
        s2_nv_if sum;
        s2_nv_if_begin(cg, &sum, LLVMBuildICmp(b, LLVMIntUGT, n_src, c32(&k, 1), ""), "sum");
        {
            LLVMValueRef v = LLVMBuildBitCast(b, LLVMBuildLoad2(b, v4, out_p, ""), LLVMVectorType(i16, 8), "");
            for (int j = 0; j < 8; j++)
                LLVMBuildStore(b, s2_nv_elt16_to_f32(cg, dt, LLVMBuildExtractElement(b, v, c32(&k, j), "")), acc[j]);
            s2_nv_loop l;
            s2_nv_loop_begin(cg, &l, "src", c32(&k, 1), n_src, c32(&k, 1), NULL, 0);
            LLVMValueRef sv = entry(&k, e, LLVMBuildZExt(b, LLVMBuildAdd(b, l.iv, c32(&k, 2), ""), cg->t_i64, ""));
            s2_nv_if has;
            s2_nv_if_begin(cg, &has, LLVMBuildICmp(b, LLVMIntSGE, sv, c64(&k, 0), ""), "present");
            LLVMValueRef x = LLVMBuildBitCast(b, load_row8(&k, sv, r, c, D), LLVMVectorType(i16, 8), "");
            for (int j = 0; j < 8; j++)
                LLVMBuildStore(b, LLVMBuildFAdd(b, LLVMBuildLoad2(b, cg->t_f32, acc[j], ""),
                                                s2_nv_elt16_to_f32(cg, dt, LLVMBuildExtractElement(b, x, c32(&k, j), "")),
                                                ""), acc[j]);
            s2_nv_if_end(cg, &has);
            s2_nv_loop_end(cg, &l, NULL);
            LLVMValueRef packed = LLVMGetUndef(v4);
            for (int j = 0; j < 4; j++)
                packed = LLVMBuildInsertElement(b, packed, s2_nv_pack2(cg, dt, LLVMBuildLoad2(b, cg->t_f32, acc[2 * j], ""),
                                                                       LLVMBuildLoad2(b, cg->t_f32, acc[2 * j + 1], "")),
                                                c32(&k, j), "");
            LLVMBuildStore(b, packed, out_p);
        }
        s2_nv_if_end(cg, &sum);
        /* dst row L = (b * H + h) * T + t */
        LLVMValueRef L = LLVMBuildAdd(b, dst_row, r, "");
        LLVMValueRef t = LLVMBuildURem(b, L, T, ""), bh = LLVMBuildUDiv(b, L, T, "");
        LLVMValueRef h = LLVMBuildURem(b, bh, H, ""), bb = LLVMBuildUDiv(b, bh, H, "");
        LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildAdd(b, LLVMBuildMul(b, bb, param(&k, R_DS), ""),
                                                        LLVMBuildMul(b, t, param(&k, R_DS_S), ""), ""),
                                        LLVMBuildAdd(b, LLVMBuildMul(b, h, param(&k, R_DS_H), ""), c, ""), "");
        LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildLoad2(b, v4, out_p, ""), s2_kb_gep16(&k.kb, param(&k, R_DST), off)),
                         16);
    }
    s2_nv_loop_end(cg, &lr, NULL);
    s2_nv_if_end(cg, &ok);
    s2_nv_if_end(cg, &live);
    LLVMBuildRetVoid(b);
    return S2_OK;
}

s2_status s2_rows_entry_build(s2_ctx *ctx, s2_cg *cg, const s2_kernel_record *rec)
{
    if (rec->role != S2_ROLE_ROWS)
        return s2_fail(ctx, S2_ERR_INTERNAL, "backward entry: no kernel of role %s", s2_role_name(rec->role));
    return s2_rows_kernel_build(ctx, cg, rec->spec.dtype, rec->spec.head_dim, rec->symbol);
}
