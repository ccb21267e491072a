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
#include "flash.h"
#include "kbase.h"
#include "params.h"
#include "s2c/launch.h"
#include "template.h"
#include "s2c/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Kernel parameters, in ABI order (abi/params.h, S2_ABI_FWD). */
enum { S2_ABI_FWD_PARAMS(S2_ABI_P_ENUM) P_COUNT };

enum { MAX_D = 256, MAX_BN = 128 };

typedef struct fwd_shape {
    s2_dtype dt;
    int D, BM, BN, warps, stages, threads;
    int chunks;                  /* 16-byte chunks per row: D / 8 */
    bool tail;                   /* D % 32 == 16: Q·Kᵀ's last k-step is a lone one (K x4 over two n-tiles) */
    bool q_reload;               /* Q's A-fragments read from shared memory per key tile, not kept in registers */
    int sub_m_log2, sub_n_size, sub_n;
    int group;                   /* query heads per kv head */
    int heads;
    bool causal;
    int q_off, k_off, v_off, stage_bytes;
} fwd_shape;

typedef struct fwd {
    S2_KB_BASE;                                     /* cg, b, fn; tid, warp, lane, g, t4 (kbase.h) */
    fwd_shape s;
    LLVMValueRef batch, head, kv_head;              /* i64 */
    LLVMValueRef q_len, kv_len, q_start, tile_pos0; /* i32 */
    LLVMValueRef entries, begin, end;               /* list [begin, end) of the entries array */
    LLVMValueRef qbase, kbase, vbase, obase;        /* element offsets (i64) of the (b, h) slices */
    LLVMValueRef lse_base;                          /* i64 index of query row 0 of (b, h) in lse */
    s2_flash_rows acc;                              /* O, m, l (flash.h) */
    LLVMValueRef s_acc[MAX_BN / 8][4];              /* score allocas (column groups may be skipped) */
    LLVMValueRef qf[MAX_D / 16][4];                 /* Q A-fragments */
} fwd;

/* Byte offset of 16-byte chunk `chunk` of row `row` inside a [rows][D] tile
 * (128-byte swizzle, flash.h). */
static LLVMValueRef swizzle(fwd *k, LLVMValueRef row, LLVMValueRef chunk)
{
    return s2_flash_swizzle(k->cg, row, chunk, k->s.chunks);
}

/* cp.async a [rows][D] tile: rows `row0 + r` of the tensor at `base` (element
 * offset `slice` of this (b, h)), row stride `rstride`; row r is copied when
 * valid(r) holds, zero-filled otherwise (src-size 0, source clamped to the
 * slice start so no address outside the tensor is formed). */
typedef LLVMValueRef (*row_valid_fn)(fwd *k, LLVMValueRef r, LLVMValueRef *tensor_row, void *user);

static void load_tile(fwd *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride, int smem_off,
                      LLVMValueRef smem_stage_off, row_valid_fn valid, void *user)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, total = rows * C;
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "tail");
        LLVMValueRef r = LLVMBuildUDiv(b, idx, c32(k, C), "");
        LLVMValueRef ch = LLVMBuildURem(b, idx, c32(k, C), "");
        LLVMValueRef trow;
        LLVMValueRef ok = valid(k, r, &trow, user);
        LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, sext64(k, trow), rstride, ""),
                                        LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, 3), ""), k->cg->t_i64, ""), "");
        off = LLVMBuildSelect(b, ok, LLVMBuildAdd(b, slice, off, ""), slice, "");
        LLVMValueRef dst = LLVMBuildAdd(b, c32(k, smem_off), swizzle(k, r, ch), "");
        if (smem_stage_off)
            dst = LLVMBuildAdd(b, dst, smem_stage_off, "");
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, dst), s2_kb_gep16(&k->kb, base, off),
                          LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), ""));
        s2_kb_spread_end(&k->kb, &guard);
    }
}

/* Query row r of the tile is at absolute position tile_pos0 + r; it exists
 * when q_start <= pos < kv_len, and is row pos - q_start of q. */
static LLVMValueRef q_row_valid(fwd *k, LLVMValueRef r, LLVMValueRef *trow, void *user)
{
    (void)user;
    LLVMValueRef pos = LLVMBuildAdd(k->b, k->tile_pos0, r, "");
    *trow = LLVMBuildSub(k->b, pos, k->q_start, "qrow");
    LLVMValueRef lo = LLVMBuildICmp(k->b, LLVMIntSGE, pos, k->q_start, "");
    LLVMValueRef hi = LLVMBuildICmp(k->b, LLVMIntSLT, pos, k->kv_len, "");
    return LLVMBuildAnd(k->b, lo, hi, "");
}

