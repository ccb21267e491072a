/* The shared part of the mma.sync forwards (fwd_common.h): CTA setup,
 * schedule entries, cp.async tile loads and the prologue. */
#include "fwd_common.h"
#include "s2c/launch.h"
#include "s2c/layout.h"

#include <string.h>


/* cp.async a [rows][D] tile: rows `row0 + r` of the tensor at `base` (element
 * offset `slice` of this (b, h)), row stride `rstride`; row r is copied when
 * valid(r) holds, zero-filled otherwise (src-size 0, source clamped to the
 * slice start so no address outside the tensor is formed). */
typedef LLVMValueRef (*row_valid_fn)(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *tensor_row, void *user);

static void load_tile(s2_fwd_kernel *k, int rows, LLVMValueRef base, LLVMValueRef slice, LLVMValueRef rstride, int smem_off,
                      LLVMValueRef smem_stage_off, row_valid_fn valid, void *user)
{
    LLVMBuilderRef b = k->b;
    int C = k->s.chunks, T = k->s.threads, total = rows * C;
    /* chunk -> element: 8 16-bit or 4 32-bit elements a chunk */
    int shift = k->s.esize == 2 ? 3 : 2;
    LLVMTypeRef elt = k->s.esize == 2 ? LLVMInt16TypeInContext(k->cg->llctx) : k->cg->t_f32;
    /* whole passes of T threads over C chunks a row: a thread's chunk stays,
     * its rows step by T/C, so its source address steps by (T/C)·rstride
     * elements (tensor rows are affine in r: one add a copy) */
    bool stepped = T % C == 0 && total % T == 0;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->cg->llctx);
    LLVMValueRef run = NULL, step = stepped ? LLVMBuildMul(b, c64(k, (long long)(T / C) * k->s.esize), rstride, "row_step")
                                            : NULL;
    LLVMValueRef at_slice = LLVMBuildInBoundsGEP2(b, elt, base, &slice, 1, "");
    for (int it = 0; it * T < total; it++) {
        s2_nv_if guard;
        LLVMValueRef idx = s2_kb_spread(&k->kb, it, T, total, &guard, "tail");
        LLVMValueRef r = LLVMBuildUDiv(b, idx, c32(k, C), "");
        LLVMValueRef ch = LLVMBuildURem(b, idx, c32(k, C), "");
        LLVMValueRef trow;
        LLVMValueRef ok = valid(k, r, &trow, user);
        LLVMValueRef src;
        if (run) {
            run = src = LLVMBuildGEP2(b, i8, run, &step, 1, "");
        } else {
            LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, sext64(k, trow), rstride, ""),
                                            LLVMBuildZExt(b, LLVMBuildShl(b, ch, c32(k, shift), ""), k->cg->t_i64, ""), "");
            src = LLVMBuildGEP2(b, elt, at_slice, &off, 1, "");
            if (stepped)
                run = src;
        }
        LLVMValueRef dst = LLVMBuildAdd(b, c32(k, smem_off), s2_flash_swizzle(k->cg, r, ch, C), "");
        if (smem_stage_off)
            dst = LLVMBuildAdd(b, dst, smem_stage_off, "");
        s2_nv_cp_async_16(k->cg, s2_nv_smem_at(k->cg, dst), LLVMBuildSelect(b, ok, src, at_slice, ""),
                          LLVMBuildSelect(b, ok, c32(k, 16), c32(k, 0), ""));
        s2_kb_spread_end(&k->kb, &guard);
    }
}

LLVMValueRef s2_fwd_q_row(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *trow)
{
    LLVMValueRef pos = LLVMBuildAdd(k->b, k->tile_pos0, r, "");
    *trow = LLVMBuildSub(k->b, pos, k->q_start, "qrow");
    LLVMValueRef lo = LLVMBuildICmp(k->b, LLVMIntSGE, pos, k->q_start, "");
    LLVMValueRef hi = LLVMBuildICmp(k->b, LLVMIntSLT, pos, k->kv_len, "");
    return LLVMBuildAnd(k->b, lo, hi, "");
}

LLVMValueRef s2_fwd_thread_q_row(void *k, int hr, LLVMValueRef *qrow)
{
    return s2_fwd_q_row(k, s2_fwd_thread_row(k, hr), qrow);
}

s2_flash_out s2_fwd_out(s2_fwd_kernel *k)
{
    return (s2_flash_out){param(k, P_O), k->obase, param(k, P_OS + 1), param(k, P_LSE), k->lse_base, k->t4, NULL,
                          k->s.D};
}

