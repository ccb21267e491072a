/* The S2 block-sparse attention forward, FlashAttention-2 style, sm_80
 * instruction set (mma.sync m16n8k16, ldmatrix, cp.async; runs on sm_90).
 *
 * One CTA = one (query tile, head, batch); num_warps warps stacked along M,
 * each owning a 16-row slab of the block_m = 16 * num_warps query rows.
 * The CTA walks its list of the packed forward schedule: for every entry
 * (key tile, flags, live bits) K and V stream through a num_stages-deep
 * cp.async ring in shared memory, S = Q·Kᵀ and O += P·V run on tensor cores
 * with P kept in registers, and the online softmax works in base 2 in the
 * scaled domain (x = score · scale·log2 e).  Head dims are multiples of 16
 * to 256: a lone last k-step where D % 32 == 16, Q's fragments read from
 * shared memory per key tile past S2_FWD_Q_REGS_MAX_D.  The kernel ABI is
 * documented in include/s2c/attention.h. */
#include "fwd_common.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { MAX_D = 256, MAX_BN = S2_FWD_MAX_BN };

typedef struct fwd {
    S2_FWD_BASE;                                    /* shape, CTA state, accumulators (fwd_common.h) */
    bool tail;                                      /* D % 32 == 16: Q·Kᵀ's last k-step is a lone one (K x4 over two n-tiles) */
    bool q_reload;                                  /* Q's A-fragments read from shared memory per key tile, not kept in registers */
    LLVMValueRef qf[MAX_D / 16][4];                 /* Q A-fragments */
} fwd;

/* Byte offset of 16-byte chunk `chunk` of row `row` inside a [rows][D] tile
 * (128-byte swizzle, flash.h). */
static LLVMValueRef swizzle(fwd *k, LLVMValueRef row, LLVMValueRef chunk)
{
    return s2_flash_swizzle(k->cg, row, chunk, k->s.chunks);
}

/* Q A-fragments of this warp's slab (ldmatrix.x4, PTX ISA 9.7.14.5.15: lane l addresses row
 * (l%8) + 8*((l/8)%2), chunk 2*ks + l/16). */
static void load_q_fragments(fwd *k)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
        LLVMBuildAdd(b, LLVMBuildAnd(b, k->lane, c32(k, 7), ""),
                     LLVMBuildAnd(b, k->lane, c32(k, 8), ""), ""), "qfrag_row");
    LLVMValueRef hi = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    for (int ks = 0; ks < k->s.D / 16; ks++) {
        LLVMValueRef ch = LLVMBuildAdd(b, hi, c32(k, 2 * ks), "");
        LLVMValueRef off = LLVMBuildAdd(b, c32(k, k->s.q_off), swizzle(k, row, ch), "");
        s2_nv_ldmatrix_x4(k->cg, s2_nv_smem_at(k->cg, off), false, k->qf[ks]);
    }
}

/* ldmatrix addresses inside the loop are stage base + a lane-dependent part
 * + a constant, so ptxas folds the constant into the instruction and only a
 * few lane parts stay live (computing each swizzled address whole would keep
 * one 64-bit register per ldmatrix alive across the loop).
 * Chunk ch0 + lc of a row whose swizzle bits come from lane row r (ch0 a
 * compile-time multiple of the lane span, lc the lane's small chunk): the
 * constant part goes to *cst; the lane part depends only on a small key and
 * is built once (cache). */
typedef struct lane_parts {
    LLVMValueRef v[10];
} lane_parts;

static LLVMValueRef chunk_part(fwd *k, lane_parts *cache, LLVMValueRef r, int ch0, LLVMValueRef lc, int *cst)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, full = C & ~7;
    int key;
    LLVMValueRef ch;
    if (C >= 8 && ch0 < full) {
        *cst += 16 * (ch0 & ~7);
        key = ch0 & 7;
        ch = LLVMBuildXor(b, LLVMBuildAdd(b, lc, c32(k, ch0 & 7), ""), LLVMBuildAnd(b, r, c32(k, 7), ""), "");
    } else if (C == 4) {
        key = ch0 & 3;
        ch = LLVMBuildXor(b, LLVMBuildAdd(b, lc, c32(k, ch0 & 3), ""),
                          LLVMBuildAnd(b, LLVMBuildLShr(b, r, c32(k, 1), ""), c32(k, 3), ""), "");
    } else {
        *cst += 16 * ch0;
        key = 9;
        ch = lc;
    }
    if (!cache->v[key])
        cache->v[key] = LLVMBuildShl(b, ch, c32(k, 4), "lane_part");
    return cache->v[key];
}