/* Key row r of a key tile: user points at {i32 position tile * block_n,
 * i32 mask of live column groups or NULL}.  Rows of a dead column group are
 * zero-filled instead of read (no query row of the tile uses them). */
typedef struct kv_rows {
    LLVMValueRef kpos0, colmask;
} kv_rows;

static LLVMValueRef kv_row_valid(fwd *k, LLVMValueRef r, LLVMValueRef *trow, void *user)
{
    const kv_rows *kr = user;
    LLVMValueRef kpos = LLVMBuildAdd(k->b, kr->kpos0, r, "kpos");
    *trow = kpos;
    LLVMValueRef ok = LLVMBuildICmp(k->b, LLVMIntSLT, kpos, k->kv_len, "");
    if (kr->colmask) {
        LLVMValueRef grp = LLVMBuildLShr(k->b, r, c32(k, s2_log2i(k->s.sub_n_size)), "");
        LLVMValueRef bit = LLVMBuildAnd(k->b, LLVMBuildLShr(k->b, kr->colmask, grp, ""), c32(k, 1), "");
        ok = LLVMBuildAnd(k->b, ok, LLVMBuildICmp(k->b, LLVMIntNE, bit, c32(k, 0), ""), "");
    }
    return ok;
}

/* Field of entry e (i32 index into the entries array): byte offset 0 tile,
 * 4 flags, 8 live. */
static LLVMValueRef entry_field(fwd *k, LLVMValueRef e, int field_off, LLVMTypeRef ty)
{
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef off = LLVMBuildAdd(k->b, LLVMBuildMul(k->b, sext64(k, e), c64(k, (long long)sizeof(s2_dev_entry)), ""),
                                    c64(k, field_off), "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(k->b, i8, k->entries, &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(k->b, ty, p, "");
    LLVMSetAlignment(v, ty == k->cg->t_i64 ? 8 : 4);
    return v;
}

/* When a key tile holds several sub-blocks of the pattern (sub_n > 1), a
 * column group (one key sub-block) that no query row of the tile keeps is
 * skipped whole: not loaded, no Q·Kᵀ, no P·V (Merge-Q tiles over vertical
 * stripes keep one group in four).  The mask of live groups is the OR of
 * the entry's live rows; FULL entries keep every group. */
static bool skips_columns(const fwd *k) { return k->s.sub_n > 1; }

static LLVMValueRef entry_colmask(fwd *k, LLVMValueRef e)
{
    LLVMBuilderRef b = k->b;
    int sub_n = k->s.sub_n, sub_m = k->s.BM >> k->s.sub_m_log2;
    LLVMValueRef live = entry_field(k, e, 8, k->cg->t_i64);
    LLVMValueRef m = LLVMConstInt(k->cg->t_i64, 0, 0);
    LLVMValueRef row_bits = LLVMConstInt(k->cg->t_i64, (1ull << sub_n) - 1, 0);
    for (int i = 0; i < sub_m; i++)
        m = LLVMBuildOr(b, m, LLVMBuildAnd(b, LLVMBuildLShr(b, live, LLVMConstInt(k->cg->t_i64, (unsigned long long)(i * sub_n), 0), ""),
                                            row_bits, ""), "");
    LLVMValueRef flags = entry_field(k, e, 4, k->cg->t_i32);
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, c32(k, S2_ENTRY_FULL), ""), c32(k, 0), "");
    return LLVMBuildSelect(b, full, c32(k, (1 << sub_n) - 1), LLVMBuildTrunc(b, m, k->cg->t_i32, ""), "colmask");
}

/* Issue the K and V copies of entry e into stage `stage` (i32). */
static void load_kv(fwd *k, LLVMValueRef e, LLVMValueRef stage)
{
    LLVMValueRef tile = entry_field(k, e, 0, k->cg->t_i32);
    kv_rows kr = {LLVMBuildMul(k->b, tile, c32(k, k->s.BN), "kpos0"), skips_columns(k) ? entry_colmask(k, e) : NULL};
    LLVMValueRef soff = LLVMBuildMul(k->b, stage, c32(k, k->s.stage_bytes), "");
    load_tile(k, k->s.BN, param(k, P_K), k->kbase, param(k, P_KS + 1), k->s.k_off, soff, kv_row_valid, &kr);
    load_tile(k, k->s.BN, param(k, P_V), k->vbase, param(k, P_VS + 1), k->s.v_off, soff, kv_row_valid, &kr);
}