/* s2_fwd_q_row as a load_tile row predicate. */
static LLVMValueRef q_row_valid(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *trow, void *user)
{
    (void)user;
    return s2_fwd_q_row(k, r, trow);
}

/* Key row r of a key tile: user points at {i32 position tile * block_n,
 * i32 mask of live column groups or NULL}.  Rows of a dead column group are
 * zero-filled instead of read (no query row of the tile uses them). */
typedef struct kv_rows {
    LLVMValueRef kpos0, colmask;
} kv_rows;

static LLVMValueRef kv_row_valid(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *trow, void *user)
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

/* Key row r of a key tile wholly inside kv_len with every column group live:
 * always valid (load_kv's fast path, no per-row checks). */
static LLVMValueRef kv_row_all(s2_fwd_kernel *k, LLVMValueRef r, LLVMValueRef *trow, void *user)
{
    const kv_rows *kr = user;
    *trow = LLVMBuildAdd(k->b, kr->kpos0, r, "kpos");
    return LLVMConstInt(LLVMInt1TypeInContext(k->cg->llctx), 1, 0);
}

/* Field of entry e (i32 index into the entries array): byte offset 0 tile,
 * 4 flags, 8 live. */
LLVMValueRef s2_fwd_entry_field(s2_fwd_kernel *k, LLVMValueRef e, int field_off, LLVMTypeRef ty)
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

LLVMValueRef s2_fwd_entry_colmask(s2_fwd_kernel *k, LLVMValueRef e)
{
    LLVMBuilderRef b = k->b;
    int sub_n = k->s.sub_n, sub_m = k->s.BM >> k->s.sub_m_log2;
    LLVMValueRef live = s2_fwd_entry_field(k, e, 8, k->cg->t_i64);
    LLVMValueRef m = LLVMConstInt(k->cg->t_i64, 0, 0);
    LLVMValueRef row_bits = LLVMConstInt(k->cg->t_i64, (1ull << sub_n) - 1, 0);
    for (int i = 0; i < sub_m; i++)
        m = LLVMBuildOr(b, m, LLVMBuildAnd(b, LLVMBuildLShr(b, live, LLVMConstInt(k->cg->t_i64, (unsigned long long)(i * sub_n), 0), ""),
                                            row_bits, ""), "");
    LLVMValueRef flags = s2_fwd_entry_field(k, e, 4, k->cg->t_i32);
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, c32(k, S2_ENTRY_FULL), ""), c32(k, 0), "");
    return LLVMBuildSelect(b, full, c32(k, (1 << sub_n) - 1), LLVMBuildTrunc(b, m, k->cg->t_i32, ""), "colmask");
}

/* Issue the K and V copies of entry e into stage `stage` (i32): without
 * per-row checks when the tile lies inside kv_len with every column group
 * live (most entries), with them otherwise. */
static void load_kv(s2_fwd_kernel *k, LLVMValueRef e, LLVMValueRef stage)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef tile = s2_fwd_entry_field(k, e, 0, k->cg->t_i32);
    kv_rows kr = {LLVMBuildMul(b, tile, c32(k, k->s.BN), "kpos0"), s2_fwd_skips_columns(k) ? s2_fwd_entry_colmask(k, e) : NULL};
    LLVMValueRef soff = LLVMBuildMul(b, stage, c32(k, k->s.stage_bytes), "");
    LLVMValueRef all = LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, kr.kpos0, c32(k, k->s.BN), ""), k->kv_len, "in_len");
    if (kr.colmask)
        all = LLVMBuildAnd(b, all, LLVMBuildICmp(b, LLVMIntEQ, kr.colmask, c32(k, (1 << k->s.sub_n) - 1), ""), "all_live");
    s2_nv_if fast, slow;
    s2_nv_if_begin(k->cg, &fast, all, "kv_fast");
    load_tile(k, k->s.BN, param(k, P_K), k->kbase, param(k, P_KS + 1), k->s.k_off, soff, kv_row_all, &kr);
    load_tile(k, k->s.BN, param(k, P_V), k->vbase, param(k, P_VS + 1), k->s.v_off, soff, kv_row_all, &kr);
    s2_nv_if_end(k->cg, &fast);
    s2_nv_if_begin(k->cg, &slow, LLVMBuildNot(b, all, ""), "kv_rows");
    load_tile(k, k->s.BN, param(k, P_K), k->kbase, param(k, P_KS + 1), k->s.k_off, soff, kv_row_valid, &kr);
    load_tile(k, k->s.BN, param(k, P_V), k->vbase, param(k, P_VS + 1), k->s.v_off, soff, kv_row_valid, &kr);
    s2_nv_if_end(k->cg, &slow);
}