/* Shared address base + part + cst (cst as a separate constant GEP). */
static LLVMValueRef smem_addr(fwd *k, LLVMValueRef base, LLVMValueRef part, int cst)
{
    LLVMValueRef p = s2_nv_smem_at(k->cg, LLVMBuildAdd(k->b, base, part, ""));
    LLVMValueRef c = c64(k, cst);
    return LLVMBuildInBoundsGEP2(k->b, LLVMInt8TypeInContext(k->cg->llctx), p, &c, 1, "");
}

/* Lane parts of the K and V ldmatrix addresses, built before the loop. */
typedef struct kv_lanes {
    LLVMValueRef k_row, k_lc, v_row, v_lc;  /* lane rows (swizzle source) and lane chunks */
    LLVMValueRef k_rowoff, v_rowoff;        /* lane row * row bytes */
    lane_parts k_parts, v_parts;
    LLVMValueRef k_part[MAX_D / 32], v_part[MAX_D / 16];
    int k_cst[MAX_D / 32], v_cst[MAX_D / 16];
    /* the lone last k-step's K x4 (tail), Q's fragments (q_reload) */
    lane_parts kt_parts, q_parts;
    LLVMValueRef kt_part, q_part[MAX_D / 16];
    int kt_cst, q_cst[MAX_D / 16];
} kv_lanes;

static void kv_lanes_init(fwd *k, kv_lanes *L)
{
    LLVMBuilderRef b = k->b;
    memset(L, 0, sizeof *L);
    int row_bytes = k->s.chunks * 16;
    /* K (x4, two k-steps): lane l -> key row l%8, chunk 4p + l/8 */
    L->k_row = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    L->k_lc = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    L->k_rowoff = LLVMBuildMul(b, L->k_row, c32(k, row_bytes), "");
    for (int p = 0; p < k->s.D / 32; p++)
        L->k_part[p] = LLVMBuildAdd(b, L->k_rowoff, chunk_part(k, &L->k_parts, L->k_row, 4 * p, L->k_lc, &L->k_cst[p]), "");
    /* V (x4.trans, two d-tiles): lane l -> key row l%16, chunk 2dp + l/16 */
    L->v_row = LLVMBuildAnd(b, k->lane, c32(k, 15), "");
    L->v_lc = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    L->v_rowoff = LLVMBuildMul(b, L->v_row, c32(k, row_bytes), "");
    for (int dp = 0; dp < k->s.D / 16; dp++)
        L->v_part[dp] = LLVMBuildAdd(b, L->v_rowoff, chunk_part(k, &L->v_parts, L->v_row, 2 * dp, L->v_lc, &L->v_cst[dp]), "");
    if (k->tail) {
        /* K of the lone k-step (x4, two n-tiles): lane l -> key row l%8 + 8(l/16), chunk D/8 - 2 + (l/8)%2 */
        LLVMValueRef row = LLVMBuildAdd(b, L->k_row, LLVMBuildLShr(b, LLVMBuildAnd(b, k->lane, c32(k, 16), ""), c32(k, 1), ""), "");
        LLVMValueRef lc = LLVMBuildAnd(b, L->k_lc, c32(k, 1), "");
        L->kt_part = LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(k, row_bytes), ""),
                                  chunk_part(k, &L->kt_parts, row, k->s.chunks - 2, lc, &L->kt_cst), "");
    }
    if (k->q_reload) {
        /* Q (x4, as load_q_fragments): lane l -> row 16 warp + l%8 + 8((l/8)%2), chunk 2ks + l/16 */
        LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
            LLVMBuildAdd(b, L->k_row, LLVMBuildAnd(b, k->lane, c32(k, 8), ""), ""), "");
        LLVMValueRef rowoff = LLVMBuildMul(b, row, c32(k, row_bytes), "");
        for (int ks = 0; ks < k->s.D / 16; ks++) {
            L->q_part[ks] = LLVMBuildAdd(b, rowoff, chunk_part(k, &L->q_parts, row, 2 * ks, L->v_lc, &L->q_cst[ks]), "");
            L->q_cst[ks] += k->s.q_off;
        }
    }
}

