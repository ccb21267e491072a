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

/* Lane parts of the K and V ldmatrix addresses, built before the loop. */
typedef struct kv_lanes {
    LLVMValueRef k_row, k_lc, v_row, v_lc;  /* lane rows (swizzle source) and lane chunks */
    LLVMValueRef k_rowoff, v_rowoff;        /* lane row * row bytes */
    s2_fwd_lane_parts k_parts, v_parts;
    LLVMValueRef k_part[MAX_D / 32], v_part[MAX_D / 16];
    int k_cst[MAX_D / 32], v_cst[MAX_D / 16];
    /* the lone last k-step's K x4 (tail), Q's fragments (q_reload) */
    s2_fwd_lane_parts kt_parts, q_parts;
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
        L->k_part[p] = LLVMBuildAdd(b, L->k_rowoff, s2_fwd_chunk_part(&k->fk, &L->k_parts, L->k_row, 4 * p, L->k_lc, &L->k_cst[p]), "");
    /* V (x4.trans, two d-tiles): lane l -> key row l%16, chunk 2dp + l/16 */
    L->v_row = LLVMBuildAnd(b, k->lane, c32(k, 15), "");
    L->v_lc = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    L->v_rowoff = LLVMBuildMul(b, L->v_row, c32(k, row_bytes), "");
    for (int dp = 0; dp < k->s.D / 16; dp++)
        L->v_part[dp] = LLVMBuildAdd(b, L->v_rowoff, s2_fwd_chunk_part(&k->fk, &L->v_parts, L->v_row, 2 * dp, L->v_lc, &L->v_cst[dp]), "");
    if (k->tail) {
        /* K of the lone k-step (x4, two n-tiles): lane l -> key row l%8 + 8(l/16), chunk D/8 - 2 + (l/8)%2 */
        LLVMValueRef row = LLVMBuildAdd(b, L->k_row, LLVMBuildLShr(b, LLVMBuildAnd(b, k->lane, c32(k, 16), ""), c32(k, 1), ""), "");
        LLVMValueRef lc = LLVMBuildAnd(b, L->k_lc, c32(k, 1), "");
        L->kt_part = LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(k, row_bytes), ""),
                                  s2_fwd_chunk_part(&k->fk, &L->kt_parts, row, k->s.chunks - 2, lc, &L->kt_cst), "");
    }
    if (k->q_reload) {
        /* Q (x4, as load_q_fragments): lane l -> row 16 warp + l%8 + 8((l/8)%2), chunk 2ks + l/16 */
        LLVMValueRef row = LLVMBuildAdd(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
            LLVMBuildAdd(b, L->k_row, LLVMBuildAnd(b, k->lane, c32(k, 8), ""), ""), "");
        LLVMValueRef rowoff = LLVMBuildMul(b, row, c32(k, row_bytes), "");
        for (int ks = 0; ks < k->s.D / 16; ks++) {
            L->q_part[ks] = LLVMBuildAdd(b, rowoff,
                                         s2_fwd_chunk_part(&k->fk, &L->q_parts, row, 2 * ks, L->v_lc, &L->q_cst[ks]), "");
            L->q_cst[ks] += k->s.q_off;
        }
    }
}

/* Q's A-fragment of k-step ks: kept in registers, or read from shared memory (q_reload). */
static LLVMValueRef *q_fragment(fwd *k, const kv_lanes *L, int ks, LLVMValueRef buf[4])
{
    if (!k->q_reload)
        return k->qf[ks];
    s2_nv_ldmatrix_x4(k->cg, s2_fwd_smem_addr(&k->fk, c32(k, 0), L->q_part[ks], L->q_cst[ks]), false, buf);
    return buf;
}