/* if (e < end) load_kv(e, stage); then commit (always, so the group count stays fixed). */
void s2_fwd_prefetch_kv(s2_fwd_kernel *k, LLVMValueRef e, LLVMValueRef stage)
{
    s2_nv_if blk;
    s2_nv_if_begin(k->cg, &blk, LLVMBuildICmp(k->b, LLVMIntSLT, e, k->end, ""), "prefetch");
    load_kv(k, e, stage);
    s2_nv_if_end(k->cg, &blk);
    s2_nv_cp_async_commit(k->cg);
}

/* The CTA's tile, sequence, list and (b, h) slices. */
static void setup(s2_fwd_kernel *k)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_fwd_shape *s = &k->s;
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

static void init_accumulators(s2_fwd_kernel *k, LLVMBasicBlockRef entry_bb)
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

void s2_fwd_shape_init(s2_fwd_shape *s, const s2_pattern *p, const s2_kspec *spec, int esize)
{
    memset(s, 0, sizeof *s);
    s->dt = spec->dtype;
    s->esize = esize;
    s->D = spec->head_dim;
    s->BM = spec->block_m;
    s->BN = spec->block_n;
    s->warps = spec->num_warps;
    s->stages = spec->num_stages;
    s->threads = s->warps * S2_WARP;
    s->chunks = s->D * esize / 16;
    int sub_m_size = p->block_size < s->BM ? p->block_size : s->BM;
    s->sub_m_log2 = s2_log2i(sub_m_size);
    s->sub_n_size = p->block_size < s->BN ? p->block_size : s->BN;
    s->sub_n = s->BN / s->sub_n_size;
    s->group = p->heads / p->kv_heads;
    s->heads = p->heads;
    s->causal = p->causal;
    s->q_off = 0;
    s->stage_bytes = s->BN * s->D * esize;
    s->k_off = s->BM * s->D * esize;
    s->v_off = s->k_off + s->stages * s->stage_bytes;
}

void s2_fwd_prologue(s2_fwd_kernel *k, const char *name)
{
    s2_cg *cg = k->cg;
    LLVMTypeRef params[P_COUNT];
    int np = s2_kb_abi_params(cg, S2_ABI_FWD, params);
    k->fn = s2_nv_kernel_new(cg, name, params, (unsigned)np, k->s.threads, 1);
    for (int i = P_Q; i <= P_V; i++) {
        s2_nv_param_attr(cg, k->fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k->fn, (unsigned)i, "readonly");
    }
    for (int i = P_CLASS; i <= P_SEQINFO; i++) {
        if (i == P_FIRST_Q_TILE || i == P_Q_TILES)
            continue;
        s2_nv_param_attr(cg, k->fn, (unsigned)i, "noalias");
        s2_nv_param_attr(cg, k->fn, (unsigned)i, "readonly");
    }
    s2_nv_param_attr(cg, k->fn, P_O, "noalias");
    s2_nv_param_attr(cg, k->fn, P_LSE, "noalias");
    LLVMBasicBlockRef entry_bb = LLVMGetInsertBlock(cg->b);

    setup(k);
    init_accumulators(k, entry_bb);
    load_tile(k, k->s.BM, param(k, P_Q), k->qbase, param(k, P_QS + 1), k->s.q_off, NULL, q_row_valid, NULL);
    s2_nv_cp_async_commit(cg);
    for (int st = 0; st < k->s.stages - 1; st++)
        s2_fwd_prefetch_kv(k, LLVMBuildAdd(k->b, k->begin, c32(k, st), ""), c32(k, st));
    /* Q's group is the oldest: S-1 newer ones may stay in flight */
    s2_nv_cp_async_wait(cg, k->s.stages - 1);
    s2_nv_barrier_cta(cg);
}

LLVMValueRef s2_fwd_thread_row(s2_fwd_kernel *k, int hr)
{
    return LLVMBuildAdd(k->b, LLVMBuildShl(k->b, k->warp, c32(k, 4), ""), LLVMBuildAdd(k->b, k->g, c32(k, 8 * hr), ""),
                        "row");
}

LLVMValueRef s2_fwd_chunk_part(s2_fwd_kernel *k, s2_fwd_lane_parts *cache, LLVMValueRef r, int ch0, LLVMValueRef lc,
                               int *cst)
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