/* Q's A-fragment of k-step ks: kept in registers, or read from shared memory (q_reload). */
static LLVMValueRef *q_fragment(fwd *k, const kv_lanes *L, int ks, LLVMValueRef buf[4])
{
    if (!k->q_reload)
        return k->qf[ks];
    s2_nv_ldmatrix_x4(k->cg, smem_addr(k, c32(k, 0), L->q_part[ks], L->q_cst[ks]), false, buf);
    return buf;
}

/* Scores of n-tiles n0 .. n0+count-1, one n-tile at a time over Q's
 * fragments in registers. */
static void scores_by_tile(fwd *k, const kv_lanes *L, LLVMValueRef kst, int n0, int count)
{
    LLVMBuilderRef b = k->b;
    int row_bytes = k->s.chunks * 16;
    for (int n = n0; n < n0 + count; n++) {
        LLVMValueRef acc[4];
        for (int i = 0; i < 4; i++)
            acc[i] = cf(k, 0.0);
        for (int p = 0; p < k->s.D / 32; p++) {
            LLVMValueRef kb[4];
            s2_nv_ldmatrix_x4(k->cg, smem_addr(k, kst, L->k_part[p], L->k_cst[p] + n * 8 * row_bytes), false, kb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, k->qf[2 * p], &kb[0], acc);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, k->qf[2 * p + 1], &kb[2], acc);
        }
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(b, acc[i], k->s_acc[n][i]);
    }
}

/* Scores of n-tiles n0 .. n0+count-1 with the k-steps outermost (each Q
 * fragment read once per column group), for a lone last k-step (tail) or Q
 * read from shared memory (q_reload): K x4 two k-steps of one n-tile at a
 * time, and the lone k-step's x4 over two n-tiles. */
