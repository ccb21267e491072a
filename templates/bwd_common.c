/* The backward kernels' shared pieces (bwd_internal.h): shared-memory tiles and
 * their mma.sync fragments, the global -> shared copies, the schedule lists,
 * the masks, the cp.async ring, slices, accumulators and their stores. */
#include "bwd_internal.h"
#include "flash.h"
#include "s2c/layout.h"

#include <math.h>

/* ---- shared-memory tiles ([rows][D] of 16-bit, 16-byte chunks swizzled as
 *      in the forward: chunk ^= row & 7, or (row >> 1) & 3 for 4 chunks) ---- */

/* Chunks of a row that are swizzled: whole groups of 8 (or all 4); the
 * chunks past them (head dims that are not a multiple of 64) stay in place. */
static int swizzled_chunks(const bwd *k)
{
    int c = k->s.chunks;
    return c >= 8 ? c & ~7 : c == 4 ? 4 : 0;
}

/* where: SW_ANY (checked at run time), SW_IN (known inside the swizzled
 * part at build time), SW_PAST (known past it) */
enum { SW_ANY, SW_IN, SW_PAST };

static LLVMValueRef swizzle_at(bwd *k, LLVMValueRef row, LLVMValueRef chunk, int where)
{
    LLVMBuilderRef b = k->b;
    int full = swizzled_chunks(k);
    if (full == 0 || where == SW_PAST)
        return add(k, mul(k, row, c32(k, k->s.row_bytes)), LLVMBuildShl(b, chunk, c32(k, 4), ""));
    LLVMValueRef sw = k->s.chunks >= 8
        ? LLVMBuildXor(b, chunk, LLVMBuildAnd(b, row, c32(k, 7), ""), "")
        : LLVMBuildXor(b, chunk, LLVMBuildAnd(b, LLVMBuildLShr(b, row, c32(k, 1), ""), c32(k, 3), ""), "");
    if (where == SW_ANY && full != k->s.chunks)
        sw = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, chunk, c32(k, full), ""), sw, chunk, "");
    return add(k, mul(k, row, c32(k, k->s.row_bytes)), LLVMBuildShl(b, sw, c32(k, 4), ""));
}

static LLVMValueRef swizzle(bwd *k, LLVMValueRef row, LLVMValueRef chunk) { return swizzle_at(k, row, chunk, SW_ANY); }

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
    if (ch0 >= swizzled_chunks(k)) {   /* past the swizzled groups: in place */
        cst += 16 * ch0;
        key = 0;
    } else if (k->s.chunks >= 8) {
        cst += 16 * (ch0 & ~7);
    }
    LLVMValueRef part = ch0 >= swizzled_chunks(k) ? swizzle_at(k, lane_row, lc, SW_PAST)
                                                  : swizzle_at(k, lane_row, add(k, lc, c32(k, key)), SW_IN);
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
void s2_bwd_mma_abt(bwd *k, LLVMValueRef a, LLVMValueRef bt, int row0, int ntiles, LLVMValueRef acc[][4])
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
    if (k->s.D % 32) {
        /* the last 16 columns: one k-step, B of n-tiles n and n+1 from one
         * ldmatrix (rows row0 + 8n + lane % 16, chunk lane / 16) */
        int ks = k->s.D / 16 - 1;
        LLVMValueRef a0[4];
        ldsm_a(k, a, ks, a0);
        for (int n = 0; n < ntiles; n += 2) {
            LLVMValueRef bb[4];
            s2_nv_ldmatrix_x4(k->cg, frag_addr(k, bt, k->bt_row, k->bt_lc, row0 + 8 * n, 2 * ks), false, bb);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a0, (LLVMValueRef[]){bb[0], bb[2]}, acc[n]);
            s2_nv_mma_m16n8k16(k->cg, k->s.dt, a0, (LLVMValueRef[]){bb[1], bb[3]}, acc[n + 1]);
        }
    }
}

/* out[dn] += X·Y: X = C-layout values x[ntiles][4] reused as A fragments
 * (n-tiles 2kk, 2kk+1 = k-step kk, PTX ISA 9.7.14.5.8), Y = rows row0 + 16kk.. of tile `y`. */
void s2_bwd_mma_xy(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef y, int row0, LLVMValueRef out[][4])
{
    s2_bwd_mma_xy_cols(k, x, ntiles, y, row0, 0, k->s.D, out);
}

