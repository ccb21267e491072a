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
 *              thread: the per-thread copies and the proxy fence per entry
 *              were a fifth of the kernel's warp-state samples).
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
 * read as zeros (Q, dO, delta), which makes their contribution zero. */
#include "cg_internal.h"
#include "flash.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bwd_internal.h"

/* ---- shared-memory tiles ([rows][D] of 16-bit, 16-byte chunks swizzled as
 *      in the forward: chunk ^= row & 7, or (row >> 1) & 3 for 4 chunks) ---- */

static LLVMValueRef swizzle(bwd *k, LLVMValueRef row, LLVMValueRef chunk)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef sw = k->s.chunks >= 8
        ? LLVMBuildXor(b, chunk, LLVMBuildAnd(b, row, c32(k, 7), ""), "")
        : LLVMBuildXor(b, chunk, LLVMBuildAnd(b, LLVMBuildLShr(b, row, c32(k, 1), ""), c32(k, 3), ""), "");
    return add(k, mul(k, row, c32(k, k->s.row_bytes)), LLVMBuildShl(b, sw, c32(k, 4), ""));
}

/* Byte offset of (row r, 16-byte chunk ch) in a tile of `rows` rows.  The
 * wgmma layout (sm_90a) stores 64-column blocks of 128-byte rows, one after
 * the other, with the 128-byte swizzle (chunk ^= row & 7), which is what the
 * wgmma descriptors of templates/bwd_sm90.c read. */
static LLVMValueRef tile_off(bwd *k, int rows, LLVMValueRef r, LLVMValueRef ch)
{
    if (!k->s.wg)
        return swizzle(k, r, ch);
    LLVMBuilderRef b = k->b;
    LLVMValueRef blk = mul(k, LLVMBuildLShr(b, ch, c32(k, 3), ""), c32(k, rows * 128));
    LLVMValueRef sw = LLVMBuildXor(b, LLVMBuildAnd(b, ch, c32(k, 7), ""), LLVMBuildAnd(b, r, c32(k, 7), ""), "");
    return add(k, blk, add(k, LLVMBuildShl(b, r, c32(k, 7), ""), LLVMBuildShl(b, sw, c32(k, 4), "")));
}

/* ldmatrix address: row lane_row + row0, chunk lc + ch0, with row0 a multiple
 * of 8 and ch0 such that (ch0 mod 8) + lc stays below 8 (below 4 for 4 chunks):
 * the swizzle then depends on the lane only, and the constant part becomes an
 * immediate offset (few live address registers, as in the forward). */
static LLVMValueRef frag_addr(bwd *k, LLVMValueRef tile, LLVMValueRef lane_row, LLVMValueRef lc, int row0, int ch0)
{
    LLVMBuilderRef b = k->b;
    int cst = row0 * k->s.row_bytes;
    int key = k->s.chunks >= 8 ? (ch0 & 7) : (ch0 & 3);
    if (k->s.chunks >= 8)
        cst += 16 * (ch0 & ~7);
    LLVMValueRef part = swizzle(k, lane_row, add(k, lc, c32(k, key)));
    LLVMValueRef p = s2_nv_smem_at(k->cg, add(k, tile, part));
    LLVMValueRef c = c64(k, cst);
    return LLVMBuildInBoundsGEP2(b, LLVMInt8TypeInContext(k->cg->llctx), p, &c, 1, "");
}

/* A fragment (this warp's 16 rows x k-step ks) of the tile at byte offset `tile`. */
static void ldsm_a(bwd *k, LLVMValueRef tile, int ks, LLVMValueRef out[4])
{
    s2_nv_ldmatrix_x4(k->cg, frag_addr(k, tile, k->a_row, k->a_lc, 0, 2 * ks), false, out);
}

/* B fragments of X·Yᵀ, Y = tile rows row0..row0+7: k-steps 2p (out[0..1]) and 2p+1 (out[2..3]). */
static void ldsm_b(bwd *k, LLVMValueRef tile, int row0, int p, LLVMValueRef out[4])
{
    s2_nv_ldmatrix_x4(k->cg, frag_addr(k, tile, k->b_row, k->b_lc, row0, 4 * p), false, out);
}

/* B fragments of P·Y, Y = tile rows row0..row0+15 (the k dimension):
 * d-tiles 2dp (out[0..1]) and 2dp+1 (out[2..3]). */
static void ldsm_bt(bwd *k, LLVMValueRef tile, int row0, int dp, LLVMValueRef out[4])
{
    s2_nv_ldmatrix_x4(k->cg, frag_addr(k, tile, k->bt_row, k->bt_lc, row0, 2 * dp), true, out);
}

/* acc[n] = A·Yᵀ over the head dim: A = this warp's 16 rows of tile `a`, Y =
 * rows row0 + 8n of tile `bt` (n < ntiles). */
static void mma_abt(bwd *k, LLVMValueRef a, LLVMValueRef bt, int row0, int ntiles, LLVMValueRef acc[][4])
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++)
            acc[n][i] = cf(k, 0.0);
    for (int p = 0; p < k->s.D / 32; p++) {
        LLVMValueRef a0[4], a1[4];
        ldsm_a(k, a, 2 * p, a0);
        ldsm_a(k, a, 2 * p + 1, a1);
        for (int n = 0; n < ntiles; n++) {
            LLVMValueRef bb[4];
            ldsm_b(k, bt, row0 + 8 * n, p, bb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a0, &bb[0], acc[n]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a1, &bb[2], acc[n]);
        }
    }
}

/* out[dn] += X·Y: X = C-layout values x[ntiles][4] reused as A fragments
 * (n-tiles 2kk, 2kk+1 = k-step kk, §1.4), Y = rows row0 + 16kk.. of tile `y`. */
static void mma_xy(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef y, int row0, LLVMValueRef out[][4])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    for (int kk = 0; kk < ntiles / 2; kk++) {
        LLVMValueRef a[4] = {
            s2_nv_pack2(cg, k->s.dt, x[2 * kk][0], x[2 * kk][1]),
            s2_nv_pack2(cg, k->s.dt, x[2 * kk][2], x[2 * kk][3]),
            s2_nv_pack2(cg, k->s.dt, x[2 * kk + 1][0], x[2 * kk + 1][1]),
            s2_nv_pack2(cg, k->s.dt, x[2 * kk + 1][2], x[2 * kk + 1][3]),
        };
        for (int dp = 0; dp < k->s.D / 16; dp++) {
            LLVMValueRef vb[4];
            ldsm_bt(k, y, row0 + 16 * kk, dp, vb);
            for (int h = 0; h < 2; h++) {
                LLVMValueRef acc[4];
                for (int i = 0; i < 4; i++)
                    acc[i] = LLVMBuildLoad2(b, cg->t_f32, out[2 * dp + h][i], "");
                s2_nv_mma_m16n8k16(cg, k->s.dt, a, &vb[2 * h], acc);
                for (int i = 0; i < 4; i++)
                    LLVMBuildStore(b, acc[i], out[2 * dp + h][i]);
            }
        }
    }
}

/* ---- global -> shared copies ---- */

static LLVMValueRef gep16(bwd *k, LLVMValueRef base, LLVMValueRef off)
{
    LLVMTypeRef i16 = LLVMInt16TypeInContext(k->cg->llctx);
    return LLVMBuildInBoundsGEP2(k->b, i16, base, &off, 1, "");
}

/* Slots of a gathered tile: nslot runs of `rows` rows, slot j's first row
 * at position pos[j]. */
typedef struct slots {
    const LLVMValueRef *pos;
    int n, rows;
} slots;

/* Position of row r of a gathered tile: slot r / rows starts at pos[r / rows]. */
static LLVMValueRef slot_row_pos(bwd *k, const slots *sl, LLVMValueRef r)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef j = LLVMBuildLShr(b, r, c32(k, s2_log2i(sl->rows)), "");
    LLVMValueRef base = sl->pos[0];
    for (int i = 1; i < sl->n; i++)
        base = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, j, c32(k, i), ""), sl->pos[i], base, "");
    return add(k, base, LLVMBuildAnd(b, r, c32(k, sl->rows - 1), ""));
}

/* Row r of a tile starting at absolute position pos0 (or of a gathered tile
 * with the given slots): a query row exists when q_start <= pos < kv_len
 * (tensor row pos - q_start), a key row when 0 <= pos < kv_len (gathered
 * tiles mark unused slots with negative positions). */
static LLVMValueRef tile_row_at(bwd *k, LLVMValueRef pos0, const slots *slot, bool query, LLVMValueRef r,
                                LLVMValueRef *trow)
{
    LLVMValueRef pos = slot ? slot_row_pos(k, slot, r) : add(k, pos0, r);
    LLVMValueRef ok = LLVMBuildICmp(k->b, LLVMIntSLT, pos, k->kv_len, "");
    *trow = pos;
    if (!query) {
        ok = LLVMBuildAnd(k->b, ok, LLVMBuildICmp(k->b, LLVMIntSGE, pos, c32(k, 0), ""), "");
    } else {
        *trow = LLVMBuildSub(k->b, pos, k->q_start, "qrow");
        ok = LLVMBuildAnd(k->b, ok, LLVMBuildICmp(k->b, LLVMIntSGE, pos, k->q_start, ""), "");
    }
    return ok;
}

static LLVMValueRef tile_row(bwd *k, LLVMValueRef pos0, bool query, LLVMValueRef r, LLVMValueRef *trow)
{
    return tile_row_at(k, pos0, NULL, query, r, trow);
}

static void load_tile_rows(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                           LLVMValueRef dst, LLVMValueRef pos0, const slots *slot, bool query);

/* A tile whose rows all exist (the common case): the thread's chunk and
 * first row are fixed, each next copy is T / C rows further, so its address
 * is one add away (no per-row checks, multiplies or zero-fill sizes).
 * trow0: the tensor row of tile row 0, or with slot, of each slot's row 0
 * (slot->rows a multiple of T / C: a copy never straddles two slots). */
static void load_tile_whole(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                            LLVMValueRef dst, const LLVMValueRef *trow0, const slots *slot)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, step = T / C, run = slot ? slot->rows : rows;
    LLVMValueRef r = LLVMBuildLShr(b, k->tid, c32(k, s2_log2i(C)), "");
    LLVMValueRef ch = LLVMBuildAnd(b, k->tid, c32(k, C - 1), "");
    LLVMValueRef src = NULL, inc = NULL;
    for (int it = 0; it * step < rows; it++) {
        int row = it * step;
        if (row % run == 0) {   /* a new run of rows (a slot): its first address */
            LLVMValueRef off = add(k, slice, add(k, mul(k, sext64(k, add(k, trow0[row / run], r)), rstride),
                                                 LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), k->cg->t_i64, "")));
            src = gep16(k, base, off);
            if (!inc)
                inc = mul(k, rstride, c64(k, step));
        } else {
            src = gep16(k, src, inc);
        }
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, tile_off(k, rows, add(k, r, c32(k, row)), ch))),
                          src, c32(k, 16));
    }
}