static void scores_by_kstep(fwd *k, const kv_lanes *L, LLVMValueRef kst, int n0, int count)
{
    LLVMBuilderRef b = k->b;
    int row_bytes = k->s.chunks * 16;
    LLVMValueRef acc[MAX_BN / 8][4], qa[2][4], kb[4];
    for (int n = n0; n < n0 + count; n++)
        for (int i = 0; i < 4; i++)
            acc[n][i] = cf(k, 0.0);
    for (int p = 0; p < k->s.D / 32; p++) {
        LLVMValueRef *a0 = q_fragment(k, L, 2 * p, qa[0]), *a1 = q_fragment(k, L, 2 * p + 1, qa[1]);
        for (int n = n0; n < n0 + count; n++) {
            s2_nv_ldmatrix_x4(k->cg, smem_addr(k, kst, L->k_part[p], L->k_cst[p] + n * 8 * row_bytes), false, kb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a0, &kb[0], acc[n]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a1, &kb[2], acc[n]);
        }
    }
    if (k->tail) {
        LLVMValueRef *a = q_fragment(k, L, k->s.D / 16 - 1, qa[0]);
        for (int n = n0; n < n0 + count; n += 2) {
            s2_nv_ldmatrix_x4(k->cg, smem_addr(k, kst, L->kt_part, L->kt_cst + n * 8 * row_bytes), false, kb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a, &kb[0], acc[n]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a, &kb[2], acc[n + 1]);
        }
    }
    for (int n = n0; n < n0 + count; n++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(b, acc[n][i], k->s_acc[n][i]);
}

/* S = Q·Kᵀ for the stage at byte offset kst: K B-fragments two k-steps at a
 * time (x4: lane l addresses key row n*8 + l%8, chunk 4p + l/8). */
static void compute_scores(fwd *k, const kv_lanes *L, LLVMValueRef kst, LLVMValueRef colmask, LLVMValueRef sc[][4])
{
    LLVMBuilderRef b = k->b;
    int per_group = colmask ? k->s.sub_n_size / 8 : k->s.BN / 8;   /* n-tiles per column group */
    for (int n0 = 0; n0 < k->s.BN / 8; n0 += per_group) {
        s2_nv_if grp = {0};
        if (colmask) {
            /* a skipped group keeps scores 0: the token mask turns them into -inf */
            for (int n = n0; n < n0 + per_group; n++)
                for (int i = 0; i < 4; i++)
                    LLVMBuildStore(b, cf(k, 0.0), k->s_acc[n][i]);
            LLVMValueRef bit = LLVMBuildAnd(b, colmask, c32(k, 1 << (n0 / per_group)), "");
            s2_nv_if_begin(k->cg, &grp, LLVMBuildICmp(b, LLVMIntNE, bit, c32(k, 0), ""), "cols");
        }
        if (k->tail || k->q_reload)
            scores_by_kstep(k, L, kst, n0, per_group);
        else
            scores_by_tile(k, L, kst, n0, per_group);
        if (colmask)
            s2_nv_if_end(k->cg, &grp);
    }
    for (int n = 0; n < k->s.BN / 8; n++)
        for (int i = 0; i < 4; i++)
            sc[n][i] = LLVMBuildLoad2(b, k->cg->t_f32, k->s_acc[n][i], "");
}

/* The token mask unless the entry is FULL: key column c of row r is kept
 * when its sub-block pair is live, c <= limit(r) where limit = kv_len-1 -
 * kpos0 (RAGGED) and, causal, qpos(r) - kpos0.  Masked scores become -inf.
 * Scores stay unscaled here: the scale is folded into the exponent. */
static void apply_mask(fwd *k, LLVMValueRef sc[][4], LLVMValueRef e, LLVMValueRef kpos0)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_fwd_shape *s = &k->s;
    int NT = s->BN / 8;

    LLVMValueRef flags = s2_fwd_entry_field(&k->fk, e, 4, cg->t_i32);
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, c32(k, S2_ENTRY_FULL), ""), c32(k, 0), "full");
    /* The schedule is the longest sequence's: a FULL tile may run past a
     * shorter one's kv_len.  Not so when causal: a FULL tile's keys precede
     * every query row of the tile, and the tile holds one of the sequence's. */
    if (!s->causal)
        full = LLVMBuildAnd(b, full, LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, kpos0, c32(k, s->BN), ""), k->kv_len, ""),
                            "full");
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef mask_bb = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "mask");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "masked");
    LLVMBuildCondBr(b, full, join, mask_bb);
    LLVMPositionBuilderAtEnd(b, mask_bb);

    LLVMValueRef live = s2_fwd_entry_field(&k->fk, e, 8, cg->t_i64);
    LLVMValueRef masked[MAX_BN / 8][4];
    LLVMValueRef ninf = cf(k, -INFINITY);
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, 1), "col0");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                                      LLVMBuildAdd(b, k->g, c32(k, 8 * hr), ""), "row");
        LLVMValueRef isub = LLVMBuildLShr(b, r, c32(k, s->sub_m_log2), "");
        LLVMValueRef shift = LLVMBuildZExt(b, LLVMBuildMul(b, isub, c32(k, s->sub_n), ""), cg->t_i64, "");
        LLVMValueRef bits = LLVMBuildTrunc(b, LLVMBuildLShr(b, live, shift, ""), cg->t_i32, "row_live");
        LLVMValueRef limit = LLVMBuildSub(b, LLVMBuildSub(b, k->kv_len, c32(k, 1), ""), kpos0, "");
        if (s->causal) {
            LLVMValueRef qpos = LLVMBuildAdd(b, k->tile_pos0, r, "");
            limit = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildSub(b, qpos, kpos0, ""), limit, ""),
                                    LLVMBuildSub(b, qpos, kpos0, ""), limit, "limit");
        }
        LLVMValueRef lim_rel = LLVMBuildSub(b, limit, col0, "");   /* compare c - col0 <= limit - col0 */
        for (int n = 0; n < NT; n++) {
            int jsub = n * 8 / s->sub_n_size;
            LLVMValueRef live_bit = LLVMBuildICmp(b, LLVMIntNE,
                LLVMBuildAnd(b, bits, c32(k, 1 << jsub), ""), c32(k, 0), "");
            for (int e2 = 0; e2 < 2; e2++) {
                int i = 2 * hr + e2;
                LLVMValueRef inside = LLVMBuildICmp(b, LLVMIntSLE, c32(k, n * 8 + e2), lim_rel, "");
                masked[n][i] = LLVMBuildSelect(b, LLVMBuildAnd(b, inside, live_bit, ""), sc[n][i], ninf, "");
            }
        }
    }
    s2_flash_join_scores(cg, from, join, NT, sc, masked);
}