LLVMValueRef s2_fwd_smem_addr(s2_fwd_kernel *k, LLVMValueRef base, LLVMValueRef part, int cst)
{
    LLVMValueRef p = s2_nv_smem_at(k->cg, LLVMBuildAdd(k->b, base, part, ""));
    LLVMValueRef c = c64(k, cst);
    return LLVMBuildInBoundsGEP2(k->b, LLVMInt8TypeInContext(k->cg->llctx), p, &c, 1, "");
}

/* Open *grp, the guard of column group `group`: its bit is set in colmask. */
static void group_begin(s2_fwd_kernel *k, s2_nv_if *grp, LLVMValueRef colmask, int group, const char *name)
{
    LLVMValueRef bit = LLVMBuildAnd(k->b, colmask, c32(k, 1 << group), "");
    s2_nv_if_begin(k->cg, grp, LLVMBuildICmp(k->b, LLVMIntNE, bit, c32(k, 0), ""), name);
}

void s2_fwd_scores_by_tile(s2_fwd_kernel *k, const void *lanes, LLVMValueRef kst, int n0, int count,
                           s2_fwd_ntile_fn ntile)
{
    for (int n = n0; n < n0 + count; n++) {
        LLVMValueRef acc[4];
        for (int i = 0; i < 4; i++)
            acc[i] = cf(k, 0.0);
        ntile(k, lanes, kst, n, acc);
        for (int i = 0; i < 4; i++)
            LLVMBuildStore(k->b, acc[i], k->s_acc[n][i]);
    }
}

/* S = Q·Kᵀ into sc (s2_fwd_main_loop). */
static void scores(s2_fwd_kernel *k, LLVMValueRef colmask, s2_fwd_tiles_fn tiles, const void *lanes, LLVMValueRef kst,
                   LLVMValueRef sc[][4])
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
            group_begin(k, &grp, colmask, n0 / per_group, "cols");
        }
        tiles(k, lanes, kst, n0, per_group);
        if (colmask)
            s2_nv_if_end(k->cg, &grp);
    }
    for (int n = 0; n < k->s.BN / 8; n++)
        for (int i = 0; i < 4; i++)
            sc[n][i] = LLVMBuildLoad2(b, k->cg->t_f32, k->s_acc[n][i], "");
}

/* The token mask of entry e (key tile at kpos0) unless the entry is FULL:
 * key column c of row r is kept when its sub-block pair is live, c <=
 * limit(r) where limit = kv_len-1 - kpos0 (RAGGED) and, causal, qpos(r) -
 * kpos0.  Masked scores become -inf.  Scores stay unscaled here: the scale
 * is folded into the exponent. */
static void apply_mask(s2_fwd_kernel *k, LLVMValueRef sc[][4], LLVMValueRef e, LLVMValueRef kpos0)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    s2_fwd_shape *s = &k->s;
    int NT = s->BN / 8;

    LLVMValueRef flags = s2_fwd_entry_field(k, e, 4, cg->t_i32);
    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, flags, c32(k, S2_ENTRY_FULL), ""), c32(k, 0), "full");
    /* The schedule is the longest sequence's: a FULL tile may run past a
     * shorter one's kv_len.  Not so when causal: a FULL tile's keys precede
     * every query row of the tile, and the tile holds one of the sequence's. */
    if (!s->causal)
        full = LLVMBuildAnd(b, full, LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, kpos0, c32(k, s->BN), ""), k->kv_len, ""),
                            "full");
    LLVMBasicBlockRef join, from = s2_flash_mask_begin(cg, k->fn, full, &join);
    LLVMValueRef live = s2_fwd_entry_field(k, e, 8, cg->t_i64);
    LLVMValueRef masked[S2_FWD_MAX_BN / 8][4];
    LLVMValueRef col0 = LLVMBuildShl(b, k->t4, c32(k, 1), "col0");
    for (int hr = 0; hr < 2; hr++) {
        LLVMValueRef r = s2_fwd_thread_row(k, hr);
        LLVMValueRef bits = s2_flash_row_live(cg, live, r, s->sub_m_log2, s->sub_n);
        LLVMValueRef lim = s2_flash_key_limit(cg, k->kv_len, kpos0, s->causal ? k->tile_pos0 : NULL, r, col0);
        s2_flash_mask_row(cg, hr, NT, s->sub_n_size, s->BN, bits, &lim, sc, masked);
    }
    s2_flash_join_scores(cg, from, join, NT, sc, masked);
}

/* One step of the main loop over the list: entry e, the byte offsets of its
 * K and V stages, its first key position and its mask of live column groups
 * (NULL when no group is skipped). */