/* cp.async a [rows][D] tile of tensor `base` (slice = element offset of this
 * (b, h), rstride its seq stride) into shared `dst`; missing rows are
 * zero-filled and their source clamped to the slice start.  A tile whose
 * rows all exist takes load_tile_whole: the per-row checks and multiplies
 * were about a fifth of the dK/dV kernel's instructions per entry
 * (bench/RESULTS.md run 30: dK/dV -5%, dQ -13%). */
static void load_tile(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride, LLVMValueRef dst,
                      LLVMValueRef pos0, const slots *slot, bool query)
{
    int step = k->s.threads / k->s.chunks;
    if (k->s.threads % k->s.chunks || step % 8 || rows % step || (slot && slot->rows % step)) {
        load_tile_rows(k, rows, base, slice, rstride, dst, pos0, slot, query);
        return;
    }
    /* rows [p, p + n) exist when lo <= p and p + n <= kv_len (tile_row_at),
     * for the tile or for each of its slots */
    LLVMBuilderRef b = k->b;
    LLVMValueRef lo = query ? k->q_start : c32(k, 0), whole = NULL, trow0[4];
    int runs = slot ? slot->n : 1, run = slot ? slot->rows : rows;
    for (int j = 0; j < runs; j++) {
        LLVMValueRef p = slot ? slot->pos[j] : pos0;
        LLVMValueRef ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, p, lo, ""),
                                       LLVMBuildICmp(b, LLVMIntSLE, add(k, p, c32(k, run)), k->kv_len, ""), "");
        whole = whole ? LLVMBuildAnd(b, whole, ok, "") : ok;
        trow0[j] = LLVMBuildSub(b, p, lo, "");
    }
    s2_nv_if w, p;
    s2_nv_if_begin(k->cg, &w, whole, "tile_whole");
    load_tile_whole(k, rows, base, slice, rstride, dst, trow0, slot);
    s2_nv_if_end(k->cg, &w);
    s2_nv_if_begin(k->cg, &p, LLVMBuildNot(b, whole, ""), "tile_part");
    load_tile_rows(k, rows, base, slice, rstride, dst, pos0, slot, query);
    s2_nv_if_end(k->cg, &p);
}

/* load_tile row by row: each row checked, missing ones zero-filled. */
static void load_tile_rows(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                           LLVMValueRef dst, LLVMValueRef pos0, const slots *slot, bool query)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, total = rows * C;
    for (int it = 0; it * T < total; it++) {
        LLVMValueRef idx = add(k, k->tid, c32(k, it * T));
        s2_nv_if guard = {0};
        bool partial = (it + 1) * T > total;
        if (partial)
            s2_nv_if_begin(k->cg, &guard, LLVMBuildICmp(b, LLVMIntULT, idx, c32(k, total), ""), "tail");
        LLVMValueRef r = LLVMBuildLShr(b, idx, c32(k, s2_log2i(C)), "");
        LLVMValueRef ch = LLVMBuildAnd(b, idx, c32(k, C - 1), "");
        LLVMValueRef trow;
        LLVMValueRef ok = tile_row_at(k, pos0, slot, query, r, &trow);
        LLVMValueRef off = add(k, mul(k, sext64(k, trow), rstride),
                               LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), k->cg->t_i64, ""));
        off = LLVMBuildSelect(b, ok, add(k, slice, off), slice, "");
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, tile_off(k, rows, r, ch))), gep16(k, base, off),
                          LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), ""));
        if (partial)
            s2_nv_if_end(k->cg, &guard);
    }
}

/* cp.async lse2 and delta of the query tile at pos0 (rows of [B][H][Sq] from
 * element rowbase) into dst: lse2[BM] then delta[BM]; missing rows read 0. */
static void load_row_stats(bwd *k, LLVMValueRef pos0, LLVMValueRef rowbase, LLVMValueRef dst)
{
    LLVMBuilderRef b = k->b;
    int BM = k->s.BM, T = k->s.threads, total = 2 * BM;
    for (int it = 0; it * T < total; it++) {
        LLVMValueRef idx = add(k, k->tid, c32(k, it * T));
        s2_nv_if guard = {0};
        bool partial = (it + 1) * T > total;
        if (partial)
            s2_nv_if_begin(k->cg, &guard, LLVMBuildICmp(b, LLVMIntULT, idx, c32(k, total), ""), "tail");
        LLVMValueRef is_delta = LLVMBuildICmp(b, LLVMIntUGE, idx, c32(k, BM), "");
        LLVMValueRef r = LLVMBuildAnd(b, idx, c32(k, BM - 1), "");
        LLVMValueRef qrow;
        LLVMValueRef ok = tile_row(k, pos0, true, r, &qrow);
        LLVMValueRef off = LLVMBuildSelect(b, ok, add(k, rowbase, sext64(k, qrow)), rowbase, "");
        LLVMValueRef src = LLVMBuildSelect(b, is_delta, param(k, P_DELTA), param(k, P_LSE2), "");
        LLVMValueRef sp = LLVMBuildInBoundsGEP2(b, k->cg->t_f32, src, &off, 1, "");
        LLVMValueRef d = add(k, dst, LLVMBuildShl(b, idx, c32(k, 2), ""));
        s2_nv_cp_async_4(k->cg, s2_nv_smem_at(k->cg, d), sp, LLVMBuildSelect(b, ok, c32(k, 4), c32(k, 0), ""));
        if (partial)
            s2_nv_if_end(k->cg, &guard);
    }
}

/* ---- schedule lists ---- */

/* Field at byte field_off of record e of `size` bytes. */
static LLVMValueRef field_at(bwd *k, LLVMValueRef entries, LLVMValueRef e, int size, int field_off, LLVMTypeRef ty)
{
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef off = add(k, mul(k, sext64(k, e), c64(k, size)), c64(k, field_off));
    LLVMValueRef v = LLVMBuildLoad2(k->b, ty, LLVMBuildInBoundsGEP2(k->b, i8, entries, &off, 1, ""), "");
    LLVMSetAlignment(v, ty == k->cg->t_i64 ? 8 : 4);
    return v;
}

/* Field of s2_dev_entry e of `entries`: byte offset 0 tile, 4 flags, 8 live. */
LLVMValueRef bwd_entry_field(bwd *k, LLVMValueRef entries, LLVMValueRef e, int field_off, LLVMTypeRef ty)
{
    return field_at(k, entries, e, (int)sizeof(s2_dev_entry), field_off, ty);
}

static LLVMValueRef load_i32(bwd *k, LLVMValueRef base, LLVMValueRef idx64)
{
    LLVMValueRef v = LLVMBuildLoad2(k->b, k->cg->t_i32, LLVMBuildInBoundsGEP2(k->b, k->cg->t_i32, base, &idx64, 1, ""), "");
    LLVMSetAlignment(v, 4);
    return v;
}

/* List `index` of head h's class: [*begin, *end) of the entries array;
 * *first (if asked) the class's first entry. */
static void list_bounds_of(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists,
                           LLVMValueRef index, LLVMValueRef *begin, LLVMValueRef *end, LLVMValueRef *first)
{
    LLVMValueRef cls = load_i32(k, param(k, p_class), h64);
    LLVMValueRef li = sext64(k, add(k, mul(k, cls, lists), index));
    *begin = load_i32(k, param(k, p_offsets), li);
    *end = load_i32(k, param(k, p_offsets), add(k, li, c64(k, 1)));
    if (first)
        *first = load_i32(k, param(k, p_offsets), sext64(k, mul(k, cls, lists)));
}

static void list_bounds(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists, LLVMValueRef index,
                        LLVMValueRef *begin, LLVMValueRef *end)
{
    list_bounds_of(k, p_class, p_offsets, h64, lists, index, begin, end, NULL);
}

LLVMValueRef bwd_ds_slot_base(bwd *k, LLVMValueRef h64)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef hb = param(k, P_DS_HEAD);
    LLVMValueRef all = LLVMBuildLoad2(b, k->cg->t_i64, LLVMBuildInBoundsGEP2(b, k->cg->t_i64, hb,
                                      (LLVMValueRef[]){c64(k, k->s.heads)}, 1, ""), "ds_tiles");
    LLVMValueRef mine = LLVMBuildLoad2(b, k->cg->t_i64, LLVMBuildInBoundsGEP2(b, k->cg->t_i64, hb, &h64, 1, ""),
                                       "ds_head");
    LLVMSetAlignment(all, 8);
    LLVMSetAlignment(mine, 8);
    return add(k, mul(k, k->batch, all), mine);
}

/* ---- masks (the forward's rule, in either orientation) ----
 * The thread's values are rows r = 16·warp + g + 8·hr and columns
 * c = 8n + 2t + e of the tile.  Forward orientation (dQ): rows are queries
 * at qpos0 + r, columns keys at kpos0 + c; transposed (dK/dV): rows are keys,
 * columns queries.  A pair is kept when its sub-block pair is live, kpos <
 * kv_len and, causal, kpos <= qpos.  Masked scores become -inf.  FULL entries
 * skip all of it. */

