/* The S2 block-sparse attention backward, FlashAttention-2 style, sm_80
 * instruction set (mma.sync m16n8k16, ldmatrix, cp.async; runs on sm_90).
 * Three kernels (four with NAME_dqds) in one module, all with the parameter list of
 * include/s2c/attention.h ("backward kernel ABI"):
 *
 *   NAME_pre   delta = rowsum(dO ∘ O) - dLSE and lse2 = LSE·log2 e (+inf for
 *              an empty row, so that its P is 0 and not NaN), fp32 [B][H][Sq].
 *   NAME_dkdv  one CTA per (key tile, kv head, batch); each warp owns 16 key
 *              rows and works on transposed tiles (Sᵀ = K·Qᵀ), so dK and dV
 *              stay in its registers and every sum over queries is inside its
 *              own mma chain.  It walks, for the query heads of its group in
 *              increasing order, the TRANSPOSED list (query tiles visiting the
 *              key tile): Q, dO, lse2 and delta stream through a cp.async ring
 *              (with spec.bwd_tma, Q and dO by TMA from the maps of
 *              parameters 51 and 52 into mbarrier-armed stages, issued by one
 *              thread: no per-thread copies, no proxy fence per entry; run 96).
 *   NAME_dq    one CTA per (query tile, head, batch) walking the FORWARD list,
 *              K and V streamed; dQ += dS·K in registers.
 *   NAME_dqds  (wgmma bodies on a 64 x 64 grid, s2_bwd_ds_capable) the same
 *              walk taking the dS tiles the dK/dV kernel wrote to the
 *              workspace (ABI 48..50): one tile product per entry.
 *
 * Nothing is reduced across CTAs or warps and there are no atomics: each
 * output element is summed by one thread in a fixed order, so results are
 * bitwise reproducible.  P is recomputed as exp2(S·scale_log2 - lse2) with the
 * forward's masking (live bits, causal, kv_len); rows outside the queries are
 * read as zeros (Q, dO, delta), which makes their contribution zero.
 *
 * This file: the shapes, the kernels' parameters and the entry point; one
 * file per kernel (bwd_pre.c, bwd_dkdv.c, bwd_dq.c, bwd_dqds.c with
 * NAME_dqds2), the shared pieces in bwd_common.c, the wgmma bodies in
 * bwd_sm90.c. */
#include "bwd_internal.h"
#include "s2c/layout.h"

#include <stdio.h>
#include <string.h>

/* ---- common setup ---- */

static void common_setup(bwd *k)
{
    LLVMBuilderRef b = k->b;
    s2_kb_thread(&k->kb);
    k->batch = LLVMBuildZExt(b, s2_nv_ctaid(k->cg, 'z'), k->cg->t_i64, "batch");
    k->q_len = param(k, P_QLEN);
    k->kv_len = param(k, P_KVLEN);
    k->q_start = LLVMBuildSub(b, k->kv_len, k->q_len, "q_start");
    /* the token rows as one batch (NAME_pre); the others take their sequence's (s2_bwd_seq) */
    LLVMValueRef varlen = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, param(k, k->p_seqinfo), k->cg->t_i64, ""),
                                        c64(k, 0), "varlen");
    k->bidx = LLVMBuildSelect(b, varlen, c64(k, 0), k->batch, "bidx");
    k->q_row0 = k->k_row0 = c64(k, 0);
    k->scale_log2 = param(k, P_SCALE_LOG2);
    /* A: row 16·warp + (l%8) + 8·((l/8)%2), chunk l/16; B: row l%8, chunk l/8;
     * B transposed: row l%16, chunk l/16 (ldmatrix, PTX ISA 9.7.14.5.15) */
    k->a_row = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                   add(k, LLVMBuildAnd(b, k->lane, c32(k, 7), ""), LLVMBuildAnd(b, k->lane, c32(k, 8), "")));
    k->a_lc = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    k->b_row = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    k->b_lc = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    k->bt_row = LLVMBuildAnd(b, k->lane, c32(k, 15), "");
    k->bt_lc = k->a_lc;
}


/* ---- shapes, entry points ---- */