/* Online softmax (flash.h; FA2 softmax_rescale_o) of the thread's two rows: new max, O and l
 * rescaled, scores -> probabilities in place. */
static void online_softmax(fwd *k, LLVMValueRef sc[][4])
{
    for (int hr = 0; hr < 2; hr++)
        s2_flash_softmax_row(k->cg, &k->acc, hr, sc, k->s.BN / 8, param(k, P_SCALE_LOG2), true, NULL);
}

/* O += P·V: P from the score registers (C layout of n-tiles 2kk, 2kk+1 = A
 * layout of k-step kk, PTX ISA 9.7.14.5.8), V B-fragments with ldmatrix.x4.trans, two
 * d-tiles at a time (lane l addresses key row 16kk + l%16, chunk 2dp + l/16). */
static void accumulate_pv(fwd *k, const kv_lanes *L, LLVMValueRef vst, LLVMValueRef colmask, LLVMValueRef sc[][4])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int row_bytes = k->s.chunks * 16;
    int steps_per_group = colmask ? k->s.sub_n_size / 16 : k->s.BN / 16;
    s2_nv_if grp = {0};
    for (int kk = 0; kk < k->s.BN / 16; kk++) {
        bool first = kk % steps_per_group == 0, last = (kk + 1) % steps_per_group == 0;
        if (colmask && first) {
            LLVMValueRef bit = LLVMBuildAnd(b, colmask, c32(k, 1 << (kk / steps_per_group)), "");
            s2_nv_if_begin(cg, &grp, LLVMBuildICmp(b, LLVMIntNE, bit, c32(k, 0), ""), "pv_cols");
        }
        LLVMValueRef a[4];
        s2_flash_a_from_c(cg, k->s.dt, &sc[2 * kk], a);
        for (int dp = 0; dp < k->s.D / 16; dp++) {
            LLVMValueRef vb[4];
            s2_nv_ldmatrix_x4(cg, smem_addr(k, vst, L->v_part[dp], L->v_cst[dp] + 16 * kk * row_bytes), true, vb);
            for (int h = 0; h < 2; h++)
                s2_flash_mma_into(cg, k->s.dt, a, &vb[2 * h], k->acc.o[2 * dp + h]);
        }
        if (colmask && last)
            s2_nv_if_end(cg, &grp);
    }
}

/* The loop over the list: ring of `stages` K/V buffers, one cp.async group
 * per entry, committed even when empty so that wait_group counts stay fixed. */
static void main_loop(fwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int S = k->s.stages;
    kv_lanes L;
    kv_lanes_init(k, &L);
    s2_nv_loop loop;
    s2_nv_loop_begin(cg, &loop, "kv", k->begin, k->end, c32(k, 1), NULL, 0);
    LLVMValueRef e = loop.iv;
    LLVMValueRef i = LLVMBuildSub(b, e, k->begin, "i");
    if (S > 1) {
        /* one barrier per entry: it publishes stage i and tells that every
         * warp is done with entry i-1, whose stage the prefetch refills */
        s2_nv_cp_async_wait(cg, S - 2);
        s2_nv_barrier_cta(cg);
        s2_fwd_prefetch_kv(&k->fk, LLVMBuildAdd(b, e, c32(k, S - 1), ""),
                    s2_kb_ring_stage(&k->kb, LLVMBuildAdd(b, i, c32(k, S - 1), ""), S, ""));
    } else {
        s2_fwd_prefetch_kv(&k->fk, e, c32(k, 0));
        s2_nv_cp_async_wait(cg, 0);
        s2_nv_barrier_cta(cg);
    }

    LLVMValueRef stage = s2_kb_ring_stage(&k->kb, i, S, "stage");
    LLVMValueRef soff = LLVMBuildMul(b, stage, c32(k, k->s.stage_bytes), "");
    LLVMValueRef kst = LLVMBuildAdd(b, soff, c32(k, k->s.k_off), "kst");
    LLVMValueRef vst = LLVMBuildAdd(b, soff, c32(k, k->s.v_off), "vst");
    LLVMValueRef kpos0 = LLVMBuildMul(b, s2_fwd_entry_field(&k->fk, e, 0, cg->t_i32), c32(k, k->s.BN), "kpos0");

    LLVMValueRef colmask = s2_fwd_skips_columns(&k->fk) ? s2_fwd_entry_colmask(&k->fk, e) : NULL;
    LLVMValueRef sc[MAX_BN / 8][4];
    compute_scores(k, &L, kst, colmask, sc);
    apply_mask(k, sc, e, kpos0);
    online_softmax(k, sc);
    accumulate_pv(k, &L, vst, colmask, sc);
    /* single stage: the next entry's copy overwrites this one */
    if (S == 1)
        s2_nv_barrier_cta(cg);
    s2_nv_loop_end(cg, &loop, NULL);
}