void bwd_apply_mask(bwd *k, const mask_geom *mg, LLVMValueRef sc[][4], int ntiles, int col0_const,
                       LLVMValueRef flags, LLVMValueRef live, LLVMValueRef row_pos0, LLVMValueRef col_pos0,
                       const LLVMValueRef *col_slot)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, c32(k, S2_ENTRY_FULL), ""), c32(k, 0), "full");
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef mask_bb = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "mask");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "masked");
    LLVMBuildCondBr(b, full, join, mask_bb);
    LLVMPositionBuilderAtEnd(b, mask_bb);

    LLVMValueRef masked[MAX_N][4];
    LLVMValueRef ninf = cf(k, -INFINITY);
    LLVMValueRef col0 = add(k, LLVMBuildShl(b, k->t4, c32(k, 1), ""), c32(k, col0_const));
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), add(k, k->g, c32(k, 8 * hr)));
        LLVMValueRef rpos = add(k, row_pos0, r);
        LLVMValueRef rsub = LLVMBuildLShr(b, r, c32(k, mg->row_sub_log2), "");
        /* column c kept when lo <= c - col0 <= hi (compared against the constant part of c) */
        LLVMValueRef lo = c32(k, INT32_MIN / 2), hi = c32(k, INT32_MAX / 2);
        LLVMValueRef his[4] = {0};
        LLVMValueRef bits, row_ok = NULL;
        if (!mg->transposed) {
            bits = LLVMBuildLShr(b, live, LLVMBuildZExt(b, mul(k, rsub, c32(k, mg->sub_n)), cg->t_i64, ""), "");
            /* kpos = col_pos0 + c < kv_len, and <= qpos when causal (per slot
             * when gathered: c then counts from the slot's first column) */
            for (int j = 0; j < (col_slot ? k->s.gather : 1); j++) {
                LLVMValueRef cp = col_slot ? col_slot[j] : col_pos0;
                LLVMValueRef lim = LLVMBuildSub(b, LLVMBuildSub(b, k->kv_len, c32(k, 1), ""), cp, "");
                if (k->s.causal)
                    lim = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildSub(b, rpos, cp, ""), lim, ""),
                                          LLVMBuildSub(b, rpos, cp, ""), lim, "");
                his[j] = LLVMBuildSub(b, lim, col0, "");
            }
            hi = his[0];
        } else {
            bits = LLVMBuildLShr(b, live, LLVMBuildZExt(b, rsub, cg->t_i64, ""), "");
            row_ok = LLVMBuildICmp(b, LLVMIntSLT, rpos, k->kv_len, "");
            /* qpos = col_pos0 + c >= kpos when causal */
            if (k->s.causal)
                lo = LLVMBuildSub(b, LLVMBuildSub(b, rpos, col_pos0, ""), col0, "");
        }
        for (int n = 0; n < ntiles; n++) {
            int csub = (col0_const + n * 8) / mg->col_sub_size;
            int bit = mg->transposed ? csub * mg->sub_n : csub;
            LLVMValueRef keep = LLVMBuildICmp(b, LLVMIntNE,
                LLVMBuildAnd(b, bits, LLVMConstInt(cg->t_i64, 1ull << bit, 0), ""), LLVMConstInt(cg->t_i64, 0, 0), "");
            if (row_ok)
                keep = LLVMBuildAnd(b, keep, row_ok, "");
            int cc = n * 8;
            if (col_slot && !mg->transposed) {
                int j = (col0_const + n * 8) / k->s.gbs;
                hi = his[j];
                cc = n * 8 - j * k->s.gbs;
            }
            for (int e = 0; e < 2; e++) {
                int i = 2 * hr + e;
                LLVMValueRef c = c32(k, cc + e);
                LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLE, lo, c, ""),
                                               LLVMBuildICmp(b, LLVMIntSLE, c, hi, ""), "");
                masked[n][i] = LLVMBuildSelect(b, LLVMBuildAnd(b, in, keep, ""), sc[n][i], ninf, "");
            }
        }
    }
    s2_nv_join_scores(cg, from, join, ntiles, sc, masked);
}

/* P = exp2(S·scale_log2 - lse2) and dS = P ∘ (dP - delta), in place; lse2
 * and delta of value (n, i) from stat(). */

void bwd_probs_and_ds(bwd *k, LLVMValueRef sc[][4], LLVMValueRef dp[][4], int ntiles, stat_fn stat, void *user)
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef l2, dl;
            stat(k, n, i, &l2, &dl, user);
            sc[n][i] = s2_nv_ex2_approx(k->cg, s2_nv_fma(k->cg, sc[n][i], k->scale_log2, LLVMBuildFNeg(k->b, l2, "")));
            dp[n][i] = LLVMBuildFMul(k->b, sc[n][i], LLVMBuildFSub(k->b, dp[n][i], dl, ""), "ds");
        }
}

/* ---- the cp.async ring (§2.1): one group per entry ---- */

/* Copies entry e (when e < end) into `stage`; with `own`, its issue values
 * are loaded here (the prologue's), else they were taken before. */
static void prefetch(bwd *k, const ring_fns *f, LLVMValueRef e, LLVMValueRef end, LLVMValueRef stage, int stage0,
                     int stage_bytes, bool own, void *user)
{
    s2_nv_if blk;
    s2_nv_if_begin(k->cg, &blk, LLVMBuildICmp(k->b, LLVMIntSLT, e, end, ""), "prefetch");
    if (own) {
        prep_vals v;
        f->prep(k, e, &v, user);
        f->take(k, &v, user);
    }
    f->issue(k, e, add(k, c32(k, stage0), mul(k, stage, c32(k, stage_bytes))), user);
    s2_nv_if_end(k->cg, &blk);
    s2_nv_cp_async_commit(k->cg);
}

/* The refill a ring_fns.late entry body issues (bwd_ring_refill). */
typedef struct ring_refill {
    const ring_fns *f;
    LLVMValueRef e, end, stage;
    int stage0, stage_bytes;
    void *user;
} ring_refill;

void bwd_ring_refill(bwd *k)
{
    ring_refill *r = k->refill;
    if (!r)
        return;
    k->refill = NULL;
    prefetch(k, r->f, r->e, r->end, r->stage, r->stage0, r->stage_bytes, false, r->user);
}

/* The refill entry e + d, or begin past the end (a valid entry: nothing is
 * issued for it then). */
static LLVMValueRef refill_entry(bwd *k, LLVMValueRef e, int d, LLVMValueRef begin, LLVMValueRef end)
{
    LLVMValueRef en = add(k, e, c32(k, d));
    return LLVMBuildSelect(k->b, LLVMBuildICmp(k->b, LLVMIntSLT, en, end, ""), en, begin, "");
}

/* Entries [begin, end) through an S-stage ring (ring_fns): issue() copies
 * entry e into a stage, compute() uses it.  Groups committed before stay
 * older than the ring's, so they are complete at the first wait.  Ends with
 * every copy landed and a barrier, so shared memory may be reused after it. */
static void pipeline(bwd *k, LLVMValueRef begin, LLVMValueRef end, int S, int stage0, int stage_bytes,
                     const ring_fns *f, void *user, LLVMValueRef r0)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    /* entry begin + j uses stage (r0 + j) % S (r0: entries the ring took
     * before, for mbarrier phases that run on across lists) */
    if (!r0)
        r0 = c32(k, 0);
    for (int st = 0; st < S - 1; st++)
        prefetch(k, f, add(k, begin, c32(k, st)), end, LLVMBuildURem(b, add(k, r0, c32(k, st)), c32(k, S), ""), stage0,
                 stage_bytes, true, user);
    /* What a refill's issue needs is loaded one iteration ahead and carried:
     * loaded in the refill's own iteration, ptxas placed the load after the
     * ring's barrier, right before its use (warp-stall sampling,
     * bench/RESULTS.md run 34).  The first refill's, before the loop
     * (non-empty lists only: an empty list's begin may be past the array). */
    prep_vals first;
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
    s2_nv_if some;
    s2_nv_if_begin(cg, &some, LLVMBuildICmp(b, LLVMIntSLT, begin, end, ""), "prep0");
    prep_vals v;
    f->prep(k, refill_entry(k, begin, S - 1, begin, end), &v, user);
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b);
    s2_nv_if_end(cg, &some);
    first.n = v.n;
    for (int j = 0; j < v.n; j++) {
        first.v[j] = LLVMBuildPhi(b, LLVMTypeOf(v.v[j]), "prep");
        LLVMValueRef in[2] = {LLVMGetUndef(LLVMTypeOf(v.v[j])), v.v[j]};
        LLVMBasicBlockRef bbs[2] = {from, then_end};
        LLVMAddIncoming(first.v[j], in, bbs, 2);
    }
    s2_nv_loop loop;
    s2_nv_loop_begin(cg, &loop, "ent", begin, end, c32(k, 1), first.v, (unsigned)first.n);
    LLVMValueRef e = loop.iv;
    LLVMValueRef i = add(k, LLVMBuildSub(b, e, begin, ""), r0);   /* ring position */
    prep_vals cur = {{0}, first.n}, next;
    for (int j = 0; j < first.n; j++)
        cur.v[j] = loop.carried[j];
    f->take(k, &cur, user);
    f->prep(k, refill_entry(k, e, S, begin, end), &next, user);
    if (S > 1) {
        /* one barrier per entry: it publishes stage i and tells that every
         * warp is done with entry i-1, whose stage the prefetch refills */
        s2_nv_cp_async_wait(cg, S - 2);
        if (k->s.wg && !f->tma)
            s2_nv_fence_proxy_async(cg);   /* the copies are read by wgmma (async proxy) */
        if (f->tma) {
            /* the ring's tiles come by TMA (async proxy already): only what
             * was cp.async'd before the ring needs the fence, once (a fence
             * per entry waited for the last entry's dS stores: MEMBAR) */
            s2_nv_if once;
            s2_nv_if_begin(cg, &once, LLVMBuildICmp(b, LLVMIntEQ, e, begin, ""), "fence_once");
            s2_nv_fence_proxy_async(cg);
            s2_nv_if_end(cg, &once);
        }
        s2_nv_barrier_cta(cg);
        /* the stage of entry i-1, free since the barrier: with f->late the
         * entry body issues its copies after its first products */
        ring_refill r = {f, add(k, e, c32(k, S - 1)), end, LLVMBuildURem(b, add(k, i, c32(k, S - 1)), c32(k, S), ""),
                         stage0, stage_bytes, user};
        k->refill = &r;
        if (!f->late)
            bwd_ring_refill(k);
        LLVMValueRef soff = add(k, c32(k, stage0), mul(k, LLVMBuildURem(b, i, c32(k, S), ""), c32(k, stage_bytes)));
        k->ring_pos = i;
        f->compute(k, e, soff, user);
        bwd_ring_refill(k);
    } else {
        prefetch(k, f, e, end, c32(k, 0), stage0, stage_bytes, false, user);
        s2_nv_cp_async_wait(cg, 0);
        if (k->s.wg)
            s2_nv_fence_proxy_async(cg);
        s2_nv_barrier_cta(cg);
        k->ring_pos = i;
        f->compute(k, e, c32(k, stage0), user);
        s2_nv_barrier_cta(cg);
    }
    s2_nv_loop_end(cg, &loop, next.v);
    s2_nv_cp_async_wait(cg, 0);
    s2_nv_barrier_cta(cg);
}

/* ---- common setup ---- */