void s2_bwd_mma_xy_cols(bwd *k, LLVMValueRef x[][4], int ntiles, LLVMValueRef y, int row0, int col0, int cols,
                        LLVMValueRef out[][4])
{
    s2_cg *cg = k->cg;
    for (int kk = 0; kk < ntiles / 2; kk++) {
        LLVMValueRef a[4];
        s2_flash_a_from_c(cg, k->s.dt, &x[2 * kk], a);
        for (int dp = col0 / 16; dp < (col0 + cols) / 16; dp++) {
            LLVMValueRef vb[4];
            ldsm_bt(k, y, row0 + 16 * kk, dp, vb);
            for (int h = 0; h < 2; h++)
                s2_flash_mma_into(cg, k->s.dt, a, &vb[2 * h], out[2 * (dp - col0 / 16) + h]);
        }
    }
}

/* ---- global -> shared copies ---- */

/* Position of row r of a gathered tile: slot r / rows starts at pos[r / rows]. */
static LLVMValueRef slot_row_pos(bwd *k, const bwd_slots *sl, LLVMValueRef r)
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
static LLVMValueRef tile_row_at(bwd *k, LLVMValueRef pos0, const bwd_slots *slot, bool query, LLVMValueRef r,
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

LLVMValueRef s2_bwd_tile_row(bwd *k, LLVMValueRef pos0, bool query, LLVMValueRef r, LLVMValueRef *trow)
{
    return tile_row_at(k, pos0, NULL, query, r, trow);
}

/* A tile whose rows all exist (the common case): the thread's chunk and
 * first row are fixed, each next copy is T / C rows further, so its address
 * is one add away (no per-row checks, multiplies or zero-fill sizes).
 * trow0: the tensor row of tile row 0, or with slot, of each slot's row 0
 * (slot->rows a multiple of T / C: a copy never straddles two slots). */
static void load_tile_whole(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                            LLVMValueRef dst, const LLVMValueRef *trow0, const bwd_slots *slot)
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
            src = s2_kb_gep16(&k->kb, base, off);
            if (!inc)
                inc = mul(k, rstride, c64(k, step));
        } else {
            src = s2_kb_gep16(&k->kb, src, inc);
        }
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, tile_off(k, rows, add(k, r, c32(k, row)), ch))),
                          src, c32(k, 16));
    }
}

/* cp.async a [rows][D] tile of tensor `base` (slice = element offset of this
 * (b, h), rstride its seq stride) into shared `dst`; missing rows are
 * zero-filled and their source clamped to the slice start.  A tile whose
 * rows all exist takes load_tile_whole, without per-row checks (run 30). */
void s2_bwd_load_tile(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride, LLVMValueRef dst,
                      LLVMValueRef pos0, const bwd_slots *slot, bool query)
{
    int step = k->s.threads / k->s.chunks;
    if (k->s.threads % k->s.chunks || step % 8 || rows % step || (slot && slot->rows % step)) {
        s2_bwd_load_tile_rows(k, rows, base, slice, rstride, dst, pos0, slot, query);
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
    s2_bwd_load_tile_rows(k, rows, base, slice, rstride, dst, pos0, slot, query);
    s2_nv_if_end(k->cg, &p);
}

/* s2_bwd_load_tile row by row: each row checked, missing ones zero-filled. */
void s2_bwd_load_tile_rows(bwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride,
                           LLVMValueRef dst, LLVMValueRef pos0, const bwd_slots *slot, bool query)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, total = rows * C;
    bool pow2 = (C & (C - 1)) == 0;
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "tail");
        LLVMValueRef r = pow2 ? LLVMBuildLShr(b, idx, c32(k, s2_log2i(C)), "") : LLVMBuildUDiv(b, idx, c32(k, C), "");
        LLVMValueRef ch = pow2 ? LLVMBuildAnd(b, idx, c32(k, C - 1), "") : LLVMBuildURem(b, idx, c32(k, C), "");
        LLVMValueRef trow;
        LLVMValueRef ok = tile_row_at(k, pos0, slot, query, r, &trow);
        LLVMValueRef off = add(k, mul(k, sext64(k, trow), rstride),
                               LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), k->cg->t_i64, ""));
        off = LLVMBuildSelect(b, ok, add(k, slice, off), slice, "");
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, add(k, dst, tile_off(k, rows, r, ch))), s2_kb_gep16(&k->kb, base, off),
                          LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), ""));
        s2_kb_spread_end(&k->kb, &guard);
    }
}

