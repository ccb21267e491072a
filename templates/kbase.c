/* The kernel-builder base of every template (kbase.h). */
#include "kbase.h"

void s2_kb_thread(s2_kb *kb)
{
    kb->tid = s2_nv_tid_x(kb->cg);
    s2_kb_lanes(kb, kb->tid);
}

void s2_kb_lanes(s2_kb *kb, LLVMValueRef t)
{
    LLVMBuilderRef b = kb->b;
    kb->warp = LLVMBuildLShr(b, t, s2_kb_i32(kb, S2_WARP_LOG2), "warp");
    kb->lane = LLVMBuildAnd(b, t, s2_kb_i32(kb, S2_WARP - 1), "lane");
    kb->g = LLVMBuildLShr(b, kb->lane, s2_kb_i32(kb, 2), "g");
    kb->t4 = LLVMBuildAnd(b, kb->lane, s2_kb_i32(kb, S2_QUAD - 1), "t4");
}

LLVMValueRef s2_kb_load_i32(s2_kb *kb, LLVMValueRef base, LLVMValueRef idx64, const char *name)
{
    LLVMValueRef p = LLVMBuildInBoundsGEP2(kb->b, kb->cg->t_i32, base, &idx64, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(kb->b, kb->cg->t_i32, p, name);
    LLVMSetAlignment(v, 4);
    return v;
}

LLVMValueRef s2_kb_spread(s2_kb *kb, int it, int T, int total, s2_nv_if *guard, const char *name)
{
    LLVMValueRef idx = LLVMBuildAdd(kb->b, kb->tid, s2_kb_i32(kb, it * T), "");
    *guard = (s2_nv_if){0};
    if ((it + 1) * T > total)
        s2_nv_if_begin(kb->cg, guard, LLVMBuildICmp(kb->b, LLVMIntULT, idx, s2_kb_i32(kb, total), ""), name);
    return idx;
}

void s2_kb_spread_end(s2_kb *kb, s2_nv_if *guard)
{
    if (guard->then)
        s2_nv_if_end(kb->cg, guard);
}

LLVMBasicBlockRef s2_kb_entry_begin(s2_kb *kb, LLVMBasicBlockRef entry_bb)
{
    LLVMBasicBlockRef back = LLVMGetInsertBlock(kb->b);
    LLVMValueRef first = LLVMGetFirstInstruction(entry_bb);
    if (first)
        LLVMPositionBuilderBefore(kb->b, first);
    else
        LLVMPositionBuilderAtEnd(kb->b, entry_bb);
    return back;
}

void s2_kb_entry_end(s2_kb *kb, LLVMBasicBlockRef back) { LLVMPositionBuilderAtEnd(kb->b, back); }

LLVMValueRef s2_kb_ring_stage(s2_kb *kb, LLVMValueRef i, int S, const char *name)
{
    return LLVMBuildURem(kb->b, i, s2_kb_i32(kb, S), name);
}

LLVMValueRef s2_kb_ring_parity(s2_kb *kb, LLVMValueRef i, int S, const char *name)
{
    return LLVMBuildAnd(kb->b, LLVMBuildUDiv(kb->b, i, s2_kb_i32(kb, S), ""), s2_kb_i32(kb, 1), name);
}

LLVMValueRef s2_kb_mbar(s2_kb *kb, LLVMValueRef smem, int off, LLVMValueRef stage)
{
    LLVMValueRef a = off ? s2_kb_add(kb, smem, s2_kb_i32(kb, off)) : smem;
    return stage ? s2_kb_add(kb, a, LLVMBuildShl(kb->b, stage, s2_kb_i32(kb, 3), "")) : a;
}

int s2_kb_abi_params(s2_cg *cg, s2_abi_id abi, LLVMTypeRef *out)
{
    const s2_abi_desc *d = s2_abi_get(abi);
    for (int i = 0; i < d->num_params; i++) {
        switch (d->params[i].type) {
        case S2_PT_PTR: out[i] = cg->t_ptr_global; break;
        case S2_PT_I32: out[i] = cg->t_i32; break;
        case S2_PT_I64: out[i] = cg->t_i64; break;
        case S2_PT_F32: out[i] = cg->t_f32; break;
        default: out[i] = LLVMPointerTypeInContext(cg->llctx, S2_AS_GENERIC); break;
        }
    }
    return d->num_params;
}