static void common_setup(bwd *k)
{
    LLVMBuilderRef b = k->b;
    k->tid = s2_nv_tid_x(k->cg);
    k->warp = LLVMBuildLShr(b, k->tid, c32(k, 5), "warp");
    k->lane = LLVMBuildAnd(b, k->tid, c32(k, 31), "lane");
    k->g = LLVMBuildLShr(b, k->lane, c32(k, 2), "g");
    k->t4 = LLVMBuildAnd(b, k->lane, c32(k, 3), "t4");
    k->batch = LLVMBuildZExt(b, s2_nv_ctaid(k->cg, 'z'), k->cg->t_i64, "batch");
    k->q_len = param(k, P_QLEN);
    k->kv_len = param(k, P_KVLEN);
    k->q_start = LLVMBuildSub(b, k->kv_len, k->q_len, "q_start");
    k->scale_log2 = param(k, P_SCALE_LOG2);
    /* A: row 16·warp + (l%8) + 8·((l/8)%2), chunk l/16; B: row l%8, chunk l/8;
     * B transposed: row l%16, chunk l/16 (§1.3) */
    k->a_row = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                   add(k, LLVMBuildAnd(b, k->lane, c32(k, 7), ""), LLVMBuildAnd(b, k->lane, c32(k, 8), "")));
    k->a_lc = LLVMBuildLShr(b, k->lane, c32(k, 4), "");
    k->b_row = LLVMBuildAnd(b, k->lane, c32(k, 7), "");
    k->b_lc = LLVMBuildLShr(b, k->lane, c32(k, 3), "");
    k->bt_row = LLVMBuildAnd(b, k->lane, c32(k, 15), "");
    k->bt_lc = k->a_lc;
}

/* Element offset b·s0 + h·s2 of a tensor whose strides start at parameter ps. */
static LLVMValueRef slice(bwd *k, int ps, LLVMValueRef h64)
{
    return add(k, mul(k, k->batch, param(k, ps)), mul(k, h64, param(k, ps + 2)));
}

/* [D/8][4] f32 accumulators as allocas at the top of the entry block (SROA
 * makes them registers), zeroed here. */
static void new_acc(bwd *k, LLVMValueRef acc[][4], const char *name)
{
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMValueRef first = LLVMGetFirstInstruction(k->entry_bb);
    if (first)
        LLVMPositionBuilderBefore(b, first);
    for (int dn = 0; dn < k->s.D / 8; dn++)
        for (int i = 0; i < 4; i++)
            acc[dn][i] = LLVMBuildAlloca(b, k->cg->t_f32, name);
    LLVMPositionBuilderAtEnd(b, cur);
    for (int dn = 0; dn < k->s.D / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(b, cf(k, 0.0), acc[dn][i]);
}

/* Store acc·mul to rows (16·warp + g + 8hr) of the tile at pos0 of a 16-bit
 * tensor (element slice `sl`, seq stride `rstride`), rows that exist only.
 * As the sm_90a forward's epilogue: one exchange with the neighbouring lane,
 * then 8-byte stores that write whole 32-byte sectors (4-byte stores where
 * the tensor or its row stride is not 8-byte aligned). */
static void store_acc(bwd *k, LLVMValueRef acc[][4], LLVMValueRef scale, LLVMValueRef out, LLVMValueRef sl,
                      LLVMValueRef rstride, LLVMValueRef pos0, bool query)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_flash_pairs pr;
    s2_flash_pairs_init(cg, &pr, k->t4, k->s.D);
    LLVMValueRef offs[1] = {LLVMBuildOr(b, sl, rstride, "")};
    LLVMValueRef aligned = s2_flash_aligned8(cg, out, offs, 1);
    for (int hr = 0; hr < 2; hr++) {
        s2_flash_pairs_pack(cg, &pr, k->s.dt, acc, hr, scale);
        s2_flash_pairs_exchange(cg, &pr);   /* in every lane (outside the row guard) */
        LLVMValueRef r = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), add(k, k->g, c32(k, 8 * hr)));
        LLVMValueRef trow;
        LLVMValueRef ok = tile_row(k, pos0, query, r, &trow);
        s2_nv_if st;
        s2_nv_if_begin(cg, &st, ok, "store");
        LLVMValueRef row_off = add(k, sl, mul(k, sext64(k, trow), rstride));
        s2_flash_pairs_store(cg, &pr, out, row_off, aligned);
        s2_nv_if_end(cg, &st);
    }
}

static LLVMValueRef softmax_scale(bwd *k) { return LLVMBuildFMul(k->b, k->scale_log2, cf(k, M_LN2), "scale"); }

/* ---- NAME_pre ---- */

/* 8 elements of a 16-bit tensor at element `off` (16-byte aligned) as f32. */
static void load8(bwd *k, LLVMValueRef base, LLVMValueRef off, LLVMValueRef out[8])
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->llctx);
    LLVMValueRef v = LLVMBuildLoad2(b, LLVMVectorType(i16, 8), gep16(k, base, off), "");
    LLVMSetAlignment(v, 16);
    for (int j = 0; j < 8; j++) {
        LLVMValueRef x = LLVMBuildExtractElement(b, v, c32(k, j), "");
        if (k->s.dt == S2_DTYPE_F16)
            out[j] = LLVMBuildFPExt(b, LLVMBuildBitCast(b, x, LLVMHalfTypeInContext(cg->llctx), ""), cg->t_f32, "");
        else
            out[j] = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildZExt(b, x, cg->t_i32, ""), c32(k, 16), ""),
                                      cg->t_f32, "");
    }
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

/* Grid (cdiv(q_len, threads / (D/8)), H, B): D/8 lanes per row, one 16-byte
 * chunk each, summed with butterflies inside the lane group. */
static void build_pre(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, rows = k->s.threads / C;
    LLVMValueRef h64 = LLVMBuildZExt(b, s2_nv_ctaid(cg, 'y'), cg->t_i64, "head");
    LLVMValueRef rloc = LLVMBuildLShr(b, k->tid, c32(k, s2_log2i(C)), "");
    LLVMValueRef ch = LLVMBuildAnd(b, k->tid, c32(k, C - 1), "");
    LLVMValueRef i = add(k, mul(k, s2_nv_ctaid(cg, 'x'), c32(k, rows)), rloc);
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntSLT, i, k->q_len, "");
    LLVMValueRef ic = sext64(k, LLVMBuildSelect(b, valid, i, c32(k, 0), ""));
    LLVMValueRef cofs = LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), cg->t_i64, "");
    LLVMValueRef o[8], d[8];
    load8(k, param(k, P_O), add(k, add(k, slice(k, P_OS, h64), mul(k, ic, param(k, P_OS + 1))), cofs), o);
    load8(k, param(k, P_DO), add(k, add(k, slice(k, P_DOS, h64), mul(k, ic, param(k, P_DOS + 1))), cofs), d);
    LLVMValueRef dot = cf(k, 0.0);
    for (int j = 0; j < 8; j++)
        dot = s2_nv_fma(cg, o[j], d[j], dot);
    for (int m = C / 2; m >= 1; m /= 2)
        dot = LLVMBuildFAdd(b, dot, s2_nv_shfl_bfly_f32(cg, dot, m), "");
    s2_nv_if wr;
    s2_nv_if_begin(cg, &wr, LLVMBuildAnd(b, valid, LLVMBuildICmp(b, LLVMIntEQ, ch, c32(k, 0), ""), ""), "write");
    LLVMValueRef idx = add(k, mul(k, add(k, mul(k, k->batch, c64(k, k->s.heads)), h64), sext64(k, k->q_len)),
                           sext64(k, i));
    LLVMValueRef dl = load_f32_or_zero(k, param(k, P_DLSE), idx);
    s2_nv_store_global_f32(cg, param(k, P_DELTA), idx, LLVMBuildFSub(b, dot, dl, ""), 4);
    LLVMValueRef lse = s2_nv_load_global_f32(cg, param(k, P_LSE), idx, 4);
    LLVMValueRef empty = LLVMBuildFCmp(b, LLVMRealOEQ, lse, cf(k, -INFINITY), "");
    s2_nv_store_global_f32(cg, param(k, P_LSE2), idx,
                           LLVMBuildSelect(b, empty, cf(k, INFINITY), LLVMBuildFMul(b, lse, cf(k, M_LOG2E), ""), ""), 4);
    s2_nv_if_end(cg, &wr);
    LLVMBuildRetVoid(b);
}

/* ---- NAME_dq ---- */


void bwd_dq_entry(bwd *k, dq_state *ds, LLVMValueRef e, LLVMValueRef *flags, LLVMValueRef *live)
{
    s2_cg *cg = k->cg;
    if (k->s.gather > 1) {
        int sz = (int)sizeof(s2_dev_gentry);
        for (int j = 0; j < k->s.gather; j++)
            ds->slot[j] = mul(k, field_at(k, ds->entries, e, sz, 4 * j, cg->t_i32), c32(k, k->s.gbs));
        ds->kpos0 = NULL;
        if (flags)
            *flags = field_at(k, ds->entries, e, sz, 16, cg->t_i32);
        if (live)
            *live = LLVMBuildZExt(k->b, field_at(k, ds->entries, e, sz, 20, cg->t_i32), cg->t_i64, "");
        return;
    }
    ds->kpos0 = mul(k, bwd_entry_field(k, ds->entries, e, 0, cg->t_i32), c32(k, k->s.BN));
    if (flags)
        *flags = bwd_entry_field(k, ds->entries, e, 4, cg->t_i32);
    if (live)
        *live = bwd_entry_field(k, ds->entries, e, 8, cg->t_i64);
}

static void dq_prep(bwd *k, LLVMValueRef e, prep_vals *out, void *user)
{
    dq_state *ds = user;
    dq_state keep = *ds;   /* the current entry's fields stay */
    bwd_dq_entry(k, ds, e, NULL, NULL);
    bool gat = k->s.gather > 1;
    out->n = gat ? k->s.gather : 1;
    for (int j = 0; j < out->n; j++)
        out->v[j] = gat ? ds->slot[j] : ds->kpos0;
    *ds = keep;
}

static void dq_take(bwd *k, const prep_vals *in, void *user)
{
    dq_state *ds = user;
    if (k->s.gather > 1) {
        for (int j = 0; j < in->n; j++)
            ds->slot[j] = in->v[j];
        ds->kpos0 = NULL;
    } else {
        ds->kpos0 = in->v[0];
    }
}

static void dq_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    (void)e;   /* its key tile: dq_take's */
    dq_state *ds = user;
    slots sl = {ds->slot, k->s.gather, k->s.gbs};
    const slots *slot = k->s.gather > 1 ? &sl : NULL;
    load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, slot, false);
    load_tile(k, k->s.BN, param(k, P_V), ds->vslice, param(k, P_VS + 1), add(k, soff, c32(k, k->s.BN * k->s.row_bytes)),
              ds->kpos0, slot, false);
}

void bwd_dq_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user)
{
    (void)n;
    dq_state *ds = user;
    *lse2 = ds->lse2[i >> 1];
    *delta = ds->delta[i >> 1];
}