/* if (e < end) load_kv(e, stage); then commit (always, so the group count stays fixed). */
static void prefetch_kv(fwd *k, LLVMValueRef e, LLVMValueRef stage)
{
    s2_nv_if blk;
    s2_nv_if_begin(k->cg, &blk, LLVMBuildICmp(k->b, LLVMIntSLT, e, k->end, ""), "prefetch");
    load_kv(k, e, stage);
    s2_nv_if_end(k->cg, &blk);
    s2_nv_cp_async_commit(k->cg);
}

static void setup(fwd *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    fwd_shape *s = &k->s;
    s2_kb_thread(&k->kb);
    LLVMValueRef head32 = s2_nv_ctaid(cg, 'y');
    k->head = LLVMBuildZExt(b, head32, cg->t_i64, "head");
    k->batch = LLVMBuildZExt(b, s2_nv_ctaid(cg, 'z'), cg->t_i64, "batch");
    k->kv_head = LLVMBuildZExt(b, LLVMBuildUDiv(b, head32, c32(k, s->group), ""), cg->t_i64, "kv_head");

    /* heavy tiles (late, long lists) first */
    LLVMValueRef q_tiles = param(k, P_Q_TILES);
    LLVMValueRef rel = LLVMBuildSub(b, LLVMBuildSub(b, q_tiles, c32(k, 1), ""), s2_nv_ctaid(cg, 'x'), "tile_rel");
    LLVMValueRef tile = LLVMBuildAdd(b, param(k, P_FIRST_Q_TILE), rel, "tile");
    k->tile_pos0 = LLVMBuildMul(b, tile, c32(k, s->BM), "tile_pos0");
    /* variable-length batch: the lengths and first token rows of sequence z */
    LLVMValueRef dflt[4] = {c32(k, 0), param(k, P_QLEN), c32(k, 0), param(k, P_KVLEN)}, seq[4];
    s2_flash_seqinfo(cg, param(k, P_SEQINFO), s2_nv_ctaid(cg, 'z'), dflt, seq);
    k->q_len = seq[1];
    k->kv_len = seq[3];
    k->q_start = LLVMBuildSub(b, k->kv_len, k->q_len, "q_start");

    /* the list: offsets[class_of_head[h] * q_tiles + rel] .. next */
    LLVMValueRef cp = LLVMBuildInBoundsGEP2(b, cg->t_i32, param(k, P_CLASS), &k->head, 1, "");
    LLVMValueRef cls = LLVMBuildLoad2(b, cg->t_i32, cp, "class");
    LLVMSetAlignment(cls, 4);
    LLVMValueRef li = sext64(k, LLVMBuildAdd(b, LLVMBuildMul(b, cls, q_tiles, ""), rel, ""));
    LLVMValueRef op = LLVMBuildInBoundsGEP2(b, cg->t_i32, param(k, P_OFFSETS), &li, 1, "");
    k->begin = LLVMBuildLoad2(b, cg->t_i32, op, "begin");
    LLVMSetAlignment(k->begin, 4);
    LLVMValueRef one = c64(k, 1);
    op = LLVMBuildInBoundsGEP2(b, cg->t_i32, op, &one, 1, "");
    k->end = LLVMBuildLoad2(b, cg->t_i32, op, "end");
    LLVMSetAlignment(k->end, 4);
    k->entries = param(k, P_ENTRIES);
    /* the schedule covers the longest sequence: a tile holding none of this
     * sequence's queries gets an empty list (it stores nothing) */
    LLVMValueRef mine = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, k->tile_pos0, k->kv_len, ""),
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, k->tile_pos0, c32(k, s->BM), ""), k->q_start, ""),
                     LLVMBuildICmp(b, LLVMIntSGT, k->q_len, c32(k, 0), ""), ""), "mine");
    k->end = LLVMBuildSelect(b, mine, k->end, k->begin, "end");

    /* (b, h) slices: b*s0 + row0*s1 + h*s2 (seq stride applied per row); a
     * variable-length batch has no batch stride, its rows start at row0 */
    LLVMValueRef varlen = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildPtrToInt(b, param(k, P_SEQINFO), cg->t_i64, ""),
                                        c64(k, 0), "");
    LLVMValueRef bidx = LLVMBuildSelect(b, varlen, c64(k, 0), k->batch, "bidx");
    LLVMValueRef row0[2] = {sext64(k, seq[0]), sext64(k, seq[2])};
    LLVMValueRef *bases[4] = {&k->qbase, &k->kbase, &k->vbase, &k->obase};
    int strides[4] = {P_QS, P_KS, P_VS, P_OS};
    for (int i = 0; i < 4; i++) {
        bool kv = i == 1 || i == 2;
        LLVMValueRef h = kv ? k->kv_head : k->head;
        LLVMValueRef bs = LLVMBuildAdd(b, LLVMBuildMul(b, bidx, param(k, strides[i]), ""),
                                       LLVMBuildMul(b, row0[kv], param(k, strides[i] + 1), ""), "");
        *bases[i] = LLVMBuildAdd(b, bs, LLVMBuildMul(b, h, param(k, strides[i] + 2), ""), "slice");
    }
    /* lse [B][H][q_len], or [H][q_len] with q_len the token rows (varlen) */
    LLVMValueRef bh = LLVMBuildAdd(b, LLVMBuildMul(b, bidx, c64(k, s->heads), ""), k->head, "");
    k->lse_base = LLVMBuildAdd(b, LLVMBuildMul(b, bh, sext64(k, param(k, P_QLEN)), ""), row0[0], "lse_base");
}