/* Scores of n-tile n over Q's fragments in registers (s2_fwd_scores_by_tile). */
static void tile_scores(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef kst, int n, LLVMValueRef acc[4])
{
    fwd *k = (fwd *)fk;
    const kv_lanes *L = lanes;
    int row_bytes = k->s.chunks * 16;
    for (int p = 0; p < k->s.D / 32; p++) {
        LLVMValueRef kb[4];
        s2_nv_ldmatrix_x4(k->cg, s2_fwd_smem_addr(&k->fk, kst, L->k_part[p], L->k_cst[p] + n * 8 * row_bytes), false, kb);
        s2_nv_mma_m16n8k16(k->cg, k->s.dt, k->qf[2 * p], &kb[0], acc);
        s2_nv_mma_m16n8k16(k->cg, k->s.dt, k->qf[2 * p + 1], &kb[2], acc);
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
            s2_nv_ldmatrix_x4(k->cg, s2_fwd_smem_addr(&k->fk, kst, L->k_part[p], L->k_cst[p] + n * 8 * row_bytes), false, kb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a0, &kb[0], acc[n]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a1, &kb[2], acc[n]);
        }
    }
    if (k->tail) {
        LLVMValueRef *a = q_fragment(k, L, k->s.D / 16 - 1, qa[0]);
        for (int n = n0; n < n0 + count; n += 2) {
            s2_nv_ldmatrix_x4(k->cg, s2_fwd_smem_addr(&k->fk, kst, L->kt_part, L->kt_cst + n * 8 * row_bytes), false, kb);
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
static void score_tiles(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef kst, int n0, int count)
{
    fwd *k = (fwd *)fk;
    const kv_lanes *L = lanes;
    if (k->tail || k->q_reload)
        scores_by_kstep(k, L, kst, n0, count);
    else
        s2_fwd_scores_by_tile(fk, L, kst, n0, count, tile_scores);
}

/* O += P·V of k-step kk (16 keys): P from the score registers (C layout of
 * n-tiles 2kk, 2kk+1 = A layout of k-step kk, PTX ISA 9.7.14.5.8), V
 * B-fragments with ldmatrix.x4.trans, two d-tiles at a time (lane l
 * addresses key row 16kk + l%16, chunk 2dp + l/16). */
static void accumulate_pv(s2_fwd_kernel *fk, const void *lanes, LLVMValueRef vst, int kk, LLVMValueRef sc[][4])
{
    fwd *k = (fwd *)fk;
    const kv_lanes *L = lanes;
    s2_cg *cg = k->cg;
    int row_bytes = k->s.chunks * 16;
    LLVMValueRef a[4];
    s2_flash_a_from_c(cg, k->s.dt, &sc[2 * kk], a);
    for (int dp = 0; dp < k->s.D / 16; dp++) {
        LLVMValueRef vb[4];
        s2_nv_ldmatrix_x4(cg, s2_fwd_smem_addr(&k->fk, vst, L->v_part[dp], L->v_cst[dp] + 16 * kk * row_bytes), true, vb);
        for (int h = 0; h < 2; h++)
            s2_flash_mma_into(cg, k->s.dt, a, &vb[2 * h], k->acc.o[2 * dp + h]);
    }
}

/* O /= l, LSE = (m·scale_log2 + log2 l)·ln 2; empty rows give O = 0 and LSE = -inf.
 * Rows outside [q_start, kv_len) are not stored.  As the sm_90a epilogue:
 * one exchange with the neighbouring lane, then 8-byte stores that write
 * whole 32-byte sectors (4-byte stores where O or its strides are not
 * 8-byte aligned). */
static void epilogue(fwd *k)
{
    s2_flash_out out = s2_fwd_out(&k->fk);
    s2_flash_store_rows16(k->cg, &out, &k->acc, k->s.dt, param(k, P_SCALE_LOG2), NULL, 0, s2_fwd_thread_q_row, &k->fk);
    LLVMBuildRetVoid(k->b);
}

int s2_fwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    s2_fwd_shape s;
    s2_fwd_shape_init(&s, p, spec, 2);
    return s2_fwd_shape_smem(&s);
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
    kv_lanes L;
    kv_lanes_init(&k, &L);
    s2_fwd_main_loop(&k.fk, score_tiles, accumulate_pv, 16, &L);
    epilogue(&k);
    return S2_OK;
}