static void dq_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    dq_state *ds = user;
    int NT = k->s.BN / 8;
    LLVMValueRef vst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes));
    LLVMValueRef sc[MAX_N][4], dp[MAX_N][4];
    mma_abt(k, c32(k, k->s.dq_q_off), soff, 0, NT, sc);
    mask_geom mg = {false, k->s.f_sub_m_log2, k->s.f_sub_n_size, k->s.f_sub_n};
    LLVMValueRef flags, live;
    bwd_dq_entry(k, ds, e, &flags, &live);
    bwd_apply_mask(k, &mg, sc, NT, 0, flags, live, ds->tile_pos0, ds->kpos0, k->s.gather > 1 ? ds->slot : NULL);
    mma_abt(k, c32(k, k->s.dq_do_off), vst, 0, NT, dp);
    bwd_probs_and_ds(k, sc, dp, NT, bwd_dq_stat, ds);
    mma_xy(k, dp, NT, soff, 0, ds->acc);
}

/* The (first) query tile of a dQ CTA (NAME_dq, NAME_dqds; NAME_dqds2 with
 * `pair`, whose second tile is the one below): its head (returned), the
 * tile, the K/V slices, its forward list [*begin, *end) and, if asked, the
 * first entry of the head's class and the tile's index *rel. */
static LLVMValueRef dq_cta(bwd *k, dq_state *ds, bool pair, LLVMValueRef *begin, LLVMValueRef *end,
                           LLVMValueRef *first, LLVMValueRef *rel_out)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef head32 = s2_nv_ctaid(cg, 'y');
    LLVMValueRef h64 = LLVMBuildZExt(b, head32, cg->t_i64, "head");
    LLVMValueRef kvh64 = LLVMBuildZExt(b, LLVMBuildUDiv(b, head32, c32(k, k->s.group), ""), cg->t_i64, "kv_head");
    /* heavy tiles (late, long lists) first */
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    LLVMValueRef x = s2_nv_ctaid(cg, 'x');
    if (pair)
        x = LLVMBuildShl(b, x, c32(k, 1), "");
    LLVMValueRef rel = LLVMBuildSub(b, LLVMBuildSub(b, q_tiles, c32(k, 1), ""), x, "tile_rel");
    if (rel_out)
        *rel_out = rel;
    ds->tile_pos0 = mul(k, add(k, param(k, P_FIRST_Q_TILE), rel), c32(k, k->s.BM));
    ds->kslice = slice(k, P_KS, kvh64);
    ds->vslice = slice(k, P_VS, kvh64);
    ds->entries = param(k, P_ENTRIES);
    list_bounds_of(k, P_CLASS, P_OFFSETS, h64, q_tiles, rel, begin, end, first);
    return h64;
}

static void build_dq(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    LLVMValueRef begin, end;
    LLVMValueRef h64 = dq_cta(k, &ds, false, &begin, &end, NULL, NULL);
    LLVMValueRef acc[MAX_D / 8][4];
    new_acc(k, acc, "dq");
    ds.acc = acc;

    /* Q and dO of the tile: one group, older than the ring's */
    load_tile_rows(k, k->s.BM, param(k, P_Q), slice(k, P_QS, h64), param(k, P_QS + 1), c32(k, k->s.dq_q_off), ds.tile_pos0,
              NULL, true);
    load_tile_rows(k, k->s.BM, param(k, P_DO), slice(k, P_DOS, h64), param(k, P_DOS + 1), c32(k, k->s.dq_do_off), ds.tile_pos0,
              NULL, true);
    s2_nv_cp_async_commit(cg);
    /* the thread's two rows' lse2 and delta (0 for rows that do not exist:
     * their Q and dO are zero, so P stays finite and dS is 0) */
    LLVMValueRef rowbase = mul(k, add(k, mul(k, k->batch, c64(k, k->s.heads)), h64), sext64(k, k->q_len));
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), add(k, k->g, c32(k, 8 * hr)));
        LLVMValueRef qrow;
        LLVMValueRef ok = tile_row(k, ds.tile_pos0, true, r, &qrow);
        LLVMValueRef idx = LLVMBuildSelect(b, ok, add(k, rowbase, sext64(k, qrow)), rowbase, "");
        ds.lse2[hr] = LLVMBuildSelect(b, ok, s2_nv_load_global_f32(cg, param(k, P_LSE2), idx, 4), cf(k, 0.0), "");
        ds.delta[hr] = LLVMBuildSelect(b, ok, s2_nv_load_global_f32(cg, param(k, P_DELTA), idx, 4), cf(k, 0.0), "");
    }
    ring_fns f = {dq_prep, dq_take, dq_issue, k->s.wg ? bwd_wg_dq_compute : dq_compute, false, false};
    pipeline(k, begin, end, k->s.stages, k->s.dq_stage0, k->s.dq_stage_bytes, &f, &ds, NULL);
    store_acc(k, acc, softmax_scale(k), param(k, P_DQ), slice(k, P_DQS, h64), param(k, P_DQS + 1), ds.tile_pos0, true);
    LLVMBuildRetVoid(b);
}

/* ---- NAME_dqds: dq = scale·dS·K from the dS tiles of the dK/dV kernel ---- */

static void dqds_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    dq_state *ds = user;
    LLVMBuilderRef b = k->b;
    load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, NULL, false);
    /* the dS tile: a plain copy (it is stored in the layout the wgmma reads) */
    LLVMValueRef src = mul(k, add(k, ds->ds_base, sext64(k, e)), c64(k, DS_TILE_BYTES));
    LLVMValueRef dst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes));
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    for (int it = 0; it * k->s.threads * 16 < DS_TILE_BYTES; it++) {
        LLVMValueRef off = LLVMBuildShl(b, add(k, k->tid, c32(k, it * k->s.threads)), c32(k, 4), "");
        LLVMValueRef g = add(k, src, LLVMBuildZExt(b, off, k->cg->t_i64, ""));
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, off)),
                          LLVMBuildInBoundsGEP2(b, i8, param(k, P_DS), &g, 1, ""), c32(k, 16));
    }
}

static void build_dqds(bwd *k)
{
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    LLVMValueRef begin, end, first;
    LLVMValueRef h64 = dq_cta(k, &ds, false, &begin, &end, &first, NULL);
    ds.ds_base = LLVMBuildSub(b, bwd_ds_slot_base(k, h64), sext64(k, first), "ds_base");
    LLVMValueRef acc[MAX_D / 8][4];
    new_acc(k, acc, "dq");
    ds.acc = acc;
    ring_fns f = {dq_prep, dq_take, dqds_issue, bwd_wg_dqds_compute, false, false};
    pipeline(k, begin, end, k->s.dqds_stages, 0, k->s.dqds_stage_bytes, &f, &ds, NULL);
    store_acc(k, acc, softmax_scale(k), param(k, P_DQ), slice(k, P_DQS, h64), param(k, P_DQS + 1), ds.tile_pos0, true);
    LLVMBuildRetVoid(b);
}

/* ---- NAME_dkdv ---- */


/* The list is walked from its end (the ring's i-th entry is end-1-i): the
 * long lists of vertical stripes then all start at the last query tiles and
 * read each query tile at about the same time, from L2. */
LLVMValueRef bwd_kv_entry(bwd *k, const kv_state *ks, LLVMValueRef e) { return LLVMBuildSub(k->b, ks->rev, e, "e_rev"); }

static void kv_prep(bwd *k, LLVMValueRef e, prep_vals *out, void *user)
{
    kv_state *ks = user;
    out->n = 1;
    out->v[0] = mul(k, bwd_entry_field(k, ks->entries, bwd_kv_entry(k, ks, e), 0, k->cg->t_i32), c32(k, k->s.BM));
}

static void kv_take(bwd *k, const prep_vals *in, void *user)
{
    (void)k;
    kv_state *ks = user;
    ks->pre_qpos = in->v[0];
}

/* The ring's full mbarrier of the stage at shared offset soff (tma). */
LLVMValueRef bwd_kv_bar(bwd *k, LLVMValueRef soff)
{
    LLVMValueRef st = LLVMBuildUDiv(k->b, LLVMBuildSub(k->b, soff, c32(k, k->s.kv_stage0), ""),
                                    c32(k, k->s.kv_stage_bytes), "stage");
    return add(k, s2_nv_smem_base32(k->cg), add(k, c32(k, k->s.kv_bar_off), LLVMBuildShl(k->b, st, c32(k, 3), "")));
}

/* Q and dO of the query tile at qpos0 by TMA into the stage at soff: one
 * thread (predicated, no branch) arms the stage's mbarrier with the bytes
 * and issues a box of 64 columns x BM rows per 64 columns of each; rows
 * outside the queries come as zeros (the maps' bounds). */
static void kv_issue_tma(bwd *k, kv_state *ks, LLVMValueRef qpos0, LLVMValueRef soff)
{
    s2_cg *cg = k->cg;
    const bwd_shape *s = &k->s;
    LLVMValueRef one = LLVMBuildICmp(k->b, LLVMIntEQ, k->tid, c32(k, 0), "tma_thread");
    LLVMValueRef bar = bwd_kv_bar(k, soff);
    s2_nv_mbar_arrive_expect_tx_if(cg, one, bar, 2 * s->BM * s->row_bytes);
    LLVMValueRef row = LLVMBuildSub(k->b, qpos0, k->q_start, "q_row");
    LLVMValueRef b32 = LLVMBuildTrunc(k->b, k->batch, cg->t_i32, "");
    for (int m = 0; m < 2; m++)
        for (int c = 0; c < s->D / 64; c++) {
            LLVMValueRef dst = add(k, s2_nv_smem_base32(cg), add(k, soff, c32(k, m * s->BM * s->row_bytes + c * s->BM * 128)));
            LLVMValueRef co[4] = {c32(k, 64 * c), row, ks->h32, b32};
            s2_nv_tma_load_4d_if(cg, one, dst, bar, param(k, m ? P_TMAP_DO : P_TMAP_Q), co);
        }
}

static void kv_issue(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    kv_state *ks = user;
    e = bwd_kv_entry(k, ks, e);
    int tb = k->s.BM * k->s.row_bytes;
    LLVMValueRef qpos0 = ks->pre_qpos;   /* kv_take's */
    if (k->s.tma) {
        kv_issue_tma(k, ks, qpos0, soff);
        load_row_stats(k, qpos0, ks->rowbase, add(k, soff, c32(k, k->s.kv_lse_off)));
        return;
    }
    /* (the query heads' loop of a GQA kernel leaves no registers for the
     * whole-tile path: it spilled there) */
    bool whole = k->s.group == 1;
    (whole ? load_tile : load_tile_rows)(k, k->s.BM, param(k, P_Q), ks->qslice, param(k, P_QS + 1), soff, qpos0, NULL, true);
    (whole ? load_tile : load_tile_rows)(k, k->s.BM, param(k, P_DO), ks->doslice, param(k, P_DOS + 1), add(k, soff, c32(k, tb)), qpos0, NULL, true);
    load_row_stats(k, qpos0, ks->rowbase, add(k, soff, c32(k, k->s.kv_lse_off)));
}