static int align_up(int x, int a) { return (x + a - 1) / a * a; }

static void bwd_shape_init(bwd_shape *s, const s2_pattern *p, const s2_kspec *spec)
{
    memset(s, 0, sizeof *s);
    s->dt = spec->dtype;
    s->D = spec->head_dim;
    s->chunks = s->D / 8;
    s->row_bytes = s->D * 2;
    s->BM = spec->block_m;
    s->BN = spec->block_n;
    s->KB = spec->block_m;
    s->warps = spec->num_warps;
    s->threads = s->warps * S2_WARP;
    s->stages = spec->num_stages;
    s->group = p->heads / p->kv_heads;
    s->heads = p->heads;
    s->causal = p->causal;
    s->wg = spec->bwd_wgmma > 0;
    int bs = p->block_size;
    s->gather = spec->kv_gather > 1 ? spec->kv_gather : 1;
    s->gbs = bs;
    s->kgbs = bs < s->KB ? bs : s->KB;
    s->kvg = s->KB / s->kgbs;
    s->f_sub_m_log2 = s2_log2i(bs < s->BM ? bs : s->BM);
    s->f_sub_n_size = bs < s->BN ? bs : s->BN;
    s->f_sub_n = s->BN / s->f_sub_n_size;
    s->t_sub_m_size = bs < s->BM ? bs : s->BM;
    s->t_sub_n_log2 = s2_log2i(bs < s->KB ? bs : s->KB);
    s->t_sub_n = s->KB >> s->t_sub_n_log2;
    /* dK, dV and the transposed S, dP of a chunk live together: keep the
     * chunk at 32 queries for d128 */
    s->qc = s->D > 64 ? 16 : s->BM > 32 ? 32 : s->BM;
    /* dK and dV of a pass stay within d128's registers: wider head dims take
     * passes of at most 128 columns (16-column steps; 96 on sm_80 past d192),
     * as FA2/FA3 split d256 */
    /* sm_80's allocation of the mma body spilled at d208+ with 128 */
    int cap = !s->wg && spec->arch == S2_ARCH_SM80 && s->D > 192 ? 96 : 128;
    int passes = (s->D + cap - 1) / cap;
    s->kv_cols = 16 * ((s->D / 16 + passes - 1) / passes);
    if (s->wg && s->D > 128)   /* whole 64-column blocks of the wgmma layout */
        s->kv_cols = 128;
    int rb = s->row_bytes;
    s->dq_q_off = 0;
    s->dq_do_off = s->BM * rb;
    s->dq_stage0 = 2 * s->BM * rb;
    s->dq_stage_bytes = 2 * s->BN * rb;
    s->kv_k_off = 0;
    s->kv_v_off = s->KB * rb;
    s->kv_stage0 = 2 * s->KB * rb;
    s->kv_lse_off = 2 * s->BM * rb;
    s->kv_stage_bytes = align_up(s->kv_lse_off + 2 * s->BM * 4, 1024);
    s->ds = s2_bwd_ds_capable(p, spec);
    s->kv_ds_off = s->kv_stage0 + s->stages * s->kv_stage_bytes;
    /* NAME_dqds streams a K tile and a dS tile per entry and does one
     * product: a deeper ring than the recomputing kernels', sized where the
     * runtime reads its launch smem (s2_bwd_dqds_smem_bytes) */
    s->dqds_stages = s2_bwd_dqds_stages();
    s->dqds_stage_bytes = s2_bwd_dqds_smem_bytes(spec) / s->dqds_stages;
    s->dqds2_stage_bytes = s->BN * s->row_bytes + 2 * DS_TILE_BYTES;
    s->dqds2_u_off = s->dqds_stages * s->dqds2_stage_bytes;
    s->tma = s->wg && spec->bwd_tma > 0;
    s->kv_bar_off = (s->ds ? s->kv_ds_off + DS_TILE_BYTES : s->kv_stage0 + s->stages * s->kv_stage_bytes);
    /* the ring's refill under the entry's S and dP products, where it hides best (run 94) */
    s->late_refill = s->wg;
}

