/* NAME_seqs (ABI seqs, s2c/launch.h): a variable-length batch's records
 * s2_attn_seq from cumulative lengths in device memory, one thread per
 * sequence, so that a captured graph reads an engine's cu_seqlens itself.
 * Built into every forward module (template.c), with NAME_combine
 * (combine.c) by s2_fwd_entry_build. */
#include "template.h"
#include "kbase.h"
#include "params.h"

/* Parameters, in ABI order (abi/params.h, S2_ABI_SEQS). */
#define Q_ENUM(e, n, t) Q_##e,
enum { S2_ABI_SEQS_PARAMS(Q_ENUM) Q_COUNT };
#undef Q_ENUM

typedef struct seqk {
    S2_KB_BASE;
} seqk;

s2_status s2_fwd_entry_build(s2_ctx *ctx, s2_cg *cg, const s2_kernel_record *rec)
{
    if (rec->role == S2_ROLE_COMBINE)
        return s2_combine_kernel_build(ctx, cg, rec->spec.dtype, rec->spec.head_dim, rec->symbol);
    if (rec->role == S2_ROLE_FWD_SEQS)
        return s2_seqs_kernel_build(ctx, cg, rec->symbol);
    if (rec->role == S2_ROLE_ROWS)
        return s2_rows_entry_build(ctx, cg, rec);
    return s2_fail(ctx, S2_ERR_INTERNAL, "forward entry: no kernel of role %s", s2_role_name(rec->role));
}

s2_status s2_seqs_kernel_build(s2_ctx *ctx, s2_cg *cg, const char *name)
{
    (void)ctx;
    seqk k = {.kb = {.cg = cg, .b = cg->b}};
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef params[Q_COUNT];
    int np = s2_kb_abi_params(cg, S2_ABI_SEQS, params);
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, S2_SEQS_THREADS, 0);
    LLVMValueRef i = LLVMBuildAdd(b, LLVMBuildMul(b, s2_nv_ctaid(cg, 'x'), c32(&k, S2_SEQS_THREADS), ""),
                                  s2_nv_tid_x(cg), "i");
    s2_nv_if live;
    s2_nv_if_begin(cg, &live, LLVMBuildICmp(b, LLVMIntULT, i, param(&k, Q_N), ""), "live");
    /* cu_k null: the keys are the queries (self-attention) */
    LLVMValueRef cuq = param(&k, Q_CU_Q), cuk_in = param(&k, Q_CU_K);
    LLVMValueRef has_k = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, cuk_in, cg->t_i64, ""), c64(&k, 0), "");
    LLVMValueRef cuk = LLVMBuildSelect(b, has_k, cuk_in, cuq, "cu_k");
    LLVMValueRef i64v = LLVMBuildZExt(b, i, cg->t_i64, ""), n64 = LLVMBuildAdd(b, i64v, c64(&k, 1), "");
    LLVMValueRef q0 = s2_kb_load_i32(&k.kb, cuq, i64v, "q0"), q1 = s2_kb_load_i32(&k.kb, cuq, n64, "q1");
    LLVMValueRef k0 = s2_kb_load_i32(&k.kb, cuk, i64v, "k0"), k1 = s2_kb_load_i32(&k.kb, cuk, n64, "k1");
    /* untrusted: both starts >= 0 and both arrays non-decreasing before the
     * (then overflow-free) differences, q_len <= kv_len <= max_kv_len */
    LLVMValueRef zero = c32(&k, 0);
    LLVMValueRef ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, q0, zero, ""),
                                   LLVMBuildICmp(b, LLVMIntSGE, k0, zero, ""), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSGE, q1, q0, ""), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSGE, k1, k0, ""), "");
    LLVMValueRef ql = LLVMBuildSub(b, q1, q0, "q_len"), kl = LLVMBuildSub(b, k1, k0, "kv_len");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSLE, ql, kl, ""), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSLE, kl, param(&k, Q_MAX_KV), ""), "ok");
    /* an invalid sequence becomes empty ({0, 0, 0, 0}): the forward skips it */
    LLVMValueRef v = LLVMGetUndef(LLVMVectorType(cg->t_i32, 4));
    LLVMValueRef f[4] = {q0, ql, k0, kl};
    for (int j = 0; j < 4; j++)
        v = LLVMBuildInsertElement(b, v, LLVMBuildSelect(b, ok, f[j], zero, ""), c32(&k, j), "");
    LLVMValueRef off = LLVMBuildMul(b, i64v, c64(&k, 4), "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, cg->t_i32, param(&k, Q_SEQINFO), &off, 1, "");
    LLVMSetAlignment(LLVMBuildStore(b, v, p), 16);
    s2_nv_if_end(cg, &live);
    LLVMBuildRetVoid(b);
    return S2_OK;
}