/* lse2 / delta of query column chunk0 + 8n + 2t + (i & 1), from the stage. */
void bwd_kv_stat(bwd *k, int n, int i, LLVMValueRef *lse2, LLVMValueRef *delta, void *user)
{
    kv_state *ks = user;
    LLVMValueRef c = add(k, LLVMBuildShl(k->b, k->t4, c32(k, 1), ""), c32(k, ks->chunk0 + 8 * n + (i & 1)));
    LLVMValueRef off = add(k, ks->stats, LLVMBuildShl(k->b, c, c32(k, 2), ""));
    *lse2 = LLVMBuildLoad2(k->b, k->cg->t_f32, s2_nv_smem_at(k->cg, off), "");
    *delta = LLVMBuildLoad2(k->b, k->cg->t_f32, s2_nv_smem_at(k->cg, add(k, off, c32(k, 4 * k->s.BM))), "");
}

static void kv_compute(bwd *k, LLVMValueRef e, LLVMValueRef soff, void *user)
{
    kv_state *ks = user;
    e = bwd_kv_entry(k, ks, e);
    LLVMBuilderRef b = k->b;
    LLVMValueRef qt = soff, dot = add(k, soff, c32(k, k->s.BM * k->s.row_bytes));
    ks->stats = add(k, soff, c32(k, k->s.kv_lse_off));
    LLVMValueRef flags = bwd_entry_field(k, ks->entries, e, 4, k->cg->t_i32);
    LLVMValueRef live = bwd_entry_field(k, ks->entries, e, 8, k->cg->t_i64);
    LLVMValueRef qpos0 = mul(k, bwd_entry_field(k, ks->entries, e, 0, k->cg->t_i32), c32(k, k->s.BM));
    /* a warp whose key sub-block no query of the entry keeps has nothing to add */
    s2_nv_if skip = {0};
    if (ks->warp_rows) {
        LLVMValueRef mine = LLVMBuildAnd(b, LLVMBuildLShr(b, live, ks->warp_shift, ""), ks->warp_rows, "");
        s2_nv_if_begin(k->cg, &skip, LLVMBuildICmp(b, LLVMIntNE, mine, c64(k, 0), ""), "warp_live");
    }
    mask_geom mg = {true, k->s.t_sub_n_log2, k->s.t_sub_m_size, k->s.t_sub_n};
    int NT = k->s.qc / 8;
    for (int c0 = 0; c0 < k->s.BM; c0 += k->s.qc) {
        LLVMValueRef sc[MAX_N][4], dp[MAX_N][4];
        ks->chunk0 = c0;
        mma_abt(k, c32(k, k->s.kv_k_off), qt, c0, NT, sc);
        bwd_apply_mask(k, &mg, sc, NT, c0, flags, live, ks->kpos0, qpos0, NULL);
        mma_abt(k, c32(k, k->s.kv_v_off), dot, c0, NT, dp);
        bwd_probs_and_ds(k, sc, dp, NT, bwd_kv_stat, ks);
        mma_xy(k, sc, NT, dot, c0, ks->dv);
        mma_xy(k, dp, NT, qt, c0, ks->dk);
    }
    if (ks->warp_rows)
        s2_nv_if_end(k->cg, &skip);
}

/* CTAs start in launch order (x fastest).  With the grid read as is (key
 * tiles of one head, then the next head) the last wave holds the long lists
 * (vertical stripes: every later query tile) of the last heads and the GPU
 * idles behind them (ncu: SMs active 84% of the dK/dV kernel at 8K, b64).
 * Read the lists major instead (all (kv head, batch) pairs of list 0 first,
 * ...: the lists come heaviest first, so the tail is made of short ones:
 * 1.01 -> 0.86 ms), in rows of KT_CHUNK lists per pair: a head's heaviest
 * lists (its vertical stripes) then run together and, walked from their
 * ends, read each query tile at about the same time (Q and dO from L2:
 * ncu at 8K, DRAM 46% -> 30% of peak; bench/RESULTS.md 2026-11-25).  Sets
 * *kvh32 and k->batch; returns the list (key tile) index. */
enum { KT_CHUNK = 8 };

static LLVMValueRef remap_key_tile(bwd *k, LLVMValueRef *kvh32)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    /* the grid's kv heads: all of them, or a chunk of them (the runtime's
     * dS path over head chunks) */
    LLVMValueRef hkv = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.y", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef nz = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.z", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef nx = s2_nv_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.nctaid.x", cg->t_i32, NULL, 0, NULL);
    LLVMValueRef lin = add(k, s2_nv_ctaid(cg, 'x'),
                           mul(k, nx, add(k, s2_nv_ctaid(cg, 'y'), mul(k, hkv, s2_nv_ctaid(cg, 'z')))));
    LLVMValueRef per = mul(k, hkv, nz);
    /* row of KT_CHUNK key tiles (the last one narrower) over every pair, pair major inside */
    LLVMValueRef row = LLVMBuildUDiv(b, lin, mul(k, per, c32(k, KT_CHUNK)), "kt_row");
    LLVMValueRef kt0 = mul(k, row, c32(k, KT_CHUNK));
    LLVMValueRef rest = LLVMBuildSub(b, nx, kt0, "");
    LLVMValueRef width = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, rest, c32(k, KT_CHUNK), ""), rest,
                                         c32(k, KT_CHUNK), "kt_width");
    LLVMValueRef r = LLVMBuildSub(b, lin, mul(k, row, mul(k, per, c32(k, KT_CHUNK))), "");
    LLVMValueRef hb = LLVMBuildUDiv(b, r, width, "hb");
    *kvh32 = LLVMBuildURem(b, hb, hkv, "kvh");
    k->batch = LLVMBuildZExt(b, LLVMBuildUDiv(b, hb, hkv, ""), cg->t_i64, "batch");
    return add(k, kt0, LLVMBuildURem(b, r, width, ""));
}

static void build_dkdv(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    const bwd_shape *s = &k->s;
    LLVMValueRef kt = s2_nv_ctaid(cg, 'x');
    LLVMValueRef kvh32 = s2_nv_ctaid(cg, 'y');
    if (s->wg)
        kt = remap_key_tile(k, &kvh32);
    LLVMValueRef kvh64 = LLVMBuildZExt(b, kvh32, cg->t_i64, "kv_head");
    kv_state ks = {0};
    ks.kpos0 = mul(k, kt, c32(k, s->KB));
    ks.entries = param(k, P_TENTRIES);
    /* the key tile's slots (pattern blocks, or the tile itself) are the
     * header record of its list (s2_schedule_pack_gathered_kv), the same for
     * every query head of the group; warp w's 16 rows lie in slot 16w / kgbs */
    LLVMValueRef hb, he;
    LLVMValueRef h0 = LLVMBuildZExt(b, mul(k, kvh32, c32(k, s->group)), cg->t_i64, "");
    list_bounds(k, P_TCLASS, P_TOFFSETS, h0, param(k, P_KV_TILES), kt, &hb, &he);
    LLVMValueRef jw = LLVMBuildLShr(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""), c32(k, s2_log2i(s->kgbs)), "warp_slot");
    LLVMValueRef mine = NULL;
    for (int j = 0; j < s->kvg; j++) {
        LLVMValueRef blk = LLVMBuildLoad2(b, cg->t_i32,
            LLVMBuildInBoundsGEP2(b, cg->t_i32, ks.entries, (LLVMValueRef[]){add(k, mul(k, sext64(k, hb), c64(k, 4)),
                                                                                  c64(k, j))}, 1, ""), "");
        LLVMSetAlignment(blk, 4);
        /* unused slots (-1) get a position no row reaches: every row fails 0 <= pos */
        ks.slot[j] = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, blk, c32(k, 0), ""), c32(k, -(1 << 20)),
                                     mul(k, blk, c32(k, s->kgbs)), "slot");
        /* row r of the tile is at kpos0 + r for this warp's rows */
        LLVMValueRef base = LLVMBuildSub(b, ks.slot[j], c32(k, j * s->kgbs), "");
        mine = j == 0 ? base : LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, jw, c32(k, j), ""), base, mine, "");
    }
    ks.kpos0 = mine;
    slots kslots = {ks.slot, s->kvg, s->kgbs};
    const slots *slot = &kslots;
    LLVMValueRef dk[MAX_D / 8][4], dv[MAX_D / 8][4];
    new_acc(k, dk, "dk");
    new_acc(k, dv, "dv");
    ks.dk = dk;
    ks.dv = dv;
    if (s->ds)
        ks.ds_on = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, param(k, P_DS), cg->t_i64, ""), c64(k, 0), "ds_on");
    /* (a warpgroup's wgmma needs all four warps: no per-warp skip there) */
    if (s->t_sub_n > 1 && !s->wg) {
        /* the warp's 16 key rows lie in key sub-block 16·warp / sub_n_size */
        unsigned long long rows = 0;
        for (int i = 0; i < s->BM / s->t_sub_m_size; i++)
            rows |= 1ull << (i * s->t_sub_n);
        ks.warp_rows = LLVMConstInt(cg->t_i64, rows, 0);
        ks.warp_shift = LLVMBuildZExt(b, LLVMBuildLShr(b, LLVMBuildShl(b, k->warp, c32(k, 4), ""),
                                                        c32(k, s->t_sub_n_log2), ""), cg->t_i64, "");
    }
    if (s->tma) {
        /* the ring's full mbarriers (one arrival: the TMA thread's); every
         * thread syncs before any use (ptxas makes the init a warp-wide
         * operation: racecheck saw it race the first arrive without this) */
        s2_nv_if init;
        s2_nv_if_begin(cg, &init, LLVMBuildICmp(b, LLVMIntEQ, k->tid, c32(k, 0), ""), "mbar_init");
        for (int st = 0; st < s->stages; st++)
            s2_nv_mbar_init(cg, add(k, s2_nv_smem_base32(cg), c32(k, s->kv_bar_off + 8 * st)), 1);
        s2_nv_fence_mbar_init(cg);
        s2_nv_prefetch_tensormap(cg, param(k, P_TMAP_Q));
        s2_nv_prefetch_tensormap(cg, param(k, P_TMAP_DO));
        s2_nv_if_end(cg, &init);
        s2_nv_barrier_cta(cg);
    }
    /* K and V of the tile, once */
    load_tile_rows(k, s->KB, param(k, P_K), slice(k, P_KS, kvh64), param(k, P_KS + 1), c32(k, s->kv_k_off), ks.kpos0, slot,
              false);
    load_tile_rows(k, s->KB, param(k, P_V), slice(k, P_VS, kvh64), param(k, P_VS + 1), c32(k, s->kv_v_off), ks.kpos0, slot,
              false);
    s2_nv_cp_async_commit(cg);

    /* the group's query heads in increasing order: a fixed summation order */
    s2_nv_loop heads;
    /* carried: the ring's position (tma: the mbarrier phases run on over the heads' lists) */
    LLVMValueRef r_init = c32(k, 0);
    s2_nv_loop_begin(cg, &heads, "qh", c32(k, 0), c32(k, s->group), c32(k, 1), &r_init, 1);
    LLVMValueRef r0 = heads.carried[0];
    LLVMValueRef h32 = add(k, mul(k, kvh32, c32(k, s->group)), heads.iv);
    ks.h32 = h32;
    LLVMValueRef h64 = LLVMBuildZExt(b, h32, cg->t_i64, "head");
    ks.qslice = slice(k, P_QS, h64);
    ks.doslice = slice(k, P_DOS, h64);
    ks.rowbase = mul(k, add(k, mul(k, k->batch, c64(k, s->heads)), h64), sext64(k, k->q_len));
    LLVMValueRef begin, end;
    list_bounds(k, P_TCLASS, P_TOFFSETS, h64, param(k, P_KV_TILES), kt, &begin, &end);
    begin = add(k, begin, c32(k, 1));   /* past the header */
    ks.rev = LLVMBuildSub(b, add(k, begin, end), c32(k, 1), "rev");
    if (s->ds) {
        /* the head's dS slot base, once (its table is read only when ds is given) */
        LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
        s2_nv_if on;
        s2_nv_if_begin(cg, &on, ks.ds_on, "ds_head");
        LLVMValueRef base = bwd_ds_slot_base(k, h64);
        LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b);
        s2_nv_if_end(cg, &on);
        ks.ds_base = LLVMBuildPhi(b, cg->t_i64, "ds_base");
        LLVMValueRef vals[2] = {c64(k, 0), base};
        LLVMBasicBlockRef bbs[2] = {from, then_end};
        LLVMAddIncoming(ks.ds_base, vals, bbs, 2);
    }
    ring_fns f = {kv_prep, kv_take, kv_issue, s->wg ? bwd_wg_kv_compute : kv_compute, s->late_refill, s->tma};
    pipeline(k, begin, end, s->stages, s->kv_stage0, s->kv_stage_bytes, &f, &ks, r0);
    LLVMValueRef len = LLVMBuildSub(b, end, begin, "");
    LLVMValueRef r_next = add(k, r0, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, len, c32(k, 0), ""), len,
                                                         c32(k, 0), ""));
    s2_nv_loop_end(cg, &heads, &r_next);

    s2_nv_cp_async_wait(cg, 0);
    store_acc(k, dk, softmax_scale(k), param(k, P_DK), slice(k, P_DKS, kvh64), param(k, P_DKS + 1), ks.kpos0, false);
    store_acc(k, dv, cf(k, 1.0), param(k, P_DV), slice(k, P_DVS, kvh64), param(k, P_DVS + 1), ks.kpos0, false);
    LLVMBuildRetVoid(b);
}