int s2_bwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    bwd_shape s;
    bwd_shape_init(&s, p, spec);
    int dq = s.dq_stage0 + s.stages * s.dq_stage_bytes;
    int kv = s.kv_stage0 + s.stages * s.kv_stage_bytes;
    if (s.tma)   /* its mbarriers end the dK/dV kernel's memory (after the dS tile with ds) */
        kv = s.kv_bar_off + 8 * s.stages;
    else if (s.ds)
        kv = s.kv_ds_off + DS_TILE_BYTES;
    if (s.ds) {
        int dqds = s.dqds_stages * s.dqds_stage_bytes;
        dq = dq > dqds ? dq : dqds;
    }
    return dq > kv ? dq : kv;
}

static LLVMValueRef new_kernel(bwd *k, const char *base, const char *suffix)
{
    s2_cg *cg = k->cg;
    char name[160];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    LLVMTypeRef params[P_COUNT];
    int n = s2_kb_abi_params(cg, k->s.tma ? S2_ABI_BWD_TMA : S2_ABI_BWD, params);
    LLVMValueRef fn = s2_nv_kernel_new(cg, name, params, (unsigned)n, k->s.threads, k->min_ctas ? k->min_ctas : 1);
    k->p_seqinfo = n - 1;
    for (int i = P_TMAP_Q; i < k->p_seqinfo; i++)
        s2_nv_param_tensormap(cg, fn, (unsigned)i);
    static const int ro[] = {P_Q, P_K, P_V, P_O, P_DO, P_LSE, P_DLSE, P_CLASS, P_OFFSETS, P_ENTRIES,
                             P_TCLASS, P_TOFFSETS, P_TENTRIES, P_DS_HEAD, P_DS_MAP};
    for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) {
        s2_nv_param_attr(cg, fn, (unsigned)ro[i], "noalias");
        s2_nv_param_attr(cg, fn, (unsigned)ro[i], "readonly");
    }
    for (int i = P_DELTA; i <= P_DV; i++)
        s2_nv_param_attr(cg, fn, (unsigned)i, "noalias");
    s2_nv_param_attr(cg, fn, P_DS, "noalias");
    s2_nv_param_attr(cg, fn, (unsigned)k->p_seqinfo, "noalias");
    s2_nv_param_attr(cg, fn, (unsigned)k->p_seqinfo, "readonly");
    k->fn = fn;
    k->entry_bb = LLVMGetInsertBlock(cg->b);
    common_setup(k);
    return fn;
}

s2_status s2_bwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    bwd k = {.kb = {.cg = cg, .b = cg->b}};
    bwd_shape_init(&k.s, p, spec);
    if (k.s.D > MAX_D || k.s.BN / 8 > MAX_N || k.s.qc / 8 > MAX_N || k.s.BM != 16 * k.s.warps ||
        k.s.D < 16 || k.s.D % 16 != 0 || k.s.chunks > k.s.threads || (k.s.wg && (k.s.D % 64 || k.s.kv_cols % 64)) ||
        (k.s.gather > 1 && (k.s.gbs != 16 || k.s.gather * k.s.gbs != k.s.BN || k.s.gather * k.s.gbs != k.s.KB)) ||
        k.s.kvg > 4 || k.s.kgbs < 16)
        return s2_fail(ctx, S2_ERR_INTERNAL, "backward: unresolved spec reached the builder");
    new_kernel(&k, name, "_pre");
    s2_bwd_build_pre(&k);
    new_kernel(&k, name, "_dq");
    s2_bwd_build_dq(&k);
    new_kernel(&k, name, "_dkdv");
    s2_bwd_build_dkdv(&k);
    if (k.s.ds) {
        new_kernel(&k, name, "_dqds");
        s2_bwd_build_dqds(&k);
        /* two warpgroups, two CTAs per SM (128 registers) */
        bwd_shape one = k.s;
        k.s.threads = S2_BWD_DQDS2_THREADS;
        k.s.warps = S2_BWD_DQDS2_THREADS / S2_WARP;
        k.min_ctas = 2;
        new_kernel(&k, name, "_dqds2");
        s2_bwd_build_dqds2(&k);
        k.s = one;
        k.min_ctas = 0;
    }
    return S2_OK;
}