static void init_accumulators(fwd *k, LLVMBasicBlockRef entry_bb)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_flash_rows_alloca(cg, &k->acc, k->s.D, entry_bb);
    /* S accumulators too, among those allocas (SROA makes them SSA) */
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMPositionBuilderBefore(b, k->acc.m[0]);
    for (int n = 0; n < k->s.BN / 8; n++)
        for (int i = 0; i < 4; i++)
            k->s_acc[n][i] = LLVMBuildAlloca(b, cg->t_f32, "s");
    LLVMPositionBuilderAtEnd(b, cur);
    s2_flash_rows_zero(cg, &k->acc);
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
    if (k->s.tail) {
        /* K of the lone k-step (x4, two n-tiles): lane l -> key row l%8 + 8(l/16), chunk D/8 - 2 + (l/8)%2 */
        LLVMValueRef row = LLVMBuildAdd(b, L->k_row, LLVMBuildLShr(b, LLVMBuildAnd(b, k->lane, c32(k, 16), ""), c32(k, 1), ""), "");
        LLVMValueRef lc = LLVMBuildAnd(b, L->k_lc, c32(k, 1), "");
        L->kt_part = LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(k, row_bytes), ""),
                                  chunk_part(k, &L->kt_parts, row, k->s.chunks - 2, lc, &L->kt_cst), "");
    }
    if (k->s.q_reload) {
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
    if (!k->s.q_reload)
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
    if (k->s.tail) {
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
        if (k->s.tail || k->s.q_reload)
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
    fwd_shape *s = &k->s;
    int NT = s->BN / 8;

    LLVMValueRef flags = entry_field(k, e, 4, cg->t_i32);
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

    LLVMValueRef live = entry_field(k, e, 8, cg->t_i64);
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
        prefetch_kv(k, LLVMBuildAdd(b, e, c32(k, S - 1), ""),
                    s2_kb_ring_stage(&k->kb, LLVMBuildAdd(b, i, c32(k, S - 1), ""), S, ""));
    } else {
        prefetch_kv(k, e, c32(k, 0));
        s2_nv_cp_async_wait(cg, 0);
        s2_nv_barrier_cta(cg);
    }

    LLVMValueRef stage = s2_kb_ring_stage(&k->kb, i, S, "stage");
    LLVMValueRef soff = LLVMBuildMul(b, stage, c32(k, k->s.stage_bytes), "");
    LLVMValueRef kst = LLVMBuildAdd(b, soff, c32(k, k->s.k_off), "kst");
    LLVMValueRef vst = LLVMBuildAdd(b, soff, c32(k, k->s.v_off), "vst");
    LLVMValueRef kpos0 = LLVMBuildMul(b, entry_field(k, e, 0, cg->t_i32), c32(k, k->s.BN), "kpos0");

    LLVMValueRef colmask = skips_columns(k) ? entry_colmask(k, e) : NULL;
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
        LLVMValueRef ok = q_row_valid(k, r, &qrow, NULL);
        s2_nv_if store;
        s2_nv_if_begin(cg, &store, ok, "store");
        LLVMValueRef row_off = LLVMBuildAdd(b, k->obase, LLVMBuildMul(b, sext64(k, qrow), param(k, P_OS + 1), ""), "");
        s2_flash_pairs_store(cg, &pr, param(k, P_O), row_off, aligned);
        s2_flash_store_lse(cg, k->t4, param(k, P_LSE), k->lse_base, qrow, lse);
        s2_nv_if_end(cg, &store);
    }
    LLVMBuildRetVoid(b);
}