/* ---- shapes, entry points ---- */

static int align_up(int x, int a) { return (x + a - 1) / a * a; }

static void bwd_shape_init(bwd_shape *s, const s2_pattern *p, const s2_kernel_spec *spec)
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
    s->threads = s->warps * 32;
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
    /* the ring's refill issued under the entry's S and dP products (H200,
     * bench/RESULTS.md runs 93-94: the dK/dV kernel -1.6% at l16v8) */
    s->late_refill = s->wg;
}

/* ---- NAME_dqds2: two query tiles per CTA, each K tile read once for both ----
 *
 * NAME_dqds reads per entry an 8 KB dS tile from DRAM and a 16 KB K tile
 * from L2, and the neighbouring query tile reads the same K tiles for all
 * but a few of its entries (bench/RESULTS.md run 82: L2 at 88%).  Here one
 * CTA of two warpgroups takes query tiles rel0 and rel0 - 1 of a head and
 * walks the union of their (increasing) forward lists: each union slot
 * loads the K tile once and each tile's dS tile (zero-filled where that
 * tile has no such entry), and each warpgroup does its own tile's product.
 * The union is built in shared memory at the start: one list entry per
 * thread (lists of at most S2_BWD_DQDS2_MAX_LIST entries; the runtime
 * takes NAME_dqds otherwise), each entry's place found by a binary search
 * in the other list and a count of the common entries before it. */

/* the union arrays (int32, after the ring): keys of list A and of list B,
 * A's common-entry counts (n0 + 1, padded), the warp totals, then per
 * union slot its key tile and the two entries */
enum { U_N = S2_BWD_DQDS2_MAX_LIST, U_KA = 0, U_KB = 4 * U_N, U_CA = 8 * U_N, U_WT = U_CA + 4 * (U_N + 8),
       U_KT = U_WT + 4 * (S2_BWD_DQDS2_THREADS / 32), U_E0 = U_KT + 8 * U_N, U_E1 = U_E0 + 8 * U_N,
       U_END = U_E1 + 8 * U_N };
_Static_assert((int)U_END == (int)S2_BWD_DQDS2_UNION_BYTES, "the union's layout and its size in attention.h");

static LLVMValueRef lds_i32(bwd *k, int off, LLVMValueRef idx)
{
    LLVMValueRef ld = LLVMBuildLoad2(k->b, k->cg->t_i32,
                                     s2_nv_smem_at(k->cg, add(k, c32(k, off), LLVMBuildShl(k->b, idx, c32(k, 2), ""))), "");
    LLVMSetAlignment(ld, 4);
    return ld;
}

static void sts_i32(bwd *k, int off, LLVMValueRef idx, LLVMValueRef v)
{
    LLVMValueRef st =
        LLVMBuildStore(k->b, v, s2_nv_smem_at(k->cg, add(k, c32(k, off), LLVMBuildShl(k->b, idx, c32(k, 2), ""))));
    LLVMSetAlignment(st, 4);
}

/* #{a[0..n) < x} for a in increasing order in shared memory (n <= 256),
 * by halving steps without branches */
static LLVMValueRef lower_bound_smem(bwd *k, int arr, LLVMValueRef n, LLVMValueRef x)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef lo = c32(k, 0);
    for (int step = S2_BWD_DQDS2_MAX_LIST; step >= 1; step >>= 1) {
        LLVMValueRef probe = add(k, lo, c32(k, step));
        LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLE, probe, n, "");
        LLVMValueRef v = lds_i32(k, arr, LLVMBuildSelect(b, in, LLVMBuildSub(b, probe, c32(k, 1), ""), c32(k, 0), ""));
        LLVMValueRef go = LLVMBuildAnd(b, in, LLVMBuildICmp(b, LLVMIntSLT, v, x, ""), "");
        lo = LLVMBuildSelect(b, go, probe, lo, "lb");
    }
    return lo;
}

/* The thread's count of `flag` over the threads below it, across the CTA
 * (every thread calls it; ends with the warp totals published) and the
 * CTA's total. */
static LLVMValueRef cta_excl_count(bwd *k, LLVMValueRef flag, LLVMValueRef *total)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    LLVMValueRef bal = s2_nv_ballot(cg, flag);
    LLVMValueRef mine = s2_nv_popc(cg, LLVMBuildAnd(b, bal, s2_nv_lanemask_lt(cg), ""));
    LLVMValueRef w = LLVMBuildLShr(b, k->tid, c32(k, 5), "cta_warp");
    s2_nv_if first;
    s2_nv_if_begin(cg, &first, LLVMBuildICmp(b, LLVMIntEQ, k->lane, c32(k, 0), ""), "warp_total");
    sts_i32(k, k->s.dqds2_u_off + U_WT, w, s2_nv_popc(cg, bal));
    s2_nv_if_end(cg, &first);
    s2_nv_barrier_cta(cg);
    LLVMValueRef below = c32(k, 0), all = c32(k, 0);
    for (int j = 0; j < S2_BWD_DQDS2_THREADS / 32; j++) {
        LLVMValueRef t = lds_i32(k, k->s.dqds2_u_off + U_WT, c32(k, j));
        below = add(k, below, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, c32(k, j), w, ""), t, c32(k, 0), ""));
        all = add(k, all, t);
    }
    *total = all;
    return add(k, below, mine);
}

static void dqds2_prep(bwd *k, LLVMValueRef u, prep_vals *out, void *user)
{
    (void)user;
    out->n = 3;
    out->v[0] = lds_i32(k, k->s.dqds2_u_off + U_KT, u);
    out->v[1] = lds_i32(k, k->s.dqds2_u_off + U_E0, u);
    out->v[2] = lds_i32(k, k->s.dqds2_u_off + U_E1, u);
}

static void dqds2_take(bwd *k, const prep_vals *in, void *user)
{
    dq_state *ds = user;
    ds->kpos0 = mul(k, in->v[0], c32(k, k->s.BN));
    ds->pe[0] = in->v[1];
    ds->pe[1] = in->v[2];
}

static void dqds2_issue(bwd *k, LLVMValueRef u, LLVMValueRef soff, void *user)
{
    (void)u;
    dq_state *ds = user;
    LLVMBuilderRef b = k->b;
    load_tile(k, k->s.BN, param(k, P_K), ds->kslice, param(k, P_KS + 1), soff, ds->kpos0, NULL, false);
    LLVMValueRef has0 = LLVMBuildICmp(b, LLVMIntSGE, ds->pe[0], c32(k, 0), "");
    LLVMValueRef any = LLVMBuildSelect(b, has0, ds->pe[0], ds->pe[1], "");   /* one of them is an entry */
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    for (int j = 0; j < 2; j++) {
        LLVMValueRef has = LLVMBuildICmp(b, LLVMIntSGE, ds->pe[j], c32(k, 0), "");
        LLVMValueRef e = LLVMBuildSelect(b, has, ds->pe[j], any, "");
        LLVMValueRef src = mul(k, add(k, ds->ds_base, sext64(k, e)), c64(k, DS_TILE_BYTES));
        LLVMValueRef dst = add(k, soff, c32(k, k->s.BN * k->s.row_bytes + j * DS_TILE_BYTES));
        LLVMValueRef size = LLVMBuildSelect(b, has, c32(k, 16), c32(k, 0), "");   /* absent: zeros */
        for (int it = 0; it * S2_BWD_DQDS2_THREADS * 16 < DS_TILE_BYTES; it++) {
            LLVMValueRef off = LLVMBuildShl(b, add(k, k->tid, c32(k, it * S2_BWD_DQDS2_THREADS)), c32(k, 4), "");
            LLVMValueRef g = add(k, src, LLVMBuildZExt(b, off, k->cg->t_i64, ""));
            s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, off)),
                              LLVMBuildInBoundsGEP2(b, i8, param(k, P_DS), &g, 1, ""), size);
        }
    }
}