/* O /= l, LSE = (m·scale_log2 + log2 l)·ln 2; empty rows give O = 0 and LSE = -inf.
 * Rows outside [q_start, kv_len) are not stored.  As the sm_90a epilogue:
 * one exchange with the neighbouring lane, then 8-byte stores that write
 * whole 32-byte sectors (4-byte stores where O or its strides are not
 * 8-byte aligned). */
static void epilogue(fwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_nv_cp_async_wait(cg, 0);
    s2_flash_pairs pr;
    s2_flash_pairs_init(cg, &pr, k->t4, k->s.D);
    LLVMValueRef offs[1] = {LLVMBuildOr(b, k->obase, param(k, P_OS + 1), "")};
    LLVMValueRef aligned = s2_flash_aligned8(cg, param(k, P_O), offs, 1);
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef inv, lse;
        s2_flash_row_final(cg, &k->acc, hr, param(k, P_SCALE_LOG2), &inv, &lse);
        s2_flash_pairs_pack(cg, &pr, k->s.dt, k->acc.o, hr, inv);
        s2_flash_pairs_exchange(cg, &pr);   /* in every lane (outside the row guard) */

        LLVMValueRef r = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                                      LLVMBuildAdd(b, k->g, c32(k, 8 * hr), ""), "row");
        LLVMValueRef qrow;
        LLVMValueRef ok = s2_fwd_q_row(&k->fk, r, &qrow);
        s2_nv_if store;
        s2_nv_if_begin(cg, &store, ok, "store");
        LLVMValueRef row_off = LLVMBuildAdd(b, k->obase, LLVMBuildMul(b, sext64(k, qrow), param(k, P_OS + 1), ""), "");
        s2_flash_pairs_store(cg, &pr, param(k, P_O), row_off, aligned);
        s2_flash_store_lse(cg, k->t4, param(k, P_LSE), k->lse_base, qrow, lse);
        s2_nv_if_end(cg, &store);
    }
    LLVMBuildRetVoid(b);
}

int s2_fwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    s2_fwd_shape s;
    s2_fwd_shape_init(&s, p, spec, 2);
    return s.v_off + s.stages * s.stage_bytes;
}

s2_status s2_fwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    fwd k = {.kb = {.cg = cg, .b = cg->b}};
    s2_fwd_shape_init(&k.s, p, spec, 2);
    k.tail = k.s.D % 32 == 16;
    /* past it Q's fragments (D/4 registers) would push O and S into spills */
    k.q_reload = k.s.D > S2_FWD_Q_REGS_MAX_D;
    if (k.s.D > MAX_D || k.s.BN > MAX_BN || k.s.BM != 16 * k.s.warps || k.s.D % 16 != 0)
        return s2_fail(ctx, S2_ERR_INTERNAL, "forward: unresolved spec reached the builder");
    s2_fwd_prologue(&k.fk, name);
    if (!k.q_reload)
        load_q_fragments(&k);
    main_loop(&k);
    epilogue(&k);
    return S2_OK;
}