typedef struct fwd_step {
    LLVMValueRef e, kst, vst, kpos0, colmask;
} fwd_step;

/* Open the loop and wait for entry e's stage; loop_end closes it. */
static void loop_begin(s2_fwd_kernel *k, s2_nv_loop *loop, fwd_step *step)
{
    s2_cg *cg = k->cg;
    LLVMBuilderRef b = k->b;
    int S = k->s.stages;
    s2_nv_loop_begin(cg, loop, "kv", k->begin, k->end, c32(k, 1), NULL, 0);
    LLVMValueRef e = loop->iv;
    LLVMValueRef i = LLVMBuildSub(b, e, k->begin, "i");
    if (S > 1) {
        /* one barrier per entry: it publishes stage i and tells that every
         * warp is done with entry i-1, whose stage the prefetch refills */
        s2_nv_cp_async_wait(cg, S - 2);
        s2_nv_barrier_cta(cg);
        s2_fwd_prefetch_kv(k, LLVMBuildAdd(b, e, c32(k, S - 1), ""),
                           s2_kb_ring_stage(&k->kb, LLVMBuildAdd(b, i, c32(k, S - 1), ""), S, ""));
    } else {
        s2_fwd_prefetch_kv(k, e, c32(k, 0));
        s2_nv_cp_async_wait(cg, 0);
        s2_nv_barrier_cta(cg);
    }

    LLVMValueRef stage = s2_kb_ring_stage(&k->kb, i, S, "stage");
    LLVMValueRef soff = LLVMBuildMul(b, stage, c32(k, k->s.stage_bytes), "");
    step->e = e;
    step->kst = LLVMBuildAdd(b, soff, c32(k, k->s.k_off), "kst");
    step->vst = LLVMBuildAdd(b, soff, c32(k, k->s.v_off), "vst");
    step->kpos0 = LLVMBuildMul(b, s2_fwd_entry_field(k, e, 0, cg->t_i32), c32(k, k->s.BN), "kpos0");
    step->colmask = s2_fwd_skips_columns(k) ? s2_fwd_entry_colmask(k, e) : NULL;
}

static void loop_end(s2_fwd_kernel *k, s2_nv_loop *loop)
{
    /* single stage: the next entry's copy overwrites this one */
    if (k->s.stages == 1)
        s2_nv_barrier_cta(k->cg);
    s2_nv_loop_end(k->cg, loop, NULL);
}

/* O += P·V: pv's key steps of pv_keys keys, those of a column group no row
 * keeps skipped (s2_fwd_main_loop). */
static void accumulate_pv(s2_fwd_kernel *k, LLVMValueRef colmask, s2_fwd_pv_fn pv, int pv_keys, const void *lanes,
                          LLVMValueRef vst, LLVMValueRef sc[][4])
{
    int steps_per_group = (colmask ? k->s.sub_n_size : k->s.BN) / pv_keys;
    s2_nv_if grp = {0};
    for (int kk = 0; kk < k->s.BN / pv_keys; kk++) {
        if (colmask && kk % steps_per_group == 0)
            group_begin(k, &grp, colmask, kk / steps_per_group, "pv_cols");
        pv(k, lanes, vst, kk, sc);
        if (colmask && (kk + 1) % steps_per_group == 0)
            s2_nv_if_end(k->cg, &grp);
    }
}

void s2_fwd_main_loop(s2_fwd_kernel *k, s2_fwd_tiles_fn tiles, s2_fwd_pv_fn pv, int pv_keys, const void *lanes)
{
    s2_nv_loop loop;
    fwd_step st;
    loop_begin(k, &loop, &st);
    LLVMValueRef sc[S2_FWD_MAX_BN / 8][4];
    scores(k, st.colmask, tiles, lanes, st.kst, sc);
    apply_mask(k, sc, st.e, st.kpos0);
    /* the online softmax (FA2's softmax_rescale_o): new max, O and l
     * rescaled, scores -> probabilities in place; lazy (flash.h): O only
     * where a row of the warp replaced its maximum */
    LLVMValueRef alpha[2];
    LLVMValueRef grow = s2_flash_online_softmax(k->cg, &k->acc, sc, k->s.BN / 8, param(k, P_SCALE_LOG2), true, alpha);
    s2_flash_rescale_o(k->cg, &k->acc, k->s.D, alpha, grow);
    accumulate_pv(k, st.colmask, pv, pv_keys, lanes, st.vst, sc);
    loop_end(k, &loop);
    s2_nv_cp_async_wait(k->cg, 0);   /* the ring's last (empty) groups */
}