/* cp.async lse2 and delta of the query tile at pos0 (rows of [B][H][Sq] from
 * element rowbase) into dst: lse2[BM] then delta[BM]; missing rows read 0,
 * or with TMA tiles lse2 = +inf: the maps bring a packed batch's neighbour
 * rows (finite) there, whose P must be 0. */
void s2_bwd_load_row_stats(bwd *k, LLVMValueRef pos0, LLVMValueRef rowbase, LLVMValueRef dst)
{
    LLVMBuilderRef b = k->b;
    int BM = k->s.BM, T = k->s.threads, total = 2 * BM;
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "tail");
        LLVMValueRef is_delta = LLVMBuildICmp(b, LLVMIntUGE, idx, c32(k, BM), "");
        LLVMValueRef r = LLVMBuildAnd(b, idx, c32(k, BM - 1), "");
        LLVMValueRef qrow;
        LLVMValueRef ok = s2_bwd_tile_row(k, pos0, true, r, &qrow);
        LLVMValueRef off = LLVMBuildSelect(b, ok, add(k, rowbase, sext64(k, qrow)), rowbase, "");
        LLVMValueRef src = LLVMBuildSelect(b, is_delta, param(k, P_DELTA), param(k, P_LSE2), "");
        LLVMValueRef sp = LLVMBuildInBoundsGEP2(b, k->cg->t_f32, src, &off, 1, "");
        LLVMValueRef d = add(k, dst, LLVMBuildShl(b, idx, c32(k, 2), ""));
        s2_nv_if inf = {0}, cp = {0};
        if (k->s.tma) {
            LLVMValueRef fill = LLVMBuildAnd(b, LLVMBuildNot(b, ok, ""), LLVMBuildNot(b, is_delta, ""), "inf_row");
            s2_nv_if_begin(k->cg, &inf, fill, "lse2_inf");
            LLVMBuildStore(b, cf(k, INFINITY), s2_nv_smem_at(k->cg, d));
            s2_nv_if_end(k->cg, &inf);
            s2_nv_if_begin(k->cg, &cp, LLVMBuildNot(b, fill, ""), "stat_copy");
        }
        s2_nv_cp_async_4(k->cg, s2_nv_smem_at(k->cg, d), sp, LLVMBuildSelect(b, ok, c32(k, 4), c32(k, 0), ""));
        if (k->s.tma)
            s2_nv_if_end(k->cg, &cp);
        s2_kb_spread_end(&k->kb, &guard);
    }
}

/* ---- schedule lists ---- */

/* Field at byte field_off of record e of `size` bytes. */
LLVMValueRef s2_bwd_field_at(bwd *k, LLVMValueRef entries, LLVMValueRef e, int size, int field_off, LLVMTypeRef ty)
{
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef off = add(k, mul(k, sext64(k, e), c64(k, size)), c64(k, field_off));
    LLVMValueRef v = LLVMBuildLoad2(k->b, ty, LLVMBuildInBoundsGEP2(k->b, i8, entries, &off, 1, ""), "");
    LLVMSetAlignment(v, ty == k->cg->t_i64 ? 8 : 4);
    return v;
}

/* Field of s2_dev_entry e of `entries`: byte offset 0 tile, 4 flags, 8 live. */
LLVMValueRef s2_bwd_entry_field(bwd *k, LLVMValueRef entries, LLVMValueRef e, int field_off, LLVMTypeRef ty)
{
    return s2_bwd_field_at(k, entries, e, (int)sizeof(s2_dev_entry), field_off, ty);
}

/* List `index` of head h's class: [*begin, *end) of the entries array;
 * *first (if asked) the class's first entry. */
void s2_bwd_list_bounds_of(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists,
                           LLVMValueRef index, LLVMValueRef *begin, LLVMValueRef *end, LLVMValueRef *first)
{
    LLVMValueRef cls = s2_kb_load_i32(&k->kb, param(k, p_class), h64, "");
    LLVMValueRef li = sext64(k, add(k, mul(k, cls, lists), index));
    *begin = s2_kb_load_i32(&k->kb, param(k, p_offsets), li, "");
    *end = s2_kb_load_i32(&k->kb, param(k, p_offsets), add(k, li, c64(k, 1)), "");
    if (first)
        *first = s2_kb_load_i32(&k->kb, param(k, p_offsets), sext64(k, mul(k, cls, lists)), "");
}