static void fwd_shape_init(fwd_shape *s, const s2_pattern *p, const s2_kspec *spec)
{
    memset(s, 0, sizeof *s);
    s->dt = spec->dtype;
    s->D = spec->head_dim;
    s->BM = spec->block_m;
    s->BN = spec->block_n;
    s->warps = spec->num_warps;
    s->stages = spec->num_stages;
    s->threads = s->warps * S2_WARP;
    s->chunks = s->D / 8;
    s->tail = s->D % 32 == 16;
    /* past it Q's fragments (D/4 registers) would push O and S into spills */
    s->q_reload = s->D > S2_FWD_Q_REGS_MAX_D;
    int sub_m_size = p->block_size < s->BM ? p->block_size : s->BM;
    s->sub_m_log2 = s2_log2i(sub_m_size);
    s->sub_n_size = p->block_size < s->BN ? p->block_size : s->BN;
    s->sub_n = s->BN / s->sub_n_size;
    s->group = p->heads / p->kv_heads;
    s->heads = p->heads;
    s->causal = p->causal;
    s->q_off = 0;
    s->stage_bytes = s->BN * s->D * 2;
    s->k_off = s->BM * s->D * 2;
    s->v_off = s->k_off + s->stages * s->stage_bytes;
}

int s2_fwd_smem_bytes(const s2_pattern *p, const s2_kspec *spec)
{
    fwd_shape s;
    fwd_shape_init(&s, p, spec);
    return s.v_off + s.stages * s.stage_bytes;
}

s2_status s2_fwd_build(s2_ctx *ctx, s2_cg *cg, const s2_pattern *p, const s2_kspec *spec, const char *name)
{
    fwd k = {.kb = {.cg = cg, .b = cg->b}};
    fwd_shape_init(&k.s, p, spec);
    if (k.s.D > MAX_D || k.s.BN > MAX_BN || k.s.BM != 16 * k.s.warps || k.s.D % 16 != 0)
        return s2_fail(ctx, S2_ERR_INTERNAL, "forward: unresolved spec reached the builder");
    LLVMTypeRef params[P_COUNT];
    int np = s2_kb_abi_params(cg, S2_ABI_FWD, params);
    k.fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, k.s.threads, 1);
    for (int i = P_Q; i <= P_V; i++) {
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "readonly");
    }
    for (int i = P_CLASS; i <= P_SEQINFO; i++) {
        if (i == P_FIRST_Q_TILE || i == P_Q_TILES)
            continue;
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k.fn, (unsigned)i, "readonly");
    }
    s2_nv_param_attr(cg, k.fn, P_O, "noalias");
    s2_nv_param_attr(cg, k.fn, P_LSE, "noalias");
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(cg->b);

    setup(&k);
    init_accumulators(&k, entry_bb);
    load_tile(&k, k.s.BM, param(&k, P_Q), k.qbase, param(&k, P_QS + 1), k.s.q_off, NULL, q_row_valid, NULL);
    s2_nv_cp_async_commit(cg);
    for (int st = 0; st < k.s.stages - 1; st++)
        prefetch_kv(&k, LLVMBuildAdd(k.b, k.begin, c32(&k, st), ""), c32(&k, st));
    /* Q's group is the oldest: S-1 newer ones may stay in flight */
    s2_nv_cp_async_wait(cg, k.s.stages - 1);
    s2_nv_barrier_cta(cg);
    if (!k.s.q_reload)
        load_q_fragments(&k);
    main_loop(&k);
    epilogue(&k);
    return S2_OK;
}