static void build_dqds2(bwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    dq_state ds = {0};
    /* the warpgroup (warp-uniform, so that its dS descriptor is), and the
     * warp within it for the fragment layouts */
    LLVMValueRef wg = s2_nv_shfl_idx_i32(cg, LLVMBuildLShr(b, k->tid, c32(k, 7), ""), 0);
    LLVMValueRef cta_warp = k->warp;
    k->warp = LLVMBuildAnd(b, cta_warp, c32(k, 3), "wg_warp");
    ds.a_shift = mul(k, wg, c32(k, DS_TILE_BYTES));

    LLVMValueRef b0, e0, b1, e1, first, rel0;
    LLVMValueRef h64 = dq_cta(k, &ds, true, &b0, &e0, &first, &rel0);
    LLVMValueRef rel1 = LLVMBuildSub(b, rel0, c32(k, 1), "rel1");
    LLVMValueRef has1 = LLVMBuildICmp(b, LLVMIntSGE, rel1, c32(k, 0), "has1");
    LLVMValueRef pos0 = ds.tile_pos0;
    /* no second tile: rows past kv_len, which the stores skip */
    LLVMValueRef pos1 = LLVMBuildSelect(b, has1, LLVMBuildSub(b, pos0, c32(k, k->s.BM), ""), k->kv_len, "");
    list_bounds_of(k, P_CLASS, P_OFFSETS, h64, param(k, P_Q_TILES), LLVMBuildSelect(b, has1, rel1, rel0, ""), &b1, &e1,
                   NULL);
    LLVMValueRef n0 = LLVMBuildSub(b, e0, b0, "n0");
    LLVMValueRef n1 = LLVMBuildSelect(b, has1, LLVMBuildSub(b, e1, b1, ""), c32(k, 0), "n1");
    ds.ds_base = LLVMBuildSub(b, bwd_ds_slot_base(k, h64), sext64(k, first), "ds_base");

    /* the union of the two lists, in increasing key order */
    int u = k->s.dqds2_u_off;
    LLVMValueRef t = k->tid;
    LLVMValueRef inA = LLVMBuildICmp(b, LLVMIntSLT, t, n0, ""), inB = LLVMBuildICmp(b, LLVMIntSLT, t, n1, "");
    LLVMValueRef ea = add(k, b0, t), eb = add(k, b1, t);
    s2_nv_if la, lb;
    s2_nv_if_begin(cg, &la, inA, "key_a");
    sts_i32(k, u + U_KA, t, bwd_entry_field(k, ds.entries, ea, 0, cg->t_i32));
    s2_nv_if_end(cg, &la);
    s2_nv_if_begin(cg, &lb, inB, "key_b");
    sts_i32(k, u + U_KB, t, bwd_entry_field(k, ds.entries, eb, 0, cg->t_i32));
    s2_nv_if_end(cg, &lb);
    s2_nv_barrier_cta(cg);
    /* A's entries: place = t + #{B < x} - #{common entries before t} */
    LLVMValueRef xa = lds_i32(k, u + U_KA, LLVMBuildSelect(b, inA, t, c32(k, 0), ""));
    LLVMValueRef lbB = lower_bound_smem(k, u + U_KB, n1, xa);
    LLVMValueRef hitB = LLVMBuildAnd(
        b, LLVMBuildAnd(b, inA, LLVMBuildICmp(b, LLVMIntSLT, lbB, n1, ""), ""),
        LLVMBuildICmp(b, LLVMIntEQ, lds_i32(k, u + U_KB, LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, lbB, n1, ""), lbB, c32(k, 0), "")), xa, ""),
        "common");
    LLVMValueRef ncommon;
    LLVMValueRef cbefore = cta_excl_count(k, hitB, &ncommon);
    s2_nv_if wa;
    s2_nv_if_begin(cg, &wa, inA, "place_a");
    {
        LLVMValueRef at = LLVMBuildSub(b, add(k, t, lbB), cbefore, "");
        sts_i32(k, u + U_CA, t, cbefore);
        sts_i32(k, u + U_KT, at, xa);
        sts_i32(k, u + U_E0, at, ea);
        sts_i32(k, u + U_E1, at, LLVMBuildSelect(b, hitB, add(k, b1, lbB), c32(k, -1), ""));
    }
    s2_nv_if_end(cg, &wa);
    s2_nv_if lastc;
    s2_nv_if_begin(cg, &lastc, LLVMBuildICmp(b, LLVMIntEQ, t, c32(k, 0), ""), "ca_end");
    sts_i32(k, u + U_CA, n0, ncommon);
    s2_nv_if_end(cg, &lastc);
    s2_nv_barrier_cta(cg);
    /* B's entries A lacks: place = t + #{A < y} - #{common entries below y} */
    s2_nv_if wb;
    s2_nv_if_begin(cg, &wb, inB, "place_b");
    {
        LLVMValueRef y = lds_i32(k, u + U_KB, t);
        LLVMValueRef lbA = lower_bound_smem(k, u + U_KA, n0, y);
        LLVMValueRef inrange = LLVMBuildICmp(b, LLVMIntSLT, lbA, n0, "");
        LLVMValueRef hitA = LLVMBuildAnd(
            b, inrange,
            LLVMBuildICmp(b, LLVMIntEQ, lds_i32(k, u + U_KA, LLVMBuildSelect(b, inrange, lbA, c32(k, 0), "")), y, ""), "");
        s2_nv_if only;
        s2_nv_if_begin(cg, &only, LLVMBuildNot(b, hitA, ""), "b_only");
        LLVMValueRef at = LLVMBuildSub(b, add(k, t, lbA), lds_i32(k, u + U_CA, lbA), "");
        sts_i32(k, u + U_KT, at, y);
        sts_i32(k, u + U_E0, at, c32(k, -1));
        sts_i32(k, u + U_E1, at, eb);
        s2_nv_if_end(cg, &only);
    }
    s2_nv_if_end(cg, &wb);
    s2_nv_barrier_cta(cg);
    LLVMValueRef nu = LLVMBuildSub(b, add(k, n0, n1), ncommon, "n_union");

    LLVMValueRef acc[MAX_D / 8][4];
    new_acc(k, acc, "dq");
    ds.acc = acc;
    ring_fns f = {dqds2_prep, dqds2_take, dqds2_issue, bwd_wg_dqds_compute, false, false};
    pipeline(k, c32(k, 0), nu, k->s.dqds_stages, 0, k->s.dqds2_stage_bytes, &f, &ds, NULL);
    LLVMValueRef mypos = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, wg, c32(k, 0), ""), pos0, pos1, "tile_pos0");
    store_acc(k, acc, softmax_scale(k), param(k, P_DQ), slice(k, P_DQS, h64), param(k, P_DQS + 1), mypos, true);
    LLVMBuildRetVoid(b);
}

int s2_bwd_smem_bytes(const s2_pattern *p, const s2_kernel_spec *spec)
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
    LLVMTypeRef params[P_COUNT + 2];
    for (int i = P_Q; i <= P_DV; i++)
        params[i] = cg->t_ptr_global;
    for (int i = P_QS; i < P_QLEN; i++)
        params[i] = cg->t_i64;
    params[P_QLEN] = params[P_KVLEN] = cg->t_i32;
    params[P_SCALE_LOG2] = cg->t_f32;
    params[P_CLASS] = params[P_OFFSETS] = params[P_ENTRIES] = cg->t_ptr_global;
    params[P_FIRST_Q_TILE] = params[P_Q_TILES] = cg->t_i32;
    params[P_TCLASS] = params[P_TOFFSETS] = params[P_TENTRIES] = cg->t_ptr_global;
    params[P_KV_TILES] = cg->t_i32;
    params[P_DS] = params[P_DS_HEAD] = params[P_DS_MAP] = cg->t_ptr_global;
    int n = P_COUNT;
    if (k->s.tma) {
        params[n++] = LLVMPointerTypeInContext(cg->llctx, S2_AS_GENERIC);   /* q map */
        params[n++] = LLVMPointerTypeInContext(cg->llctx, S2_AS_GENERIC);   /* do map */
    }
    LLVMValueRef fn = s2_nv_kernel_new(cg, name, params, (unsigned)n, k->s.threads, k->min_ctas ? k->min_ctas : 1);
    for (int i = P_COUNT; i < n; i++)
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
    k->fn = fn;
    k->entry_bb = LLVMGetInsertBlock(cg->b);
    common_setup(k);
    return fn;
}

s2_status s2_bwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kernel_spec *spec, const char *name)
{
    bwd k = {.cg = cg, .b = cg->b};
    bwd_shape_init(&k.s, p, spec);
    if (k.s.D > MAX_D || k.s.BN / 8 > MAX_N || k.s.qc / 8 > MAX_N || k.s.BM != 16 * k.s.warps ||
        (k.s.chunks != 4 && k.s.chunks != 8 && k.s.chunks != 16) || k.s.threads % k.s.chunks != 0 ||
        (k.s.gather > 1 && (k.s.gbs != 16 || k.s.gather * k.s.gbs != k.s.BN || k.s.gather * k.s.gbs != k.s.KB)) ||
        k.s.kvg > 4 || k.s.kgbs < 16)
        return s2_fail(ctx, S2_ERR_INTERNAL, "backward: unresolved spec reached the builder");
    new_kernel(&k, name, "_pre");
    build_pre(&k);
    new_kernel(&k, name, "_dq");
    build_dq(&k);
    new_kernel(&k, name, "_dkdv");
    build_dkdv(&k);
    if (k.s.ds) {
        new_kernel(&k, name, "_dqds");
        build_dqds(&k);
        /* two warpgroups, two CTAs per SM (128 registers) */
        bwd_shape one = k.s;
        k.s.threads = S2_BWD_DQDS2_THREADS;
        k.s.warps = S2_BWD_DQDS2_THREADS / 32;
        k.min_ctas = 2;
        new_kernel(&k, name, "_dqds2");
        build_dqds2(&k);
        k.s = one;
        k.min_ctas = 0;
    }
    return S2_OK;
}