void s2_bwd_list_bounds(bwd *k, int p_class, int p_offsets, LLVMValueRef h64, LLVMValueRef lists, LLVMValueRef index,
                        LLVMValueRef *begin, LLVMValueRef *end)
{
    s2_bwd_list_bounds_of(k, p_class, p_offsets, h64, lists, index, begin, end, NULL);
}

LLVMValueRef s2_bwd_ds_slot_base(bwd *k, LLVMValueRef h64)
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

void s2_bwd_apply_mask(bwd *k, const mask_geom *mg, LLVMValueRef sc[][4], int ntiles, int col0_const,
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
    s2_flash_join_scores(cg, from, join, ntiles, sc, masked);
}

/* P = exp2(S·scale_log2 - lse2) and dS = P ∘ (dP - delta), in place; lse2
 * and delta of value (n, i) from stat(). */

void s2_bwd_probs_and_ds(bwd *k, LLVMValueRef sc[][4], LLVMValueRef dp[][4], int ntiles, stat_fn stat, void *user)
{
    for (int n = 0; n < ntiles; n++)
        for (int i = 0; i < 4; i++) {
            LLVMValueRef l2, dl;
            stat(k, n, i, &l2, &dl, user);
            sc[n][i] = s2_nv_ex2_approx(k->cg, s2_nv_fma(k->cg, sc[n][i], k->scale_log2, LLVMBuildFNeg(k->b, l2, "")));
            dp[n][i] = LLVMBuildFMul(k->b, sc[n][i], LLVMBuildFSub(k->b, dp[n][i], dl, ""), "ds");
        }
}

/* ---- the cp.async ring: one group per entry, committed even when empty ---- */

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

/* The refill a ring_fns.late entry body issues (s2_bwd_ring_refill). */
typedef struct ring_refill {
    const ring_fns *f;
    LLVMValueRef e, end, stage;
    int stage0, stage_bytes;
    void *user;
} ring_refill;

void s2_bwd_ring_refill(bwd *k)
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
void s2_bwd_pipeline(bwd *k, LLVMValueRef begin, LLVMValueRef end, int S, int stage0, int stage_bytes,
                     const ring_fns *f, void *user, LLVMValueRef r0)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    /* entry begin + j uses stage (r0 + j) % S (r0: entries the ring took
     * before, for mbarrier phases that run on across lists) */
    if (!r0)
        r0 = c32(k, 0);
    for (int st = 0; st < S - 1; st++)
        prefetch(k, f, add(k, begin, c32(k, st)), end, s2_kb_ring_stage(&k->kb, add(k, r0, c32(k, st)), S, ""), stage0,
                 stage_bytes, true, user);
    /* What a refill's issue needs is loaded one iteration ahead and carried,
     * so that ptxas cannot sink the load below the ring's barrier (run 34).
     * The first refill's, before the loop
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
        ring_refill r = {f, add(k, e, c32(k, S - 1)), end, s2_kb_ring_stage(&k->kb, add(k, i, c32(k, S - 1)), S, ""),
                         stage0, stage_bytes, user};
        k->refill = &r;
        if (!f->late)
            s2_bwd_ring_refill(k);
        LLVMValueRef soff = add(k, c32(k, stage0), mul(k, s2_kb_ring_stage(&k->kb, i, S, ""), c32(k, stage_bytes)));
        k->ring_pos = i;
        f->compute(k, e, soff, user);
        s2_bwd_ring_refill(k);
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

LLVMValueRef s2_bwd_slice(bwd *k, int ps, LLVMValueRef h64)
{
    bool key = ps == P_KS || ps == P_VS || ps == P_DKS || ps == P_DVS;
    LLVMValueRef bs = add(k, mul(k, k->bidx, param(k, ps)), mul(k, key ? k->k_row0 : k->q_row0, param(k, ps + 1)));
    return add(k, bs, mul(k, h64, param(k, ps + 2)));
}

void s2_bwd_seq(bwd *k)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef dflt[4] = {c32(k, 0), param(k, P_QLEN), c32(k, 0), param(k, P_KVLEN)}, seq[4];
    LLVMValueRef info = param(k, k->p_seqinfo);
    s2_flash_seqinfo(k->cg, info, LLVMBuildTrunc(b, k->batch, k->cg->t_i32, ""), dflt, seq);
    /* k->batch may be new (the dK/dV kernel's remapped grid) */
    LLVMValueRef varlen = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, info, k->cg->t_i64, ""), c64(k, 0), "");
    k->bidx = LLVMBuildSelect(b, varlen, c64(k, 0), k->batch, "bidx");
    k->q_row0 = sext64(k, seq[0]);
    k->q_len = seq[1];
    k->k_row0 = sext64(k, seq[2]);
    k->kv_len = seq[3];
    k->q_start = LLVMBuildSub(b, k->kv_len, k->q_len, "q_start");
}

LLVMValueRef s2_bwd_stats_base(bwd *k, LLVMValueRef h64)
{
    LLVMValueRef bh = add(k, mul(k, k->bidx, c64(k, k->s.heads)), h64);
    return add(k, mul(k, bh, sext64(k, param(k, P_QLEN))), k->q_row0);
}

LLVMValueRef s2_bwd_q_tile_mine(bwd *k, LLVMValueRef pos0)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, pos0, k->kv_len, ""),
                                   LLVMBuildICmp(b, LLVMIntSGT, add(k, pos0, c32(k, k->s.BM)), k->q_start, ""), "");
    return LLVMBuildAnd(b, in, LLVMBuildICmp(b, LLVMIntSGT, k->q_len, c32(k, 0), ""), "q_tile_mine");
}

/* [D/8][4] f32 accumulators as allocas at the top of the entry block (SROA
 * makes them registers), zeroed here. */
void s2_bwd_new_acc(bwd *k, LLVMValueRef acc[][4], const char *name) { s2_bwd_new_acc_cols(k, acc, k->s.D, name); }

void s2_bwd_new_acc_cols(bwd *k, LLVMValueRef acc[][4], int cols, const char *name)
{
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef cur = s2_kb_entry_begin(&k->kb, k->entry_bb);
    for (int dn = 0; dn < cols / 8; dn++)
        for (int i = 0; i < 4; i++)
            acc[dn][i] = LLVMBuildAlloca(b, k->cg->t_f32, name);
    s2_kb_entry_end(&k->kb, cur);
    s2_bwd_zero_acc(k, acc, cols);
}

void s2_bwd_zero_acc(bwd *k, LLVMValueRef acc[][4], int cols)
{
    for (int dn = 0; dn < cols / 8; dn++)
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(k->b, cf(k, 0.0), acc[dn][i]);
}

/* Store acc·mul to rows (16·warp + g + 8hr) of the tile at pos0 of a 16-bit
 * tensor (element slice `sl`, seq stride `rstride`), rows that exist only.
 * As the sm_90a forward's epilogue: one exchange with the neighbouring lane,
 * then 8-byte stores that write whole 32-byte sectors (4-byte stores where
 * the tensor or its row stride is not 8-byte aligned). */
void s2_bwd_store_acc(bwd *k, LLVMValueRef acc[][4], LLVMValueRef scale, LLVMValueRef out, LLVMValueRef sl,
                      LLVMValueRef rstride, LLVMValueRef pos0, bool query)
{
    s2_bwd_store_acc_cols(k, acc, k->s.D, scale, out, sl, rstride, pos0, query);
}

void s2_bwd_store_acc_cols(bwd *k, LLVMValueRef acc[][4], int cols, LLVMValueRef scale, LLVMValueRef out,
                           LLVMValueRef sl, LLVMValueRef rstride, LLVMValueRef pos0, bool query)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_flash_pairs pr;
    s2_flash_pairs_init(cg, &pr, k->t4, cols);
    LLVMValueRef offs[1] = {LLVMBuildOr(b, sl, rstride, "")};
    LLVMValueRef aligned = s2_flash_aligned8(cg, out, offs, 1);
    for (int hr = 0; hr < 2; hr++) {
        s2_flash_pairs_pack(cg, &pr, k->s.dt, acc, hr, scale);
        s2_flash_pairs_exchange(cg, &pr);   /* in every lane (outside the row guard) */
        LLVMValueRef r = add(k, LLVMBuildShl(b, k->warp, c32(k, 4), ""), add(k, k->g, c32(k, 8 * hr)));
        LLVMValueRef trow;
        LLVMValueRef ok = s2_bwd_tile_row(k, pos0, query, r, &trow);
        s2_nv_if st;
        s2_nv_if_begin(cg, &st, ok, "store");
        LLVMValueRef row_off = add(k, sl, mul(k, sext64(k, trow), rstride));
        s2_flash_pairs_store(cg, &pr, out, row_off, aligned);
        s2_nv_if_end(cg, &st);
    }
}

LLVMValueRef s2_bwd_softmax_scale(bwd *k) { return LLVMBuildFMul(k->b, k->scale_log2, cf(k, M_LN2), "scale"); }
